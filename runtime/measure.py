"""Interleaved repeats: time several programs A B C, A B C, ... so that drift and busy neighbours hit all alike.

One *repeat* of a program is runtime/timing.py's :func:`~runtime.timing.measure`
(barrier, ``iters`` back-to-back runs, synchronize); its time is the maximum
over ranks. Repeats go round the programs in turn, so a burst of load from
another job lands on neighbouring programs, not on all repeats of one. Each
program ends with its median over repeats and a distribution-free 95% interval
(runtime/stats.py). The tuner and the accuracy protocol both measure with this.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from p2synth.runtime.stats import Interval, median_interval
from p2synth.runtime.timing import TimingConfig, measure


@dataclass(frozen=True)
class Measured:
    """One program's repeats (max over ranks, seconds per run) and their median and interval."""

    repeats_s: tuple[float, ...]
    interval: Interval

    @property
    def median_s(self) -> float:
        """The median over repeats."""
        return self.interval.median


def interleaved(runs: Sequence[Callable[[], None]], synchronize: Callable[[], None], world: MPI.Intracomm,
                config: TimingConfig, after_repeat: Callable[[int], None] | None = None) -> list[Measured]:
    """Warm every program up, then `config.repeats` rounds timing each program once, in order (collective).

    `after_repeat(r)` is called after round r (e.g. to advance a progress bar).
    """
    for run in runs:
        for _ in range(config.warmup):
            run()
    synchronize()
    local = np.zeros((config.repeats, len(runs)), dtype=np.float64)
    for r in range(config.repeats):
        for i, run in enumerate(runs):
            local[r, i] = measure(run, synchronize, world, config.iters)
        if after_repeat is not None:
            after_repeat(r)
    worst = np.empty_like(local)
    world.Allreduce(local, worst, op=MPI.MAX)
    out = []
    for i in range(len(runs)):
        samples = tuple(float(t) for t in worst[:, i])
        out.append(Measured(samples, median_interval(samples)))
    return out
