"""Search: for one request on one placement, the ranked programs with proof and check.

What a search establishes depends on little of the placement, so it is done at
the level it depends on and shared (a :class:`Memo` holds it across placements):

* the program space (valid programs, their count, Z3's proof that the sketch's
  steps are the state space's) depends only on the collective and the number of
  reduced cells;
* the ranking and its proof (``solver/ranking.py``) depend on the :class:`~solver.models.CostSignature`
  (hierarchy, reduced cells' levels and factors, size, cost model): the explicit
  search (``solver/topn.py``, over the step costs of ``solver/stepcosts.py``)
  finds the cheapest programs and the cost-to-go table (``solver/costtogo.py``)
  that ``solver/certificate.py`` checks as the proof that nothing else is
  cheaper; with ``Proof.Z3`` Z3 also proves it on its own (one unsat over the
  whole sketch, as before the certificate existed; much slower);
* the concrete check of a program (``hierarchies.verify``) depends on the
  placement's miniature.

A placement's :class:`Solution` is the same whether these were computed for it
or borrowed from another placement (a test compares whole sweeps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from p2synth.hierarchies.bound import lower_bound
from p2synth.hierarchies.placement import Placement
from p2synth.hierarchies.program import Collective, Program, Request, default_program, to_program, to_raw
from p2synth.hierarchies.verify import verifier
from p2synth.encodings.deadline import Deadline
from p2synth.solver.cost import CostModel, raw_program_cost
from p2synth.solver.models import CostModelKind, CostSignature, InCellOrder, canonical_order, cost_model, cost_signature, reorder
from p2synth.solver.ranking import Proof, VerificationError, rank_signature
from p2synth.solver.topn import tie_order

__all__ = ["Memo", "Proof", "Ranked", "Solution", "VerificationError", "solve"]  # Proof, VerificationError: ranking.py's


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

    @property
    def bound_s(self) -> float:
        """The lower bound no program's predicted time goes below (hierarchies/bound.py; docs/model.md, "Lower bound")."""
        return lower_bound(self.placement, self.request, self.message_bytes).seconds

    @property
    def of_bound(self) -> float | None:
        """The best program's predicted time over the bound (None without a program or a bound)."""
        best = self.best
        return best.cost_s / self.bound_s if best is not None and self.bound_s > 0 else None


@dataclass
class Memo:
    """Results shared across placements: rankings per cost signature, step times per (signature, program)."""

    rankings: dict = field(default_factory=dict)
    step_times: dict = field(default_factory=dict)


def solve(
    placement: Placement,
    request: Request,
    message_bytes: int,
    max_steps: int,
    top: int | None = 5,
    deadline: Deadline | None = None,
    model_kind: CostModelKind = CostModelKind.ALPHA_BETA,
    proof: Proof = Proof.CERTIFICATE,
    memo: Memo | None = None,
    pieces: tuple[int, ...] = (1,),
) -> Solution:
    """Rank programs for `request` on `placement`: the `top` cheapest (None: all of them).

    Programs are costed by the cost model `model_kind`, each at its cheapest
    piece count among `pieces` (1: sequential; a program of two or more steps
    may run pipelined, see ``Program.pipeline``). The first program is proved
    cheapest within `max_steps` and over those piece counts (``optimal``)
    unless the deadline ran out (then ``timed_out`` is set). `memo` shares work
    with other placements (a fresh one when None).
    """
    deadline = deadline or Deadline(None)
    memo = memo or Memo()
    signature = cost_signature(placement, request, message_bytes, model_kind)
    models = _models(placement, request, message_bytes, model_kind)
    n_cells = len(request.reduced_cells(placement))
    if n_cells == 0:  # nothing to reduce: the reduction group is a single device
        empty = Ranked(Program(()), 0.0, (), True)
        return Solution(placement, request, message_bytes, empty, (empty,), 1, True)
    order = canonical_order(placement, request)
    default = _rank(default_program(placement, request), placement, request, models, (signature, order), memo)
    if request.collective is Collective.SEND_RECV:  # a shift's one program is its default: nothing to search
        return Solution(placement, request, message_bytes, default, (default,), 1, True)
    pieces = tuple(sorted(set(pieces) | {1}))
    key = (signature, max_steps, top, proof, pieces)
    if key not in memo.rankings:  # searched with the cells in the signature's order, shared by every placement that has it
        memo.rankings[key] = rank_signature(request, n_cells, max_steps, top, lambda p: InCellOrder(models(p), order),
                                            pieces, proof, deadline, signature.cells)
    ranking = memo.rankings[key]
    programs = [(Program(to_program(reorder(raw, order), placement, request).steps, p), cost)
                for raw, p, cost in ranking.candidates]
    chosen = tie_order(programs)
    chosen = chosen if top is None else chosen[:top]
    ranked = []
    for program, cost in chosen:
        item = _rank(program, placement, request, models, (signature, order), memo)
        if not math.isclose(item.cost_s, cost, rel_tol=1e-9, abs_tol=1e-15):
            raise VerificationError(f"cost mismatch: search {cost} vs model {item.cost_s} for {item.program.text(placement)}")
        ranked.append(item)
    return Solution(placement, request, message_bytes, default, tuple(ranked), ranking.count, ranking.optimal,
                    ranking.timed_out)


def _models(placement: Placement, request: Request, message_bytes: int, kind: CostModelKind):
    """``models(P)``: the cost model at 1/P of the message (one piece of a P-piece pipeline), built once per P."""
    built: dict[int, CostModel] = {}

    def models(pieces: int) -> CostModel:
        if pieces not in built:
            built[pieces] = cost_model(placement, request, message_bytes, kind, pieces)
        return built[pieces]

    return models


def _rank(program: Program, placement: Placement, request: Request, models, shared: tuple[CostSignature, tuple[int, ...]],
          memo: Memo) -> Ranked:
    """Check `program` concretely and cost it with the placement's own cost model (times shared by the placements
    with its signature and cell order, `shared`: :func:`~solver.models.canonical_order`); VerificationError if the
    check fails.

    A pipelined program is checked as one piece (its steps); its step times are
    each step's on one piece, its cost the pipeline's.
    """
    result = verifier(placement, request).check(program.sequential())
    if not result.ok:
        raise VerificationError(f"program {program.text(placement)} fails the concrete checker: {result.reason}")
    cells = request.reduced_cells(placement)
    raw = to_raw(program, cells)
    key = (shared, raw, program.pipeline)
    if key not in memo.step_times:
        memo.step_times[key] = raw_program_cost(models, request.collective, len(cells), raw, program.pipeline)
    cost, steps = memo.step_times[key]
    return Ranked(program, cost, tuple(steps), verified=True)
