"""The cost models by name: the spec's ``cost_model`` field picks one."""

from __future__ import annotations

from enum import Enum

from hierarchies.placement import Placement
from hierarchies.program import Request
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
