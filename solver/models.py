"""The cost models by name: the spec's ``cost_model`` field picks one."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from p2synth.hierarchies.model import Hierarchy
from p2synth.hierarchies.placement import Placement
from p2synth.hierarchies.program import Collective, Program, Request, to_raw
from p2synth.solver.cost import AlphaBeta, CostModel, raw_program_cost
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


@dataclass(frozen=True)
class CostSignature:
    """Everything a request's predicted step times on a placement depend on.

    Both cost models see a placement only through the hierarchy (its link
    figures and counts) and the reduced cells' levels and factors, in cell
    order; two placements with equal signatures give every program the same
    predicted time, so one search and one proof serve both
    (``tests/test_search.py`` holds the models to this).
    """

    kind: CostModelKind
    hierarchy: Hierarchy
    collective: Collective
    message_bytes: float
    cells: tuple[tuple[int, int], ...]  # (level, factor) of each reduced cell


def cost_signature(placement: Placement, request: Request, message_bytes: float,
                   kind: CostModelKind | str = CostModelKind.ALPHA_BETA) -> CostSignature:
    """The :class:`CostSignature` of `request` on `placement` at `message_bytes` under cost model `kind`."""
    cells = tuple((c.level, placement.factor(c)) for c in request.reduced_cells(placement))
    return CostSignature(CostModelKind(kind), placement.hierarchy, request.collective, float(message_bytes), cells)
