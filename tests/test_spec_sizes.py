"""A workload request that lists several message sizes: the spec, the planned entries, the plan file."""

import json

import pytest

from p2synth.encodings.deadline import Deadline
from p2synth.hierarchies.plan_file import PlanFileError, parse_plan_file
from p2synth.solver.planner import plan_placement, rank_plans
from p2synth.solver.result import result_json
from p2synth.solver.spec import SpecError, build_problem, parse_spec

SPEC = {
    "hierarchy": {"name": "cpu-2x4", "levels": [
        {"name": "node", "count": 2, "bandwidth_GBps": 1.0, "uplink_GBps": 1.0, "latency_us": 20},
        {"name": "core", "count": 4, "bandwidth_GBps": 8.0, "latency_us": 1}]},
    "axes": [{"name": "data", "size": 8}],
    "workload": [
        {"name": "grad_allreduce", "axes": ["data"], "message_bytes": [26214400, 4096, 1048576], "count": 2},
        {"name": "loss", "axes": ["data"], "message_bytes": 8},
    ],
    "max_steps": 4,
}


def with_sizes(sizes) -> dict:
    """SPEC with the gradient request's message_bytes replaced."""
    return {**SPEC, "workload": [{**SPEC["workload"][0], "message_bytes": sizes}, SPEC["workload"][1]]}


def spec_errors(spec: dict) -> list[str]:
    """The lines of the SpecError that parsing and checking `spec` raises."""
    with pytest.raises(SpecError) as info:
        build_problem(parse_spec(json.dumps(spec)))
    return info.value.lines


def plan_of(spec: dict) -> dict:
    """The result JSON the planner writes for `spec` (every placement, top 2 programs)."""
    problem = build_problem(parse_spec(json.dumps(spec)))
    plans = [plan_placement(problem, m, spec["max_steps"], 2, Deadline(None)) for m in problem.matrices]
    return result_json(problem, rank_plans(plans, []), spec["max_steps"])


def test_a_request_with_several_sizes_is_planned_once_per_size_smallest_first():
    problem = build_problem(parse_spec(json.dumps(SPEC)))
    assert [(r.name, r.message_bytes, r.count) for r in problem.requests] == [
        ("grad_allreduce_4096", 4096, 2), ("grad_allreduce_1048576", 1048576, 2),
        ("grad_allreduce_26214400", 26214400, 2), ("loss", 8, 1)]
    assert len({r.request for r in problem.requests[:3]}) == 1


@pytest.mark.parametrize("sizes,line", [
    ([4096, 4096], "workload.0.message_bytes: lists a size twice; list each once"),
    ([4096, 0], "workload.0.message_bytes.1: Input should be greater than 0"),
    ([], "workload.0.message_bytes: List should have at least 1 item after validation, not 0"),
    (list(range(1, 34)), "workload.0.message_bytes: List should have at most 32 items after validation, not 33"),
    ([4096, "big"], "workload.0.message_bytes.1: Input should be a valid integer, unable to parse string as an integer"),
    ([2.5], "workload.0.message_bytes.0: Input should be a valid integer, got a number with a fractional part"),
    ({"min": 1}, "workload.0.message_bytes: must be a number of bytes or a non-empty list of them"),
    (None, "workload.0.message_bytes: must be a number of bytes or a non-empty list of them"),
    (-1, "workload.0.message_bytes: Input should be greater than 0"),
])
def test_bad_size_lists_give_one_line_naming_the_field(sizes, line):
    assert spec_errors(with_sizes(sizes)) == [line]


def test_a_planned_name_that_repeats_another_request_is_refused():
    spec = {**SPEC, "workload": [*SPEC["workload"], {"name": "grad_allreduce_4096", "axes": ["data"], "message_bytes": 64}]}
    assert spec_errors(spec) == ["workload: request names must be unique (a request that lists sizes, or a gradient "
                                 "in buckets of two sizes, is planned as NAME_BYTES for each); rename the repeated one"]


def test_the_result_lists_each_planned_size_as_a_request_with_its_item():
    plan = plan_of(SPEC)
    assert [(w["name"], w["message_bytes"], w.get("item")) for w in plan["workload"]] == [
        ("grad_allreduce_4096", 4096, "grad_allreduce"), ("grad_allreduce_1048576", 1048576, "grad_allreduce"),
        ("grad_allreduce_26214400", 26214400, "grad_allreduce"), ("loss", 8, None)]
    entries = plan["placements"][0]["requests"]
    assert [(q["name"], q["message_bytes"], q["count"]) for q in entries] == [
        (w["name"], w["message_bytes"], w["count"]) for w in plan["workload"]]
    # each size gets its own program: the pipelined one only pays off on large buckets
    assert [q["programs"][0]["pipeline"] for q in entries[:3]] == [1, 16, 16]
    assert plan["placements"][0]["total_s"] == pytest.approx(sum(q["step_s"] for q in entries), rel=1e-12)
    assert entries[0]["step_s"] == pytest.approx(2 * entries[0]["best_s"], rel=1e-12)


def test_the_plan_file_groups_the_sizes_of_a_request():
    plan = parse_plan_file(plan_of(SPEC))
    assert plan.item_names() == ("grad_allreduce", "loss")
    assert plan.sizes_of("grad_allreduce") == ("grad_allreduce_4096", "grad_allreduce_1048576", "grad_allreduce_26214400")
    assert plan.sizes_of("loss") == ("loss",)
    with pytest.raises(PlanFileError, match=r"^no request 'grad' in the plan; its requests: grad_allreduce, loss$"):
        plan.sizes_of("grad")
    with pytest.raises(PlanFileError, match=r"^the plan has 2 requests \(grad_allreduce, loss\); choose one by name$"):
        plan.only_item()


def test_a_plan_without_size_lists_reads_as_before():
    document = plan_of({**SPEC, "workload": [{**SPEC["workload"][0], "message_bytes": 4096}]})
    assert "item" not in document["workload"][0]
    plan = parse_plan_file(document)
    assert plan.request_names() == plan.item_names() == ("grad_allreduce",)
    assert plan.only_item() == "grad_allreduce" and plan.sizes_of("grad_allreduce") == ("grad_allreduce",)
