"""Statistics of repeated timings, shared by the tuner (runtime/tune.py) and the accuracy protocol (scripts/accuracy).

Pure functions on plain lists of seconds, no MPI:

* :func:`median_interval`: the median of a program's repeats and a
  distribution-free 95% interval for it (order statistics of the binomial
  sign test; it assumes nothing about the shape of the noise, which on a
  shared machine is skewed: other jobs only ever add time);
* :func:`faster_beyond_noise`: whether one program is faster than another by
  more than the noise, i.e. their intervals do not overlap;
* :func:`paired_faster`: whether one program beats another by more than a
  minimum gain in so many of their interleaved rounds that an exact one-sided
  sign test rejects chance at a stated level (the rounds are paired: round r
  of every program ran back to back, under the same load);
* :func:`pick`: the tuner's rule: the measured-fastest program, but the default
  unless that one beats the default by :data:`MIN_GAIN` under the paired test;
* :func:`paired_verdict`: every "faster / slower / within noise" verdict the
  measurements print (DDP, step, tuner, validate; issue 47): an exact one-sided
  sign test over the interleaved rounds at :data:`LEVEL` each way, and for
  "within noise" a paired equivalence test (two one-sided sign tests, TOST) with
  the margin :data:`EQUIVALENCE_MARGIN`; what none of the three shows is
  "inconclusive".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95
MIN_GAIN = 0.02  # the tuner leaves the default only for a program at least 2% faster ...
LEVEL = 0.05     # ... in enough paired rounds that a one-sided exact sign test rejects chance at this level
EQUIVALENCE_MARGIN = 0.05  # "within noise": shown within 5% of the default, either way, on the paired rounds

FASTER, SLOWER, WITHIN, INCONCLUSIVE = "faster", "slower", "within noise", "inconclusive"
NO_HOOK = "no hook attached"  # the variant ran the default itself: no evidence for or against a hook


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


def fastest(medians: Sequence[float]) -> int:
    """Index of the smallest of `medians` (the first on equal ones): the measured-fastest program."""
    return min(range(len(medians)), key=lambda i: (medians[i], i))


def sign_test_p(wins: int, n: int) -> float:
    """One-sided exact sign-test p-value: the chance of `wins` or more successes in `n` fair coin flips."""
    return 1.0 - _binom_cdf(wins - 1, n) if wins > 0 else 1.0


def paired_faster(candidate: Sequence[float], default: Sequence[float], min_gain: float = MIN_GAIN,
                  level: float = LEVEL) -> bool:
    """Whether `candidate` beats `default` by more than `min_gain` on their paired rounds (``candidate[r]`` and
    ``default[r]`` ran in the same interleaved round r).

    A round is a win when the candidate took less than ``(1 - min_gain)`` times
    the default's time in it. Under the null hypothesis that the candidate's
    gain is at most `min_gain` (a win no likelier than a loss), the wins follow
    Binomial(n, 1/2) at most; the candidate beats the default when the exact
    one-sided sign test rejects that at `level`. With 9 rounds that takes 8
    wins (p = 10/512 = 0.020); with 6 rounds, 6 (p = 1/64).
    """
    if len(candidate) != len(default) or not candidate:
        raise ValueError("paired rounds of equal, non-zero length expected")
    wins = sum(c < (1.0 - min_gain) * d for c, d in zip(candidate, default))
    return sign_test_p(wins, len(candidate)) <= level


def pick(rounds: Sequence[Sequence[float]], default: int, min_gain: float = MIN_GAIN, level: float = LEVEL) -> int:
    """The tuner's choice among programs timed in the same interleaved rounds (`rounds[i]`: program i's time per
    round): the smallest median if it beats the default by `min_gain` under :func:`paired_faster`, else the default."""
    best = fastest([statistics.median(r) for r in rounds])
    return best if best != default and paired_faster(rounds[best], rounds[default], min_gain, level) else default


def relative_spread(samples: Sequence[float]) -> float:
    """How much the repeats of one program differ: (slowest - fastest) / median."""
    xs = [float(x) for x in samples]
    return (max(xs) - min(xs)) / statistics.median(xs)


@dataclass(frozen=True)
class PairedVerdict:
    """A candidate against the default on their interleaved rounds: the verdict (:data:`FASTER`, :data:`SLOWER`,
    :data:`WITHIN` or :data:`INCONCLUSIVE`), the rounds, those the candidate was faster and slower in, the median over
    rounds of default / candidate (above 1: the candidate faster) and both one-sided sign tests' p-values."""

    verdict: str
    rounds: int
    wins: int
    losses: int
    median_ratio: float
    p_faster: float
    p_slower: float

    def text(self) -> str:
        """The verdict as the tables print it (:func:`verdict_text`)."""
        return verdict_text(self.to_json())

    def to_json(self) -> dict:
        """The verdict and its figures, as the summaries record them."""
        return {"verdict": self.verdict, "rounds": self.rounds, "faster_rounds": self.wins, "slower_rounds": self.losses,
                "median_ratio": round(self.median_ratio, 3), "p_faster": round(self.p_faster, 4),
                "p_slower": round(self.p_slower, 4)}


