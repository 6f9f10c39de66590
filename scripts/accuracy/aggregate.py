"""The figures of a cost model over a set of cases: hits, rank correlation, errors, regret, the tuner's pick.

Per case, over its measured programs (``case_metrics``); over a set of cases (``aggregate``), top-k
only over the cases with more than k programs. ``repeatability`` judges the measurement as a model of
itself, ``oracle`` gives what measuring everything would, ``placement_spread`` compares the placements
of one request and ``by_pipeline`` splits the error between sequential and pipelined programs.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from scripts.accuracy import metrics as M
from scripts.accuracy.cases import Case

TUNER_TOP = 5  # the tuner's K in tuned_loss_5pct / tuned_regret_median


def case_metrics(c: Case, key: str) -> dict:
    """One case's figures under model `key`: hits (ties within noise count), Spearman, errors, pick and tuner."""
    pred, right = c.predicted[key], c.right
    pick = M.model_order(pred, c.lengths)[0]
    tuned = M.tuner_choice(pred, c.rounds, c.default_index, TUNER_TOP, c.lengths)
    best = min(c.measured)
    return {
        "top1": M.hits(pred, right, 1, c.lengths),
        "top1_strict": pick == c.best,
        "top5": M.hits(pred, right, 5, c.lengths),
        "top10": M.hits(pred, right, 10, c.lengths),
        "spearman": M.spearman(pred, c.measured),
        "discordant": M.discordant_pairs(pred, c.measured, c.differs),
        "rel_errors": [M.rel_error(p, m) for p, m in zip(pred, c.measured)],
        "speedup": c.measured[c.default_index] / c.measured[pick],
        "regret": c.measured[pick] / best,
        "loss": M.loses(c.measured, pick, c.default_index),
        "tuned_regret": c.measured[tuned] / best,
        "tuned_loss": M.loses(c.measured, tuned, c.default_index),
    }


def _mean(values: list[float]) -> float | None:
    """The mean, None for no values."""
    return statistics.mean(values) if values else None


def aggregate(cases: list[Case], key: str) -> dict:
    """The figures of model `key` over `cases` (top-k only over cases with more than k measured programs)."""
    per = [case_metrics(c, key) for c in cases]
    n = len(per)
    if not n:
        return {"cases": 0}
    errs = [e for p in per for e in p["rel_errors"]]
    rhos = [p["spearman"] for p in per if p["spearman"] is not None]
    sp = [p["speedup"] for p in per]
    wins = [s for s in sp if s > 1.0]
    sizes = [len(c.measured) for c in cases]
    top5, over5 = M.top_k_over([(p["top5"], k) for p, k in zip(per, sizes)], 5)
    top10, over10 = M.top_k_over([(p["top10"], k) for p, k in zip(per, sizes)], 10)
    return {
        "cases": n,
        "programs_measured": sum(sizes),
        "ties": sum(len(c.right) > 1 for c in cases),
        "top1": sum(p["top1"] for p in per) / n,
        "top1_strict": sum(p["top1_strict"] for p in per) / n,
        "top5": top5,
        "top10": top10,
        "cases_over_5_programs": over5,
        "cases_over_10_programs": over10,
        "top10_over_10": top10,
        "top1_within_5pct": sum(p["regret"] <= 1.05 for p in per) / n,
        "top1_within_10pct": sum(p["regret"] <= 1.10 for p in per) / n,
        "pick_loss_5pct": sum(p["loss"] for p in per) / n,
        "pick_regret_median": statistics.median(p["regret"] for p in per),
        "pick_regret_max": max(p["regret"] for p in per),
        "tuned_loss_5pct": sum(p["tuned_loss"] for p in per) / n,
        "tuned_regret_median": statistics.median(p["tuned_regret"] for p in per),
        "tuned_regret_max": max(p["tuned_regret"] for p in per),
        "spearman": _mean(rhos),
        "spearman_median": statistics.median(rhos) if rhos else None,
        # every program of every case in one ranking: the cases' sizes and groups order most of it (see the next)
        "spearman_pooled": M.spearman([x for c in cases for x in c.predicted[key]], [y for c in cases for y in c.measured]),
        # the same, for a "model" that predicts each program's message size and nothing else
        "spearman_pooled_size_only": M.spearman([float(c.nbytes) for c in cases for _ in c.measured],
                                                [y for c in cases for y in c.measured]),
        "spearman_over_10_programs": _mean([p["spearman"] for p, k in zip(per, sizes) if k > 10 and p["spearman"] is not None]),
        "spearman_3_programs": _mean([p["spearman"] for p, k in zip(per, sizes) if k == 3 and p["spearman"] is not None]),
        "discordant_pairs": (d := sum(p["discordant"][0] for p in per)),
        "discordant_within_noise": sum(p["discordant"][1] for p in per) / d if d else None,
        "median_rel_error": statistics.median(errs),
        "max_rel_error": max(errs),
        "median_rel_error_best": statistics.median([p["rel_errors"][min(range(len(c.measured)), key=c.measured.__getitem__)] for p, c in zip(per, cases)]),
        "noise_median": statistics.median(x for c in cases for x in c.spreads),
        **repeatability(cases),
        "win_fraction": len(wins) / n,
        "win_fraction_5pct": sum(s > 1.05 for s in sp) / n,
        "loss_fraction_5pct": sum(s < 1 / 1.05 for s in sp) / n,
        "max_speedup": max(sp),
        "mean_speedup": statistics.fmean(sp),
        "mean_speedup_of_wins": statistics.fmean(wins) if wins else None,
        "min_speedup": min(sp),
    }


