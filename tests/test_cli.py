"""The CLI as a user runs it: exit codes, one-line errors, budgets that hold, the result JSON."""

import contextlib
import io
import json
import math
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings

import p2synth.solver.run as solver_run
import z3
from p2synth.encodings.deadline import Deadline, SolverGaveUp
from p2synth.encodings.errors import SolverTimeout
from p2synth.solver.run import EXIT_CODES, main
from scripts.bench_synthesis import spec as bench_spec
from p2synth.solver.spec_lines import field_key
from tests.spec_mutations import mutated_specs, spec_fields

ROOT = Path(__file__).resolve().parent.parent


class Clock:
    """A clock for :class:`Deadline` that stands still, then jumps past any budget: after `reads` readings, or
    when :meth:`expire` is called. The budget runs out at the same point of every run, whatever the machine's load."""

    def __init__(self, reads: float = math.inf):
        self.left = reads
        self.now = 0.0
        self.reads_after = 0  # readings once expired

    def __call__(self) -> float:
        self.left -= 1
        if self.left < 0:
            self.expire()
        self.reads_after += self.now == math.inf
        return self.now

    def expire(self) -> None:
        """From now on every deadline on this clock has run out."""
        self.now = math.inf


def run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "solver.run", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def write_spec(tmp_path, spec, name="spec.json"):
    path = tmp_path / name
    path.write_text(spec if isinstance(spec, str) else json.dumps(spec))
    return str(path)


BASE = {
    "hierarchy": {"name": "t", "levels": [{"name": "node", "count": 2, "bandwidth_GBps": 10, "latency_us": 10},
                                          {"name": "gpu", "count": 4, "bandwidth_GBps": 100, "latency_us": 1}]},
    "axes": [{"name": "data", "size": 8}],
    "request": {"axes": ["data"], "collective": "all_reduce"},
    "message_bytes": 1 << 30,
    "max_steps": 4,
}


def test_pipelining_lists_each_program_once_at_its_cheapest_piece_count(tmp_path):
    """The default piece counts (1, 2, 4, 8, 16): at 1 GiB the best program runs pipelined; single steps never do."""
    out = tmp_path / "result.json"
    r = run(write_spec(tmp_path, BASE), "--top", "all", "--out", str(out))
    assert r.returncode == 0, r.stderr
    (pl,) = json.loads(out.read_text())["placements"]
    assert pl["program_count"] == len(pl["programs"]) == 49 and pl["optimal"]
    assert len({json.dumps(p["steps"]) for p in pl["programs"]}) == 49
    assert all(p["pipeline"] == 1 for p in pl["programs"] if len(p["steps"]) == 1)
    best = pl["programs"][0]
    assert best["pipeline"] > 1 and len(best["steps"]) > 1 and best["cost_s"] < pl["default"]["cost_s"]
    assert f"x{best['pipeline']} pieces" in r.stdout
    # the lower bound: the node's 4 GPUs push 2 (1 - 1/2) GiB at 10 GB/s each, plus one latency per level (10 + 1 us)
    assert pl["bound_s"] == pytest.approx(2 * 0.5 * (1 << 30) / 40e9 + 11e-6, rel=1e-12)
    assert all(p["cost_s"] >= pl["bound_s"] for p in pl["programs"])
    assert "of bound" in r.stdout and f"{best['cost_s'] / pl['bound_s']:.2f}x" in r.stdout


