"""Timing as nccl-tests does it: warm-up, barrier, a timed batch of iterations, reduced over ranks.

One *repeat* is: barrier, host timer, ``iters`` back-to-back runs, backend
synchronize (the stream, on GPUs), timer; the rank's time per iteration is
the elapsed time over ``iters``. Over ranks we keep the maximum (the job
waits for its slowest rank) and the mean (nccl-tests' default); over repeats
we report medians.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI


@dataclass(frozen=True)
class TimingConfig:
    """How many untimed warm-up runs, timed runs per repeat, and repeats."""

    warmup: int = 2
    iters: int = 10
    repeats: int = 5

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.iters < 1 or self.repeats < 1:
            raise ValueError("need warmup >= 0, iters >= 1 and repeats >= 1")


@dataclass(frozen=True)
class Timing:
    """Seconds per iteration: median over repeats of the max (and of the mean) over ranks."""

    time_s: float
    mean_s: float
    repeats_s: tuple[float, ...]  # the max over ranks of every repeat


def measure(run: Callable[[], None], synchronize: Callable[[], None], world: MPI.Intracomm, iters: int) -> float:
    """One repeat: this rank's seconds per iteration, from a barrier to the end of its last run."""
    world.Barrier()
    start = time.perf_counter()
    for _ in range(iters):
        run()
    synchronize()
    return (time.perf_counter() - start) / iters


def summarize(local: Sequence[float], world: MPI.Intracomm) -> Timing:
    """Reduce this rank's per-repeat times over ranks (max and mean) and take medians over repeats."""
    mine = np.asarray(local, dtype=np.float64)
    worst = np.empty_like(mine)
    total = np.empty_like(mine)
    world.Allreduce(mine, worst, op=MPI.MAX)
    world.Allreduce(mine, total, op=MPI.SUM)
    mean = total / world.Get_size()
    return Timing(statistics.median(worst), statistics.median(mean), tuple(float(t) for t in worst))


def time_runs(run: Callable[[], None], synchronize: Callable[[], None], world: MPI.Intracomm, config: TimingConfig) -> Timing:
    """Warm up, then time `config.repeats` batches of `config.iters` runs."""
    for _ in range(config.warmup):
        run()
    synchronize()
    return summarize([measure(run, synchronize, world, config.iters) for _ in range(config.repeats)], world)
