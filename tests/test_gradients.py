"""A workload request marked as a gradient is priced as DDP's buckets (issue 48, point 3).

The issue's job: 16 DGX H100 nodes, data 16 x tensor 8, a 32 MiB tensor all-reduce 96 times a step and a 1 GiB
gradient. Given as one 1 GiB request marked ``"gradient": true`` or as DDP's buckets (41 requests of 25 MiB), the
planner must rank the placements the same, with and without a step section. The assertions compare the two
descriptions with each other, never with hard-coded times: the GPU constants of dgx-h100 may change.
"""

import json
import subprocess
import sys

import pytest

from p2synth.encodings.deadline import Deadline
from p2synth.solver.gradients import DDP_BUCKET_BYTES, Buckets, bucket_notes
from p2synth.solver.planner import plan_placement, rank_plans
from p2synth.solver.result import result_json
from p2synth.solver.spec import SpecError, build_problem, parse_spec

GIB, MIB = 1 << 30, 1 << 20
TENSOR = {"name": "tp_allreduce", "axes": ["tensor"], "message_bytes": 32 * MIB, "count": 96}
MARKED = {"name": "grad_allreduce", "axes": ["data"], "message_bytes": GIB, "gradient": True}
AS_BUCKETS = {"name": "grad_allreduce", "axes": ["data"], "message_bytes": 25 * MIB, "count": 41}
STEP = {"roles": {"data": "data", "tensor": "tensor"}, "layers": 48, "compute": {"forward_ms": 2.0}}


def job(gradient: dict, step: dict | None = None) -> dict:
    """The issue's job on 16 DGX H100 nodes with the gradient described as `gradient`."""
    spec = {"hierarchy": {"system": "dgx-h100", "nodes": 16},
            "axes": [{"name": "data", "size": 16}, {"name": "tensor", "size": 8}],
            "workload": [TENSOR, gradient], "max_steps": 4}
    return spec if step is None else {**spec, "step": step}


def plan_of(spec: dict) -> dict:
    """The result JSON of `spec`: every placement, its best program per request."""
    problem = build_problem(parse_spec(json.dumps(spec)))
    plans = [plan_placement(problem, m, spec["max_steps"], 1, Deadline(None)) for m in problem.matrices]
    return result_json(problem, rank_plans(plans, []), spec["max_steps"])


def spec_errors(spec: dict) -> list[str]:
    """The lines of the SpecError that parsing and checking `spec` raises."""
    with pytest.raises(SpecError) as info:
        build_problem(parse_spec(json.dumps(spec)))
    return info.value.lines


def test_a_gradient_is_ceil_size_over_bucket_buckets_the_last_the_remainder():
    b = Buckets(GIB, DDP_BUCKET_BYTES)
    assert (b.per_gradient, b.full, b.last_bytes) == (41, 40, 24 * MIB)
    assert b.sizes() == [(25 * MIB, 40), (24 * MIB, 1)]
    assert sum(size * n for size, n in b.sizes()) == GIB
    assert Buckets(100 * MIB, 25 * MIB, count=2).sizes() == [(25 * MIB, 8)]  # splits evenly: one size
    assert Buckets(3 * MIB, 25 * MIB).sizes() == [(3 * MIB, 1)]  # smaller than a bucket: one bucket


def test_a_marked_gradient_is_planned_as_its_buckets():
    problem = build_problem(parse_spec(json.dumps(job(MARKED))))
    assert [(r.name, r.message_bytes, r.count) for r in problem.requests] == [
        ("tp_allreduce", 32 * MIB, 96), ("grad_allreduce_26214400", 25 * MIB, 40), ("grad_allreduce_25165824", 24 * MIB, 1)]
    custom = build_problem(parse_spec(json.dumps(job({**MARKED, "bucket_bytes": 256 * MIB}))))
    assert [(r.name, r.message_bytes, r.count) for r in custom.requests[1:]] == [("grad_allreduce", 256 * MIB, 4)]


