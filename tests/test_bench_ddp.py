"""scripts/bench_ddp.py: the table and summary rebuilt from raw data (exactly, without torch), the all-reduce's bound
speedup from first principles, older raw files, the harness's pure parts, and (marked torch) the real training loop
in 2 MPI ranks with DDP's own all-reduce standing in for the hook. tests/test_bench_ddp_faults.py shows the parameter
check failing on wrong hooks."""

import json
import re
import sys
from pathlib import Path

import pytest

from p2synth.hierarchies.model import Hierarchy
from scripts import bench_ddp
from scripts.bench_ddp import Variant
from tests.runtime_support import run_mpi

DOCS = Path(__file__).resolve().parent.parent / "docs" / "measurements"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
BUCKETS = [16785408, 33570816, 16785408]  # DDP's buckets of the default model, once rebuilt
DECIDED = {"16785408": {"kept": "plan", "trials": 3, "plan_median_s": 0.41, "default_median_s": 0.52},
           "33570816": {"kept": "default", "trials": 3, "plan_median_s": 0.9, "default_median_s": 0.8}}


def raw_case(case: str, step: dict[str, float], mismatch: str | None = None, buckets: list[int] | None = BUCKETS) -> dict:
    """A raw record of 9 rounds: variant v's round r has steps (base + r ms, base + r ms, 900 ms) for base = step[v];
    a hook's run differs from the reference by 2e-9 + r * 1e-10 at most (1% of the tolerance and a bit), but
    `mismatch`'s round 4, by 6e-6 (30 times the tolerance)."""
    runs = []
    for r in range(9):
        for position, v in enumerate(bench_ddp.round_order([Variant(v) for v in step], r)):
            base = step[v.value] + r * 1e-3
            diff = 6e-6 if (v.value == mismatch and r == 4) else 0.0 if v is Variant.DEFAULT else 2e-9 + r * 1e-10
            share = diff / 2e-7
            runs.append({"round": r, "position": position, "variant": v.value,
                         "started_at": f"2025-06-01T10:{r:02d}:{position:02d}+00:00", "step_s": [base, 0.9, base],
                         "params_max_diff": diff, "params_tol_share": share, "params_match": share <= 1.0})
    return {"case": case, "world": 8, "commit": COMMIT, "dirty": False, "started_at": "2025-06-01T10:00:00+00:00",
            "ended_at": "2025-06-01T10:09:30+00:00", "torch": "2.13.0+cpu", "backend": "gloo",
            "plan": f"plans/{case}.tuned.json", "mpi_plan": None, "spec": None, "guard": "on",
            "model": {"grad_bytes": 67141632}, "bucket_bytes": buckets, "rounds": 9, "variants": list(step),
            "params_check": "elementwise", "runs": runs,
            "decisions": {v: dict(DECIDED) if v == "client" else {} for v in step if v != "default"}}


def legacy_case(case: str, step: dict[str, float]) -> dict:
    """A raw record as an older bench_ddp wrote it: variant p2synth, a checksum per run, no commit or times."""
    new = raw_case(case, {("client" if v == "p2synth" else v): s for v, s in step.items()})
    runs = [{"round": r["round"], "position": r["position"], "step_s": r["step_s"], "checksum": [1.0, 2.0, 3.0],
             "variant": "p2synth" if r["variant"] == "client" else r["variant"], "ranks_agree": True}
            for r in new["runs"]]
    return {"case": case, "world": 8, "torch": "2.14.1+cu130", "plan": f"plans/{case}.tuned.json", "placement": 0,
            "request": "grad_allreduce", "model": {"layers": 4, "width": 2048, "batch": 8, "grad_bytes": 67141632},
            "bucket_cap_mb": 25.0, "warmup": 2, "steps": 5, "rounds": 9, "variants": list(step), "runs": runs}


def level(name: str, count: int, gbit: float | None = None) -> dict:
    """A level of `count` children, each link (and uplink) `gbit` Gbit/s one way, no latency (None: a fast inner
    level, 80 Gbit/s, no uplink)."""
    if gbit is None:
        return {"name": name, "count": count, "bandwidth_GBps": 10.0, "latency_us": 0}
    return {"name": name, "count": count, "bandwidth_GBps": gbit / 8, "uplink_GBps": gbit / 8, "latency_us": 0}