def repeatability(cases: list[Case]) -> dict:
    """The measurement judged as a model of itself: the even rounds' medians against the odd rounds', by the same
    figures as a model (``split_half_spearman``: Spearman per case, mean over cases; ``split_half_rel_error``:
    median relative difference over programs); over the cases whose every program has two or more rounds."""
    split = [c.halves for c in cases if c.halves and all(h is not None for h in c.halves)]
    rhos = [r for h in split if (r := M.spearman([a for a, _ in h], [b for _, b in h])) is not None]
    errors = [M.rel_error(a, b) for h in split for a, b in h]
    return {"split_half_cases": len(split), "split_half_spearman": _mean(rhos),
            "split_half_rel_error": statistics.median(errors) if errors else None}


def oracle(cases: list[Case]) -> dict:
    """What measuring everything would give: the measured best against the default."""
    sp = [c.measured[c.default_index] / min(c.measured) for c in cases]
    return {"win_fraction": sum(s > 1.0 for s in sp) / len(sp), "win_fraction_5pct": sum(s > 1.05 for s in sp) / len(sp),
            "max_speedup": max(sp), "mean_speedup": statistics.fmean(sp)} if sp else {}


def placement_spread(cases: list[Case], key: str) -> dict:
    """Per (testbed, axes, request, size) with several placements: slowest/fastest of each placement's measured
    best, and whether the model's best placement (by its predicted best program) is the measured best."""
    groups = defaultdict(list)
    for c in cases:
        groups[c.testbed, c.axes_key, c.request_key, c.nbytes].append(c)
    spreads, right = [], []
    for g in groups.values():
        if len(g) < 2:
            continue
        best = [min(c.measured) for c in g]
        spreads.append(M.spread(best))
        predicted_best = [min(c.predicted[key]) for c in g]
        right.append(min(range(len(g)), key=predicted_best.__getitem__) == min(range(len(g)), key=best.__getitem__))
    if not spreads:
        return {"groups": 0}
    return {"groups": len(spreads), "placement_spread_max": max(spreads), "placement_spread_mean": statistics.fmean(spreads),
            "placement_spread_median": statistics.median(spreads), "best_placement_picked": sum(right) / len(right)}


def by_pipeline(cases: list[Case], key: str) -> dict:
    """Model `key`'s error on the sequential and on the pipelined programs of `cases` apart: how many, the median
    measured / predicted and the median relative error of each kind."""
    out = {}
    for kind, keep in (("sequential", lambda p: p.pipeline == 1), ("pipelined", lambda p: p.pipeline > 1)):
        pairs = [(pred, m) for c in cases for p, pred, m in zip(c.programs, c.predicted[key], c.measured) if keep(p)]
        if pairs:
            out[kind] = {"programs": len(pairs), "measured_over_predicted_median": statistics.median(m / p for p, m in pairs),
                         "median_rel_error": statistics.median(M.rel_error(p, m) for p, m in pairs)}
    return out
