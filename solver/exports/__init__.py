"""Exports of a placement and its programs as framework modules (PyTorch, JAX).

Each exporter is a pure function ``(placement, requests) -> str`` returning the
source of a self-contained module; ``requests`` holds ``(name, request,
program, message_bytes)`` items. :func:`export_placement` exports a placement
of a plan file (the solver's result JSON) with each request's best program, so
exporting needs neither Z3 nor the cost model: ``python -m solver.exports
plan.json --placement I --format torch|jax``. ``docs/exports.md`` explains the
generated code.

Modules: formats (the formats and :func:`export_placement`), planning (what
each step does to which chunks), rendering (the shared source text), to_torch
and to_jax (the two exporters). This file stays free of imports: it also runs
under its short name when ``python -m solver.exports`` starts.
"""
