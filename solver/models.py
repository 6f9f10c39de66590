"""The cost models by name: the spec's ``cost_model`` field picks one."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from hierarchies.model import Hierarchy
from hierarchies.placement import Placement
from hierarchies.program import Collective, Request
from solver.cost import AlphaBeta, CostModel
from solver.simulator import Simulator


class CostModelKind(str, Enum):
    """The cost models a spec can name."""

    ALPHA_BETA = "alpha-beta"
    SIMULATOR = "simulator"

    def __str__(self) -> str:
        return self.value


def cost_model(placement: Placement, request: Request, message_bytes: float,
               kind: CostModelKind | str = CostModelKind.ALPHA_BETA) -> CostModel:
    """The cost model `kind` for `request` on `placement` at `message_bytes`."""
    if CostModelKind(kind) is CostModelKind.SIMULATOR:
        return Simulator(placement, request, message_bytes)
    return AlphaBeta(placement, request, message_bytes)


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