# The testbed's cases at their configured rates: node links 1 Gbit/s, rack uplinks 400 Mbit/s, 2 ranks a node.
NOMINAL = {"4x2": [level("node", 4, 1.0), level("core", 2)],
           "2x2x2": [level("rack", 2, 0.4), level("node", 2, 1.0), level("core", 2)],
           "3x2x2": [level("rack", 3, 0.4), level("node", 2, 1.0), level("core", 2)]}


def write_spec(path: Path, levels: list[dict]) -> Path:
    """A spec of the all-reduce over every device of the hierarchy `levels`, at `path`."""
    h = Hierarchy.model_validate({"levels": levels})
    path.write_text(json.dumps({"hierarchy": {"name": path.stem, "levels": levels},
                                "axes": [{"name": "data", "size": h.num_devices}],
                                "workload": [{"name": "grad_allreduce", "axes": ["data"], "collective": "all_reduce",
                                              "message_bytes": BUCKETS[:2]}]}))
    return path


FASTER_9 = {"verdict": "faster", "rounds": 9, "faster_rounds": 9, "slower_rounds": 0, "p_faster": 0.002, "p_slower": 1.0}

CASES = [raw_case("4x2-1gbit", {"default": 0.300, "client": 0.200, "mpi": 0.250, "sequential": 0.260}),
         raw_case("2x2x2", {"default": 0.300, "client": 0.310, "mpi": 0.296}, mismatch="client")]

TABLE = """\
| case | variant | step (ms) | 95% interval (ms) | speedup over default | vs default (paired rounds) | speedup over sequential | params match | largest difference (share of tolerance) |
|---|---|---|---|---|---|---|---|---|
| 4x2-1gbit | default | 304.0 | [301.0, 307.0] | 1.00 |  |  | yes | 0.0e+00 (0) |
| 4x2-1gbit | client | 204.0 | [201.0, 207.0] | 1.49 | faster (9 of 9 rounds, p = 0.002) | 1.29 | yes | 2.8e-09 (0.014) |
| 4x2-1gbit | mpi | 254.0 | [251.0, 257.0] | 1.20 | faster (9 of 9 rounds, p = 0.002) |  | yes | 2.8e-09 (0.014) |
| 4x2-1gbit | sequential | 264.0 | [261.0, 267.0] | 1.15 | faster (9 of 9 rounds, p = 0.002) |  | yes | 2.8e-09 (0.014) |
| 2x2x2 | default | 304.0 | [301.0, 307.0] | 1.00 |  |  | yes | 0.0e+00 (0) |
| 2x2x2 | client | 314.0 | [311.0, 317.0] | 0.97 | slower (9 of 9 rounds, p = 0.002) |  | NO | 6.0e-06 (30) |
| 2x2x2 | mpi | 300.0 | [297.0, 303.0] | 1.01 | faster (9 of 9 rounds, p = 0.002) |  | yes | 2.8e-09 (0.014) |

- 4x2-1gbit: commit 0123456789ab, measured 2025-06-01T10:00:00+00:00; guard on; torch 2.13.0+cpu; the all-reduce's bound speedup 1.167 (over the buckets)
  - client hook's guard (rank 0): 16785408 bytes: {"default_median_s": 0.52, "kept": "plan", "plan_median_s": 0.41, "trials": 3}; 33570816 bytes: {"default_median_s": 0.8, "kept": "default", "plan_median_s": 0.9, "trials": 3}
- 2x2x2: commit 0123456789ab, measured 2025-06-01T10:00:00+00:00; guard on; torch 2.13.0+cpu; bound speedup unknown (no spec)
  - client hook's guard (rank 0): 16785408 bytes: {"default_median_s": 0.52, "kept": "plan", "plan_median_s": 0.41, "trials": 3}; 33570816 bytes: {"default_median_s": 0.8, "kept": "default", "plan_median_s": 0.9, "trials": 3}
"""


def write_raws(tmp_path, cases=CASES) -> list[str]:
    """The raw records as files; their paths."""
    paths = []
    for i, case in enumerate(cases):
        paths.append(str(tmp_path / f"raw{i}.json"))
        (tmp_path / f"raw{i}.json").write_text(json.dumps(case))
    return paths


