"""What every rank of ``runtime.step`` runs: the plan's placement, its step section and every request's programs,
loaded and checked the same way on every rank (:func:`prepare`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from enum import Enum

from mpi4py import MPI

from p2synth.hierarchies.plan_file import PlanFile, PlanFileError, PlannedPlacement, load_plan_file
from p2synth.hierarchies.step import Part, Role, StepSpec, request_part
from p2synth.runtime.job import require_out_folder
from p2synth.runtime.plan import Selection, select


class Variant(str, Enum):
    """Which program every request runs: the plan's best (after the guard, with one), its default collective, or
    (with a guard) the plan's best as planned."""

    BEST = "best"
    DEFAULT = "default"
    PLAN = "plan"  # the plan's programs as planned, beside a guarded best (runtime/step_guard.py); only with a guard

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class StepRequest:
    """A workload request as the step runs it: its part, count, and (but for the pipeline part) its default and best."""

    name: str
    part: Part
    count: int
    message_bytes: int
    selection: Selection | None  # None for the pipeline part: it is run as point-to-point sends


@dataclass(frozen=True)
class StepJob:
    """What every rank runs, validated the same way on every rank."""

    plan: PlanFile
    planned: PlannedPlacement
    step: StepSpec
    requests: tuple[StepRequest, ...]
    pipeline_axis: int | None  # index of the pipeline-role axis (None: one stage)
    stages: int
    tensor: int
    activation_bytes: int  # bytes each pipeline send carries


def prepare(args: argparse.Namespace, world: MPI.Intracomm) -> StepJob:
    """Load the plan and choose every request's programs; PlanFileError/ValueError (one line) if anything is off."""
    plan = load_plan_file(args.plan)
    step = plan.step
    if step is None:
        raise PlanFileError(f"{args.plan}: the plan has no step section: plan a spec with a \"step\" section "
                            "(docs/workloads.md) to run its step")
    planned = plan.placement(args.placement)
    devices = planned.placement.num_devices
    if world.Get_size() != devices:
        raise PlanFileError(f"placement {args.placement} has {devices} devices but the job has {world.Get_size()} ranks; "
                            f"run with -n {devices}")
    for out in (args.out, args.trace, args.guard_out):
        if out is not None:
            require_out_folder(out)
    try:
        pipeline_axis = step.axis_index(Role.PIPELINE, plan.axes)
        tensor = step.axis_size(Role.TENSOR, plan.axes)
    except ValueError as e:
        raise PlanFileError(f"step: {e}") from None
    requests = []
    for r in planned.requests:
        named = r.named
        part = request_part(step, plan.axes, named.request)
        if part is Part.LAYER and named.count % (2 * step.microbatches):
            raise PlanFileError(f"request {named.name}: count {named.count} is not a multiple of 2 x microbatches "
                                f"({2 * step.microbatches}): a layer request runs count / (2 x microbatches) times a pass")
        if named.message_bytes <= 0:
            raise PlanFileError(f"request {named.name}: the plan gives no message_bytes to run at")
        selection = None
        if part is not Part.PIPELINE:
            selection = select(plan, args.placement, 1, named.name if plan.is_workload else None)
            selection.check_size(named.message_bytes, world.Get_size())
        requests.append(StepRequest(named.name, part, named.count, named.message_bytes, selection))
    return StepJob(plan, planned, step, tuple(requests), pipeline_axis, step.axis_size(Role.PIPELINE, plan.axes), tensor,
                   sum(r.message_bytes for r in requests if r.part is Part.PIPELINE))
