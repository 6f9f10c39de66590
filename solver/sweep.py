"""Sweeps: every request of a problem on every placement, with shared work, over processes or MPI ranks.

Placements whose requests have the same cost signatures (``solver.models``)
form a *group*: one search and one proof serve the whole group (a
:class:`~solver.search.Memo`). Groups are independent, so a sweep spreads them:

* one process (``jobs=1``), in placement order;
* ``jobs > 1`` worker processes on this machine (``concurrent.futures``);
* the ranks of an MPI job (``mpirun -n R python -m solver.run ...``), through
  ``mpi4py.futures.MPICommExecutor``: rank 0 hands each group, the largest
  first, to the next idle rank of 1..R-1, shows the progress and writes the
  result (rank 0 solves nothing itself, so ``-n 2`` has one solving rank).

Whichever way, each placement's result is what a fresh solve of it gives, so
the result JSON is the same byte for byte (tests compare them).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from p2synth.hierarchies.program import Collective
from p2synth.hierarchies.statespace import statuses
from p2synth.encodings.deadline import Deadline
from p2synth.solver.models import cost_signature
from p2synth.solver.planner import PlacementResult, SweepResult, plan_placement, rank_plans
from p2synth.solver.search import Memo, Proof
from p2synth.solver.spec import Problem

Progress = Callable[[int], None]  # called with the number of placements just finished


@dataclass(frozen=True)
class SweepTask:
    """Everything a worker needs to solve groups of placements (picklable)."""

    problem: Problem
    max_steps: int
    top: int | None
    proof: Proof
    reuse: bool
    budget_s: float | None  # seconds left when the sweep started (None: no limit)


def groups(problem: Problem) -> list[list[int]]:
    """Indices into ``problem.matrices`` grouped by the cost signatures of their requests, in order of first appearance."""
    out: dict[tuple, list[int]] = {}
    for i, matrix in enumerate(problem.matrices):
        placement = problem.placement(matrix)
        key = tuple(cost_signature(placement, r.request, r.message_bytes, problem.spec.cost_model) for r in problem.requests)
        out.setdefault(key, []).append(i)
    return list(out.values())


def work(problem: Problem, group: list[int]) -> float:
    """Estimated cost of solving a group: its abstract state space sizes (once, shared) plus a little per placement."""
    placement = problem.placement(problem.matrices[group[0]])
    states = sum(1 if r.request.collective is Collective.SEND_RECV  # no state space: its one program is its default
                 else len(statuses(r.request.collective)) ** len(r.request.reduced_cells(placement)) for r in problem.requests)
    return states + 50.0 * len(group)


def solve_groups(task: SweepTask, chosen: list[list[int]], deadline: Deadline | None = None,
                 progress: Progress | None = None) -> dict[int, PlacementResult | None]:
    """Solve the placements of `chosen` groups; index -> result (None: the budget ran out before it was reached)."""
    deadline = deadline or Deadline(task.budget_s)
    out: dict[int, PlacementResult | None] = {}
    for group in chosen:
        memo = Memo()
        for i in group:
            if deadline.expired():
                out[i] = None
            else:
                out[i] = plan_placement(task.problem, task.problem.matrices[i], task.max_steps, task.top, deadline,
                                        task.proof, memo if task.reuse else Memo())
        if progress:
            progress(len(group))
    return out


def assemble(problem: Problem, results: dict[int, PlacementResult | None]) -> SweepResult:
    """The ranked sweep from every placement's result (missing or None: not reached within the budget)."""
    plans = [results[i] for i in range(len(problem.matrices)) if results.get(i) is not None]
    unsolved = [m for i, m in enumerate(problem.matrices) if results.get(i) is None]
    return rank_plans(plans, unsolved)


def sweep(task: SweepTask, deadline: Deadline, jobs: int = 1, progress: Progress | None = None) -> SweepResult:
    """Solve every placement of the task's problem in this process or `jobs` worker processes."""
    chosen = groups(task.problem)
    if jobs <= 1 or len(chosen) < 2 or len(task.problem.matrices) < MIN_PARALLEL_PLACEMENTS:
        return assemble(task.problem, solve_groups(task, chosen, deadline, progress))
    remaining = deadline.remaining()
    task = SweepTask(task.problem, task.max_steps, task.top, task.proof, task.reuse, remaining)
    ends_at = None if remaining is None else time.time() + remaining  # wall clock: the same instant in every worker
    # spawn: fresh interpreters, so no Z3 or numpy state of this process is shared through fork
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_init_worker, initargs=(task, ends_at)) as pool:
        results = _collect(pool, _solve_in_worker, task.problem, chosen, progress)
    return assemble(task.problem, results)


