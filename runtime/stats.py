"""Statistics of repeated timings, shared by the tuner (runtime/tune.py) and the accuracy protocol (scripts/accuracy).

Pure functions on plain lists of seconds, no MPI:

* :func:`median_interval`: the median of a program's repeats and a
  distribution-free 95% interval for it (order statistics of the binomial
  sign test; it assumes nothing about the shape of the noise, which on a
  shared machine is skewed: other jobs only ever add time);
* :func:`faster_beyond_noise`: whether one program is faster than another by
  more than the noise, i.e. their intervals do not overlap;
* :func:`pick`: the measured-fastest program, but the default unless that one is
  faster than the default beyond the noise;
* :func:`ties`: the programs within noise of the measured best.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """A median and an interval that holds the true median with probability `coverage` (seconds)."""

    median: float
    low: float
    high: float
    coverage: float
    repeats: int

    def to_json(self) -> list[float]:
        """``[low, high]``, as written to tuned.json's ``measured_ci_s``."""
        return [self.low, self.high]


def _binom_cdf(k: int, n: int) -> float:
    """P(Binomial(n, 1/2) <= k)."""
    return math.fsum(math.comb(n, i) for i in range(k + 1)) / 2**n


def median_interval(samples: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The median of `samples` and the narrowest order-statistic interval ``[x(j), x(n+1-j)]`` covering it with `confidence`.

    With n samples, ``[x(j), x(n+1-j)]`` (1-based, sorted) holds the median with
    probability ``1 - 2 P(B <= j-1)``, B ~ Binomial(n, 1/2), whatever the noise's
    distribution. Below 6 samples no interval reaches 95%; the full range is
    returned with its true coverage (5 samples: 93.75%).
    """
    xs = sorted(float(x) for x in samples)
    n = len(xs)
    if n == 0:
        raise ValueError("no samples")
    j = 1
    while j + 1 <= (n + 1) // 2 and 1 - 2 * _binom_cdf(j, n) >= confidence:
        j += 1
    coverage = 1 - 2 * _binom_cdf(j - 1, n) if n > 1 else 0.0
    return Interval(statistics.median(xs), xs[j - 1], xs[n - j], coverage, n)


def faster_beyond_noise(a: Interval, b: Interval) -> bool:
    """Whether `a` is faster than `b` beyond the measured noise: `a`'s interval lies wholly below `b`'s."""
    return a.high < b.low


def within_noise(a: Interval, b: Interval) -> bool:
    """Whether neither is faster than the other beyond the noise (the intervals overlap)."""
    return not faster_beyond_noise(a, b) and not faster_beyond_noise(b, a)


def fastest(intervals: Sequence[Interval]) -> int:
    """Index of the smallest median (the first on equal medians)."""
    return min(range(len(intervals)), key=lambda i: (intervals[i].median, i))


def pick(intervals: Sequence[Interval], default: int) -> int:
    """The tuner's choice: the measured-fastest if it is faster than the default beyond the noise, else the default."""
    best = fastest(intervals)
    return best if faster_beyond_noise(intervals[best], intervals[default]) else default


def ties(intervals: Sequence[Interval]) -> list[int]:
    """Indices of the programs within noise of the measured-fastest (it included): any of them is a right pick."""
    best = intervals[fastest(intervals)]
    return [i for i, iv in enumerate(intervals) if within_noise(iv, best)]


def relative_spread(samples: Sequence[float]) -> float:
    """How much the repeats of one program differ: (slowest - fastest) / median."""
    xs = [float(x) for x in samples]
    return (max(xs) - min(xs)) / statistics.median(xs)
