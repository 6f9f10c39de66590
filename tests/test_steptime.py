"""The step-time model (solver/steptime.py) on hand-computed schedules, and the step section's errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from p2synth.encodings.deadline import Deadline
from p2synth.hierarchies.program import Collective, Program, Step
from p2synth.hierarchies.placement import Cell
from p2synth.hierarchies.step import Part, Pass, Schedule, StepSpec, stage_ops
from p2synth.solver.planner import plan_placement
from p2synth.solver.spec import SpecError, build_problem, parse_spec
from p2synth.solver.steptime import Occurrence, PassTimes, buckets_end, concurrency, layer_seconds, step_time, timeline

F, B = Pass.FORWARD, Pass.BACKWARD


def test_1f1b_and_gpipe_orders():
    # 3 stages, 4 microbatches: stage s warms up with 2 - s forwards (PipeDream-flush / Megatron-LM's 1F1B)
    assert [f"{p}{j}" for p, j in stage_ops(Schedule.ONE_F_ONE_B, 0, 3, 4)] == "F0 F1 F2 B0 F3 B1 B2 B3".split()
    assert [f"{p}{j}" for p, j in stage_ops(Schedule.ONE_F_ONE_B, 2, 3, 4)] == "F0 B0 F1 B1 F2 B2 F3 B3".split()
    assert [f"{p}{j}" for p, j in stage_ops(Schedule.ONE_F_ONE_B, 0, 4, 2)] == "F0 F1 B0 B1".split()  # warm-up capped at m
    assert [f"{p}{j}" for p, j in stage_ops(Schedule.GPIPE, 1, 3, 2)] == "F0 F1 B0 B1".split()


def test_two_stage_1f1b_by_hand():
    # F = 1, B = 2, no transfer time: s0 F0 [0,1] F1 [1,2] B0 [4,6] B1 [7,9]; s1 F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7]
    t = timeline(Schedule.ONE_F_ONE_B, 2, 2, 1.0, 2.0, 0.0)
    assert t[0] == {(F, 0): PassTimes(0, 1), (F, 1): PassTimes(1, 2), (B, 0): PassTimes(4, 6), (B, 1): PassTimes(7, 9)}
    assert t[1] == {(F, 0): PassTimes(1, 2), (B, 0): PassTimes(2, 4), (F, 1): PassTimes(4, 5), (B, 1): PassTimes(5, 7)}
    # (m + p - 1)(F + B) = 3 x 3 = 9
    # with a transfer of 0.5: s1 F0 [1.5,2.5] B0 [2.5,4.5] F1 [4.5,5.5] B1 [5.5,7.5]; s0 B0 [5,7] B1 [8,10]
    t = timeline(Schedule.ONE_F_ONE_B, 2, 2, 1.0, 2.0, 0.5)
    assert t[1][B, 1] == PassTimes(5.5, 7.5) and t[0][B, 0] == PassTimes(5, 7) and t[0][B, 1] == PassTimes(8, 10)


def test_transfers_between_two_stages_queue():
    # F = 1, B = 1, transfers of 3: s0's forwards end at 1 and 2; the first transfer arrives at 4, the second
    # waits for it and arrives at 7, so s1 runs F0 [4,5] and F1 [7,8] (GPipe: s1 then runs B0 [8,9], B1 [9,10])
    t = timeline(Schedule.GPIPE, 2, 2, 1.0, 1.0, 3.0)
    assert t[1][F, 0] == PassTimes(4, 5) and t[1][F, 1] == PassTimes(7, 8)
    # backwards: s1's B0 ends at 9 -> arrives 12; B1 ends at 10, waits for the channel -> arrives 15
    assert t[0][B, 0] == PassTimes(12, 13) and t[0][B, 1] == PassTimes(15, 16)


def test_gpipe_by_hand():
    # GPipe, 2 stages, 3 microbatches, F = 1, B = 1: s1 runs F0..F2 at [1,2],[2,3],[3,4], B0..B2 at [4,5],[5,6],[6,7];
    # s0's B0 waits for s1's B0 (end 5): [5,6], [6,7], B2 waits for s1's B2 (end 7): [7,8]
    t = timeline(Schedule.GPIPE, 2, 3, 1.0, 1.0, 0.0)
    assert [t[0][B, j] for j in range(3)] == [PassTimes(5, 6), PassTimes(6, 7), PassTimes(7, 8)]
    assert max(x.end for x in t[1].values()) == 7


def _bucket(nbytes: int, seconds: float) -> Occurrence:
    return Occurrence(Part.GRADIENT, nbytes, 1, Program(()), seconds)


def test_buckets_overlap_the_last_backward_pass():
    last = PassTimes(10.0, 14.0)
    # two equal buckets, 1 s each: ready at 12 and 14; the first ends at 13, the second at 15 -> 1 s exposed
    assert buckets_end(last, [_bucket(100, 1.0), _bucket(100, 1.0)], 0.0) == 15.0
    # a 1:3 split: ready at 11 and 14; reductions of 0.5 s end at 11.5 and 14.5
    assert buckets_end(last, [_bucket(100, 0.5), _bucket(300, 0.5)], 0.0) == 14.5
    # sharing a level with 3.5 s of layer communication in that pass: no earlier than 10 + 3.5 + 1
    assert buckets_end(last, [_bucket(100, 0.5), _bucket(300, 0.5)], 3.5) == 14.5
    assert buckets_end(last, [_bucket(100, 0.5), _bucket(300, 0.5)], 4.0) == 15.0


SPEC = {
    "hierarchy": {"name": "tb", "levels": [{"name": "node", "count": 4, "bandwidth_GBps": 0.1, "latency_us": 50},
                                           {"name": "core", "count": 2, "bandwidth_GBps": 10, "latency_us": 1}]},
    "axes": [{"name": "dp", "size": 2}, {"name": "pp", "size": 2}, {"name": "tp", "size": 2}],
    "workload": [
        {"name": "tp_ar", "axes": ["tp"], "collective": "all_reduce", "message_bytes": 1 << 20, "count": 8},
        {"name": "pp_send", "axes": ["pp"], "collective": "send_recv", "message_bytes": 1 << 20, "count": 4},
        {"name": "grad", "axes": ["dp"], "collective": "all_reduce", "message_bytes": 1 << 22, "count": 2},
    ],
    "step": {"roles": {"data": "dp", "pipeline": "pp", "tensor": "tp"}, "microbatches": 2, "layers": 4,
             "compute": {"forward_ms": 10, "backward_ms": 20}},
    "placements": [[[2, 1], [2, 1], [1, 2]]],
}


def test_whole_step_by_hand():
    """data=[node 2] pipeline=[node 2] tensor=[core 2], alpha-beta; every figure recomputed here by hand."""
    problem = build_problem(parse_spec(json.dumps(SPEC)))
    result = plan_placement(problem, problem.matrices[0], 4, 5, Deadline(None))
    tp, pp, grad = (r.best_s for r in result.requests)
    # a stage holds 2 layers split over tensor 2: forward 2 x 10 / 2 = 10 ms, backward 20 ms; 8 / (2 x 2) = 2 tp
    # all-reduces per pass
    fwd, bwd = 0.010 + 2 * tp, 0.020 + 2 * tp
    # 2 stages, 2 microbatches, transfer pp: as test_two_stage_1f1b_by_hand, s0's last backward starts at
    # 2 fwd + bwd + ... : s1 F0 [fwd+pp, 2fwd+pp], B0 to 2fwd+bwd+pp, s0 B0 from 2fwd+bwd+2pp, s1 F1 from
    # max(2fwd+bwd+pp, 2fwd+pp) = 2fwd+bwd+pp to 3fwd+bwd+pp, B1 to 3fwd+2bwd+pp; s0 B1 from max(2fwd+2bwd+2pp,
    # 3fwd+2bwd+2pp) = 3fwd+2bwd+2pp to 3fwd+3bwd+2pp
    pipe_end = 3 * fwd + 3 * bwd + 2 * pp
    still_end = 3 * fwd + 3 * bwd
    last_start = 3 * fwd + 2 * bwd + 2 * pp
    # two 4 MiB buckets, ready at half and the end of s0's last backward pass; tp (core) and grad (node) share no level
    bucket_end = max(max(last_start + bwd / 2, last_start) + grad, pipe_end) + grad
    step = result.step
    assert step is not None
    assert step.step_s == pytest.approx(bucket_end)
    assert step.compute_s == pytest.approx(2 * (0.010 + 0.020))
    assert step.layer_comm_s == pytest.approx(2 * 2 * 2 * tp)
    assert step.bubble_s == pytest.approx(still_end - 2 * (fwd + bwd))
    assert step.pipeline_comm_s == pytest.approx(2 * pp)
    assert step.gradient_exposed_s == pytest.approx(bucket_end - pipe_end)
    parts = (step.compute_s + step.layer_comm_s + step.bubble_s + step.pipeline_comm_s + step.gradient_exposed_s
             + step.after_s)
    assert parts == pytest.approx(step.step_s)


def test_concurrency_is_read_off_the_schedule():
    # the 2-stage schedule of test_two_stage_1f1b_by_hand: s0 F0 [0,1] F1 [1,2] B0 [4,6] B1 [7,9];
    # s1 F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7]
    k = concurrency(timeline(Schedule.ONE_F_ONE_B, 2, 2, 1.0, 2.0, 0.0))
    assert k == {(0, F, 0): 1.0, (0, F, 1): 2.0, (0, B, 0): 2.0, (0, B, 1): 1.0,
                 (1, F, 0): 2.0, (1, B, 0): 1.0, (1, F, 1): 2.0, (1, B, 1): 1.5}


def test_layer_seconds_go_from_one_stage_to_every_stage_with_concurrency():
    layer = [Occurrence(Part.LAYER, 1, 8, Program(()), 1.0, 4.0), Occurrence(Part.LAYER, 1, 4, Program(()), 0.5)]
    # 2 microbatches: 8 / 4 = 2 and 4 / 4 = 1 occurrences a pass; 4 stages: k = 1 -> one stage's prices,
    # k = 4 -> every stage's, k = 2 -> a third of the way; the second has no shared price: 0.5 throughout
    assert layer_seconds(layer, 4, 2, 1.0) == 2 * 1.0 + 0.5
    assert layer_seconds(layer, 4, 2, 4.0) == 2 * 4.0 + 0.5
    assert layer_seconds(layer, 4, 2, 2.0) == pytest.approx(2 * 2.0 + 0.5)
    assert layer_seconds(layer, 1, 2, 1.0) == 2.5


def test_stages_that_run_at_once_share_the_layer_links_by_hand():
    """2 stages, 1F1B, 2 microbatches, F = 1 s and B = 2 s of compute, one layer request a pass at 1 s on one
    stage's machine and 3 s with both stages' groups at once; no sends, no buckets."""
    spec = {**SPEC, "workload": [SPEC["workload"][0] | {"count": 4}, SPEC["workload"][1]],
            "step": {**SPEC["step"], "layers": 2, "compute": {"forward_ms": 2000, "backward_ms": 4000}}}
    problem = build_problem(parse_spec(json.dumps(spec)))
    placement = problem.placement(problem.matrices[0])
    layer = Occurrence(Part.LAYER, 1 << 20, 4, Program(()), 1.0, 3.0)
    # priced one stage at a time (F = 2, B = 3): s0 F0 [0,2] F1 [2,4] B0 [7,10] B1 [12,15];
    # s1 F0 [2,4] B0 [4,7] F1 [7,9] B1 [9,12]. Stages at once: s0 1, 2, 2, 1; s1 2, 1, 2, 4/3 -> layer 1 + 2 (k - 1):
    # s0 1, 3, 3, 1; s1 3, 1, 3, 5/3. Again: s0 F0 [0,2] F1 [2,6]; s1 F0 [2,6] B0 [6,9]; s0 B0 [9,14];
    # s1 F1 [9,13] B1 [13,16 2/3]; s0 B1 [16 2/3, 19 2/3]
    t = step_time(problem.spec.step, placement, [layer])
    assert t.step_s == pytest.approx(19 + 2 / 3)
    assert t.compute_s == pytest.approx(6.0)
    assert t.layer_comm_s == pytest.approx(3 + 1 + 3 + 5 / 3)  # stage 1's, the larger
    assert t.bubble_s == pytest.approx(19 + 2 / 3 - 6 - (8 + 2 / 3)) and t.pipeline_comm_s == 0.0
    # without a shared price the passes keep their one-stage price: (m + p - 1)(F + B) = 3 x 5
    alone = step_time(problem.spec.step, placement, [Occurrence(Part.LAYER, 1 << 20, 4, Program(()), 1.0)])
    assert alone.step_s == pytest.approx(15.0) and alone.layer_comm_s == pytest.approx(4.0)
    # buckets whose program shares a level with the layer request's end no earlier than their stage's last backward
    # pass's start plus that pass's own layer time plus the buckets: stage 0's B1 [16 2/3, 19 2/3] pays 1 s of layer
    # (stage 1's B1 pays 5/3); buckets of 1 and 99 bytes, 5 s and 0.5 s: 16 2/3 + 1 + 5 + 0.5
    level = Program((Step(Collective.ALL_REDUCE, (Cell(axis=1, level=0),)),))
    layer = Occurrence(Part.LAYER, 1 << 20, 4, level, 1.0, 3.0)
    buckets = [Occurrence(Part.GRADIENT, 1, 1, level, 5.0), Occurrence(Part.GRADIENT, 99, 1, level, 0.5)]
    t = step_time(problem.spec.step, placement, [layer, *buckets])
    assert t.step_s == pytest.approx(23 + 1 / 6) and t.gradient_exposed_s == pytest.approx(23 + 1 / 6 - (19 + 2 / 3))


def test_a_layer_request_over_a_level_the_stages_share_pays_for_it():
    """tensor across nodes, pipeline inside them: both stages' tensor groups cross the same node uplink, so a layer
    request costs more than on one stage's machine; tensor inside the node, pipeline across: nothing is shared."""
    from p2synth.solver.planner import chosen_of
    from p2synth.solver.steptime import occurrences_of
    for matrix, shared in (([[2, 1], [1, 2], [2, 1]], True), ([[2, 1], [2, 1], [1, 2]], False)):
        levels = [{**SPEC["hierarchy"]["levels"][0], "uplink_GBps": 0.1}, SPEC["hierarchy"]["levels"][1]]
        spec = {**SPEC, "hierarchy": {**SPEC["hierarchy"], "levels": levels}, "cost_model": "simulator",
                "placements": [matrix]}
        problem = build_problem(parse_spec(json.dumps(spec)))
        result = plan_placement(problem, problem.matrices[0], 4, 5, Deadline(None))
        occ = occurrences_of(problem.spec.step, result.placement, chosen_of(result.requests), problem.spec.cost_model)
        tp = occ[0]
        assert tp.part is Part.LAYER and tp.shared_seconds == pytest.approx(result.requests[0].best_s)
        if shared:
            assert tp.shared_seconds > tp.seconds * 1.2
        else:
            assert tp.shared_seconds == pytest.approx(tp.seconds)
        lone = step_time(problem.spec.step, result.placement, [o if o is not tp else Occurrence(
            tp.part, tp.message_bytes, tp.count, tp.program, tp.seconds) for o in occ])
        assert (result.step.step_s > lone.step_s) is shared


