"""What trivial pickers score under the same rules as a model: always the default, and a uniform random pick.

A figure a model reaches means little until it is set beside what needs no model at all. For every case
both baselines are scored on the same right answers, regret, loss and speedup as a model's pick
(``aggregate.case_metrics``):

* **always-default** picks the default; its ranking (for top-k) is the default first, then the other
  programs in a uniformly random order;
* **random** picks a program uniformly at random; its ranking is a uniformly random order.

Random figures are exact expectations, never a sampled draw: per case the chance that the pick (or a
k-subset) is a right answer, the mean regret and speedup over the programs, and a Spearman of 0 (a random
order is uncorrelated with any other by symmetry). Per-case expectations are then aggregated as a model's
figures are (the median regret is the median over cases of each case's expected regret).
"""

from __future__ import annotations

import math
import statistics
from enum import Enum

from scripts.accuracy.cases import Case

LOSS = 1.05


class Baseline(str, Enum):
    """The pickers that need no model."""

    ALWAYS_DEFAULT = "always_default"
    RANDOM = "random"


FIGURES = ("top1", "top1_strict", "top1_within_5pct", "top5", "top10", "pick_loss_5pct", "pick_regret_median",
           "pick_regret_max", "win_fraction", "mean_speedup", "spearman")


def _none_hit(n: int, right: int, k: int) -> float:
    """The chance that a uniformly random k-subset of n programs holds none of the `right` ones."""
    return math.comb(n - right, k) / math.comb(n, k) if k <= n else 0.0


def case_figures(c: Case, kind: Baseline) -> dict:
    """One case's figures for baseline `kind` (expectations for the random pick)."""
    m, d, b, right = c.measured, c.default_index, c.best, set(c.right)
    n = len(m)
    regrets = [x / m[b] for x in m]
    if kind is Baseline.ALWAYS_DEFAULT:
        hit_rest = lambda k: 1.0 if d in right else 1.0 - _none_hit(n - 1, len(right), k - 1)
        return {"top1": float(d in right), "top1_strict": float(d == b), "top1_within_5pct": float(regrets[d] <= LOSS),
                "top5": hit_rest(5), "top10": hit_rest(10), "loss": 0.0, "regret": regrets[d], "win": 0.0,
                "speedup": 1.0, "spearman": None}
    return {"top1": len(right) / n, "top1_strict": 1.0 / n, "top1_within_5pct": sum(r <= LOSS for r in regrets) / n,
            "top5": 1.0 - _none_hit(n, len(right), 5), "top10": 1.0 - _none_hit(n, len(right), 10),
            "loss": sum(x > LOSS * m[d] for x in m) / n, "regret": statistics.fmean(regrets),
            "win": sum(x < m[d] for x in m) / n, "speedup": statistics.fmean(m[d] / x for x in m), "spearman": 0.0}


def baseline(cases: list[Case], kind: Baseline) -> dict:
    """Baseline `kind`'s figures over `cases` (top-k only over the cases with more than k programs, as for a model)."""
    per = [case_figures(c, kind) for c in cases]
    if not per:
        return {}
    n = len(per)
    over = lambda k: [p[f"top{k}"] for p, c in zip(per, cases) if len(c.measured) > k]
    rhos = [p["spearman"] for p in per if p["spearman"] is not None]
    return {
        "top1": sum(p["top1"] for p in per) / n,
        "top1_strict": sum(p["top1_strict"] for p in per) / n,
        "top1_within_5pct": sum(p["top1_within_5pct"] for p in per) / n,
        "top5": statistics.fmean(over(5)) if over(5) else None,
        "top10": statistics.fmean(over(10)) if over(10) else None,
        "pick_loss_5pct": sum(p["loss"] for p in per) / n,
        "pick_regret_median": statistics.median(p["regret"] for p in per),
        "pick_regret_max": max(p["regret"] for p in per),
        "win_fraction": sum(p["win"] for p in per) / n,
        "mean_speedup": statistics.fmean(p["speedup"] for p in per),
        "spearman": statistics.fmean(rhos) if rhos else None,
    }


def baselines(cases: list[Case]) -> dict:
    """Both baselines' figures over `cases`, keyed by :class:`Baseline` value."""
    return {kind.value: baseline(cases, kind) for kind in Baseline}
