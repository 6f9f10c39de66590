"""scripts/bench_ddp.py: the table and summary rebuilt from raw data (exactly, without torch), the harness's pure
parts, and (marked torch) the real training loop in 2 MPI ranks with DDP's own all-reduce standing in for the hook."""

import json
import sys

import pytest

from scripts import bench_ddp
from scripts.bench_ddp import Variant
from tests.runtime_support import run_mpi

GOOD = [1.0, 2.0, 3.0]


def raw_case(case: str, step: dict[str, float], bad_checksum: str | None = None, disagree: bool = False) -> dict:
    """A raw record of 9 rounds: variant v's round r has steps (base + r ms, base + r ms, 900 ms) for base = step[v]."""
    runs = []
    for r in range(9):
        for position, v in enumerate(bench_ddp.round_order([Variant(v) for v in step], r)):
            base = step[v.value] + r * 1e-3
            checksum = [1.0, 2.0, 3.1] if (v.value == bad_checksum and r == 4) else GOOD
            runs.append({"round": r, "position": position, "variant": v.value, "step_s": [base, 0.9, base],
                         "checksum": checksum, "ranks_agree": not (disagree and r == 8)})
    return {"case": case, "world": 8, "model": {"grad_bytes": 67141632}, "rounds": 9, "variants": list(step), "runs": runs}


CASES = [raw_case("4x2-1gbit", {"default": 0.300, "p2synth": 0.200, "sequential": 0.250}),
         raw_case("2x2x2", {"default": 0.300, "p2synth": 0.296, "sequential": 0.310}, bad_checksum="sequential")]