def test_from_raw_rebuilds_the_table_and_the_summary_exactly(tmp_path, capsys):
    raws = write_raws(tmp_path)
    write_spec(tmp_path / "4x2-1gbit.spec.json", NOMINAL["4x2"])  # found beside the raw file, by the plan's name
    argv = ["--from-raw", *raws, "--markdown", str(tmp_path / "t.md"), "--summary", str(tmp_path / "s.json")]
    assert bench_ddp.main(argv) == 0
    assert (tmp_path / "t.md").read_text() == TABLE
    summary = json.loads((tmp_path / "s.json").read_text())
    assert {k: v for k, v in summary.items() if k != "cases"} == {
        "speedup_median": 1.229, "speedup_min": 0.968, "speedup_max": 1.49, "cases_slower": 1, "cases_faster": 1,
        "cases_no_hook": 0, "cases_slower_mpi_plan": 0, "cases_faster_mpi_plan": 2, "cases_no_hook_mpi_plan": 0,
        "verdict_test": bench_ddp.VERDICT_TEST, "params_match": False, "params_check": "elementwise", "rounds": 9}
    first, second = summary["cases"]
    assert first == {
        "case": "4x2-1gbit", "world": 8, "grad_bytes": 67141632, "rounds": 9, "commit": COMMIT, "dirty": False,
        "measured_at": "2025-06-01T10:00:00+00:00", "guard": "on", "torch": "2.13.0+cpu",
        "default_ms": 304.0, "default_ci_ms": [301.0, 307.0], "client_ms": 204.0, "client_ci_ms": [201.0, 207.0],
        "mpi_ms": 254.0, "mpi_ci_ms": [251.0, 257.0], "sequential_ms": 264.0, "sequential_ci_ms": [261.0, 267.0],
        "speedup": 1.49, "speedup_mpi_plan": 1.197, "pipelining_speedup": 1.294,
        "hook_vs_default": {"client": FASTER_9 | {"median_ratio": 1.49}, "mpi": FASTER_9 | {"median_ratio": 1.197},
                            "sequential": FASTER_9 | {"median_ratio": 1.152}},
        "bound_speedup": round(1.75 / 1.5, 3), "bucket_bytes": BUCKETS,
        "decisions": {"client": DECIDED, "mpi": {}, "sequential": {}},
        "params_check": "elementwise", "params_match": True,
        "params_max_diff": {"default": 0.0, "client": pytest.approx(2.8e-9), "mpi": pytest.approx(2.8e-9),
                            "sequential": pytest.approx(2.8e-9)},
        "params_tol_share": {"default": 0.0, "client": pytest.approx(0.014), "mpi": pytest.approx(0.014),
                             "sequential": pytest.approx(0.014)}}
    assert (second["speedup"], second["speedup_mpi_plan"], second["bound_speedup"], second["params_match"]) == (
        0.968, 1.013, None, False)
    assert {v: x["verdict"] for v, x in second["hook_vs_default"].items()} == {"client": "slower", "mpi": "faster"}
    out = capsys.readouterr().out
    assert "│ 4x2-1gbit │ client     │     204.0 │" in out and "bound speedup 1.167 (over the buckets)" in out
    # the same raw files give the same bytes
    before = (tmp_path / "s.json").read_bytes(), (tmp_path / "t.md").read_bytes()
    assert bench_ddp.main(argv) == 0
    assert ((tmp_path / "s.json").read_bytes(), (tmp_path / "t.md").read_bytes()) == before