def test_top_all_lists_exactly_49_verified_programs(tmp_path):
    out = tmp_path / "result.json"
    r = run(write_spec(tmp_path, {**BASE, "pipeline": [1]}), "--top", "all", "--out", str(out))
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    (pl,) = result["placements"]
    assert pl["matrix"] == [[2, 4]] and pl["program_count"] == 49 and pl["optimal"] is True
    assert len(pl["programs"]) == 49 and all(p["verified"] for p in pl["programs"])
    steps = [p["steps"] for p in pl["programs"]]
    assert [{"op": "all_reduce", "slice": [["data", "node"], ["data", "gpu"]]}] in steps
    assert [{"op": "reduce_scatter", "slice": [["data", "gpu"]]}, {"op": "all_reduce", "slice": [["data", "node"]]},
            {"op": "all_gather", "slice": [["data", "gpu"]]}] in steps
    assert [{"op": "reduce", "slice": [["data", "gpu"]]}, {"op": "all_reduce", "slice": [["data", "node"]]},
            {"op": "broadcast", "slice": [["data", "gpu"]]}] in steps
    costs = [p["cost_s"] for p in pl["programs"]]
    # best first (costs within 1e-9 are ties, listed fewer steps first); each program once, at its cheapest piece count
    assert all(a <= b * (1 + 1e-9) for a, b in zip(costs, costs[1:])) and pl["default"]["cost_s"] > costs[0]
    assert len({json.dumps(s) for s in steps}) == 49 and all(p["pipeline"] == 1 for p in pl["programs"])
    assert result["hierarchy"]["levels"][0]["name"] == "node" and result["max_steps"] == 4
    assert "RS(data@gpu) -> AR(data@node) -> AG(data@gpu)" in r.stdout


def test_all_to_all_on_node2_gpu4_lists_exactly_the_three_programs_all_checked(tmp_path):
    out = tmp_path / "result.json"
    r = run("examples/all-to-all-2x4.json", "--top", "all", "--out", str(out))
    assert r.returncode == 0, r.stderr
    (pl,) = json.loads(out.read_text())["placements"]
    assert pl["program_count"] == 3 and pl["optimal"] is True and all(p["verified"] for p in pl["programs"])
    node, gpu = ["data", "node"], ["data", "gpu"]
    a2a = lambda *cells: {"op": "all_to_all", "slice": list(cells)}
    assert sorted(map(json.dumps, (p["steps"] for p in pl["programs"]))) == sorted(map(json.dumps, [
        [a2a(node, gpu)], [a2a(node), a2a(gpu)], [a2a(gpu), a2a(node)]]))
    assert pl["default"]["steps"] == [a2a(node, gpu)]
    # at 64 KiB the hierarchical programs win: fewer, larger messages across the nodes
    assert len(pl["programs"][0]["steps"]) == 2 and pl["default"]["cost_s"] > pl["programs"][0]["cost_s"]
    assert "A2A(data@node) -> A2A(data@gpu)" in r.stdout