def test_placements_ranked_by_step_time(tmp_path):
    spec = {**SPEC, "placements": "all"}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    out = tmp_path / "plan.json"
    proc = subprocess.run([sys.executable, "-m", "solver.run", str(path), "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(out.read_text())
    steps = [p["step"]["step_s"] for p in plan["placements"]]
    assert len(steps) == 3 and steps == sorted(steps)
    assert plan["step"]["roles"] == {"data": "dp", "pipeline": "pp", "tensor": "tp"}
    assert "training step (1f1b schedule, 2 microbatches, 4 layers)" in proc.stdout


@pytest.mark.parametrize("change, line", [
    ({"roles": {"data": "dp", "pipeline": "nope"}}, "step.roles.pipeline: unknown axis 'nope'"),
    ({"roles": {"data": "dp", "pipeline": "dp"}}, "step.roles: an axis plays two roles"),
    ({"layers": 3}, "step.layers: 3 layers do not split evenly over 2 pipeline stages; use a multiple of 2"),
    ({"microbatches": 3}, "workload.0.count: a request inside every layer runs in each of the 6 passes"),
    ({"compute": {"forward_ms": 1, "peak_tflops": 3}}, "step.compute: forward_ms is a time"),
    ({"compute": {"forward_gflop": 1}}, "step.compute: forward_gflop needs peak_tflops and efficiency"),
    ({"schedule": "zb"}, "step.schedule: Input should be '1f1b' or 'gpipe'"),
])
def test_step_errors_name_the_field(change, line):
    spec = {**SPEC, "step": {**SPEC["step"], **change}}
    with pytest.raises(SpecError) as e:
        build_problem(parse_spec(json.dumps(spec)))
    assert any(l.startswith(line) for l in e.value.lines), e.value.lines


def test_pipeline_send_count_must_match_the_passes():
    spec = json.loads(json.dumps(SPEC))
    spec["workload"][1]["count"] = 3
    with pytest.raises(SpecError) as e:
        build_problem(parse_spec(json.dumps(spec)))
    assert e.value.lines == ["workload.1.count: a send_recv over the pipeline axis runs once per pass, 4 times a step "
                             "(forward and backward of 2 microbatches); set count to 4"]


def test_a_step_needs_a_workload():
    spec = {k: v for k, v in SPEC.items() if k != "workload"} | {"request": {"axes": ["dp"]}}
    with pytest.raises(SpecError) as e:
        build_problem(parse_spec(json.dumps(spec)))
    assert e.value.lines[0].startswith("step: a step runs a workload")


from hypothesis import given, settings, strategies as st


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(Schedule)), st.integers(1, 6), st.integers(1, 9),
       st.floats(0.1, 5), st.floats(0.1, 5), st.floats(0, 3))
