"""Exports of a placement and its programs as framework modules (PyTorch, JAX).

Each exporter is a pure function ``(placement, requests) -> str`` returning the
source of a self-contained module; ``requests`` holds ``(name, request,
program, message_bytes)`` items. ``docs/exports.md`` explains the generated code.
"""

from solver.export_jax import export_jax
from solver.export_plan import ExportRequest
from solver.export_torch import export_torch

# The exporters by the name the CLI's --export takes.
EXPORTERS = {"torch": export_torch, "jax": export_jax}

__all__ = ["EXPORTERS", "ExportRequest", "export_jax", "export_torch"]
