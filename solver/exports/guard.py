"""The DDP hook's guard: for the first buckets of each size, alternate the plan's program with DDP's own all-reduce,
then keep the faster, the same choice on every rank (no torch here; solver/exports/ddp.py runs it).

For each bucket size the guard runs ``trials`` buckets with each of the two
(in the order plan, default, default, plan, plan, default, ...: each pair
swaps who goes first, so a drift over the trials hits both alike). Each trial's
time is this rank's wall time for the bucket's reduction. Once both have
``trials`` times, the ranks agree: one small all-reduce takes, trial by trial,
the slowest rank's time (:meth:`SizeTrials.decide` is given those), and every
rank keeps the plan's program only if its median slowest-rank time is below the
default's; a tie keeps the default. Every rank then computes the same decision
from the same numbers. Both reductions average the bucket, so the choice never
changes what training computes (up to the order of float additions).

Where the default is kept, the hook runs the size's later buckets as a plan that
picked DDP's all-reduce does: on the calling thread, not the worker's. Which
bucket is the first to go there must be the same on every rank, so it goes by
count, not by when the decision arrives: the bucket after a size's ``2 trials``
trial buckets (:meth:`Guard.call`) and every one after it wait for the decision.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

GUARD_TRIALS = 3  # buckets of each size reduced with each of the two before the guard decides


class Reduction(str, Enum):
    """What reduces a bucket: the plan's program or DDP's own all-reduce."""

    PLAN = "plan"
    DEFAULT = "default"

    def __str__(self) -> str:
        return self.value


def trial_order(trial: int) -> Reduction:
    """What trial number `trial` (0-based, both kinds counted) of a size runs: plan, default, default, plan, ..."""
    first_of_pair = Reduction.PLAN if (trial // 2) % 2 == 0 else Reduction.DEFAULT
    second = Reduction.DEFAULT if first_of_pair is Reduction.PLAN else Reduction.PLAN
    return first_of_pair if trial % 2 == 0 else second


@dataclass
class SizeTrials:
    """The trials of one bucket size: this rank's times of each, and the decision once taken."""

    trials: int
    times: dict[Reduction, list[float]] = field(default_factory=lambda: {Reduction.PLAN: [], Reduction.DEFAULT: []})
    slowest: dict[Reduction, list[float]] | None = None
    kept: Reduction | None = None

    def next(self) -> Reduction:
        """What the next bucket of this size runs: the kept one once decided, else the next trial's."""
        if self.kept is not None:
            return self.kept
        return trial_order(sum(len(t) for t in self.times.values()))

    def record(self, ran: Reduction, seconds: float) -> bool:
        """Add this rank's time of a trial; True when every trial has run (the ranks must now agree)."""
        if self.kept is None:
            self.times[ran].append(seconds)
        return self.kept is None and all(len(t) >= self.trials for t in self.times.values())

    def local(self) -> list[float]:
        """This rank's trial times, the plan's then the default's, as the agreement's input."""
        return self.times[Reduction.PLAN][:self.trials] + self.times[Reduction.DEFAULT][:self.trials]

    def decide(self, slowest: Sequence[float]) -> Reduction:
        """Keep the plan's program if the median of its slowest-rank times (`slowest`, laid out as :meth:`local`)
        is below the default's, else the default."""
        k = self.trials
        self.slowest = {Reduction.PLAN: list(slowest[:k]), Reduction.DEFAULT: list(slowest[k:2 * k])}
        plan, default = (statistics.median(self.slowest[r]) for r in (Reduction.PLAN, Reduction.DEFAULT))
        self.kept = Reduction.PLAN if plan < default else Reduction.DEFAULT
        return self.kept

    def to_json(self) -> dict:
        """The record :meth:`Guard.decisions` gives: what was kept and the slowest-rank times it was kept on."""
        out: dict = {"kept": None if self.kept is None else self.kept.value, "trials": self.trials}
        if self.slowest is not None:
            out.update({f"{r.value}_s": [round(t, 6) for t in self.slowest[r]] for r in Reduction})
            out.update({f"{r.value}_median_s": round(statistics.median(self.slowest[r]), 6) for r in Reduction})
        return out


@dataclass
class Guard:
    """The guard of one hook: the trials of every bucket size met so far, and how many buckets of each size the
    hook was called with."""

    trials: int = GUARD_TRIALS
    sizes: dict[int, SizeTrials] = field(default_factory=dict)
    calls: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise ValueError(f"guard trials must be at least 1, got {self.trials}")

    def call(self, nbytes: int) -> bool:
        """Count a call of the hook with a bucket of `nbytes` bytes; True when it comes after the size's trial
        buckets (both kinds), so that it runs by the decision, which the caller must wait for."""
        n = self.calls.get(nbytes, 0)
        self.calls[nbytes] = n + 1
        return n >= 2 * self.trials

    def kept(self, nbytes: int) -> Reduction | None:
        """What the guard kept for buckets of `nbytes` bytes; None while they are on trial."""
        size = self.sizes.get(nbytes)
        return None if size is None else size.kept

    def next(self, nbytes: int) -> Reduction:
        """What the next bucket of `nbytes` bytes runs."""
        return self.sizes.setdefault(nbytes, SizeTrials(self.trials)).next()

    def record(self, nbytes: int, ran: Reduction, seconds: float,
               slowest: Callable[[list[float]], Sequence[float]]) -> Reduction | None:
        """Record this rank's time of a bucket; once every trial of its size has run, agree and decide.

        `slowest(local)` is the agreement: every rank passes its :meth:`SizeTrials.local` times and gets
        the elementwise maximum over ranks (one small all-reduce; collective, so every rank must call
        :meth:`record` for the same buckets). Returns the decision when it is taken now, else None.
        """
        size = self.sizes.setdefault(nbytes, SizeTrials(self.trials))
        if not size.record(ran, seconds):
            return None
        return size.decide(slowest(size.local()))

    def decisions(self) -> dict[int, dict]:
        """Per bucket size (bytes) met so far: what the guard kept (None: still on trial) and its times."""
        return {n: s.to_json() for n, s in sorted(self.sizes.items())}