@pytest.mark.parametrize("step", [None, STEP], ids=["summed", "step-model"])
def test_the_issue_job_gets_one_answer_however_the_gradient_is_described(step):
    marked, buckets = plan_of(job(MARKED, step)), plan_of(job(AS_BUCKETS, step))
    assert [p["matrix"] for p in marked["placements"]] == [p["matrix"] for p in buckets["placements"]]
    assert marked["placements"][0]["description"] == buckets["placements"][0]["description"]
    # the marked gradient's buckets are 1 MiB less than 41 x 25 MiB: per placement, its gradient costs no more
    for m, b in zip(marked["placements"], buckets["placements"]):
        grad = lambda p: sum(r["step_s"] for r in p["requests"] if r["name"].startswith("grad_allreduce"))
        assert grad(m) <= grad(b) and grad(m) >= 0.9 * grad(b)
    assert marked["gradients"] == [{"name": "grad_allreduce", "message_bytes": GIB, "bucket_bytes": 25 * MIB, "count": 1,
                                    "buckets": 41, "last_bucket_bytes": 24 * MIB}]
    assert [(w["name"], w["count"], w.get("item")) for w in marked["workload"][1:]] == [
        ("grad_allreduce_26214400", 40, "grad_allreduce"), ("grad_allreduce_25165824", 1, "grad_allreduce")]
    assert "gradients" not in buckets and "gradient" not in buckets["workload"][1]


def test_unmarked_the_one_big_request_is_one_bucket_exposed_after_the_backward_pass():
    """What the issue met: a 1 GiB request over the data axis is one bucket, ready only when the pass ends."""
    one, marked = plan_of(job({**MARKED, "gradient": False}, STEP)), plan_of(job(MARKED, STEP))
    by_matrix = {str(p["matrix"]): p["step"]["gradient_exposed_s"] for p in marked["placements"]}
    for p in one["placements"]:
        assert p["step"]["gradient_exposed_s"] > by_matrix[str(p["matrix"])]


def test_the_notes_say_which_buckets_were_priced_and_where_they_run():
    workload = parse_spec(json.dumps(job(MARKED))).workload
    assert bucket_notes(workload, in_step=True) == [
        "grad_allreduce: gradient of 1 GiB priced as 41 buckets of 25 MiB (the last 24 MiB), "
        "each reduced as the last backward pass produces it"]
    assert bucket_notes(workload, in_step=False)[0].endswith("summed (no step section: no backward pass to overlap)")
    assert bucket_notes(parse_spec(json.dumps(job(AS_BUCKETS))).workload, in_step=True) == []


@pytest.mark.parametrize("change,line", [
    ({"bucket_bytes": 1024, "gradient": False},
     'workload.1.bucket_bytes: sizes a gradient\'s buckets; add "gradient": true or drop bucket_bytes'),
    ({"collective": "all_gather"},
     'workload.1.gradient: a gradient is reduced, and all_gather does not reduce; use all_reduce or reduce_scatter, '
     'or drop "gradient"'),
    ({"message_bytes": [1024, 2048]},
     "workload.1.gradient: a gradient is one size, its total bytes, split into buckets of bucket_bytes; "
     "give message_bytes as one number"),
    ({"bucket_bytes": 0}, "workload.1.bucket_bytes: Input should be greater than 0"),
])
def test_a_bad_gradient_gives_one_line_naming_the_field(change, line):
    assert spec_errors(job({**MARKED, **change})) == [line]


def test_in_a_step_a_gradient_must_run_over_the_data_axis():
    lines = spec_errors(job({**MARKED, "axes": ["tensor"], "count": 2}, STEP))
    assert lines == ["workload.1.gradient: in a step a gradient's buckets overlap the backward pass over the data axis "
                     "('data'); reduce it over that one axis, or drop \"gradient\""]


def test_the_first_table_says_which_buckets_it_priced(tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job(MARKED)))
    run = subprocess.run([sys.executable, "-m", "solver.run", str(path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert ("grad_allreduce: gradient of 1 GiB priced as 41 buckets of 25 MiB (the last 24 MiB), summed"
            in " ".join(run.stdout.split()))
