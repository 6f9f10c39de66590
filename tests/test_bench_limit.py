"""scripts/bench_limit.py: bounds, records and tables from hand-made plans and raw files; no testbed."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from p2synth.hierarchies.model import Hierarchy
from scripts.bench_limit import bounds, duplex_hierarchy, measured_programs, rows
from scripts.tables import printed_rows
from tests.runtime_support import ROOT

MiB = 1 << 20
NOMINAL = {"name": "testbed-4x2", "levels": [
    {"name": "node", "count": 4, "bandwidth_GBps": 0.125, "latency_us": 20.0, "uplink_GBps": 0.125},
    {"name": "core", "count": 2, "bandwidth_GBps": 10.0, "latency_us": 2.0}]}
FITTED = {"name": "testbed-4x2-fitted", "library": "open-mpi", "reduce_GBps": 0.8, "levels": [
    {"name": "node", "count": 4, "bandwidth_GBps": 0.12, "latency_us": 40.0, "uplink_GBps": 0.12, "duplex_efficiency": 0.6},
    {"name": "core", "count": 2, "bandwidth_GBps": 4.0, "latency_us": 3.0}]}
FLAT = {"steps": [{"op": "all_reduce", "slice": [["data", "node"], ["data", "core"]]}], "pipeline": 1}
HIER = {"steps": [{"op": "reduce_scatter", "slice": [["data", "core"]]}, {"op": "all_reduce", "slice": [["data", "node"]]},
                  {"op": "all_gather", "slice": [["data", "core"]]}], "pipeline": 1}
PIPED = {**HIER, "pipeline": 4}


def plan(nbytes: int = 64 * MiB) -> dict:
    """A solver result for all_reduce(data) over data=8 on the fitted 4x2 hierarchy."""
    return {"hierarchy": FITTED, "axes": [{"name": "data", "size": 8}], "cost_model": "simulator",
            "request": {"axes": ["data"], "collective": "all_reduce"}, "message_bytes": nbytes,
            "placements": [{"matrix": [[4, 2]], "program_count": 49, "default": {**FLAT, "cost_s": 2.0},
                            "programs": [{**PIPED, "cost_s": 0.9}, {**HIER, "cost_s": 1.0}, {**FLAT, "cost_s": 2.0}]}]}


def figures(median: float, wrong: int = 0) -> dict:
    return {"measured_s": median, "measured_ci_s": [median * 0.98, median * 1.03], "measured_repeats_s": [median] * 9, "wrong": wrong}


def tuned(hier_wrong: int = 0) -> dict:
    """What runtime.tune writes for :func:`plan` with --top 2: the pick first, the default's copy among the programs."""
    doc = plan()
    body = doc["placements"][0]
    body["default"].update(figures(2.5))
    piped, hier, flat = body["programs"]
    body["programs"] = [{**hier, **figures(1.6, hier_wrong)}, {**piped, **figures(1.7)}, flat]
    return doc


def test_duplex_hierarchy_runs_the_rates_at_the_efficiency_but_never_below_half():
    h = duplex_hierarchy(Hierarchy.model_validate(FITTED))
    assert h.levels[0].bandwidth_GBps == pytest.approx(0.072) and h.levels[0].uplink_GBps == pytest.approx(0.072)
    assert h.levels[0].duplex_efficiency is None and h.levels[1] == Hierarchy.model_validate(FITTED).levels[1]
    low = {**FITTED, "levels": [{**FITTED["levels"][0], "duplex_efficiency": 0.3}, FITTED["levels"][1]]}
    assert duplex_hierarchy(Hierarchy.model_validate(low)).levels[0].bandwidth_GBps == pytest.approx(0.06)


def test_bounds_at_configured_calibrated_and_duplex_rates():
    b = bounds(plan(), Hierarchy.model_validate(NOMINAL), Hierarchy.model_validate(FITTED))
    cut = 2 * (3 / 4) * 64 * MiB  # what one node sends out for an all_reduce over 4 nodes; its 2 ranks share the uplink
    # latency floor: open-mpi's coll/han charges the outermost level only (the nominal hierarchy names no library)
    assert b["configured"] == pytest.approx(cut / 0.125e9 + 22e-6)
    assert b["calibrated"] == pytest.approx(cut / 0.12e9 + 40e-6)
    assert b["calibrated_duplex"] == pytest.approx(cut / (0.12e9 * 0.6) + 40e-6)


def test_measured_programs_lists_the_default_first_and_each_program_once():
    progs = measured_programs(tuned())
    assert [p["text"] for p in progs] == ["AR(data@node,data@core)", "RS(data@core) -> AR(data@node) -> AG(data@core)",
                                          "RS(data@core) -> AR(data@node) -> AG(data@core) x4 pieces"]
    assert [p["default"] for p in progs] == [True, False, False]
    assert [p["measured_s"] for p in progs] == [2.5, 1.6, 1.7] and [p["predicted_s"] for p in progs] == [2.0, 1.0, 0.9]


def _raw(hier_wrong: int = 0) -> dict:
    b = bounds(plan(), Hierarchy.model_validate(NOMINAL), Hierarchy.model_validate(FITTED))
    cases = [{"collective": "all_reduce", "message_bytes": 64 * MiB, "bound_s": b, "programs": measured_programs(tuned(hier_wrong))},
             {"collective": "all_to_all", "message_bytes": 64 * MiB, "error": "tune exit 1: rank 3 crashed\nmore"}]
    return {"testbeds": [{"testbed": {"name": "4x2-1gbit"}, "nominal": NOMINAL, "hierarchy": FITTED, "cases": cases}]}