def test_schedule_properties(schedule, stages, microbatches, fwd, bwd, send):
    """Without sends both schedules take (m + p - 1)(F + B); every pass keeps its dependences; sends never help."""
    still = timeline(schedule, stages, microbatches, fwd, bwd, 0.0)
    end = max(t.end for stage in still for t in stage.values())
    assert end == pytest.approx((microbatches + stages - 1) * (fwd + bwd))
    moving = timeline(schedule, stages, microbatches, fwd, bwd, send)
    for s, stage in enumerate(moving):
        order = stage_ops(schedule, s, stages, microbatches)
        assert list(stage) == list(order)  # runs its passes in the schedule's order, one at a time
        times = [stage[o] for o in order]
        assert all(a.end <= b.start + 1e-12 for a, b in zip(times, times[1:]))
        for (kind, j), t in stage.items():
            source = s - 1 if kind is F else s + 1
            if 0 <= source < stages:
                assert t.start >= moving[source][kind, j].end + send - 1e-9
    assert max(t.end for stage in moving for t in stage.values()) >= end - 1e-9


def test_a_layer_request_is_priced_on_one_stage_and_a_send_one_way():
    """The stage view is the machine of one stage built by hand; a pipeline send drops the duplex factor."""
    from p2synth.hierarchies.model import Hierarchy
    from p2synth.hierarchies.placement import Axis, Placement
    from p2synth.hierarchies.program import Request
    from p2synth.solver.models import CostModelKind, program_cost
    from p2synth.hierarchies.program import default_program
    from p2synth.solver.steptime import one_way, stage_view

    levels = [{"name": "node", "count": 2, "bandwidth_GBps": 1.0, "uplink_GBps": 1.0, "latency_us": 10, "duplex_efficiency": 0.5},
              {"name": "core", "count": 4, "bandwidth_GBps": 20.0, "latency_us": 1, "duplex_efficiency": 0.5}]
    h = Hierarchy.model_validate({"name": "h", "levels": levels, "library": "open-mpi"})
    axes = (Axis(name="pp", size=2), Axis(name="tp", size=2), Axis(name="dp", size=2))
    placed = Placement(h, axes, ((1, 2), (2, 1), (1, 2)))  # pipeline inside the node: 4 devices share its uplink
    view = stage_view(placed, 0)
    assert [lv.count for lv in view.hierarchy.levels] == [2, 2] and view.matrix == ((1, 1), (2, 1), (1, 2))
    by_hand = Placement(Hierarchy.model_validate({"name": "h", "levels": [levels[0], {**levels[1], "count": 2}],
                                                  "library": "open-mpi"}),
                        (Axis(name="pp", size=1), Axis(name="tp", size=2), Axis(name="dp", size=2)), ((1, 1), (2, 1), (1, 2)))
    tp = Request(frozenset({1}))
    for kind in CostModelKind:
        program = default_program(placed, tp)
        whole, one = program_cost(placed, tp, program, 1 << 20, kind), program_cost(view, tp, program, 1 << 20, kind)
        assert one == program_cost(by_hand, tp, program, 1 << 20, kind) and one < whole
    send = Request(frozenset({0}), Collective.SEND_RECV)
    program = default_program(placed, send)
    two_way = program_cost(placed, send, program, 1 << 20, CostModelKind.SIMULATOR)
    assert program_cost(one_way(placed), send, program, 1 << 20, CostModelKind.SIMULATOR) < two_way
    assert [lv.duplex_efficiency for lv in one_way(placed).hierarchy.levels] == [None, None]


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(list(Schedule)), st.sampled_from([2, 4]), st.integers(1, 5), st.floats(1, 50), st.floats(1, 50),
       st.floats(0, 0.5), st.floats(1, 4), st.floats(0, 0.2), st.integers(0, 3))
