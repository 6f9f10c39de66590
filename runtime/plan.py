"""Pick what one run executes from a plan file: a placement, one request, its default and its best programs.

The plan file is the solver's result JSON, read by ``hierarchies/plan_file.py``
(single-request and workload formats). Every chosen program is checked with
the concrete semantics (``hierarchies/concrete.py``, on a miniature for large
systems) before it may run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from p2synth.hierarchies.placement import Placement
from p2synth.hierarchies.plan_file import PlanFile, PlanFileError, PlannedProgram
from p2synth.hierarchies.program import Program, Request
from p2synth.hierarchies.verify import Verifier
from p2synth.runtime.data import element_count, index_bits, reduction_group


@dataclass(frozen=True)
class Candidate:
    """A program to run, with the cost the solver predicted and its rank in the plan (None: the default)."""

    program: Program
    cost_s: float | None
    position: int | None

    @property
    def is_default(self) -> bool:
        """Whether this is the default collective (one call over the whole reduction group)."""
        return self.position is None


@dataclass(frozen=True)
class Selection:
    """What one run executes: a placement, the request, its size, and the default first, then the chosen programs."""

    index: int
    placement: Placement
    request: Request
    request_name: str
    message_bytes: int
    candidates: tuple[Candidate, ...]

    @property
    def pieces(self) -> int:
        """What every chunk is cut into so that each candidate gets whole pieces: the lcm of their pipelines (1: none pipelined)."""
        return math.lcm(*(c.program.pipeline for c in self.candidates))

    def check_size(self, nbytes: int, world_size: int) -> None:
        """ValueError (one line) when `nbytes` holds less than one element per chunk (per piece of a chunk), or is
        too large for the exact check on `world_size` ranks."""
        group = reduction_group(self.placement, self.request, 0).size
        index_bits(world_size, element_count(nbytes, group, self.pieces))


def _candidate(p: PlannedProgram, position: int | None) -> Candidate:
    return Candidate(p.program, p.cost_s, position)


def select(plan: PlanFile, index: int, top: int | None, request: str | None = None) -> Selection:
    """The default and the best `top` programs (all if None) of request `request` on placement `index`, each checked.

    `request` names a request of a workload plan (None: the plan's only one).
    A top program equal to the default runs once, as the default. Raises
    PlanFileError on a bad index or name, a bad entry, or a program that fails
    the concrete checker.
    """
    planned = plan.placement(index)
    chosen = planned.request(request)
    default = _candidate(chosen.default, None)
    programs = chosen.programs if top is None else chosen.programs[:top]
    candidates = (default, *(c for c in (_candidate(p, i) for i, p in enumerate(programs)) if c.program != default.program))
    checker = Verifier(planned.placement, chosen.named.request)  # on a miniature when the system is large
    for c in candidates:
        verdict = checker.check(c.program)
        if not verdict:
            which = "the default program" if c.is_default else f"program {c.position}"
            raise PlanFileError(f"placement {index}: {which} {c.program.text(planned.placement)} fails the checker: {verdict.reason}")
    return Selection(index, planned.placement, chosen.named.request, chosen.named.name, chosen.named.message_bytes, candidates)