def test_verdicts_come_from_the_paired_rounds_and_a_missing_hook_is_no_evidence():
    # every round: the variant at its base + r ms, the default at 200 + r ms
    slower = raw_case("slower", {"default": 0.200, "client": 0.300, "mpi": 0.212})
    mixed = raw_case("mixed", {"default": 0.200, "client": 0.205, "mpi": 0.150})
    no_mpi = raw_case("no-mpi", {"default": 0.200, "client": 0.150})
    # the client ran a hook only 2 ms slower in 7 rounds and faster in 2: not shown slower (p = 0.09), and it is
    # within 5% of the default in every round: within noise
    for r in mixed["runs"]:
        if r["variant"] == "client":
            r["step_s"][0] = r["step_s"][2] = 0.2 + r["round"] * 1e-3 + (0.002 if r["round"] < 7 else -0.002)
    records = [bench_ddp.case_record(c) for c in (slower, mixed, no_mpi)]
    assert [{v: x["verdict"] for v, x in r["hook_vs_default"].items()} for r in records] == [
        {"client": "slower", "mpi": "slower"}, {"client": "within noise", "mpi": "faster"}, {"client": "faster"}]
    assert records[1]["hook_vs_default"]["client"]["slower_rounds"] == 7
    summary = bench_ddp.summary(records)
    assert (summary["cases_slower"], summary["cases_faster"], summary["cases_slower_mpi_plan"],
            summary["cases_faster_mpi_plan"]) == (1, 1, 1, 1)
    assert records[2]["speedup_mpi_plan"] is None
    assert bench_ddp.summary(records[2:])["cases_slower_mpi_plan"] is None  # no case has the mpi plan
    # where the plan attached no hook (rank 0's bucket counts null), the variant ran the default itself: no verdict
    unhooked = {**raw_case("none", {"default": 0.200, "client": 0.150}), "hook_buckets": {"client": None}}
    record = bench_ddp.case_record(unhooked)
    assert record["hook_vs_default"] == {"client": {"verdict": "no hook attached"}}
    assert bench_ddp.table_rows([record])[1][5] == "no hook attached"
    counts = bench_ddp.summary([record])
    assert (counts["cases_no_hook"], counts["cases_faster"], counts["cases_slower"]) == (1, 0, 0)


def test_the_torch_hook_control_gets_a_row_and_a_verdict_but_counts_in_no_target():
    record = bench_ddp.case_record(raw_case("c", {"default": 0.200, "client": 0.150, "torch-hook": 0.212}))
    assert {v: x["verdict"] for v, x in record["hook_vs_default"].items()} == {"client": "faster", "torch-hook": "slower"}
    assert record["torch-hook_ms"] == 216.0 and record["speedup"] == round(0.204 / 0.154, 3)
    row = [r for r in bench_ddp.table_rows([record]) if r[1] == "torch-hook"]  # rounds 212..220 ms: ranks 2 and 8
    assert row == [("c", "torch-hook", "216.0", "[213.0, 219.0]", "0.94", "slower (9 of 9 rounds, p = 0.002)", "",
                    "yes", "2.8e-09 (0.014)")]
    assert bench_ddp.summary([record])["cases_slower"] == 0  # the client's count, not the control's


def test_a_run_beyond_the_tolerance_fails_the_case_and_says_by_how_much():
    record = bench_ddp.case_record(raw_case("bad", {"default": 0.200, "client": 0.300}, mismatch="default"))
    assert record["params_match"] is False and record["params_tol_share"]["default"] == pytest.approx(30.0)
    assert "pipelining_speedup" not in record and record["speedup"] == round(0.204 / 0.304, 3)
    assert bench_ddp.params_cells(record, "default") == ("NO", "6.0e-06 (30)")


def test_an_older_raw_file_reads_with_its_parameters_said_checked_by_checksums(tmp_path, capsys):
    old = legacy_case("old", {"default": 0.300, "p2synth": 0.200, "sequential": 0.250})
    bad = legacy_case("bad", {"default": 0.300, "p2synth": 0.200})
    bad["runs"][7]["checksum"] = [1.0, 2.0, 3.1]
    argv = ["--from-raw", *write_raws(tmp_path, [old, bad]), "--markdown", str(tmp_path / "t.md"),
            "--summary", str(tmp_path / "s.json")]
    assert bench_ddp.main(argv) == 0
    table = (tmp_path / "t.md").read_text()
    assert "| old | mpi | 204.0 | [201.0, 207.0] | 1.49 | faster (9 of 9 rounds, p = 0.002) | 1.25 | yes (checksums) | - |" in table
    assert "| bad | mpi | 204.0 | [201.0, 207.0] | 1.49 | faster (9 of 9 rounds, p = 0.002) |  | NO (checksums) | - |" in table
    assert ("- old: a raw file of an older bench_ddp: no commit or times recorded; parameters checked by checksums "
            "only, not elementwise; bound speedup unknown (no spec)") in table
    summary = json.loads((tmp_path / "s.json").read_text())
    assert (summary["params_check"], summary["params_match"]) == ("checksum, not elementwise: old, bad", False)
    first = summary["cases"][0]
    assert (first["commit"], first["measured_at"], first["params_check"], first["params_max_diff"]) == (
        None, None, "checksum", None)
    # an older raw file's hook ran the plan runtime.tune tuned with Open MPI: the mpi variant, no client one
    assert (first["speedup"], first["speedup_mpi_plan"], first["pipelining_speedup"]) == (None, 1.49, 1.245)
    assert (summary["speedup_median"], summary["cases_slower"]) == (None, None)