def test_sharing_links_never_speeds_a_step_and_its_parts_still_add_up(schedule, stages, microbatches, fwd_ms, bwd_ms,
                                                                      alone_s, factor, send_s, buckets):
    """Across schedules, stage counts and prices: a step whose layer requests cost `factor` times more with every
    stage at once is never faster than one whose don't, the parts add up and none is negative, and the layer
    communication (the stage that pays most) lies between the one-stage and the every-stage price."""
    m = microbatches
    spec = {**SPEC, "axes": [{"name": "pp", "size": stages}, {"name": "tp", "size": 8 // stages}],
            "workload": [{"name": "tp_ar", "axes": ["tp"], "collective": "all_reduce", "message_bytes": 1 << 20, "count": 2 * m},
                         {"name": "pp_send", "axes": ["pp"], "collective": "send_recv", "message_bytes": 1 << 20, "count": 2 * m}],
            "step": {"roles": {"pipeline": "pp", "tensor": "tp"}, "schedule": schedule.value, "microbatches": m,
                     "layers": 4, "compute": {"forward_ms": fwd_ms, "backward_ms": bwd_ms}},
            "placements": "all"}
    problem = build_problem(parse_spec(json.dumps(spec)))
    placement = problem.placement(problem.matrices[0])
    rest = [Occurrence(Part.PIPELINE, 1, 2 * m, Program(()), send_s)] + [_bucket(100, 0.01)] * buckets
    shared = step_time(problem.spec.step, placement, [Occurrence(Part.LAYER, 1, 2 * m, Program(()), alone_s, alone_s * factor)] + rest)
    alone = step_time(problem.spec.step, placement, [Occurrence(Part.LAYER, 1, 2 * m, Program(()), alone_s)] + rest)
    for t in (shared, alone):
        parts = (t.compute_s, t.layer_comm_s, t.bubble_s, t.pipeline_comm_s, t.gradient_exposed_s, t.after_s)
        assert min(parts) >= -1e-9 and math.fsum(parts) == pytest.approx(t.step_s)
    assert shared.step_s >= alone.step_s - 1e-9
    assert alone.layer_comm_s == pytest.approx(2 * m * alone_s)
    assert 2 * m * alone_s - 1e-9 <= shared.layer_comm_s <= 2 * m * alone_s * factor + 1e-9


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(list(Schedule)), st.integers(1, 6), st.integers(1, 8), st.floats(0.1, 5), st.floats(0.1, 5),
       st.floats(0, 3), st.lists(st.floats(0, 4), min_size=96, max_size=96))
def test_concurrency_equals_the_overlap_summed_pass_by_pass(schedule, stages, microbatches, fwd, bwd, send, extras):
    """The binary-search concurrency equals the plain sum of every other pass's overlap, on uneven schedules."""
    keys = [(s, kind, j) for s in range(stages) for kind in (F, B) for j in range(microbatches)]
    passes = timeline(schedule, stages, microbatches, fwd, bwd, send, dict(zip(keys, extras)))
    k = concurrency(passes)
    for s, stage in enumerate(passes):
        for (kind, j), t in stage.items():
            overlap = sum(max(0.0, min(t.end, u.end) - max(t.start, u.start))
                          for r, other in enumerate(passes) if r != s for u in other.values())
            assert k[s, kind, j] == pytest.approx(1 + overlap / (t.end - t.start), abs=1e-9)
