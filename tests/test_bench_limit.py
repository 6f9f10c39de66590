"""scripts/bench_limit.py: bounds, records and tables from hand-made plans and raw files; no testbed."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from p2synth.hierarchies.model import Hierarchy
from scripts.bench_limit import (ONE_WAY_TOLERANCE, beaten, bounds, burst_s, duplex_estimate, duplex_hierarchy,
                                 measured_programs, rows)
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


def test_bounds_at_configured_and_calibrated_rates_and_the_duplex_estimate_apart():
    b = bounds(plan(), Hierarchy.model_validate(NOMINAL), Hierarchy.model_validate(FITTED))
    cut = 2 * (3 / 4) * 64 * MiB  # what one node sends out for an all_reduce over 4 nodes; its 2 ranks share the uplink
    # latency floor: open-mpi's coll/han charges the outermost level only (the nominal hierarchy names no library)
    assert set(b) == {"configured", "calibrated"}  # the bounds of measured time; the duplex figure is no bound
    assert b["configured"] == pytest.approx(cut / 0.125e9 + 22e-6)
    assert b["calibrated"] == pytest.approx(cut / 0.12e9 + 40e-6)
    assert duplex_estimate(plan(), Hierarchy.model_validate(FITTED)) == pytest.approx(cut / (0.12e9 * 0.6) + 40e-6)


def test_measured_programs_lists_the_default_first_and_each_program_once():
    progs = measured_programs(tuned())
    assert [p["text"] for p in progs] == ["AR(data@node,data@core)", "RS(data@core) -> AR(data@node) -> AG(data@core)",
                                          "RS(data@core) -> AR(data@node) -> AG(data@core) x4 pieces"]
    assert [p["default"] for p in progs] == [True, False, False]
    assert [p["measured_s"] for p in progs] == [2.5, 1.6, 1.7] and [p["predicted_s"] for p in progs] == [2.0, 1.0, 0.9]


def _raw(hier_wrong: int = 0, legacy: bool = False) -> dict:
    """A raw document of one testbed: an all_reduce case and a failed all_to_all at 64 MiB. `legacy`: the duplex
    estimate where the raw files before issue 32 kept it, as ``bound_s["calibrated_duplex"]``."""
    b = bounds(plan(), Hierarchy.model_validate(NOMINAL), Hierarchy.model_validate(FITTED))
    estimate = duplex_estimate(plan(), Hierarchy.model_validate(FITTED))
    ok = {"collective": "all_reduce", "message_bytes": 64 * MiB, "programs": measured_programs(tuned(hier_wrong)),
          **({"bound_s": {**b, "calibrated_duplex": estimate}} if legacy else {"bound_s": b, "duplex_estimate_s": estimate})}
    cases = [ok, {"collective": "all_to_all", "message_bytes": 64 * MiB, "error": "tune exit 1: rank 3 crashed\nmore"}]
    return {"testbeds": [{"testbed": {"name": "4x2-1gbit"}, "nominal": NOMINAL, "hierarchy": FITTED, "cases": cases}]}


@pytest.mark.parametrize("legacy", [False, True])
def test_rows_take_the_fastest_exact_program_against_the_one_way_bound(legacy):
    ok, failed = rows(_raw(legacy=legacy))
    assert ok["program"].endswith("AG(data@core)") and ok["best_s"] == 1.6 and not ok["pick_is_default"]
    assert ok["of_bound"] == pytest.approx(1.6 / ok["bound_s"]) and ok["bound_s"] == _raw()["testbeds"][0]["cases"][0]["bound_s"]["calibrated"]
    assert ok["of_bound_ci"] == pytest.approx((1.6 * 0.98 / ok["bound_s"], 1.6 * 1.03 / ok["bound_s"]))
    assert ok["of_configured"] == pytest.approx(1.6 / ok["bound_configured_s"]) and ok["default_s"] == 2.5
    assert ok["of_duplex_estimate"] == pytest.approx(1.6 / ok["duplex_estimate_s"]) and ok["duplex_estimate_s"] > ok["bound_s"]
    assert failed["error"].startswith("tune exit 1")
    # a program with wrong elements never counts as the best
    assert rows(_raw(hier_wrong=3))[0]["best_s"] == 1.7


def test_beaten_names_a_measurement_below_a_bound_beyond_the_tolerance():
    """The check behind test_no_committed_measurement_beats_a_bound: configured bound 805.3 ms less the 2 ms burst
    and the 22 us latency floor, calibrated one-way bound 838.9 ms less 5%."""
    assert burst_s(Hierarchy.model_validate(NOMINAL)) == pytest.approx(0.002)  # 250,000 bytes at 1 Gbit/s
    assert beaten(_raw()) == []

    def with_round(seconds: float) -> dict:
        raw = _raw()
        raw["testbeds"][0]["cases"][0]["programs"][1]["repeats_s"][4] = seconds
        return raw

    assert beaten(with_round(0.81)) == []  # over both floors: 0.81 > 0.8033 and > 0.7970
    (line,) = beaten(with_round(0.80))  # under the configured floor only
    assert line.startswith("4x2-1gbit all_reduce 64M RS(data@core) -> AR(data@node) -> AG(data@core): 800.0 ms under the configured")
    assert len(beaten(with_round(0.79))) == 2  # under both
    raw = _raw()
    raw["testbeds"][0]["cases"][0]["bound_s"]["calibrated"] = 1.6 / (1 - ONE_WAY_TOLERANCE) + 1e-6  # a bound raised
    assert len(beaten(raw)) == 1


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scripts.bench_limit", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)


def test_from_raw_prints_the_tables_and_writes_markdown(tmp_path):
    path, md = tmp_path / "limit.raw.json", tmp_path / "limit.md"
    path.write_text(json.dumps(_raw()))
    r = run("--from-raw", str(path), "--markdown", str(md))
    assert r.returncode == 0, r.stderr
    assert "best measured program against the lower bound" in r.stdout and "configured and calibrated" in r.stdout
    assert "within 1.3x of the one-way bound" in r.stdout and "below a bound" not in r.stderr
    assert sum("4x2-1gbit" in row[0] for row in printed_rows(r.stdout)) >= 3  # two cases, one level (rows may wrap)
    text = md.read_text()
    assert text.startswith("| testbed | request | size |") and len(text.splitlines()) == 14
    main, rates, verdict = text.strip().split("\n\n")
    assert "bound" not in main.splitlines()[0].split("duplex estimate")[1].replace("(not a bound)", "")
    table = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| 4x2")]
    ok, failed, node, core = table
    assert ok[:5] == ["4x2-1gbit", "all_reduce(data)", "64M", "RS(data@core) -> AR(data@node) -> AG(data@core)",
                      "1600.0 [1568.0, 1648.0]"]
    assert ok[5:] == ["2500.0", "1000.0", "805.3", "838.9", "1.99x", "1.91x [1.87, 1.96]", "2.98x", "1398.1", "1.14x"]
    assert failed[3] == "failed: tune exit 1: rank 3 crashed" and failed[4:] == ["-"] * 10
    assert node == ["4x2-1gbit", "node", "0.125", "0.12", "0.12", "0.6", "40", "0.960"]
    assert core == ["4x2-1gbit", "core", "10 (guess)", "4", "-", "-", "3", "-"]
    (ar, a2a) = [[c.strip() for c in line.strip("|").split("|")] for line in verdict.splitlines()[2:]]
    # one session's best-of-many: the fastest of its 3 exact programs; the raw file recorded no commit or start
    assert ar == ["all_reduce", "4x2-1gbit", "3", "RS(data@core) -> AR(data@node) -> AG(data@core)",
                  "1600.0 [1568.0, 1648.0]", "838.9", "1.907x [1.869, 1.964]", "1.99x", "no", "no commit recorded"]
    assert a2a[:4] == ["all_to_all", "4x2-1gbit", "-", "failed"] and a2a[-2:] == ["no", "no commit recorded"]


def test_each_session_says_its_commit_and_start_where_its_raw_file_recorded_them():
    from scripts.bench_limit import session_text

    checkout = {"checkout": {"commit": "0c1a63e60812463942e14d13dbfd782295b27911", "dirty": True},
                "started": "2026-12-06T04:24:15Z"}
    assert session_text({"document": checkout}) == "0c1a63e60812 (dirty), 2026-12-06 04:24"
    assert session_text({"document": {"commit": "abcdef0123456789", "started": None}}) == "abcdef012345"
    assert session_text({"document": {"started": "2026-12-04T21:20:36Z"}}) == "no commit recorded, 2026-12-04 21:20"
    assert session_text({}) == "no commit recorded"


def test_within_the_target_asks_the_whole_interval():
    from scripts.bench_limit import within

    assert within({"of_bound": 1.25, "of_bound_ci": (1.2, 1.29)}) == "yes"
    assert within({"of_bound": 1.297, "of_bound_ci": (1.23, 1.42)}) == "median only"
    assert within({"of_bound": 1.31, "of_bound_ci": (1.2, 1.4)}) == "no"


LIMIT = ROOT / "docs" / "measurements" / "limit"
RAW_FILES = ("limit.raw.json", "limit-ring.raw.json", "limit-oop.raw.json", "limit-oop-others.raw.json",
             "limit-oop-2x2x2.raw.json", "limit-exchange-4x2.raw.json", "limit-pairwise-4x2.raw.json",
             "limit-lazy-4x2.raw.json", "limit-pairwise-two-way-4x2.raw.json")  # in the order limit.md's command names them


def committed() -> dict:
    """The committed raw files as one document, their testbeds in order."""
    return {"testbeds": [tb for name in RAW_FILES for tb in json.loads((LIMIT / name).read_text())["testbeds"]]}


def test_committed_tables_are_rebuilt_from_the_raw_data(tmp_path):
    """docs/measurements/limit.md's three tables are what --from-raw makes of the committed raw files, byte for byte."""
    doc = (ROOT / "docs" / "measurements" / "limit.md").read_text()
    md = tmp_path / "limit.md"
    r = run("--from-raw", *(f"docs/measurements/limit/{name}" for name in RAW_FILES), "--markdown", str(md))
    assert r.returncode == 0, r.stderr
    assert "below a bound" not in r.stderr
    tables = md.read_text().strip().split("\n\n")
    assert len(tables) == 3
    for t in tables:
        assert t in doc
    assert " ".join(f"docs/measurements/limit/{name}" for name in RAW_FILES) in " ".join(doc.replace("\\\n", " ").split())