def verdict_text(v: dict) -> str:
    """A verdict's JSON form (:meth:`PairedVerdict.to_json`, or ``{"verdict": NO_HOOK}``) as the tables print it:
    ``faster (9 of 9 rounds, p = 0.002)``; for a verdict no one-sided test showed, the rounds each way."""
    if v["verdict"] not in (FASTER, SLOWER, WITHIN, INCONCLUSIVE):
        return v["verdict"]
    if v["verdict"] in (FASTER, SLOWER):
        won, p = (v["faster_rounds"], v["p_faster"]) if v["verdict"] == FASTER else (v["slower_rounds"], v["p_slower"])
        return f"{v['verdict']} ({won} of {v['rounds']} rounds, p = {p:.3f})"
    return f"{v['verdict']} ({v['faster_rounds']} faster, {v['slower_rounds']} slower of {v['rounds']} rounds)"


def paired_verdict(candidate: Sequence[float], default: Sequence[float], level: float = LEVEL,
                   margin: float = EQUIVALENCE_MARGIN) -> PairedVerdict:
    """`candidate` against `default` on their paired rounds (``candidate[r]`` and ``default[r]`` ran in the same
    interleaved round r): the one verdict every measurement prints.

    * faster: the rounds the candidate took less time in reject chance under a one-sided exact sign test at `level`
      (rounds with equal times are dropped, as the sign test drops ties); with 9 rounds, 8 of them (p = 0.020);
    * slower: the same test the other way;
    * within noise: neither, and a paired equivalence test shows the candidate within `margin` of the default both
      ways: the rounds with ``candidate < (1 + margin) default`` and those with ``candidate > (1 - margin) default``
      each reject chance under the one-sided sign test at `level` (two one-sided tests, TOST; with 9 rounds, 8 of
      9 inside each bound);
    * inconclusive: none of these shown.

    The two one-sided tests for faster and slower run at `level` each; no round is counted twice in one test.
    """
    if len(candidate) != len(default) or not candidate:
        raise ValueError("paired rounds of equal, non-zero length expected")
    pairs = list(zip(map(float, candidate), map(float, default)))
    wins = sum(c < d for c, d in pairs)
    losses = sum(c > d for c, d in pairs)
    p_faster, p_slower = sign_test_p(wins, wins + losses), sign_test_p(losses, wins + losses)
    n = len(pairs)
    below = sum(c < (1 + margin) * d for c, d in pairs)
    above = sum(c > (1 - margin) * d for c, d in pairs)
    if p_faster <= level:
        verdict = FASTER
    elif p_slower <= level:
        verdict = SLOWER
    elif max(sign_test_p(below, n), sign_test_p(above, n)) <= level:
        verdict = WITHIN
    else:
        verdict = INCONCLUSIVE
    ratio = statistics.median(d / c for c, d in pairs)
    return PairedVerdict(verdict, n, wins, losses, ratio, p_faster, p_slower)