def test_the_committed_raw_files_of_the_older_bench_ddp_still_give_their_committed_figures():
    """docs/measurements/ddp/before/*.raw.json (the measurement before issue 31) predate the elementwise check: read
    as older raw files, they give that run's ddp-summary.json's step times and speedups (its hook variant, p2synth,
    ran the Open MPI-tuned plan: mpi), their parameters said checked by checksums, and the bound speedups of their
    specs (the whole gradient taken as one bucket)."""
    committed = json.loads((DOCS / "ddp" / "before" / "ddp-summary.json").read_text())
    raws = [DOCS / "ddp" / "before" / f"{case}.raw.json" for case in ("4x2-1gbit", "2x2x2-1gbit-400mbit")]
    records = bench_ddp.from_raw(raws)
    for record, old in zip(records, committed["cases"]):
        assert (record["case"], record["default_ms"], record["mpi_ms"], record["sequential_ms"]) == (
            old["case"], old["default_ms"], old["p2synth_ms"], old["sequential_ms"])
        assert (record["speedup_mpi_plan"], record["pipelining_speedup"], record["params_match"]) == (
            old["speedup"], old["pipelining_speedup"], old["params_match"])
        assert (record["params_check"], record["commit"], record["bucket_bytes"]) == ("checksum", None, None)
    assert [r["bound_speedup"] for r in records] == [pytest.approx(1.17, abs=0.01), pytest.approx(1.75, abs=0.01)]


# --- the all-reduce's bound speedup -----------------------------------------------------------------------------

@pytest.mark.parametrize(("case", "ring", "bound"), [
    ("4x2", 1.75, 1.5),      # the ring crosses a node's 1 Gbit/s link with 2 (8-1)/8 b; the bound's cut 2 (1-1/4) b
    ("2x2x2", 1.75, 1.0),    # over a rack's 400 Mbit/s uplink: 2 (8-1)/8 b against 2 (1-1/2) b
    ("3x2x2", 22 / 12, 4 / 3),  # 2 (12-1)/12 b against 2 (1-1/3) b
])
def test_the_bound_speedup_from_first_principles(case, ring, bound):
    h = Hierarchy.model_validate({"levels": NOMINAL[case]})
    slowest = min(lv["bandwidth_GBps"] for lv in NOMINAL[case]) * 1e9
    b = float(1 << 24)
    assert bench_ddp.ring_allreduce_s(h, b) == pytest.approx(ring * b / slowest, rel=1e-12)
    assert bench_ddp.bound_allreduce_s(h, b) == pytest.approx(bound * b / slowest, rel=1e-12)
    assert bench_ddp.bound_speedup(h, BUCKETS) == round(ring / bound, 3)


def test_the_ring_pays_each_steps_slowest_latency():
    levels = [dict(level("node", 4, 1.0), latency_us=100), dict(level("core", 2), latency_us=1)]
    h = Hierarchy.model_validate({"levels": levels})
    assert bench_ddp.ring_allreduce_s(h, 8e6) == pytest.approx(14 * (100e-6 + 1e6 / 0.125e9), rel=1e-12)
    assert bench_ddp.ring_allreduce_s(Hierarchy.model_validate({"levels": [level("core", 1)]}), 8e6) == 0.0


@pytest.mark.parametrize(("case", "world", "expected"), [
    ("4x2-1gbit", 8, 1.17), ("2x2x2-1gbit-400mbit", 8, 1.75), ("3x2x2-1gbit-400mbit", 12, 1.375)])
def test_the_cases_specs_give_about_the_nominal_bound_speedups(case, world, expected):
    path = DOCS / "ddp" / f"{case}.spec.json"
    if not path.is_file():
        pytest.skip(f"{path.name} is not in this checkout")
    assert bench_ddp.bound_speedup(bench_ddp.spec_hierarchy(path, world), BUCKETS) == pytest.approx(expected, abs=0.01)


