"""scripts/bench_pipeline.py: the plan lists one program on every piece count; the table's ratios are the medians'."""

import json

import pytest

from scripts import bench_pipeline
from scripts.tables import printed_rows

HIERARCHY = {"name": "cpu-2x4", "levels": [
    {"name": "node", "count": 2, "bandwidth_GBps": 1.0, "uplink_GBps": 1.0, "latency_us": 20},
    {"name": "core", "count": 4, "bandwidth_GBps": 8.0, "latency_us": 1}]}


def _plan(tmp_path, size: str, pieces: str) -> dict:
    """The plan `bench_pipeline plan` writes for HIERARCHY at `size` on `pieces` (it must exit 0)."""
    (tmp_path / "h.json").write_text(json.dumps(HIERARCHY))
    out = tmp_path / "plan.json"
    assert bench_pipeline.main(["plan", "--hierarchy", str(tmp_path / "h.json"), "--bytes", size, "--pieces", pieces,
                                "--out", str(out)]) == 0
    return json.loads(out.read_text())


def test_the_plan_lists_the_same_program_on_every_piece_count(tmp_path):
    programs = _plan(tmp_path, "16M", "4,2")["placements"][0]["programs"]
    assert [p["pipeline"] for p in programs] == [4, 2, 1]
    assert len({json.dumps(p["steps"]) for p in programs}) == 1 and len(programs[0]["steps"]) >= 2
    # pipelining a multi-step program on a 1 GB/s node link at 16 MiB is predicted faster
    assert programs[0]["cost_s"] < programs[2]["cost_s"]


def _tuned(wrong=0):
    program = lambda p, s, c: {"steps": [], "pipeline": p, "cost_s": c, "measured_s": s, "measured_ci_s": [s * 0.9, s * 1.1],
                               "wrong": wrong if p == 2 else 0}
    return {"message_bytes": 16 << 20, "placements": [{
        "default": {"steps": [], "cost_s": 1.0, "measured_s": 0.8, "measured_ci_s": [0.7, 0.9], "wrong": 0},
        "programs": [program(2, 0.25, 0.2), program(1, 0.5, 0.4)]}]}


def test_the_table_gives_ratios_of_medians_and_exit_1_on_wrong_elements(tmp_path, capsys):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_tuned()))
    assert bench_pipeline.main(["table", str(path), "--markdown", str(tmp_path / "t.md")]) == 0
    rows = printed_rows(capsys.readouterr().out)
    assert rows[1] == ["16 MiB", "P = 2", "250.0", "[225.0, 275.0]", "200.0", "1.25", "2.00", "3.20", "0"]
    assert rows[2] == ["16 MiB", "P = 1", "500.0", "[450.0, 550.0]", "400.0", "1.25", "1.00", "1.60", "0"]
    md = (tmp_path / "t.md").read_text().splitlines()
    assert md[0].startswith("| size | program |") and len(md) == 2 + 3
    assert md[3] == "| 16 MiB | P = 2 | 250.0 | [225.0, 275.0] | 200.0 | 1.25 | 2.00 | 3.20 | 0 |"
    path.write_text(json.dumps(_tuned(wrong=3)))
    assert bench_pipeline.main(["table", str(path)]) == 1


def test_the_table_predicts_on_another_hierarchy_what_the_solver_would(tmp_path, capsys):
    """``table --hierarchy H`` re-predicts every measured program with the simulator on H: on the plan's own hierarchy
    that is the plan's cost_s of every piece count and of the default; on an Open MPI one, whose reduce_scatter is
    a reduce and a linear scatter at these sizes, a program with a reduce_scatter step is predicted slower, and the
    default (one all_reduce over both hosts) runs coll/han's two pipelined stages, faster than the flat schedule."""
    tuned = _plan(tmp_path, "16M", "4")
    entry = tuned["placements"][0]
    for p in [entry["default"], *entry["programs"]]:
        p.update(measured_s=1.0, measured_ci_s=[0.9, 1.1], wrong=0)
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(tuned))
    from p2synth.hierarchies.model import Hierarchy
    same = bench_pipeline.predictions(tuned, Hierarchy.model_validate(HIERARCHY))
    assert [same[id(p)] for p in [entry["default"], *entry["programs"]]] == \
        pytest.approx([p["cost_s"] for p in [entry["default"], *entry["programs"]]], rel=1e-12)
    open_mpi = bench_pipeline.predictions(tuned, Hierarchy.model_validate({**HIERARCHY, "library": "open-mpi"}))
    sequential = entry["programs"][-1]
    assert sequential["pipeline"] == 1 and sequential["steps"][0]["op"] == "reduce_scatter"
    assert open_mpi[id(sequential)] > same[id(sequential)] and open_mpi[id(entry["default"])] < same[id(entry["default"])]
    (tmp_path / "om.json").write_text(json.dumps({**HIERARCHY, "library": "open-mpi"}))
    assert bench_pipeline.main(["table", str(path), "--hierarchy", str(tmp_path / "om.json")]) == 0
    assert f"{open_mpi[id(entry['programs'][-1])] * 1e3:.1f}" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["plan", "--hierarchy", "/nonexistent.json", "--bytes", "16M", "--out", "x.json"],
                                  ["plan", "--bytes", "16M"], ["table", "/nonexistent.json"],
                                  ["table", "/nonexistent.json", "--hierarchy", "/nonexistent-h.json"]])
def test_bad_arguments_give_one_line_and_exit_2(argv, capsys):
    assert bench_pipeline.main(argv) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_an_entry_costed_directly_is_what_the_solver_lists(tmp_path):
    """Where the solver lists the program on a piece count, costing the same steps on that count directly
    (what the plan falls back to at small messages) gives the same cost and step costs."""
    (tmp_path / "h.json").write_text(json.dumps(HIERARCHY))
    out = tmp_path / "plan.json"
    assert bench_pipeline.main(["plan", "--hierarchy", str(tmp_path / "h.json"), "--bytes", "16M", "--pieces", "4",
                                "--out", str(out)]) == 0
    plan = json.loads(out.read_text())
    four, one = plan["placements"][0]["programs"]
    assert (four["pipeline"], one["pipeline"]) == (4, 1)
    direct = bench_pipeline._on_pieces(plan, one, 4)
    assert direct["cost_s"] == pytest.approx(four["cost_s"], rel=1e-12)
    assert direct["step_costs_s"] == pytest.approx(four["step_costs_s"], rel=1e-12)
    assert direct["steps"] == four["steps"] and direct["verified"]


def test_a_plan_at_a_small_message_lists_every_piece_count(tmp_path):
    """At 64 KiB pipelining this program does not pay, and the solver lists it only sequentially: the plan still
    lists it on every piece count, each costed as the solver would, the sequential one cheapest."""
    programs = _plan(tmp_path, "64K", "4,2")["placements"][0]["programs"]
    assert [p["pipeline"] for p in programs] == [4, 2, 1]
    assert len({json.dumps(p["steps"]) for p in programs}) == 1
    assert programs[2]["cost_s"] < programs[1]["cost_s"] < programs[0]["cost_s"]