def experiments() -> dict:
    """The tuned plans of docs/measurements/limit/experiments/ as a raw document: each measured on the 4x2 1 Gbit
    testbed with the first session's calibrated hierarchy in its plan, so its bounds are on those figures."""
    nominal = next(tb["nominal"] for tb in committed()["testbeds"] if tb["testbed"]["name"] == "4x2-1gbit")
    cases = []
    for path in sorted((LIMIT / "experiments").glob("*-tuned-*.json")):
        doc = json.loads(path.read_text())
        cases.append({"collective": doc["request"]["collective"], "message_bytes": doc["message_bytes"],
                      "bound_s": bounds(doc, Hierarchy.model_validate(nominal), Hierarchy.model_validate(doc["hierarchy"])),
                      "programs": measured_programs(doc)})
    assert len(cases) == 8
    return {"testbeds": [{"testbed": {"name": "4x2-1gbit experiments"}, "nominal": nominal, "cases": cases}]}


def test_no_committed_measurement_beats_a_bound():
    """No round, median or interval end of any committed measurement (the campaigns' raw files and the experiments'
    tuned plans) lies below what docs/measurements/limit.md calls a bound: the configured and the calibrated one-way
    cut, with the slack `scripts/bench_limit.py`'s docstring argues (the tbf burst, the fit, the latency floor).

    The duplex estimate is no bound, and the doc says how often the best lies below it."""
    raw = committed()
    # beaten() passes over a testbed without its configured figures or a case without bounds: the committed have all
    assert all("nominal" in tb and all("bound_s" in c for c in tb["cases"]) for tb in raw["testbeds"])
    assert beaten(raw) == [] and beaten(experiments()) == []
    ok = [r for r in rows(raw) if "error" not in r]
    below = sum(r["best_s"] < r["duplex_estimate_s"] for r in ok)
    assert (below, len(ok)) == (17, 41)
    assert "17 of the 41" in (ROOT / "docs" / "measurements" / "limit.md").read_text()


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
    assert set(case["bound_s"]) == {"configured", "calibrated"} and case["duplex_estimate_s"] > case["bound_s"]["calibrated"]
    assert [c for c, _ in calls] == ["down", "up", "run", "run", "down"] and {i for _, i in calls} == {"lim"}
    assert raw["testbeds"][0]["env"] == {} and rows(raw)[0]["testbed"] == "4x2-1gbit"


def test_env_settings_are_recorded_and_named_in_the_table():
    from scripts.bench_limit import label, parse_args

    assert parse_args(["--out", "x", "--env", "OMPI_MCA_a=1", "--env", "B=x=y"]).env == {"OMPI_MCA_a": "1", "B": "x=y"}
    assert label({"testbed": {"name": "4x2-1gbit"}, "env": {"OMPI_MCA_coll_libnbc_iallreduce_algorithm": "1"}}) == \
        "4x2-1gbit coll_libnbc_iallreduce_algorithm=1"
    assert parse_args(["--out", "x", "--note", "out-of-place"]).note == "out-of-place"
    assert label({"testbed": {"name": "4x2-1gbit"}, "env": {}, "note": "out-of-place"}) == "4x2-1gbit out-of-place"
