"""Exports of a placement and its programs as framework modules (PyTorch, JAX).

Each exporter is a pure function ``(placement, requests) -> str`` returning the
source of a self-contained module; ``requests`` holds ``(name, request,
program, message_bytes)`` items. :func:`export_placement` exports a placement
of a plan file (the solver's result JSON) with each request's best program, so
exporting needs neither Z3 nor the cost model: ``python -m solver.exports
plan.json --placement I --format torch|jax``. ``docs/exports.md`` explains the
generated code.
"""

from enum import Enum

from p2synth.hierarchies.plan_file import PlanFile
from p2synth.solver.exports.planning import ExportRequest
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

    Raises PlanFileError for a bad index or entry and ValueError for a program
    that does not perform its request.
    """
    planned = plan.placement(index)
    requests = [
        ExportRequest(r.named.name, r.named.request, (r.programs[0] if r.programs else r.default).program,
                      r.named.message_bytes)
        for r in planned.requests
    ]
    return EXPORTERS[ExportFormat(fmt)](planned.placement, requests)


__all__ = ["EXPORTERS", "ExportFormat", "ExportRequest", "export_jax", "export_placement", "export_torch"]
