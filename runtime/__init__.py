"""Runs synthesized programs across MPI ranks (numpy over MPI, or CuPy over NCCL), checks them exactly, times them.

Entry point: ``mpiexec -n N python -m runtime.bench PLAN ...`` (see docs/runtime.md).
Modules: plan (load the solver's result), layout (which buffer each action of a
layout plan uses; the plan comes from hierarchies/layout.py),
executor (sub-communicators and compiled calls), backends (numpy/MPI,
cupy/NCCL), data (tagged check data and exact expected results), faults
(deliberate faults for ``--inject``), timing (nccl-tests method), report
(bandwidths, tables), job (errors and aborts across ranks), bench (the CLI).
Never imports Z3 or the solver.
"""