def test_the_spec_is_the_raw_files_else_beside_its_plan_else_named_after_the_case(tmp_path):
    raw = raw_case("c", {"default": 0.2, "client": 0.1})
    folder = tmp_path / "raw"
    folder.mkdir()
    assert bench_ddp.find_spec(raw, folder / "c.raw.json") is None
    named = write_spec(folder / "c.spec.json", NOMINAL["4x2"])
    assert bench_ddp.find_spec(raw, folder / "c.raw.json") == named
    beside = write_spec(folder / "p.spec.json", NOMINAL["4x2"])
    assert bench_ddp.find_spec({**raw, "plan": str(Path("plans") / "p.tuned.json")}, folder / "c.raw.json") == beside
    given = write_spec(tmp_path / "given.spec.json", NOMINAL["2x2x2"])
    assert bench_ddp.find_spec({**raw, "spec": str(given)}, folder / "c.raw.json") == given
    for plan in ("x.plan.json", "x.tuned.json", "x.client-tuned.json", "x.gloo.plan.json"):
        assert bench_ddp.spec_beside(Path("d") / plan) == Path("d") / "x.spec.json"


def test_spec_given_on_the_command_line_wins_and_a_wrong_one_is_one_line(tmp_path, capsys):
    raws = write_raws(tmp_path, CASES[:1])
    spec = write_spec(tmp_path / "other.json", NOMINAL["2x2x2"])
    assert bench_ddp.main(["--from-raw", *raws, "--spec", str(spec), "--summary", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["cases"][0]["bound_speedup"] == 1.75
    capsys.readouterr()
    wrong = write_spec(tmp_path / "twelve.json", NOMINAL["3x2x2"])
    assert bench_ddp.main(["--from-raw", *raws, "--spec", str(wrong)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {wrong}: its hierarchy has 12 devices, but the case ran 8 ranks\n"
    (tmp_path / "bad.json").write_text('{"axes": []}')
    assert bench_ddp.main(["--from-raw", *raws, "--spec", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'bad.json'}: not a spec (") and err.count("\n") == 1
    assert bench_ddp.main(["--from-raw", *raws, "--spec", str(spec), str(spec)]) == 2
    assert capsys.readouterr().err == "error: --spec: give one per raw file (1), not 2\n"


# --- bad input ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("cases", "message"), [
    ([CASES[0], CASES[0]], "a case appears twice in the raw files: ['4x2-1gbit', '4x2-1gbit']"),
    ([raw_case("x", {"default": 0.3})], "not a raw file of scripts.bench_ddp (a case needs the variant default and a hook variant)"),
    ([{"case": "x"}], "not a raw file of scripts.bench_ddp ('runs')"),
    ([[1, 2]], "not a raw file of scripts.bench_ddp (not a JSON object)"),
])
def test_bad_raw_files_are_one_line_and_exit_2(tmp_path, capsys, cases, message):
    assert bench_ddp.main(["--from-raw", *write_raws(tmp_path, cases)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.strip().endswith(message)


def test_a_missing_raw_file_is_one_line(capsys):
    assert bench_ddp.main(["--from-raw", "/nonexistent/raw.json"]) == 2
    assert capsys.readouterr().err.startswith("error: /nonexistent/raw.json: not a raw file of scripts.bench_ddp")


def test_checksums_of_older_raw_files_match_within_the_tolerance_of_their_scale():
    assert bench_ddp.checksums_close([10.0, 1e4, 50.0], [10.0 + 0.9e-1, 1e4 + 0.09, 50.0 + 4e-4])
    assert not bench_ddp.checksums_close([10.0, 1e4, 50.0], [10.2, 1e4, 50.0])  # 0.2 > 1e-5 * 1e4
    assert not bench_ddp.checksums_close([10.0, 1e4, 50.0], [10.0, 1e4, 50.001])


# --- the harness's pure parts -------------------------------------------------------------------------------------

def test_rounds_rotate_the_order_so_each_variant_takes_each_place_equally():
    variants = [Variant.DEFAULT, Variant.CLIENT, Variant.MPI]
    orders = [bench_ddp.round_order(variants, r) for r in range(9)]
    assert orders[:4] == [variants, variants[1:] + variants[:1], variants[2:] + variants[:2], variants]
    for v in variants:
        assert sorted(order.index(v) for order in orders) == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_the_sequential_plan_runs_every_program_on_one_piece_and_leaves_the_rest():
    program = {"steps": [{"op": "reduce_scatter", "slice": ["data@core"]}], "pipeline": 16, "cost_s": 0.5}
    plan = {"hierarchy": {"levels": []}, "workload": [{"name": "grad_allreduce", "sizes": [1, 2]}],
            "placements": [{"requests": [{"default": {"steps": [{"op": "all_reduce"}]}, "programs": [program, dict(program)]}]}]}
    out = bench_ddp.sequential_plan(plan)
    entry = out["placements"][0]["requests"][0]
    assert [p["pipeline"] for p in entry["programs"]] == [1, 1] and entry["default"]["pipeline"] == 1
    assert entry["programs"][0]["steps"] == program["steps"] and entry["programs"][0]["cost_s"] == 0.5
    assert out["workload"] == plan["workload"] and "pipeline" not in out["workload"][0]
    assert program["pipeline"] == 16  # the input is not changed


def test_the_hooks_decisions_are_keyed_by_size_in_order_and_empty_without_a_guard():
    class Guarded:
        def decisions(self):
            return {33570816: {"kept": "plan"}, 16785408: {"kept": None}}

    decided = bench_ddp.hook_decisions(Guarded())
    assert list(decided.items()) == [("16785408", {"kept": None}), ("33570816", {"kept": "plan"})]
    assert bench_ddp.hook_decisions(object()) == {} and bench_ddp.hook_decisions(None) == {}


@pytest.mark.parametrize(("guard", "passed"), [(True, {}), (False, {"guard": False})])
def test_the_hook_is_attached_as_a_user_would_and_the_guard_passed_only_to_turn_it_off(monkeypatch, guard, passed):
    """bench_ddp attaches the hook with register_p2synth_hook (which leaves DDP's built-in all-reduce where the plan
    keeps it everywhere), passing guard= only to turn the guard off."""
    from p2synth.solver.exports import ddp

    calls = []

    def fake_register(model, plan, placement, request, **kwargs):
        calls.append((model, plan, placement, request, kwargs))
        return "hook"

    monkeypatch.setattr(ddp, "register_p2synth_hook", fake_register)
    hook = bench_ddp.attach_p2synth_hook("model", Path("plan.json"), 1, "grad_allreduce", guard)
    assert hook == "hook" and calls == [("model", Path("plan.json"), 1, "grad_allreduce", passed)]


def test_the_default_model_has_at_least_64_mib_of_gradients_and_the_variants_follow_the_plans(tmp_path):
    (tmp_path / "x.tuned.json").write_text("{}")
    argv = ["--plan", str(tmp_path / "x.tuned.json"), "--out", str(tmp_path / "raw.json")]
    args = bench_ddp.parse_args(argv)
    assert args.layers == 4 and args.layers * 4 * args.width * (args.width + 1) >= 64 << 20
    assert (args.variants, args.rounds, args.guard, args.spec, args.mpi_plan) == (["default", "client"], 9, "on", None, None)
    write_spec(tmp_path / "x.spec.json", NOMINAL["4x2"])
    args = bench_ddp.parse_args([*argv, "--mpi-plan", str(tmp_path / "x.tuned.json"), "--guard", "off"])
    assert (args.variants, args.guard, args.spec) == (["default", "client", "mpi"], "off", tmp_path / "x.spec.json")


@pytest.mark.parametrize(("argv", "message"), [
    ([], "error: give --plan PLAN and --out RAW to measure, or --from-raw RAW... to rebuild the table"),
    (["--plan", "/nonexistent.json", "--out", "x.json"], "error: --plan /nonexistent.json: no such file"),
    (["--plan", "PLAN", "--out", "x.json", "--mpi-plan", "/nonexistent.json"], "error: --mpi-plan /nonexistent.json: no such file"),
    (["--plan", "PLAN", "--out", "x.json", "--variants", "default,sequential"], "error: --variants must include default and client"),
    (["--plan", "PLAN", "--out", "x.json", "--variants", "default,client,mpi"], "error: --variants mpi needs --mpi-plan PLAN"),
    (["--plan", "PLAN", "--out", "x.json", "--variants", "default,client,client"], "error: --variants names a variant twice"),
    (["--plan", "PLAN", "--out", "x.json", "--variants", "default,p2synth"], "error: argument --variants: invalid <lambda> value"),
    (["--plan", "PLAN", "--out", "x.json", "--guard", "maybe"], "error: argument --guard: invalid choice"),
    (["--plan", "PLAN", "--out", "x.json", "--spec", "/nonexistent.json"], "error: --spec /nonexistent.json: give one spec file"),
    (["--plan", "PLAN", "--out", "x.json", "--rounds", "0"], "error: --rounds, --steps, --mib, --width and --batch must be positive"),
])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, capsys, argv, message):
    (tmp_path / "plan.json").write_text("{}")
    assert bench_ddp.main([str(tmp_path / "plan.json") if a == "PLAN" else a for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_without_torch_a_measurement_is_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "plan.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "0")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "1")
    assert bench_ddp.main(["--plan", str(tmp_path / "plan.json"), "--out", str(tmp_path / "raw.json")]) == 2
    assert capsys.readouterr().err == ("error: PyTorch is not installed (python -m scripts.check_clients makes an "
                                       "environment with it)\n")


# The hook replaced by DDP's own all-reduce hook: what this checks is the harness (ranks, rendezvous over MPI, rounds,
# timing, the parameter check, what the raw file records), not the hook, whose own tests train with it.
STAND_IN = """
import sys, scripts.bench_ddp as b
class Decided:
    reduced, direct = 7, 2
    def decisions(self):
        return {4096: {"kept": "plan"}}
def attach(model, plan_path, placement, request, guard=True):
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    assert '"pipeline": 1' in open(plan_path).read() or plan_path.name == "plan.json"
    assert guard is False
    model.register_comm_hook(None, allreduce_hook)
    return Decided()
b.attach_p2synth_hook = attach
sys.exit(b.main(sys.argv[1:]))
"""


@pytest.mark.torch
@pytest.mark.mpi
def test_the_training_loop_runs_every_variant_in_every_round_with_the_same_parameters(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "plan.json").write_text(json.dumps({"placements": [{"programs": [{"steps": [], "pipeline": 4}]}]}))
    raw = tmp_path / "raw.json"
    job = run_mpi(2, ["-c", STAND_IN, "--plan", str(tmp_path / "plan.json"), "--out", str(raw), "--width", "64",
                      "--layers", "3", "--rounds", "3", "--steps", "2", "--warmup", "1", "--case", "two",
                      "--variants", "default,client,sequential,torch-hook", "--guard", "off"], timeout=300)
    assert job.returncode == 0, job.stderr[-2000:]
    data = json.loads(raw.read_text())
    assert (data["world"], data["case"], data["model"]["grad_bytes"]) == (2, "two", 3 * 64 * 65 * 4)
    assert (data["backend"], data["guard"], data["params_check"], data["spec"]) == ("gloo", "off", "elementwise", None)
    assert re.fullmatch(r"[0-9a-f]{40}", data["commit"]) and data["started_at"] <= data["ended_at"]
    assert sum(data["bucket_bytes"]) == data["model"]["grad_bytes"]
    assert data["decisions"] == {"client": {"4096": {"kept": "plan"}}, "sequential": {"4096": {"kept": "plan"}}}
    assert data["hook_buckets"] == {v: {"reduced": 7, "direct": 2} for v in ("client", "sequential")}
    variants = [Variant.DEFAULT, Variant.CLIENT, Variant.SEQUENTIAL, Variant.TORCH_HOOK]
    assert [(r["round"], r["variant"]) for r in data["runs"]] == [
        (r, v.value) for r in range(3) for v in bench_ddp.round_order(variants, r)]
    assert all(len(r["step_s"]) == 2 and min(r["step_s"]) > 0 and r["params_match"] for r in data["runs"])
    assert all(r["params_tol_share"] < 0.01 and r["started_at"] >= data["started_at"] for r in data["runs"])
    assert bench_ddp.case_record(data)["params_match"]



def test_the_hooks_bucket_counts_are_said_under_the_table_where_recorded():
    """A raw file with rank 0's bucket counts gets one line per counted hook under the table; one without them (every
    raw file before the counts) gets none, so the committed tables rebuild as they were."""
    with_counts = {**raw_case("c", {"default": 1.0, "client": 0.8}),
                   "hook_buckets": {"client": {"reduced": 64, "direct": 58}}}
    lines = bench_ddp.notes([bench_ddp.case_record(with_counts)])
    assert "  - client hook (rank 0): 64 buckets reduced, 58 of them by DDP's all-reduce on the calling thread" in lines
    without = bench_ddp.notes([bench_ddp.case_record(raw_case("c", {"default": 1.0, "client": 0.8}))])
    assert not any("buckets reduced" in line for line in without)
