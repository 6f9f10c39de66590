"""The result JSON of ``python -m solver.run --out`` (other tools read it: keep its fields)."""

from __future__ import annotations

from p2synth.hierarchies.model import CollectiveLibrary
from p2synth.hierarchies.placement import Placement
from p2synth.hierarchies.program import Request
from p2synth.solver.planner import SweepResult, RequestResult
from p2synth.solver.search import Ranked, Solution
from p2synth.solver.models import step_schedules
from p2synth.solver.spec import Problem


def ranked_json(r: Ranked, solution: Solution, with_verified: bool = True) -> dict:
    """A program entry: steps, predicted cost, per-step costs, under ``library: nccl`` the algorithm and protocol
    NCCL runs each step with (as the model prices it), and the check outcome."""
    out = r.program.to_json(solution.placement)
    out["cost_s"] = r.cost_s
    out["step_costs_s"] = list(r.step_costs_s)
    if solution.placement.hierarchy.library is CollectiveLibrary.NCCL:
        out["nccl_algorithms"] = step_schedules(solution.placement, solution.request, r.program, solution.message_bytes)
    if with_verified:
        out["verified"] = r.verified
    return out


def solution_json(s: Solution) -> dict:
    """One placement's entry for a single request."""
    return {
        "matrix": [list(row) for row in s.placement.matrix],
        "description": s.placement.describe(),
        "program_count": s.program_count,
        "optimal": s.optimal,
        "timed_out": s.timed_out,
        "default": ranked_json(s.default, s, with_verified=False),
        "speedup": s.speedup,
        "bound_s": s.bound_s,
        "programs": [ranked_json(r, s) for r in s.programs],
    }


def problem_header(problem: Problem) -> dict:
    """The echoed inputs at the top of a result."""
    spec = problem.spec
    out = {
        "hierarchy": problem.hierarchy.model_dump(mode="json"),
        "axes": [a.model_dump() for a in problem.axes],
        "cost_model": spec.cost_model,
    }
    if spec.request is not None:
        out["request"] = spec.request.model_dump(mode="json")
        out["message_bytes"] = spec.message_bytes
    return out


def request_json(r: RequestResult) -> dict:
    """One request of a workload on one placement."""
    out = {"name": r.named.name, "request": _request_spec(r.named.request, r.solution.placement),
           "message_bytes": r.named.message_bytes, "count": r.named.count,
           "best_s": r.best_s, "step_s": r.step_s, "default_step_s": r.default_step_s, "step_bound_s": r.step_bound_s}
    body = solution_json(r.solution)
    del body["matrix"], body["description"]
    return {**out, **body}


def _request_spec(request: Request, placement: Placement) -> dict:
    return {"axes": [placement.axes[a].name for a in sorted(request.axes)], "collective": request.collective.value}


def workload_json(problem: Problem) -> list[dict]:
    """The workload's requests as planned, in the order of each placement's ``requests``.

    A request that lists several sizes appears once per size, and a gradient once per bucket size, named by
    :func:`~hierarchies.plan_file.sized_name`, with ``"item"`` naming the request as the spec gave it.
    """
    out = []
    for w in problem.spec.workload or []:
        buckets = w.buckets()
        given = (w.model_dump(mode="json", exclude={"gradient", "bucket_bytes"}) if buckets is None
                 else {**w.model_dump(mode="json"), "bucket_bytes": buckets.bucket_bytes})
        for p in w.planned():
            out.append({**given, "name": p.name, "message_bytes": p.message_bytes, "count": p.count,
                        **({} if p.name == w.name else {"item": w.name})})
    return out


def gradients_json(problem: Problem) -> list[dict]:
    """Each request marked as a gradient with the buckets it was priced as (solver/gradients.py)."""
    return [{"name": w.name, **b.to_json()} for w in problem.spec.workload or [] if (b := w.buckets()) is not None]


def is_complete(problem: Problem, plan: SweepResult) -> bool:
    """True when every placement was enumerated and solved with every program proved (or listed)."""
    return problem.placements_complete and plan.complete


def result_json(problem: Problem, plan: SweepResult, max_steps: int, proof: str = "certificate") -> dict:
    """The whole result; a single-request spec keeps the single-request format. `proof`: what backs "optimal"."""
    out = problem_header(problem)
    out["max_steps"] = max_steps
    out["proof"] = str(proof)
    out["complete"] = is_complete(problem, plan)
    out["placement_count"] = problem.placement_count
    if not problem.is_workload:
        out["placements"] = [solution_json(p.requests[0].solution) for p in plan.placements]
        return out
    out["workload"] = workload_json(problem)
    if gradients := gradients_json(problem):
        out["gradients"] = gradients
    if problem.spec.step is not None:
        out["step"] = problem.spec.step.model_dump(mode="json")
    out["placements"] = [
        {"matrix": [list(r) for r in p.placement.matrix], "description": p.placement.describe(),
         "total_s": p.total_s, "default_total_s": p.default_total_s, "bound_total_s": p.bound_total_s, "optimal": p.optimal,
         **({} if p.step is None else {"step": p.step.to_json()}),
         "requests": [request_json(r) for r in p.requests]}
        for p in plan.placements
    ]
    return out
