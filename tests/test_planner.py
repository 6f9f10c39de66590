"""The workload planner: per-request proved programs, placements ranked by step total."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from p2synth.solver.planner import plan_placement, rank_plans
from p2synth.solver.spec import build_problem, parse_spec
from p2synth.encodings.deadline import Deadline

ROOT = Path(__file__).resolve().parent.parent

SPEC = {
    "hierarchy": {"name": "t", "levels": [
        {"name": "node", "count": 2, "bandwidth_GBps": 10, "latency_us": 10, "uplink_GBps": 10},
        {"name": "gpu", "count": 4, "bandwidth_GBps": 100, "latency_us": 1}]},
    "axes": [{"name": "data", "size": 4}, {"name": "tensor", "size": 2}],
    "workload": [
        {"name": "grads", "axes": ["data"], "collective": "all_reduce", "message_bytes": 1 << 28, "count": 1},
        {"name": "tp", "axes": ["tensor"], "collective": "all_reduce", "message_bytes": 1 << 22, "count": 50},
    ],
    "pipeline": [1],  # the hand-computed figures below are of sequential programs
}


def _plan(spec):
    problem = build_problem(parse_spec(json.dumps(spec)))
    plans = [plan_placement(problem, m, 4, 3, Deadline(None)) for m in problem.matrices]
    return problem, rank_plans(plans, [])


# Hand-computed with the alpha-beta model (solver/cost.py, docs/model.md): a step over a group of k sends
# V bytes per member (all_reduce 2(k-1)/k m, reduce_scatter (k-1)/k m, all_gather (k-1) m) and pays
# rounds x latency (2(k-1) for all_reduce, k-1 otherwise). Crossing the node level, one node's 4 devices
# share its 10 GB/s uplink, so V takes 4 V / 10e9 s; inside a node V takes V / 100e9 s.
GRADS, TP = 1 << 28, 1 << 22
# placement ((1, 4), (2, 1)): data inside the node, tensor across nodes
GRADS_INSIDE = 2 * 3 / 4 * GRADS / 100e9 + 6 * 1e-6  # AR(data@gpu), k = 4
TP_ACROSS = 4 * TP / 10e9 + 2 * 10e-6  # AR(tensor@node), k = 2
# placement ((2, 2), (1, 2)): data split over node and gpu, tensor inside the node
GRADS_SPLIT = 2 * (GRADS / 2 / 100e9 + 1e-6) + (4 * GRADS / 2 / 10e9 + 2 * 10e-6)  # RS(gpu), AR(node) on half, AG(gpu)
TP_INSIDE = TP / 100e9 + 2 * 1e-6  # AR(tensor@gpu), k = 2


def test_each_request_gets_its_proved_best_program_and_count_times_its_time():
    _, plan = _plan(SPEC)
    got = {p.placement.matrix: [(r.named.name, r.solution.best.program.text(p.placement), r.step_s) for r in p.requests]
           for p in plan.placements}
    assert got == {
        ((2, 2), (1, 2)): [("grads", "RS(data@gpu) -> AR(data@node) -> AG(data@gpu)", pytest.approx(GRADS_SPLIT, rel=1e-12)),
                           ("tp", "AR(tensor@gpu)", pytest.approx(50 * TP_INSIDE, rel=1e-12))],
        ((1, 4), (2, 1)): [("grads", "AR(data@gpu)", pytest.approx(GRADS_INSIDE, rel=1e-12)),
                           ("tp", "AR(tensor@node)", pytest.approx(50 * TP_ACROSS, rel=1e-12))],
    }
    assert all(p.optimal for p in plan.placements)


def test_frequent_tensor_allreduce_pulls_tensor_inside_the_node():
    _, plan = _plan(SPEC)
    assert [p.placement.matrix for p in plan.placements] == [((2, 2), (1, 2)), ((1, 4), (2, 1))]
    assert [p.total_s for p in plan.placements] == pytest.approx([GRADS_SPLIT + 50 * TP_INSIDE, GRADS_INSIDE + 50 * TP_ACROSS], rel=1e-12)
    # the gradient alone prefers the other placement, by a factor of 14: the trade-off is real
    _, grads_only = _plan({**SPEC, "workload": SPEC["workload"][:1]})
    assert [p.placement.matrix for p in grads_only.placements] == [((1, 4), (2, 1)), ((2, 2), (1, 2))]
    assert [p.total_s for p in grads_only.placements] == pytest.approx([GRADS_INSIDE, GRADS_SPLIT], rel=1e-12)


def test_workload_cli_writes_per_request_results(tmp_path):
    spec = tmp_path / "w.json"
    spec.write_text(json.dumps(SPEC))
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "solver.run", str(spec), "--out", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    assert [w["name"] for w in result["workload"]] == ["grads", "tp"]
    first = result["placements"][0]
    assert {"matrix", "total_s", "default_total_s", "bound_total_s", "optimal", "requests"} <= set(first)
    assert [q["name"] for q in first["requests"]] == ["grads", "tp"]
    q = first["requests"][1]
    assert q["request"] == {"axes": ["tensor"], "collective": "all_reduce"} and q["count"] == 50
    assert math.isclose(q["step_s"], 50 * q["programs"][0]["cost_s"])
    assert math.isclose(q["step_bound_s"], 50 * q["bound_s"]) and 0 < q["bound_s"] <= q["best_s"]
    assert math.isclose(first["bound_total_s"], sum(x["step_bound_s"] for x in first["requests"]))
    assert "grads" in r.stdout and "all defaults" in r.stdout and "of bound" in r.stdout


@pytest.mark.parametrize("example", ["gpt-3d-on-dgx-a100", "gpt-3d-on-64-dgx-a100", "zero-dp-on-dgx-h100", "moe-on-dgx-h100"])
def test_bundled_workload_examples_plan(example, tmp_path):
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "solver.run", f"examples/{example}.json", "--quiet", "--top", "1", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    assert result["complete"] and result["placements"]
    assert all(q["programs"][0]["verified"] for p in result["placements"] for q in p["requests"])


def test_moe_example_exchanges_tokens_with_a_hierarchical_all_to_all(tmp_path):
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "solver.run", "examples/moe-on-dgx-h100.json", "--quiet", "--top", "3", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    best = json.loads(out.read_text())["placements"][0]
    assert best["description"] == "data=[gpu 2] expert=[node 4, gpu 2] tensor=[gpu 2]"
    for name in ("token_dispatch", "token_combine"):
        q = next(q for q in best["requests"] if q["name"] == name)
        assert q["request"] == {"axes": ["expert"], "collective": "all_to_all"} and q["count"] == 48
        assert q["program_count"] == 3 and all(p["verified"] for p in q["programs"])
        steps = [(s["op"], s["slice"]) for s in q["programs"][0]["steps"]]
        assert steps == [("all_to_all", [["expert", "node"]]), ("all_to_all", [["expert", "gpu"]])]
        assert q["default"]["cost_s"] / q["programs"][0]["cost_s"] > 1.15


def test_duplicate_request_names_are_rejected(tmp_path):
    spec = {**SPEC, "workload": [SPEC["workload"][0], SPEC["workload"][0]]}
    path = tmp_path / "w.json"
    path.write_text(json.dumps(spec))
    r = subprocess.run([sys.executable, "-m", "solver.run", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "workload: request names must be unique" in r.stderr


@pytest.mark.parametrize("kind,needles", [
    ("torch", ["def build_mesh", "def grad_allreduce(", "def tp_allreduce(", "init_device_mesh"]),
    ("jax", ["def build_mesh", "def grad_allreduce(", "def tp_allreduce(", "shard_map"]),
])
def test_export_prints_a_module_for_the_chosen_placement(kind, needles):
    r = subprocess.run([sys.executable, "-m", "solver.run", "examples/gpt-3d-on-dgx-a100.json", "--export", kind, "--placement", "1"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    compile(r.stdout, f"plan_{kind}.py", "exec")
    assert all(n in r.stdout for n in needles)
    assert "data=[node 4] pipeline=[gpu 2] tensor=[gpu 4]" in r.stdout  # placement 1 of the ranked list (by step time)


def test_export_placement_out_of_range_exits_2():
    r = subprocess.run([sys.executable, "-m", "solver.run", "examples/gpt-3d-on-dgx-a100.json", "--export", "torch", "--placement", "5"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--placement: 5 is out of range" in r.stderr and not r.stdout
