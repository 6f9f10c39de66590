"""The export formats and :func:`export_placement`: a placement of a plan file as a framework module."""

from __future__ import annotations

from enum import Enum

from p2synth.hierarchies.plan_file import PlanFile
from p2synth.solver.exports.planning import ExportRequest, NotExportable, check_exportable
from p2synth.solver.exports.to_jax import export_jax
from p2synth.solver.exports.to_torch import export_torch


class ExportFormat(str, Enum):
    """The frameworks a placement can be exported to."""

    TORCH = "torch"
    JAX = "jax"

    def __str__(self) -> str:
        return self.value


# The exporters by format.
EXPORTERS = {ExportFormat.TORCH: export_torch, ExportFormat.JAX: export_jax}


def export_placement(plan: PlanFile, index: int, fmt: ExportFormat | str) -> str:
    """Source of a `fmt` module running the best program of every request of placement `index` of `plan`.

    Raises PlanFileError for a bad index or entry, and NotExportable (naming
    the placement and the request) for a program that does not perform its
    request or a placement without cells.
    """
    planned = plan.placement(index)
    requests = [
        ExportRequest(r.named.name, r.named.request, (r.programs[0] if r.programs else r.default).program,
                      r.named.message_bytes)
        for r in planned.requests
    ]
    if not planned.placement.cells:
        raise NotExportable(f"placement {index} has no cells (a single device): there is no mesh to export")
    for item in requests:
        try:
            check_exportable(planned.placement, item.request, item.program)
        except NotExportable as e:
            raise NotExportable(f"placement {index}, request {item.name}: {e}") from None
    return EXPORTERS[ExportFormat(fmt)](planned.placement, requests)