def test_rows_take_the_fastest_exact_program_against_the_duplex_bound():
    ok, failed = rows(_raw())
    assert ok["program"].endswith("AG(data@core)") and ok["best_s"] == 1.6 and not ok["pick_is_default"]
    assert ok["of_calibrated"] == pytest.approx(1.6 / ok["bound_calibrated_duplex_s"])
    assert ok["of_configured"] == pytest.approx(1.6 / ok["bound_configured_s"]) and ok["default_s"] == 2.5
    assert failed["error"].startswith("tune exit 1")
    # a program with wrong elements never counts as the best
    assert rows(_raw(hier_wrong=3))[0]["best_s"] == 1.7


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scripts.bench_limit", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)


def test_from_raw_prints_both_tables_and_writes_markdown(tmp_path):
    path, md = tmp_path / "limit.raw.json", tmp_path / "limit.md"
    path.write_text(json.dumps(_raw()))
    r = run("--from-raw", str(path), "--markdown", str(md))
    assert r.returncode == 0, r.stderr
    assert "best measured program against the lower bound" in r.stdout and "configured and calibrated" in r.stdout
    assert sum("4x2-1gbit" in row[0] for row in printed_rows(r.stdout)) >= 3  # two cases, one level (rows may wrap)
    text = md.read_text()
    assert text.startswith("| testbed | request | size |") and len(text.splitlines()) == 9
    table = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| 4x2")]
    ok, failed, node, core = table
    assert ok[:5] == ["4x2-1gbit", "all_reduce(data)", "64M", "RS(data@core) -> AR(data@node) -> AG(data@core)",
                      "1600.0 [1568.0, 1648.0]"]
    assert ok[5:] == ["2500.0", "1000.0", "805.3", "838.9", "1398.1", "1.99x", "1.14x", "1.79x"]
    assert failed[3] == "failed: tune exit 1: rank 3 crashed" and failed[4:] == ["-"] * 9
    assert node == ["4x2-1gbit", "node", "0.125", "0.12", "0.12", "0.6", "40", "0.960"]
    assert core == ["4x2-1gbit", "core", "10 (guess)", "4", "-", "-", "3", "-"]


@pytest.mark.parametrize("args,needle", [([], "give --out (to measure) or --from-raw"),
                                         (["--from-raw", "/nonexistent.json"], "cannot read raw measurements"),
                                         (["--out", "x.json", "--testbeds", "9x9"], "unknown testbed"),
                                         (["--out", "x.json", "--env", "NOVALUE"], "expected NAME=VALUE")])
def test_bad_usage_is_one_line_and_exit_2(args, needle):
    r = run(*args)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr and "Traceback" not in r.stderr


def test_measure_solves_tunes_and_records_each_case_then_brings_the_testbed_down(monkeypatch, tmp_path):
    """The measuring path end to end with stand-ins for the testbed and the tuner (the solver runs for real)."""
    from scripts import bench_limit
    from scripts.accuracy import measure as accuracy_measure

    calls = []

    def testbed(*args, timeout=None, check=True, instance=None):
        calls.append((args[0], instance))
        if args[0] == "up":
            Path(args[args.index("--hierarchy-out") + 1]).write_text(json.dumps(NOMINAL))
        elif "scripts.calibrate" in args:
            Path(args[args.index("--out") + 1]).write_text(json.dumps(FITTED))
        elif "runtime.tune" in args:
            doc = json.loads(Path(args[args.index("runtime.tune") + 1]).read_text())
            body = doc["placements"][0]
            for i, e in enumerate([body["default"], *body["programs"]]):
                e.update(figures(1.0 + i / 10))
            Path(args[args.index("--out") + 1]).write_text(json.dumps(doc))
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(accuracy_measure, "testbed", testbed)
    out = tmp_path / "raw.json"
    args = bench_limit.parse_args(["--out", str(out), "--testbeds", "4x2-1gbit", "--collectives", "all_to_all",
                                   "--sizes", "16M", "--workdir", str(tmp_path)])
    raw = bench_limit.measure(args, log=lambda s: None)
    assert json.loads(out.read_text()) == raw and "finished" in raw
    (case,) = raw["testbeds"][0]["cases"]
    assert case["collective"] == "all_to_all" and case["iters"] == 3 and "error" not in case
    assert case["programs"][0]["default"] and case["programs"][0]["text"] == "A2A(data@node,data@core)"
    assert set(case["bound_s"]) == {"configured", "calibrated", "calibrated_duplex"}
    assert [c for c, _ in calls] == ["down", "up", "run", "run", "down"] and {i for _, i in calls} == {"lim"}
    assert raw["testbeds"][0]["env"] == {} and rows(raw)[0]["testbed"] == "4x2-1gbit"


def test_env_settings_are_recorded_and_named_in_the_table():
    from scripts.bench_limit import label, parse_args

    assert parse_args(["--out", "x", "--env", "OMPI_MCA_a=1", "--env", "B=x=y"]).env == {"OMPI_MCA_a": "1", "B": "x=y"}
    assert label({"testbed": {"name": "4x2-1gbit"}, "env": {"OMPI_MCA_coll_libnbc_iallreduce_algorithm": "1"}}) == \
        "4x2-1gbit coll_libnbc_iallreduce_algorithm=1"
    assert parse_args(["--out", "x", "--note", "out-of-place"]).note == "out-of-place"
    assert label({"testbed": {"name": "4x2-1gbit"}, "env": {}, "note": "out-of-place"}) == "4x2-1gbit out-of-place"
