"""Search: for one request on one placement, the ranked programs with proof and check.

Z3 (``p2synth_encodings.programs``) finds the programs; every one is decoded, checked
by the concrete semantics (``hierarchies.verify``) and costed by the same cost model
the encoding minimised. The exact number of valid programs comes from the
abstract semantics (``hierarchies.abstract.count_programs``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from p2synth_encodings.errors import SolverTimeout
from p2synth_encodings.deadline import Deadline
from p2synth_encodings.programs import ProgramSketch
from hierarchies.placement import Placement
from hierarchies.program import Program, Request, default_program, to_program
from hierarchies.abstract import count_programs
from solver.explicit import cheapest_programs, tie_key
from solver.cost import CostModel, program_seconds, step_seconds
from solver.models import CostModelKind, cost_model
from hierarchies.verify import verifier

# `--top all` refuses to list more programs than this per placement.
LIST_ALL_LIMIT = 20_000


class VerificationError(Exception):
    """An independent check disagreed (concrete checker, explicit search vs Z3): a bug, never a result."""


class TooManyPrograms(Exception):
    """`--top all` on a space too large to list."""


@dataclass(frozen=True)
class Ranked:
    """A program with its predicted time (and per-step times) and its check outcome."""

    program: Program
    cost_s: float
    step_costs_s: tuple[float, ...]
    verified: bool


@dataclass(frozen=True)
class Solution:
    """What the search established for one request on one placement."""

    placement: Placement
    request: Request
    message_bytes: int
    default: Ranked
    programs: tuple[Ranked, ...]
    program_count: int | None
    optimal: bool
    timed_out: bool = False

    @property
    def best(self) -> Ranked | None:
        """The cheapest program found, if any."""
        return self.programs[0] if self.programs else None

    @property
    def speedup(self) -> float:
        """Predicted default time / best time (1.0 when nothing beats it)."""
        best = self.best
        if best is None or best.cost_s <= 0:
            return 1.0
        return self.default.cost_s / best.cost_s


def rank(program: Program, placement: Placement, request: Request, model: CostModel) -> Ranked:
    """Check `program` concretely and cost it; VerificationError if the check fails."""
    result = verifier(placement, request).check(program)
    if not result.ok:
        raise VerificationError(f"program {program.text(placement)} fails the concrete checker: {result.reason}")
    steps = tuple(program_seconds(model, placement, request, program))
    return Ranked(program, math.fsum(steps), steps, verified=True)


def solve(
    placement: Placement,
    request: Request,
    message_bytes: int,
    max_steps: int,
    top: int | None = 5,
    deadline: Deadline | None = None,
    model_kind: CostModelKind = CostModelKind.ALPHA_BETA,
) -> Solution:
    """Rank programs for `request` on `placement`: the `top` cheapest (None: all of them).

    Programs are costed by the cost model `model_kind` (a solver.models.CostModelKind).
    The first program is proved cheapest within `max_steps` unless the
    deadline ran out (then ``timed_out`` is set and ``optimal`` is False).
    """
    deadline = deadline or Deadline(None)
    model = cost_model(placement, request, message_bytes, model_kind)
    n_cells = len(request.reduced_cells(placement))
    default = rank(default_program(placement, request), placement, request, model) if n_cells else Ranked(Program(()), 0.0, (), True)
    if n_cells == 0:  # nothing to reduce: the reduction group is a single device
        return Solution(placement, request, message_bytes, default, (default,), 1, True)
    count = count_programs(request.collective, n_cells, max_steps)
    sketch = ProgramSketch(request.collective, n_cells, max_steps, model.step_time)
    if top is None:
        if count > LIST_ALL_LIMIT:
            raise TooManyPrograms(f"{count} programs within {max_steps} steps")
        raws, timed_out = _listed(sketch, deadline)
        ranked = sorted((rank(to_program(r, placement, request), placement, request, model) for r in raws), key=_order)
        if len(ranked) > count or (not timed_out and len(ranked) < count):
            raise VerificationError(f"Z3 listed {len(ranked)} programs, the abstract count is {count}")
        return Solution(placement, request, message_bytes, default, tuple(ranked), count, not timed_out, timed_out)
    found, timed_out = _proved_top(sketch, request, n_cells, max_steps, top, model, deadline)
    ranked = []
    for r in found:
        item = rank(to_program(r.program, placement, request), placement, request, model)
        if not math.isclose(item.cost_s, r.cost, rel_tol=1e-6, abs_tol=1e-15):
            raise VerificationError(f"cost mismatch: Z3 {r.cost} vs model {item.cost_s} for {item.program.text(placement)}")
        ranked.append(item)
    proved = bool(found) and found[0].proved
    timed_out = timed_out or len(found) < min(top, count) or any(not r.proved for r in found)
    return Solution(placement, request, message_bytes, default, tuple(sorted(ranked, key=_order)), count, proved, timed_out)


def _listed(sketch: ProgramSketch, deadline: Deadline) -> tuple[list, bool]:
    """Every program of `sketch`, or those listed before the deadline ran out (then True)."""
    raws: list = []
    try:
        for raw in sketch.enumerate(deadline):
            raws.append(raw)
    except SolverTimeout:
        return raws, True
    return raws, False


def _proved_top(sketch: ProgramSketch, request: Request, n_cells: int, max_steps: int, top: int,
                model: CostModel, deadline: Deadline) -> tuple[list, bool]:
    """The `top` cheapest programs, each proved by Z3.

    The explicit uniform-cost search over the abstract semantics proposes
    them (fast while the space is moderate) and Z3 checks each and proves
    that nothing else is cheaper; two independent implementations must
    agree. Where the explicit search would be too large, Z3 searches alone
    by iterative tightening.
    """
    def step_cost(s, op, S):  # the explicit search stops with the budget too
        if deadline.expired():
            raise SolverTimeout("explicit search")
        return step_seconds(model, s, op, S, n_cells)

    try:
        proposed = cheapest_programs(request.collective, n_cells, max_steps, step_cost, top)
        if proposed is None:
            return sketch.top(top, deadline), False
        try:
            ranked, proved = sketch.prove_top([p for _, p in proposed], deadline)
        except ValueError as e:
            raise VerificationError(f"the explicit search and Z3 disagree: {e}") from None
        return ranked, not proved
    except SolverTimeout:
        return [], True


def _order(r: Ranked) -> tuple:
    return (tie_key(r.cost_s), len(r.program), r.program)
