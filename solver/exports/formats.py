"""The export formats and :func:`export_placement`: a placement of a plan file as a framework module."""

from __future__ import annotations

from p2synth.hierarchies.plan_file import PlanFile, RequestPrograms
from p2synth.solver.exports.choice import ExportFormat, RankedProgram
from p2synth.solver.exports.planning import ExportRequest, NotExportable
from p2synth.solver.exports.to_jax import export_jax
from p2synth.solver.exports.to_torch import export_torch

__all__ = ["EXPORTERS", "ExportFormat", "export_placement", "export_request"]

# The exporters by format.
EXPORTERS = {ExportFormat.TORCH: export_torch, ExportFormat.JAX: export_jax}


def export_request(planned: RequestPrograms) -> ExportRequest:
    """One request of a plan as the exporters take it: its ranked programs with their predicted times.

    A request whose list is empty offers its default, unranked.
    """
    ranked = tuple(RankedProgram(p.program, i + 1, p.cost_s) for i, p in enumerate(planned.programs))
    ranked = ranked or (RankedProgram(planned.default.program, None, planned.default.cost_s),)
    named = planned.named
    return ExportRequest(named.name, named.request, ranked[0].program, named.message_bytes, ranked)


def export_placement(plan: PlanFile, index: int, fmt: ExportFormat | str) -> str:
    """Source of a `fmt` module running, for every request of placement `index` of `plan`, the best program of
    its ranked list that `fmt` can express.

    Raises PlanFileError for a bad index or entry, and NotExportable (naming
    the placement and the request) for a chosen program that does not perform
    its request, a request none of whose programs `fmt` can express, or a
    placement without cells.
    """
    planned = plan.placement(index)
    if not planned.placement.cells:
        raise NotExportable(f"placement {index} has no cells (a single device): there is no mesh to export")
    try:
        return EXPORTERS[ExportFormat(fmt)](planned.placement, [export_request(r) for r in planned.requests])
    except NotExportable as e:
        raise NotExportable(f"placement {index}, {e}") from None
