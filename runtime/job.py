"""Job-wide behaviour under MPI: errors every rank agrees on, and no hangs when one rank fails.

* An expected error (bad argument, bad plan, backend unavailable) is agreed
  on by all ranks with one small collective; the first failing rank (rank 0
  when all see the same plan) prints one line and every rank returns the same
  non-zero code, so the job ends cleanly.
* Anything else raised on one rank prints that rank's traceback and calls
  ``MPI_Abort``, which ends every rank of the job, instead of leaving the
  others waiting in a collective (the same as ``python -m mpi4py``).
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from p2synth.hierarchies.cli import ArgumentParser, UsageError
from p2synth.hierarchies.plan_file import PlanFileError
from p2synth.runtime.backends import BackendUnavailable, make_backend

EXIT_OK = 0
EXIT_WRONG = 1  # a result failed the exact check (or a rank crashed)
EXIT_USAGE = 2  # bad arguments, bad plan, or backend unavailable
EXIT_DETECTED = 3  # --inject: the fault struck and the check caught it in every run it struck
EXIT_MISSED = 4  # --inject: the fault struck some run and the check did not see it


def require_out_folder(out: Path) -> None:
    """PlanFileError (one line) unless the folder an ``--out`` file goes to exists: checked before any work is done."""
    if out.parent and not out.parent.is_dir():
        raise PlanFileError(f"--out {out}: folder {out.parent} does not exist")


def mpi_version() -> str:
    """The MPI library's name and version, e.g. ``Open MPI v5.0.11``."""
    return MPI.Get_library_version().splitlines()[0].split(",")[0].strip()


def fail_together(world: MPI.Intracomm, error: str | None) -> bool:
    """Whether any rank has an error (collective); the first such rank prints its one line."""
    flags = np.zeros(world.Get_size(), dtype=np.int8)
    world.Allgather(np.array([error is not None], dtype=np.int8), flags)
    failing = np.flatnonzero(flags)
    if failing.size == 0:
        return False
    if world.Get_rank() == failing[0]:
        print(f"error: {error}", file=sys.stderr, flush=True)
    return True


def run_guarded(world: MPI.Intracomm, main: Callable[[], int]) -> int:
    """Run `main`; if it raises (anything but SystemExit), print the traceback and abort the whole job."""
    try:
        return main()
    except SystemExit:
        raise
    except BaseException:
        sys.stderr.write(f"[rank {world.Get_rank()}] " + traceback.format_exc())
        sys.stderr.flush()
        world.Abort(EXIT_WRONG)
        raise  # not reached: Abort does not return


class RankZeroParser(ArgumentParser):
    """The shared parser (errors raise UsageError) that prints its help on rank 0 only."""

    def print_help(self, file=None) -> None:
        """Print the help on rank 0 only."""
        if MPI.COMM_WORLD.Get_rank() == 0:
            super().print_help(file)


def start_command(world: MPI.Intracomm, argv: list[str] | None, parse_args: Callable[[list[str] | None], Any],
                  prepare: Callable[[Any, MPI.Intracomm], Any]) -> tuple[Any, Any, Any] | None:
    """:func:`start_job` for a command whose arguments name the backend (``args.backend``): parse `argv`, then
    ``prepare(args, world)``; ``(args, prepared, backend)``, or None when any rank failed (its one line printed)."""
    def load():
        args = parse_args(argv)
        return args, prepare(args, world)

    started = start_job(world, load, lambda loaded: loaded[0].backend)
    return None if started is None else (*started[0], started[1])


def run_command(argv: list[str] | None, parse_args: Callable[[list[str] | None], Any],
                prepare: Callable[[Any, MPI.Intracomm], Any], body: Callable[[Any, Any, Any, MPI.Intracomm], int]) -> int:
    """The entry point of a runtime command whose arguments name the backend, on MPI's world: :func:`start_command`
    (exit 2 if any rank's input is bad, its one line printed), then ``body(args, prepared, backend, world)``'s exit
    status, every rank the same; an exception on any rank aborts the whole job (:func:`run_guarded`)."""
    world = MPI.COMM_WORLD

    def command() -> int:
        started = start_command(world, argv, parse_args, prepare)
        return EXIT_USAGE if started is None else body(*started, world)

    return run_guarded(world, command)


def start_job(world: MPI.Intracomm, prepare: Callable[[], Any], backend_kind: Callable[[Any], Any]) -> tuple[Any, Any] | None:
    """The start every runtime command shares: `prepare()` (parse and load, on every rank), then the backend
    named by ``backend_kind(prepared)``; None when any rank failed either (its one line printed, exit 2 due)."""
    error, prepared = None, None
    try:
        prepared = prepare()
    except (UsageError, PlanFileError, ValueError) as e:
        error = str(e)
    if fail_together(world, error):
        return None
    try:
        backend = make_backend(backend_kind(prepared), world)
    except BackendUnavailable as e:
        error = str(e)
    if fail_together(world, error):
        return None
    return prepared, backend
