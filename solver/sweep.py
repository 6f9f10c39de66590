"""Sweeps: every request of a problem on every placement, with shared work, over processes or MPI ranks.

Placements whose requests have the same cost signatures (``solver.models``)
form a *group*: one search and one proof serve the whole group (a
:class:`~solver.search.Memo`). Groups are independent, so a sweep spreads them:

* one process (``jobs=1``), in placement order;
* ``jobs > 1`` worker processes on this machine (``concurrent.futures``);
* the ranks of an MPI job (``mpirun -n R python -m solver.run ...``): every
  rank, rank 0 included, takes the next group of one list ordered by
  :func:`work` (the largest first) from a counter in an MPI window on rank 0
  (``mpi4py.util.sync.Counter``: an atomic fetch-and-add), so each rank takes
  a new group whenever it finishes one; rank 0 then gathers the ranks'
  results, shows the progress and writes the result (``-n 2`` has two
  solving ranks).

Whichever way, each placement's result is what a fresh solve of it gives, so
the result JSON is the same byte for byte (tests compare them).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from dataclasses import dataclass

import z3

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


def quiet_one_host_windows() -> None:
    """Before MPI starts: leave Open MPI's UCX one-sided component out when every rank runs on this host.

    The MPI sweep's counters are MPI windows. On one host Open MPI 5 serves them
    with its shared-memory component (osc/sm) anyway, but first asks osc/ucx,
    which, finding no UCX transport for one-sided calls (the PyPI wheel on a
    laptop or CI), prints a bogus ``Error: OSC UCX component priority set inside
    component query failed`` on every rank for every window (open-mpi/ompi#12517).
    ``OMPI_MCA_osc`` set by the user is kept; several hosts, or another MPI, are
    left alone. Call it before ``from mpi4py import MPI`` (which starts MPI).
    """
    size, local = os.environ.get("OMPI_COMM_WORLD_SIZE"), os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE")
    if size and size == local and "OMPI_MCA_osc" not in os.environ:
        os.environ["OMPI_MCA_osc"] = "^ucx"


def mpi_sweep(comm, task: SweepTask, deadline: Deadline, progress: Progress | None = None) -> SweepResult | None:
    """The sweep over the ranks of `comm`, every rank solving: rank 0 returns the whole result, the others None.

    Every rank (each loaded the same problem, so each orders the same groups
    the same way, the largest :func:`work` first) takes the index of its next
    group from a shared counter on rank 0, an atomic fetch-and-add in an MPI
    window (``mpi4py.util.sync.Counter``), until the list is used up; each
    solves its groups with its own copy of the task and its own `deadline`.
    A second counter adds up the placements finished on all ranks; rank 0
    reads it while it solves and while it waits for the other ranks, and
    calls `progress` with what was added since the last call. Rank 0 then
    gathers every rank's results (``comm.gather``) and assembles them.

    A group that raises, on any rank, makes that rank raise
    :class:`RankFailed` naming the rank and the error; the caller prints it
    and ends the job at once (``Abort``), without waiting for the groups still
    running on the other ranks (tests/test_sweep.py checks both). Each group
    runs in a helper thread and Z3's own Ctrl-C handling is off, so a Ctrl-C
    reaches the main thread at once as KeyboardInterrupt (the caller aborts
    the job) rather than cancelling only the Z3 call under way.
    """
    from mpi4py.util.sync import Counter

    problem = task.problem
    order = sorted(groups(problem), key=lambda g: -work(problem, g))  # stable: the same list on every rank
    rank = comm.Get_rank()
    taken = Counter(0, typecode="q", comm=comm, root=0)  # the index into `order` of the next group to take
    finished = Counter(0, typecode="q", comm=comm, root=0)  # placements finished, all ranks together
    results: dict[int, PlacementResult | None] = {}
    mine: list[int] = []  # indices into `order` of the groups this rank solved
    shown = 0  # placements rank 0 has passed to `progress`
    ctrl_c = z3.get_param("ctrl_c")
    z3.set_param("ctrl_c", False)
    try:
        _injected_failure(rank)
        while (k := next(taken)) < len(order):
            answers: queue.SimpleQueue = queue.SimpleQueue()
            threading.Thread(target=_solve_into, args=(answers, task, order[k], deadline), daemon=True,
                             name=f"p2synth group {k}").start()
            while True:
                try:
                    answer = answers.get(timeout=_POLL_S)  # a Ctrl-C interrupts this wait
                    break
                except queue.Empty:
                    if rank == 0:
                        shown = _advance(progress, shown, finished.next(0))
            if isinstance(answer, BaseException):
                raise answer
            results.update(answer)
            mine.append(k)
            done = finished.next(len(order[k])) + len(order[k])
            if rank == 0:
                shown = _advance(progress, shown, done)
    except Exception as e:  # noqa: BLE001 - everything a group can fail with ends the job, as one line
        raise RankFailed(f"rank {rank}: {type(e).__name__}: {e}") from e
    finally:
        z3.set_param("ctrl_c", ctrl_c)
    # every rank waits here for the last group, asleep rather than spinning in a blocking MPI call (Open MPI
    # busy-polls there, taking a core from the ranks still solving); rank 0's bar moves on and a Ctrl-C is handled
    while (done := finished.next(0)) < len(problem.matrices):
        if rank == 0:
            shown = _advance(progress, shown, done)
        time.sleep(_POLL_S)
    if rank == 0:
        _advance(progress, shown, done)
    parts = comm.gather((mine, results), root=0)
    taken.free()
    finished.free()
    if parts is None:
        return None
    for _, part in parts:
        results.update(part)
    _record_shares(order, [solved for solved, _ in parts])
    return assemble(problem, results)


def _solve_into(answers: queue.SimpleQueue, task: SweepTask, group: list[int], deadline: Deadline) -> None:
    """Put into `answers` the results of one group, or the exception it raised (in a helper thread)."""
    try:
        answers.put(solve_groups(task, [group], deadline))
    except BaseException as e:  # noqa: BLE001 - the waiting thread raises it
        answers.put(e)


_POLL_S = 0.05  # seconds between two readings of the finished counter by rank 0


def _advance(progress: Progress | None, shown: int, done: int) -> int:
    """Pass the placements finished since `shown` to `progress`; the new count shown."""
    if progress and done > shown:
        progress(done - shown)
    return max(shown, done)


SHARES = "P2SYNTH_SWEEP_SHARES"  # test hook: rank 0 writes to this file, as JSON, the placements each rank solved


def _record_shares(order: list[list[int]], solved: list[list[int]]) -> None:
    """Under the :data:`SHARES` hook, write ``[[placement index, ...] for each rank]`` (rank 0 first)."""
    path = os.environ.get(SHARES)
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump([sorted(i for k in ks for i in order[k]) for ks in solved], f)


FAIL_ON_RANK = "P2SYNTH_FAIL_ON_RANK"  # test hook: the rank with this number raises before it solves anything


def _injected_failure(rank: int) -> None:
    """Under the :data:`FAIL_ON_RANK` hook, raise RuntimeError on the rank it names."""
    if os.environ.get(FAIL_ON_RANK) == str(rank):
        raise RuntimeError(f"failure injected by {FAIL_ON_RANK}={rank}")


class RankFailed(Exception):
    """A rank of an MPI sweep failed; the message names it and its error."""