def test_bundled_example_runs(tmp_path):
    r = run("examples/dgx-a100-dp-tp.json", "--out", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert {tuple(map(tuple, p["matrix"])) for p in result["placements"]} == {((2, 8), (2, 1)), ((4, 4), (1, 2))}
    assert result["complete"] and all(p["optimal"] and p["programs"][0]["verified"] for p in result["placements"])


@pytest.mark.parametrize("spec,needle", [
    ("{", "spec is not valid JSON"),
    ({**BASE, "axes": [{"name": "data", "size": 4}]}, "axes: sizes multiply to 4 but the hierarchy"),
    ({**BASE, "request": {"axes": ["tensor"]}}, "request.axes: unknown axis 'tensor'; known axes: 'data'"),
    ({**BASE, "axes": [{"name": "data", "size": 0}]}, "axes.0.size: Input should be greater than 0"),
    ({**BASE, "axes": [{"name": "data", "size": -8}]}, "axes.0.size: Input should be greater than 0"),
    ({**BASE, "hierarchy": {"name": "t", "levels": [{"name": "node", "count": 0}]}}, "hierarchy.levels.0.count: Input should be greater than 0"),
    ({**BASE, "hierarchy": "dgx-z100"}, "hierarchy: unknown system 'dgx-z100'; use one of"),
    ({**BASE, "hierarchy": {"system": "dgx-zz", "nodes": 1}}, "hierarchy.system: unknown system 'dgx-zz'"),
    ({**BASE, "colective": "x"}, "colective: unknown field"),
    ({**BASE, "request": {"axes": ["data"], "collective": "alltoall"}}, "request.collective: Input should be"),
    ({**BASE, "placements": [[[4, 2]]]}, "placements.0: column of level 'node' multiplies to 4"),
    ({**BASE, "max_steps": 0}, "max_steps: Input should be greater than or equal to 1"),
    ({k: v for k, v in BASE.items() if k != "request"}, "request/workload: give exactly one of 'request' or 'workload'"),
    ({**BASE, "hierarchy": "x" * 5000}, "hierarchy: unknown system 'xxxxxxxx"),
    ({**BASE, "hierarchy": "../systems/dgx-a100"}, "hierarchy: unknown system '../systems/dgx-a100'"),
    ({**BASE, "hierarchy": 7}, 'hierarchy: must be a bundled system name, {"system": NAME'),
    ({**BASE, "placements": 7}, 'placements: must be "all" or a non-empty list of matrices'),
    ({**BASE, "placements": []}, "placements: List should have at least 1 item"),
    ({**BASE, "message_bytes": 10**400}, "message_bytes: Input should be less than or equal to"),
    ({**BASE, "axes": [{"name": "d" * 5000, "size": 8}]}, "axes.0.name: 5,000 characters, more than 64; shorten it"),
    ({**BASE, "request": {"axes": ["q" * 5000]}}, "request.axes: unknown axis 'qqqq"),
    ({**BASE, "x" * 5000: 1}, "spec error: 'xxxxxxxxxxxxxxxxx...(5002 chars): unknown field; remove it"),
    ({**BASE, "hierarchy": {"name": "t", "levels": [{"name": "node", "count": 2, "latency_us": float("inf")},
                                                   {"name": "gpu", "count": 4}]}}, "hierarchy.levels.0.latency_us: Input should be a finite number"),
    ({**BASE, "hierarchy": {"name": "t", "levels": [{"name": "node", "count": 2**30}]}, "axes": [{"name": "data", "size": 2**30}]},
     "hierarchy: the level counts multiply to more than 16,777,216 devices"),
])
def test_bad_specs_exit_2_with_one_clear_line(tmp_path, spec, needle):
    r = run(write_spec(tmp_path, spec), "--out", str(tmp_path / "never.json"))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert len(lines[0]) <= 200, lines[0]
    assert "Traceback" not in r.stderr and not (tmp_path / "never.json").exists()


def test_every_spec_problem_is_one_line_in_one_run(tmp_path):
    """A misspelled axis and a misspelled collective (issue 48, point 5): both reported, in spec order, exit 2."""
    spec = {**BASE, "axes": [{"name": "data", "size": 4}, {"name": "tensor", "size": 2}], "request": None,
            "workload": [{"name": "grad", "axes": ["dta"], "message_bytes": 1024},
                         {"name": "tp", "axes": ["tensor"], "collective": "allreduce", "message_bytes": 1024}]}
    del spec["request"]
    r = run(write_spec(tmp_path, spec))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2, r.stderr
    assert lines[0] == "spec error: workload.0.axes: unknown axis 'dta'; known axes: 'data', 'tensor'"
    assert lines[1].startswith("spec error: workload.1.collective: Input should be 'all_reduce'")
    single = {**BASE, "request": {"axes": ["dta"], "collective": "allreduce"}}
    lines = run(write_spec(tmp_path, single)).stderr.strip().splitlines()
    assert [line.split(":")[1].strip() for line in lines] == ["request.axes", "request.collective"], lines
    # problems the checks after parsing find are all reported too: two unknown axes and a wrong product
    spec["workload"][1]["collective"] = "all_reduce"
    spec["workload"].append({"name": "pp", "axes": ["pipe"], "message_bytes": 1024})
    spec["axes"][1]["size"] = 4
    lines = run(write_spec(tmp_path, spec)).stderr.strip().splitlines()
    assert [line.split(":")[1].strip() for line in lines] == ["axes", "workload.0.axes", "workload.2.axes"], lines


@pytest.mark.parametrize("args,needle", [
    (["--top", "0"], "--top"),
    (["--top", "many"], "--top"),
    (["--max-steps", "99"], "--max-steps"),
    (["--timeout", "-1"], "--timeout"),
    (["--timeout", "nan"], "--timeout"),
    (["--timeout", "inf"], "--timeout"),
    (["--timeout", "1e12"], "--timeout"),
    (["--max-placements", "0"], "--max-placements"),
])
def test_bad_arguments_exit_2(tmp_path, args, needle):
    r = run(write_spec(tmp_path, BASE), *args)
    assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_missing_spec_file_exits_2(tmp_path):
    r = run(str(tmp_path / "nope.json"))
    assert r.returncode == 2 and "cannot read spec" in r.stderr
    r = run("y" * 5000)
    assert r.returncode == 2 and "cannot read spec 'yyyy" in r.stderr and len(r.stderr.strip()) <= 200


def test_print_schema_is_json_schema():
    r = run("--print-schema")
    schema = json.loads(r.stdout)
    assert r.returncode == 0 and {"hierarchy", "axes", "request", "placements"} <= set(schema["properties"])


def test_too_many_programs_for_top_all_is_refused(tmp_path):
    spec = {**BASE, "hierarchy": {"name": "t", "levels": [{"name": "a", "count": 2}, {"name": "b", "count": 2},
                                                          {"name": "c", "count": 2}, {"name": "d", "count": 2}]},
            "axes": [{"name": "data", "size": 16}], "max_steps": 8}
    r = run(write_spec(tmp_path, spec), "--top", "all")
    assert r.returncode == 2 and "too many to list" in r.stderr


def test_a_placement_too_large_to_check_is_refused_up_front_naming_it(tmp_path):
    """An all_to_all over 10 cells of factor 2: its addressed chunks' check would hold 4 GiB; refused before solving,
    in one line, nothing written."""
    spec = {**BASE, "hierarchy": {"name": "t", "levels": [{"name": f"l{i}", "count": 2} for i in range(10)]},
            "axes": [{"name": "data", "size": 1024}], "request": {"axes": ["data"], "collective": "all_to_all"}}
    out = tmp_path / "r.json"
    r = run(write_spec(tmp_path, spec), "--out", str(out))
    assert r.returncode == 2 and not out.exists()
    assert r.stderr.count("\n") == 1 and "placement 0" in r.stderr and "4.0 GiB" in r.stderr and "fewer cells" in r.stderr


def run_on_clock(monkeypatch, tmp_path, spec, clock: Clock, *args) -> tuple[int, list[str], Path]:
    """``solver.run.main`` in this process on `spec` with --quiet and --out, its budget on `clock`:
    the exit code, the stderr lines and the --out path."""
    monkeypatch.setattr(solver_run, "Deadline", lambda seconds: Deadline(seconds, clock))
    path, out = write_spec(tmp_path, spec), tmp_path / "r.json"
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main([path, "--quiet", *args, "--out", str(out)])
    return code, stderr.getvalue().splitlines(), out


# 8 reduced cells, programs of up to 8 steps: 1,766 readings of the clock (6 s) to finish
EIGHT_CELLS = {**BASE, "hierarchy": {"name": "t", "levels": [{"name": f"l{i}", "count": 2} for i in range(8)]},
               "axes": [{"name": "data", "size": 256}], "max_steps": 8}


def test_timeout_reports_what_was_proved_and_exits_4(monkeypatch, tmp_path):
    code, lines, out = run_on_clock(monkeypatch, tmp_path, EIGHT_CELLS, Clock(reads=100))
    assert code == 4 and len(lines) == 1 and lines[0].startswith("timeout:")
    assert json.loads(out.read_text())["complete"] is False


def _levels(n, count=2):
    return {"name": "t", "levels": [{"name": f"l{i}", "count": count} for i in range(n)]}


# 9 axes of size 2 on 9 levels of 2: the placements are the 9 x 9 permutation matrices, 9! = 362,880 of them
NINE_BY_NINE = {"hierarchy": _levels(9), "axes": [{"name": f"a{i}", "size": 2} for i in range(9)],
                "request": {"axes": ["a0"]}}
# one placement with 9 cells (4^9 abstract states), programs of up to 12 steps: 15,150 readings (31 s) to finish
NINE_CELLS = {**BASE, "hierarchy": {"name": "t", "levels": [{"name": f"l{i}", "count": c} for i, c in enumerate([4, 4, 4, 4, 2])]},
              "axes": [{"name": "x", "size": 32}, {"name": "y", "size": 16}], "request": {"axes": ["x", "y"]},
              "max_steps": 12, "placements": [[[2, 2, 2, 2, 2], [2, 2, 2, 2, 1]]]}


def test_top_all_out_of_time_exits_4_with_the_programs_listed_so_far(monkeypatch, tmp_path):
    # one placement with 4 cells; 11,833 programs within 5 steps, about one reading each
    spec = {**BASE, "hierarchy": _levels(4), "axes": [{"name": "data", "size": 16}], "max_steps": 5}
    code, lines, out = run_on_clock(monkeypatch, tmp_path, spec, Clock(reads=500), "--top", "all", "--timeout", "3")
    assert code == 4, lines
    (line,) = lines
    assert line.startswith("timeout: --timeout 3 s ran out with 1 of 1 placement(s) reached, 1 of them not fully proved or listed")
    result = json.loads(out.read_text())
    (pl,) = result["placements"]
    assert result["complete"] is False and pl["timed_out"] is True and pl["optimal"] is False
    assert pl["program_count"] == 11833 and 0 < len(pl["programs"]) < 11833
    steps = [json.dumps(p["steps"]) for p in pl["programs"]]
    assert len(set(steps)) == len(steps) and all(p["verified"] for p in pl["programs"])
    costs = [p["cost_s"] for p in pl["programs"]]
    assert all(a <= b * (1 + 1e-9) for a, b in zip(costs, costs[1:]))  # best first; within 1e-9 a tie


def test_timeout_bounds_the_search_for_the_best_programs(monkeypatch, tmp_path):
    clock = Clock(reads=10)  # inside the search: the placement is reached, its default costed
    code, lines, out = run_on_clock(monkeypatch, tmp_path, NINE_CELLS, clock, "--timeout", "2")
    assert code == 4, lines
    (pl,) = json.loads(out.read_text())["placements"]
    assert pl["timed_out"] is True and pl["optimal"] is False and pl["default"]["cost_s"] > 0
    assert clock.reads_after < 10  # the search stopped at its next look at the clock


# 4,096 devices, dp 64 x tp 8 x pp 8, all_reduce over dp, tp and pp: 253 placements in many groups of up to 8 cells
# (scripts/bench_synthesis.py's spec), far more than 1 s of work
MANY_GROUPS = bench_spec(["dp", "tp", "pp"])


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_timeout_bounds_a_sweep_over_worker_processes(monkeypatch, tmp_path, jobs):
    """One deadline for the whole sweep, shared by every worker: the budget runs out as the sweep starts, so no
    placement is solved. With --jobs 2 each group used to get the full budget anew (78 s for --timeout 1)."""
    clock = Clock()
    start_sweep = solver_run.sweep

    def sweep_out_of_time(*args, **kwargs):
        clock.expire()
        return start_sweep(*args, **kwargs)

    monkeypatch.setattr(solver_run, "sweep", sweep_out_of_time)
    code, lines, out = run_on_clock(monkeypatch, tmp_path, MANY_GROUPS, clock, "--timeout", "1", "--jobs", jobs)
    assert code == 4, lines
    assert lines == ["timeout: --timeout 1 s ran out with 0 of 253 placement(s) reached, 0 of them not fully proved or "
                     "listed; raise --timeout or lower max_steps"]
    result = json.loads(out.read_text())
    assert result["complete"] is False and result["placements"] == []


def test_an_expired_budget_stops_the_search_inside_a_placement():
    from p2synth.solver.search import solve
    from p2synth.solver.spec import build_problem, parse_spec

    problem = build_problem(parse_spec(json.dumps(NINE_CELLS)))
    placement = problem.placement(((2, 2, 2, 2, 2), (2, 2, 2, 2, 1)))
    clock = Clock(reads=1)  # the deadline's own reading, then expired
    solution = solve(placement, problem.requests[0].request, 1 << 20, 12, 5, Deadline(600, clock))
    assert solution.timed_out and not solution.optimal and solution.programs == ()
    assert clock.reads_after < 10  # the whole search takes 15,150 readings


def test_too_many_placements_are_refused_up_front_with_the_count_and_the_fix(monkeypatch, tmp_path):
    # on a clock already out of time: enumerating would time out (exit 4); counting refuses first
    code, lines, out = run_on_clock(monkeypatch, tmp_path, NINE_BY_NINE, Clock(reads=0))
    assert code == 2 and not out.exists()
    assert lines == ['spec error: placements: "all" means 362,880 placements of these axes on this hierarchy, more than '
                     '--max-placements 1,000; list the ones to consider in "placements" or raise --max-placements']


def test_timeout_bounds_placement_enumeration(monkeypatch, tmp_path):
    clock = Clock(reads=101)  # the deadline's reading, then one per placement found
    code, lines, out = run_on_clock(monkeypatch, tmp_path, NINE_BY_NINE, clock, "--max-placements", "400000", "--timeout", "3")
    assert code == 4, lines
    assert lines == ["timeout: placement enumeration did not finish within --timeout 3 s (100 of 362,880 found, "
                     'none solved); raise --timeout or list the placements to consider in "placements"']
    result = json.loads(out.read_text())
    assert result["complete"] is False and result["placement_count"] == 362880 and result["placements"] == []


def test_a_timeout_before_the_chosen_placement_still_writes_out_before_export_exits_4(monkeypatch, tmp_path):
    """--export on a run out of time: the result goes to --out (complete false) first; it used to return before."""
    clock = Clock()
    start_sweep = solver_run.sweep
    monkeypatch.setattr(solver_run, "sweep", lambda *a, **k: (clock.expire(), start_sweep(*a, **k))[1])
    code, lines, out = run_on_clock(monkeypatch, tmp_path, BASE, clock, "--export", "torch")
    assert code == 4
    assert lines == ["timeout: placement 0 was not reached within --timeout 600 s; raise --timeout"]
    result = json.loads(out.read_text())
    assert result["complete"] is False and result["placements"] == []


class Unknown:
    """A Z3 solver stand-in whose check answers unknown for `reason`."""

    def __init__(self, reason: str):
        self.reason = reason

    def set(self, *args):
        pass

    def check(self):
        return z3.unknown

    def reason_unknown(self):
        return self.reason


@pytest.mark.parametrize("reason", ["timeout", "canceled"])
def test_unknown_for_our_budget_is_a_timeout(reason):
    with pytest.raises(SolverTimeout):
        Deadline(5, Clock()).check(Unknown(reason), "test")


@pytest.mark.parametrize("seconds, reason", [(5, "incomplete quantifiers"), (5, "max. resource limit exceeded"), (None, "timeout")])
def test_unknown_for_another_reason_is_not_a_timeout_and_names_z3s_reason(seconds, reason):
    with pytest.raises(SolverGaveUp) as caught:
        Deadline(seconds, Clock()).check(Unknown(reason), "test")
    assert str(caught.value) == f"Z3 answered unknown during test (reason: {reason}), not for lack of time"


def test_z3_giving_up_is_an_internal_error_with_its_reason_not_a_timeout(monkeypatch, tmp_path):
    monkeypatch.delenv("P2SYNTH_DEBUG", raising=False)
    monkeypatch.setattr(z3.Solver, "check", lambda self, *a: z3.unknown)
    monkeypatch.setattr(z3.Solver, "reason_unknown", lambda self: "smt tactic failed to show goal to be sat/unsat")
    code, lines, out = run_on_clock(monkeypatch, tmp_path, BASE, Clock())
    assert code == 1 and not out.exists()
    assert lines == ["internal error: SolverGaveUp: Z3 answered unknown during placement enumeration (reason: smt tactic "
                     "failed to show goal to be sat/unsat), not for lack of time (set P2SYNTH_DEBUG=1 for a traceback)"]


def test_explicit_placements_are_not_counted_against_the_limit(tmp_path):
    identity = [[2 if a == level else 1 for level in range(9)] for a in range(9)]
    out = tmp_path / "r.json"
    r = run(write_spec(tmp_path, {**NINE_BY_NINE, "placements": [identity]}), "--top", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    assert result["complete"] is True and result["placement_count"] == 1
    assert [p["matrix"] for p in result["placements"]] == [identity]


def test_readme_usage_doc_and_docstring_name_exactly_the_exit_codes_main_returns():
    import p2synth.solver.run as solver_run

    for doc in ("README.md", "docs/usage.md"):
        text = (ROOT / doc).read_text()
        paragraph = text[text.index("Exit codes:"):].split("\n\n")[0]
        assert {int(c) for c in re.findall(r"`(\d+)`", paragraph)} == set(EXIT_CODES), doc
    doc = solver_run.__doc__
    docstring = doc[doc.index("Exit codes:"):]
    assert {int(c) for c in re.findall(r"(?:^|[;:] )(\d+) ", docstring.replace("\n", " "))} == set(EXIT_CODES)


# ---- fuzzing: mutated bundled examples, run in-process ----------------------------------------
FUZZ_TIMEOUT_S = 1


def run_in_process(spec: dict, workdir: Path) -> tuple[int, str, Path]:
    """Run ``solver.run.main`` on `spec` (short budget, top 1); its exit code, stderr and --out path."""
    path, out = workdir / "spec.json", workdir / "out.json"
    path.write_text(json.dumps(spec))
    out.unlink(missing_ok=True)
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main([str(path), "--timeout", str(FUZZ_TIMEOUT_S), "--quiet", "--top", "1", "--out", str(out)])
    return code, stderr.getvalue(), out


def check_mutated_spec(spec: dict, workdir: Path) -> int:
    """Run one mutated spec and check its outcome; returns the exit code.

    Every outcome is 0 (complete result), 2 (one line per problem, each
    naming the field, nothing written) or 4 (one timeout line, a result with
    complete false); never 1, never a traceback, no line over 200 characters.
    """
    code, stderr, out = run_in_process(spec, workdir)
    lines = stderr.splitlines()
    assert code in (0, 2, 4), stderr
    assert "Traceback" not in stderr and all(len(line) <= 200 for line in lines), stderr
    if code == 2:
        fields = spec_fields() | {field_key(k) for k in spec} | {"request/workload"}
        assert lines and not out.exists()
        for line in lines:
            rest = line.removeprefix("spec error: ")
            assert rest != line and any(rest.startswith((f + ".", f + ": ")) for f in fields), line
    else:
        assert json.loads(out.read_text())["complete"] is (code == 0)
        assert (lines == []) if code == 0 else (len(lines) == 1 and lines[0].startswith("timeout: ")), stderr
    return code


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_specs())
def test_mutated_specs_exit_0_2_or_4_with_one_line_per_problem(spec):
    with tempfile.TemporaryDirectory() as workdir:
        check_mutated_spec(spec, Path(workdir))


def fuzz_outcomes(examples: int) -> Counter:
    """Run `examples` mutated specs through :func:`check_mutated_spec`; exit code -> how many (by hand)."""
    outcomes: Counter = Counter()

    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(mutated_specs())
    def fuzz(spec):
        with tempfile.TemporaryDirectory() as workdir:
            outcomes[check_mutated_spec(spec, Path(workdir))] += 1

    fuzz()
    return outcomes
