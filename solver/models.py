"""The cost models by name: the spec's ``cost_model`` field picks one."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from p2synth.hierarchies.model import Hierarchy
from p2synth.hierarchies.placement import Placement
from p2synth.hierarchies.program import Collective, Program, RawProgram, Request, to_raw
from p2synth.solver.algebra import PY, Algebra
from p2synth.solver.cost import AlphaBeta, CostModel, chosen_schedule, raw_program_cost, step_bits
from p2synth.solver.simulator import Simulator


class CostModelKind(str, Enum):
    """The cost models a spec can name."""

    ALPHA_BETA = "alpha-beta"
    SIMULATOR = "simulator"

    def __str__(self) -> str:
        return self.value


def cost_model(placement: Placement, request: Request, message_bytes: float,
               kind: CostModelKind | str = CostModelKind.ALPHA_BETA, pieces: int = 1) -> CostModel:
    """The cost model `kind` for one piece of `request` on `placement`: `message_bytes` cut into `pieces`
    (more than one: the runtime runs the steps as non-blocking collectives, which the simulator knows)."""
    if CostModelKind(kind) is CostModelKind.SIMULATOR:
        return Simulator(placement, request, message_bytes / pieces, nonblocking=pieces > 1)
    return AlphaBeta(placement, request, message_bytes, pieces)


def program_cost(placement: Placement, request: Request, program: Program, message_bytes: float,
                 kind: CostModelKind | str = CostModelKind.ALPHA_BETA) -> float:
    """Predicted seconds of `program` (on its ``pipeline`` pieces) for `request` at `message_bytes` under model `kind`:
    the figure the solver reports as its ``cost_s``."""
    return program_cost_and_steps(placement, request, program, message_bytes, kind)[0]


def program_cost_and_steps(placement: Placement, request: Request, program: Program, message_bytes: float,
                           kind: CostModelKind | str = CostModelKind.ALPHA_BETA) -> tuple[float, list[float]]:
    """:func:`program_cost` and each step's seconds on one piece (the solver's ``cost_s`` and ``step_costs_s``)."""
    if not program.steps:
        return 0.0, []
    cells = request.reduced_cells(placement)
    models = lambda pieces: cost_model(placement, request, message_bytes, kind, pieces)
    return raw_program_cost(models, request.collective, len(cells), to_raw(program, cells), program.pipeline)


def step_schedules(placement: Placement, request: Request, program: Program, message_bytes: float) -> list[str]:
    """The schedule each step of `program` runs, as the cost models price it on one of its pieces: under
    ``library: nccl`` NCCL's algorithm and protocol (``Ring/LL128``, ``NVLS/Simple``, ...: what the result JSON's
    ``nccl_algorithms`` and the table show), else AlphaBeta's ``ring`` or ``tree`` (the simulator's own Open MPI
    and gloo algorithms are not named); ``pairwise`` for an all_to_all's steps, ``shift`` for a send_recv."""
    cells = request.reduced_cells(placement)
    if request.collective in (Collective.ALL_TO_ALL, Collective.SEND_RECV):
        return ["pairwise" if request.collective is Collective.ALL_TO_ALL else "shift"] * len(program.steps)
    model = AlphaBeta(placement, request, message_bytes / program.pipeline)
    return [chosen_schedule(model.split(PY, op, *bits))
            for op, bits in step_bits(request.collective, len(cells), to_raw(program, cells))]


@dataclass(frozen=True)
class CostSignature:
    """Everything a request's predicted step times on a placement depend on, up to the order of its cells.

    Both cost models see a placement only through the hierarchy (its link
    figures and counts) and the reduced cells' levels and factors, each cell
    alike; the signature lists the cells in :func:`canonical_order` (by level,
    then factor), so two placements with equal signatures give every program
    the same predicted time once their cells are read in that order
    (:class:`InCellOrder`), and one search and one proof serve both
    (``tests/test_certificate.py`` holds the models to this).
    """

    kind: CostModelKind
    hierarchy: Hierarchy
    collective: Collective
    message_bytes: float
    cells: tuple[tuple[int, int], ...]  # (level, factor) of each reduced cell


def cost_signature(placement: Placement, request: Request, message_bytes: float,
                   kind: CostModelKind | str = CostModelKind.ALPHA_BETA) -> CostSignature:
    """The :class:`CostSignature` of `request` on `placement` at `message_bytes` under cost model `kind`."""
    cells = request.reduced_cells(placement)
    shape = tuple((cells[i].level, placement.factor(cells[i])) for i in canonical_order(placement, request))
    return CostSignature(CostModelKind(kind), placement.hierarchy, request.collective, float(message_bytes), shape)


def canonical_order(placement: Placement, request: Request) -> tuple[int, ...]:
    """The request's reduced cells (their indices in cell order) sorted by level, then factor (ties in cell order):
    the order in which a :class:`CostSignature` lists them."""
    cells = request.reduced_cells(placement)
    return tuple(sorted(range(len(cells)), key=lambda i: (cells[i].level, placement.factor(cells[i]))))


def reorder(raw: RawProgram, order: Sequence[int]) -> RawProgram:
    """A program over cells read in `order` (bit ``k`` of a mask for cell ``order[k]``) as masks over the cells in
    their own order."""
    return tuple((op, sum(1 << order[k] for k in range(len(order)) if mask >> k & 1)) for op, mask in raw)


@dataclass(frozen=True)
class InCellOrder:
    """Cost model `model` read with its cells in `order`: entry ``k`` of the per-cell booleans it is given is the
    model's cell ``order[k]``. Costs are the model's own, for the program :func:`reorder` maps to."""

    model: CostModel
    order: tuple[int, ...]

    def _own(self, *bits: Sequence[Any]) -> list[list[Any]]:
        out = []
        for b in bits:
            own = [None] * len(b)
            for k, i in enumerate(self.order):
                own[i] = b[k]
            out.append(own)
        return out

    @property
    def pieces(self) -> int | None:
        """The wrapped model's piece count (None if it has none)."""
        return getattr(self.model, "pieces", None)

    def step_time(self, alg: Algebra, op: Any, S: Sequence[Any], Y: Sequence[Any], Z: Sequence[Any]) -> Any:
        """The model's step time."""
        return self.model.step_time(alg, op, *self._own(S, Y, Z))

    def traffic(self, alg: Algebra, op: Any, S: Sequence[Any], Y: Sequence[Any], Z: Sequence[Any]) -> list[Any]:
        """The model's per-level traffic."""
        return self.model.traffic(alg, op, *self._own(S, Y, Z))

    @property
    def split(self):
        """The model's ``split`` read in this order, or None where the model does not split (``solver.stepcosts``)."""
        inner = getattr(self.model, "split", None)
        return None if inner is None else lambda alg, op, S, Y, Z: inner(alg, op, *self._own(S, Y, Z))

    @property
    def on_piece(self):
        """The model's ``on_piece`` read in this order, or None (``solver.cost``'s walk along a program)."""
        inner = getattr(self.model, "on_piece", None)
        return None if inner is None else lambda alg, op, S, Y, Z: inner(alg, op, *self._own(S, Y, Z))

    def with_pieces(self, pieces: int) -> InCellOrder:
        """The same wrapper around the model at `pieces` pieces (a model with a ``pieces`` field)."""
        return InCellOrder(dataclasses.replace(self.model, pieces=pieces), self.order)
