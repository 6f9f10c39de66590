"""Metric functions of the accuracy report: pure, on plain lists (tested on hand-made data).

Under the model-independent protocol a case's *right answers* are the measured-fastest and the
programs that do not differ from it significantly on their paired rounds (:func:`paired_ties`:
Wilcoxon's signed-rank test, two-sided, exact, at :data:`TIE_LEVEL`); a model hits when its pick
(or, for top-k, one of its k best) is among them. ``top1_strict`` asks for the measured-fastest itself.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

from scipy import stats

from p2synth.runtime.stats import fastest, pick

TIE_LEVEL = 0.05  # two programs tie unless Wilcoxon's test on their paired rounds rejects equality at this level


def differ(a: Sequence[float], b: Sequence[float], level: float = TIE_LEVEL) -> bool:
    """Whether two programs' times differ significantly on their paired rounds (``a[r]``, ``b[r]`` measured in the
    same interleaved round r): Wilcoxon's signed-rank test (``scipy.stats.wilcoxon``, two-sided, exact for these
    sample sizes) on the per-round log ratios, rejecting equality at `level`. Rounds with equal times carry no sign
    and are dropped (Wilcoxon's own rule); fewer than two rounds never differ."""
    d = [math.log(x) - math.log(y) for x, y in zip(a, b) if x != y]
    if len(d) < 2:
        return False
    return float(stats.wilcoxon(d, alternative="two-sided").pvalue) <= level


def paired_ties(rounds: Sequence[Sequence[float]], medians: Sequence[float], level: float = TIE_LEVEL) -> list[int]:
    """The measured-fastest program (the smallest median) and every program that does not :func:`differ` from it."""
    best = fastest(medians)
    return [i for i in range(len(medians)) if i == best or not differ(rounds[i], rounds[best], level)]


def ranks(values: Sequence[float]) -> list[float]:
    """Average ranks (1-based), ties share the mean rank (``scipy.stats.rankdata``, method "average")."""
    return stats.rankdata(values, method="average").tolist()


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman rank correlation (Pearson on average ranks, ``scipy.stats.spearmanr``); None with fewer than 3 points
    or no spread (all of `xs` or all of `ys` equal)."""
    if len(xs) != len(ys):
        raise ValueError("length mismatch")
    if len(xs) < 3 or len(set(xs)) == 1 or len(set(ys)) == 1:
        return None
    return float(stats.spearmanr(xs, ys).statistic)


def discordant_pairs(predicted: Sequence[float], medians: Sequence[float], differs: Callable[[int, int], bool]) -> tuple[int, int]:
    """(pairs of programs the model orders against their measured medians, how many of those tie: ``differs(i, j)``,
    whether programs i and j differ significantly on their paired rounds (:func:`differ`), is false)."""
    out = noise = 0
    for i in range(len(predicted)):
        for j in range(i + 1, len(predicted)):
            if (predicted[i] - predicted[j]) * (medians[i] - medians[j]) < 0:
                out += 1
                noise += not differs(i, j)
    return out, noise


def model_order(predicted: Sequence[float], lengths: Sequence[int] | None = None) -> list[int]:
    """Indices, best predicted first; ties broken by fewer steps, then by position (as the solver does)."""
    lengths = lengths or [0] * len(predicted)
    return sorted(range(len(predicted)), key=lambda i: (predicted[i], lengths[i], i))


def in_top_k(predicted: Sequence[float], measured: Sequence[float], k: int, lengths: Sequence[int] | None = None) -> bool:
    """Is the measured-fastest program among the model's `k` best predictions?"""
    best = min(range(len(measured)), key=lambda i: measured[i])
    return best in model_order(predicted, lengths)[:k]


def rel_error(predicted: float, measured: float) -> float:
    """|predicted - measured| / measured."""
    return abs(predicted - measured) / measured


def pick_speedup(predicted: Sequence[float], measured: Sequence[float], default_index: int,
                 lengths: Sequence[int] | None = None) -> float:
    """Measured time of the default over the measured time of the model's pick (1.0 when it picks the default)."""
    pick = model_order(predicted, lengths)[0]
    return measured[default_index] / measured[pick]


def spread(times: Sequence[float]) -> float:
    """Slowest over fastest."""
    return max(times) / min(times)


def summarize(values: Sequence[float]) -> dict:
    """median / mean / max of a list (None when empty)."""
    if not values:
        return {"median": None, "mean": None, "max": None}
    return {"median": statistics.median(values), "mean": statistics.fmean(values), "max": max(values)}


def hits(predicted: Sequence[float], right: Sequence[int], k: int, lengths: Sequence[int] | None = None) -> bool:
    """Is one of the model's `k` best predictions among the `right` programs (those within noise of the measured best)?"""
    return bool(set(model_order(predicted, lengths)[:k]) & set(right))


def top_k_over(flags_and_sizes: Sequence[tuple[bool, int]], k: int) -> tuple[float | None, int]:
    """Top-k rate over the cases with more than `k` measured programs only (others would be hits by construction).

    `flags_and_sizes`: per case (hit within top k, number of measured programs). Returns (rate or None, cases counted).
    """
    kept = [hit for hit, n in flags_and_sizes if n > k]
    return (sum(kept) / len(kept) if kept else None), len(kept)


def regret(predicted: Sequence[float], measured: Sequence[float], lengths: Sequence[int] | None = None) -> float:
    """Measured time of the model's pick over the measured best (1.0: it picked the fastest)."""
    return measured[model_order(predicted, lengths)[0]] / min(measured)


def loses(measured: Sequence[float], chosen: int, default_index: int, threshold: float = 1.05) -> bool:
    """Does the chosen program measure more than `threshold` times the default's time?"""
    return measured[chosen] > threshold * measured[default_index]


def tuner_choice(predicted: Sequence[float], rounds: Sequence[Sequence[float]], default_index: int, k: int,
                 lengths: Sequence[int] | None = None) -> int:
    """What ``runtime.tune --top k`` would pick from these measurements (in sample): among the default and the
    model's `k` best other programs, the fastest if it beats the default under the tuner's paired rule
    (``runtime.stats.pick``), else the default (an index into the case)."""
    others = [i for i in model_order(predicted, lengths) if i != default_index][:k]
    candidates = [default_index, *others]
    return candidates[pick([rounds[i] for i in candidates], 0)]
