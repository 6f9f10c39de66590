"""Which of a plan's programs a gradient bucket runs, and the attach-time checks of the DDP hook (no torch here).

A workload request can be planned at several message sizes (``"message_bytes": [...]``
in the spec, docs/workloads.md). :func:`bucket_plan` collects them for one request
of one placement of a plan file and checks, before any process group exists, that
the hook can run them: the placement and the request exist and the request is an
all_reduce. :func:`check_world` then checks the placement against the job's world
size and DDP's process group. :meth:`BucketPlan.choose` picks the program of a
bucket: the planned size nearest to it. ``solver/exports/ddp.py`` is the hook.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from p2synth.hierarchies.cli import quote
from p2synth.hierarchies.plan_file import PlanFile, PlanFileError
from p2synth.hierarchies.placement import Placement
from p2synth.hierarchies.program import Collective, Program, Request, default_program


class HookError(ValueError):
    """A plan the DDP hook cannot run; the message is one line."""


@dataclass(frozen=True)
class SizedProgram:
    """The program planned for one message size: exported as function `name` of the plan's module."""

    name: str
    message_bytes: int
    program: Program
    group_size: int

    @property
    def multiple(self) -> int:
        """Element count a buffer must be a multiple of: one piece of each of the group's chunks per element."""
        return self.group_size * self.program.pipeline


@dataclass(frozen=True)
class BucketPlan:
    """The programs of one all_reduce request of one placement, by planned size (smallest first)."""

    index: int
    request: str
    placement: Placement
    reduced: Request
    sizes: tuple[SizedProgram, ...]

    def choose(self, nbytes: int) -> SizedProgram:
        """The program for a bucket of `nbytes` bytes: its size's, else the nearest planned size's by ratio.

        Ties go to the larger size; a bucket of 0 bytes takes the smallest.
        """
        return min(reversed(self.sizes), key=lambda s: abs(math.log(s.message_bytes) - math.log(max(nbytes, 1))))

    def covers(self, nbytes: int) -> bool:
        """True when the plan has a program planned for exactly `nbytes` bytes."""
        return any(s.message_bytes == nbytes for s in self.sizes)

    def runs_default(self, sized: SizedProgram) -> bool:
        """True when `sized`'s program is the default: one all_reduce over the whole group, unpipelined (what the
        client tuner writes where no program beat DDP's own all-reduce)."""
        return sized.program == default_program(self.placement, self.reduced)

    def group(self, rank: int) -> tuple[int, ...]:
        """The ranks device `rank` reduces with (itself included), ascending."""
        return tuple(sorted(self.placement.group(rank, self.reduced.reduced_cells(self.placement))))

    def describe(self) -> str:
        """One line: the placement, the request, and each planned size's program."""
        programs = "; ".join(f"{s.message_bytes:,} bytes: {s.program.text(self.placement)}" for s in self.sizes)
        return f"placement {self.index} ({self.placement.describe()}), request {self.request}: {programs}"


def bucket_plan(plan: PlanFile, placement: int, request: str | None = None) -> BucketPlan:
    """The programs placement `placement` of `plan` runs for `request` at each planned size.

    `request` is a workload request's name as the spec gave it (None: the
    plan's only request). HookError (one line) for a bad index or entry, an
    unknown request, or a request that is not an all_reduce.
    """
    try:
        planned = plan.placement(placement)
        request = plan.only_item() if request is None else request
        names = plan.sizes_of(request)
        entries = [planned.request(name) for name in names]
    except PlanFileError as e:
        raise HookError(str(e)) from None
    collective = entries[0].named.request.collective
    if collective is not Collective.ALL_REDUCE:
        raise HookError(f"request {quote(request)} is a {collective}, not an all_reduce: "
                        "a DDP hook all-reduces gradient buckets")
    reduced = entries[0].named.request
    cells = reduced.reduced_cells(planned.placement)
    group_size = planned.placement.group_size(cells)
    sizes = tuple(sorted(
        (SizedProgram(e.named.name, e.named.message_bytes, e.best.program, group_size) for e in entries),
        key=lambda s: s.message_bytes))
    return BucketPlan(placement, request, planned.placement, reduced, sizes)


def check_world(plan: BucketPlan, world_size: int, rank: int, group_ranks: tuple[int, ...]) -> None:
    """HookError (one line) unless the job fits `plan`: `world_size` devices, and DDP's process group
    (`group_ranks`, global ranks, as seen by `rank`) is exactly the ranks `rank` reduces with."""
    devices = plan.placement.num_devices
    if world_size != devices:
        raise HookError(f"the plan's placement {plan.index} is for {devices} devices, but the job has "
                        f"world size {world_size}; plan for this job's hierarchy")
    want = plan.group(rank)
    if tuple(sorted(group_ranks)) != want:
        axes = ", ".join(plan.placement.axes[a].name for a in sorted(plan.reduced.axes))
        raise HookError(f"request {quote(plan.request)} reduces over {axes}: rank {rank} reduces with ranks "
                        f"{_ranks(want)}, but DDP's process group holds ranks {_ranks(tuple(sorted(group_ranks)))}; "
                        "pass DDP's process group, or plan the request over the axes it spans")


def _ranks(ranks: tuple[int, ...], most: int = 8) -> str:
    """Ranks for an error line, at most `most` of them."""
    shown = ", ".join(map(str, ranks[:most]))
    return f"[{shown}{f', ... ({len(ranks)} in all)' if len(ranks) > most else ''}]"