def _collect(executor: Executor, solve: Callable[[list[int]], dict], problem: Problem, chosen: list[list[int]],
             progress: Progress | None) -> dict[int, PlacementResult | None]:
    """Every group of `chosen` solved by `solve` on the executor, the largest work first (each to the next idle worker).

    On an error or Ctrl-C the groups not yet started are cancelled before it propagates.
    """
    futures = {executor.submit(solve, g): g for g in sorted(chosen, key=lambda g: -work(problem, g))}
    results: dict[int, PlacementResult | None] = {}
    try:
        for future in as_completed(futures):
            results.update(future.result())
            if progress:
                progress(len(futures[future]))
    except BaseException:
        executor.shutdown(wait=False, cancel_futures=True)
        raise
    return results


MIN_PARALLEL_PLACEMENTS = 8  # smaller sweeps run in one process: starting workers would cost more than it saves

_TASK: SweepTask | None = None
_DEADLINE: Deadline | None = None


def _init_worker(task: SweepTask, ends_at: float | None) -> None:
    """Keep the task and the sweep's deadline (wall-clock `ends_at`, None: no limit) for every group of this worker."""
    global _TASK, _DEADLINE
    _TASK = task
    _DEADLINE = Deadline(None if ends_at is None else max(0.0, ends_at - time.time()))


def _solve_in_worker(group: list[int]) -> dict[int, PlacementResult | None]:
    assert _TASK is not None and _DEADLINE is not None
    return solve_groups(_TASK, [group], _DEADLINE)


def default_jobs() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def under_mpi() -> bool:
    """Whether this process is one of several ranks started by mpirun/mpiexec (Open MPI, MPICH, Intel MPI, PMIx)."""
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"):
        value = os.environ.get(var)
        if value and value.isdigit() and int(value) > 1:
            return True
    return False


def mpi_sweep(comm, task: SweepTask, deadline: Deadline, progress: Progress | None = None) -> SweepResult | None:
    """The sweep over the ranks of `comm` (``mpi4py.futures``): rank 0 returns the whole result, the others None.

    Rank 0 hands out the groups, the largest work first, each to the next idle
    rank, and shows the progress; ranks 1.. solve them, each with its own copy
    of the task and its own `deadline` (every rank loaded the same problem).
    A group that raises makes rank 0 raise :class:`RankFailed` naming the rank
    and the error, and the caller ends the job (``Abort``). That is why this is
    not a plain ``with MPICommExecutor(...)`` block: leaving one runs
    ``shutdown(wait=True)``, which waits for every group still running on the
    other ranks (under ``-n 3``, a 10-cell group kept a failed job alive for
    minutes; tests/test_sweep.py checks that the job now ends at once).
    """
    from mpi4py.futures import MPICommExecutor

    global _TASK, _DEADLINE
    _TASK, _DEADLINE = task, deadline
    pool = MPICommExecutor(comm, root=0)
    executor = pool.__enter__()  # ranks 1..: serve groups until rank 0 shuts the executor down, then None
    if executor is None:
        pool.__exit__(None, None, None)
        return None
    _injected_failure(0)
    results = _collect(executor, _solve_on_rank, task.problem, groups(task.problem), progress)
    pool.__exit__(None, None, None)
    return assemble(task.problem, results)


def _solve_on_rank(group: list[int]) -> dict[int, PlacementResult | None]:
    """One group on an MPI rank; any error comes back to rank 0 as :class:`RankFailed` naming this rank."""
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    try:
        _injected_failure(rank)
        return _solve_in_worker(group)
    except Exception as e:  # noqa: BLE001 - everything a group can fail with goes to rank 0, as one line
        raise RankFailed(f"rank {rank}: {type(e).__name__}: {e}") from None


FAIL_ON_RANK = "P2SYNTH_FAIL_ON_RANK"  # test hook: the rank with this number raises before it solves anything


def _injected_failure(rank: int) -> None:
    if os.environ.get(FAIL_ON_RANK) == str(rank):
        raise RuntimeError(f"failure injected by {FAIL_ON_RANK}={rank}")


class RankFailed(Exception):
    """A rank of an MPI sweep failed; the message names it and its error."""