TABLE = """\
| case | variant | step (ms) | 95% interval (ms) | speedup over default | speedup over sequential | params match |
|---|---|---|---|---|---|---|
| 4x2-1gbit | default | 304.0 | [301.0, 307.0] | 1.00 |  | yes |
| 4x2-1gbit | p2synth | 204.0 | [201.0, 207.0] | 1.49 | 1.25 | yes |
| 4x2-1gbit | sequential | 254.0 | [251.0, 257.0] | 1.20 |  | yes |
| 2x2x2 | default | 304.0 | [301.0, 307.0] | 1.00 |  | NO |
| 2x2x2 | p2synth | 300.0 | [297.0, 303.0] | 1.01 | 1.05 | NO |
| 2x2x2 | sequential | 314.0 | [311.0, 317.0] | 0.97 |  | NO |
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
    argv = ["--from-raw", *raws, "--markdown", str(tmp_path / "t.md"), "--summary", str(tmp_path / "s.json")]
    assert bench_ddp.main(argv) == 0
    assert (tmp_path / "t.md").read_text() == TABLE
    summary = json.loads((tmp_path / "s.json").read_text())
    assert {k: summary[k] for k in ("speedup_median", "speedup_min", "speedup_max", "params_match", "rounds")} == {
        "speedup_median": 1.252, "speedup_min": 1.013, "speedup_max": 1.49, "params_match": False, "rounds": 9}
    first, second = summary["cases"]
    assert first == {"case": "4x2-1gbit", "world": 8, "grad_bytes": 67141632, "rounds": 9,
                     "default_ms": 304.0, "default_ci_ms": [301.0, 307.0], "p2synth_ms": 204.0, "p2synth_ci_ms": [201.0, 207.0],
                     "sequential_ms": 254.0, "sequential_ci_ms": [251.0, 257.0], "speedup": 1.49, "pipelining_speedup": 1.245,
                     "hook_vs_default": "faster beyond noise", "params_match": True}
    assert (second["speedup"], second["hook_vs_default"], second["params_match"]) == (1.013, "within noise", False)
    assert "│ 4x2-1gbit │ p2synth    │     204.0 │" in capsys.readouterr().out
    # the same raw files give the same bytes
    before = (tmp_path / "s.json").read_bytes(), (tmp_path / "t.md").read_bytes()
    assert bench_ddp.main(argv) == 0
    assert ((tmp_path / "s.json").read_bytes(), (tmp_path / "t.md").read_bytes()) == before


def test_a_case_whose_ranks_disagree_does_not_match_and_a_slower_hook_is_said(tmp_path):
    case = raw_case("slow", {"default": 0.200, "p2synth": 0.300}, disagree=True)
    record = bench_ddp.case_record(case)
    assert record["params_match"] is False and record["hook_vs_default"] == "slower beyond noise"
    assert "pipelining_speedup" not in record and record["speedup"] == round(0.204 / 0.304, 3)


def test_parameters_match_within_the_tolerance_of_their_scale():
    assert bench_ddp.params_close([10.0, 1e4, 50.0], [10.0 + 0.9e-1, 1e4 + 0.09, 50.0 + 4e-4])
    assert not bench_ddp.params_close([10.0, 1e4, 50.0], [10.2, 1e4, 50.0])  # 0.2 > 1e-5 * 1e4
    assert not bench_ddp.params_close([10.0, 1e4, 50.0], [10.0, 1e4, 50.001])


@pytest.mark.parametrize(("cases", "message"), [
    ([CASES[0], CASES[0]], "a case appears twice in the raw files: ['4x2-1gbit', '4x2-1gbit']"),
    ([raw_case("x", {"default": 0.3, "sequential": 0.2})], "not a raw file of scripts.bench_ddp (a case needs the variants default and p2synth)"),
    ([{"case": "x"}], "not a raw file of scripts.bench_ddp ('variants')"),
])
def test_bad_raw_files_are_one_line_and_exit_2(tmp_path, capsys, cases, message):
    assert bench_ddp.main(["--from-raw", *write_raws(tmp_path, cases)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.strip().endswith(message)


def test_a_missing_raw_file_is_one_line(capsys):
    assert bench_ddp.main(["--from-raw", "/nonexistent/raw.json"]) == 2
    assert capsys.readouterr().err.startswith("error: /nonexistent/raw.json: not a raw file of scripts.bench_ddp")


def test_rounds_rotate_the_order_so_each_variant_takes_each_place_equally():
    variants = list(Variant)
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


def test_rank_and_world_come_from_open_mpi_or_torchrun():
    assert bench_ddp.rank_and_world({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8", "RANK": "0", "WORLD_SIZE": "1"}) == (3, 8)
    assert bench_ddp.rank_and_world({"RANK": "1", "WORLD_SIZE": "2"}) == (1, 2)
    with pytest.raises(bench_ddp.UsageError, match="no rank"):
        bench_ddp.rank_and_world({})


def test_interface_addresses():
    assert bench_ddp.interface_address("lo") == "127.0.0.1"
    with pytest.raises(bench_ddp.UsageError, match="--ifname p2s-nosuch0: no IPv4 address"):
        bench_ddp.interface_address("p2s-nosuch0")
    assert bench_ddp.default_ifname() in ("lo", bench_ddp.NODE_IF)


def test_the_default_model_has_at_least_64_mib_of_gradients(tmp_path):
    (tmp_path / "plan.json").write_text("{}")
    args = bench_ddp.parse_args(["--plan", str(tmp_path / "plan.json"), "--out", str(tmp_path / "raw.json")])
    assert args.layers == 4 and args.layers * 4 * args.width * (args.width + 1) >= 64 << 20
    assert args.variants == ["default", "p2synth", "sequential"] and args.rounds == 9


@pytest.mark.parametrize(("argv", "message"), [
    ([], "error: give --plan PLAN and --out RAW to measure, or --from-raw RAW... to rebuild the table"),
    (["--plan", "/nonexistent.json", "--out", "x.json"], "error: --plan /nonexistent.json: no such file"),
    (["--plan", "PLAN", "--out", "x.json", "--variants", "default,sequential"], "error: --variants must include default and p2synth"),
    (["--plan", "PLAN", "--out", "x.json", "--variants", "default,fast"], "error: argument --variants: invalid <lambda> value"),
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
# timing, checksums), not the hook, whose own tests train with it.
STAND_IN = """
import sys, scripts.bench_ddp as b
def attach(model, plan_path, placement, request):
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    assert '"pipeline": 1' in open(plan_path).read() or plan_path.name == "plan.json"
    model.register_comm_hook(None, allreduce_hook)
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
                      "--layers", "3", "--rounds", "3", "--steps", "2", "--warmup", "1", "--case", "two"], timeout=300)
    assert job.returncode == 0, job.stderr[-2000:]
    data = json.loads(raw.read_text())
    assert (data["world"], data["case"], data["model"]["grad_bytes"]) == (2, "two", 3 * 64 * 65 * 4)
    assert [(r["round"], r["variant"]) for r in data["runs"]] == [
        (r, v.value) for r in range(3) for v in bench_ddp.round_order(list(Variant), r)]
    assert all(len(r["step_s"]) == 2 and min(r["step_s"]) > 0 and r["ranks_agree"] for r in data["runs"])
    assert bench_ddp.case_record(data)["params_match"]
    assert data["runs"][0]["checksum"] != [0.0, 0.0, 0.0]


def test_the_recorded_measurement_rebuilds_its_committed_summary_and_table_exactly(tmp_path):
    """docs/measurements/ddp-summary.json and the table in ddp.md come from the committed raw files, byte for byte."""
    from pathlib import Path

    docs = Path(__file__).resolve().parent.parent / "docs" / "measurements"
    raws = [str(docs / "ddp" / f"{case}.raw.json") for case in ("4x2-1gbit", "2x2x2-1gbit-400mbit")]
    summary, table = tmp_path / "summary.json", tmp_path / "table.md"
    assert bench_ddp.main(["--from-raw", *raws, "--summary", str(summary), "--markdown", str(table)]) == 0
    assert summary.read_bytes() == (docs / "ddp-summary.json").read_bytes()
    assert table.read_text().strip() in (docs / "ddp.md").read_text()
