"""Runs synthesized programs across MPI ranks (numpy over MPI, or CuPy over NCCL), checks them exactly, times them.

Entry points: ``mpiexec -n N python -m runtime.bench PLAN ...`` and ``runtime.tune``
(see docs/runtime.md), also as ``p2synth bench|tune`` (command: the ``p2synth``
console command). Modules: plan (load the solver's result), layout (which buffer
each action of a layout plan uses; the plan comes from hierarchies/layout.py),
executor (sub-communicators and compiled calls), backends (the backend protocol
and numpy/MPI), nccl (CuPy/NCCL), data (tagged check data and exact expected results), faults
(deliberate faults for ``--inject``), timing (nccl-tests method), report
(bandwidths, tables), job (errors and aborts across ranks), bench (the CLI).
Never imports Z3 or the solver.
"""
