"""The accuracy report from raw measurements: held-out split, fitted constants, metrics, plots.

The measured time of a program is the median of its interleaved repeats, with the
distribution-free 95% interval of runtime/stats.py; the programs within noise of the
measured-fastest are a case's right answers (ties). Every cost model gets the same
fitting (fit_constants, per model) on the fit subset; metrics are on the other combos.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from p2synth.hierarchies.model import Hierarchy
from p2synth.hierarchies.placement import Axis, Placement
from p2synth.hierarchies.program import Program
from p2synth.runtime.calibration import library_of
from p2synth.runtime.layout import plan_layout
from p2synth.runtime.stats import Interval, median_interval, relative_spread, ties
from scripts.accuracy import metrics as M
from scripts.accuracy.programs import make_request, predict

MODELS = ("simulator", "alpha-beta")
PROTOCOL = "model-independent"
TUNER_TOP = 5  # the tuner's K in tuned_loss_5pct / tuned_regret_median


def measured_interval(r: dict) -> Interval:
    """A raw result's median over its repeats and 95% interval (the tuner's own figures)."""
    return median_interval(r["repeats_s"]) if r.get("repeats_s") else median_interval([r["time_s"]])


def measured_time(r: dict) -> float:
    """The measured time of a raw result: the median over its repeats."""
    return measured_interval(r).median


def halves(r: dict) -> tuple[float, float] | None:
    """A raw result's two independent half-measurements: the medians of its even and of its odd rounds (None with
    fewer than two rounds). How well one half predicts the other is the measurement's own repeatability."""
    rounds = r.get("repeats_s") or []
    return (statistics.median(rounds[0::2]), statistics.median(rounds[1::2])) if len(rounds) >= 2 else None


# Simulator constants fitted on the fit subset (grid, microseconds): the per-step launch overhead.
OVERHEAD_GRID_US = [0.0] + [round(10 ** (i / 8), 1) for i in range(33)]  # 1 us .. 10 ms


@dataclass
class Case:
    """One (testbed, placement, request, size) with every measured program."""

    testbed: str
    combo: int
    fit: bool
    placement: Placement
    request: object
    axes_key: str
    request_key: str
    nbytes: int
    programs: list[Program]
    lengths: list[int]
    measured: list[float]
    default_index: int
    transposes: list[int]
    intervals: list[Interval] = field(default_factory=list)
    spreads: list[float] = field(default_factory=list)
    halves: list[tuple[float, float] | None] = field(default_factory=list)
    predicted: dict = field(default_factory=dict)

    @property
    def right(self) -> list[int]:
        """The programs within noise of the measured-fastest (any of them is a right pick)."""
        return ties(self.intervals)


def load_cases(raw: dict) -> tuple[list[Case], dict[str, Hierarchy]]:
    """Cases and each testbed's calibrated hierarchy from a raw document."""
    suite = raw["suite"]
    fit_every = int(suite.get("fit_every", 4))
    cases, hierarchies = [], {}
    for tb in raw["testbeds"]:
        if "hierarchy" not in tb:
            continue
        name = tb["testbed"]["name"]
        h = Hierarchy.model_validate(tb["hierarchy"])
        if h.library is None:  # recorded before calibration wrote it: the library its calibration names
            h = h.model_copy(update={"library": library_of(tb.get("calibration", {}).get("mpi", ""))})
        hierarchies[name] = h
        for combo in tb["combos"]:
            if "results" not in combo:
                continue
            axes = tuple(Axis(name=a, size=s) for a, s in combo["axes"])
            pl = Placement(h, axes, tuple(tuple(r) for r in combo["matrix"]))
            names = tuple(combo["request"]["axes"])
            req = make_request(pl, names, combo["request"]["collective"])
            by_size = defaultdict(list)
            for r in combo["results"]:
                if r.get("wrong"):
                    continue
                by_size[r["nbytes"]].append(r)
            for nbytes, rs in sorted(by_size.items()):
                progs = [Program.from_json(r["program"], pl) for r in rs]
                dflt = [i for i, r in enumerate(rs) if r["default"]]
                if len(rs) < 2 or not dflt:
                    continue
                cases.append(Case(
                    testbed=name, combo=combo["index"], fit=combo["index"] % fit_every == 0, placement=pl, request=req,
                    axes_key="x".join(f"{a}={s}" for a, s in combo["axes"]),
                    request_key=f"{combo['request']['collective']}({','.join(names)})", nbytes=nbytes, programs=progs,
                    lengths=[len(p.steps) for p in progs], measured=[measured_time(r) for r in rs], default_index=dflt[0],
                    transposes=[r["transposes"] if "transposes" in r else plan_layout(pl, req, p).transposes for r, p in zip(rs, progs)],
                    intervals=[measured_interval(r) for r in rs],
                    spreads=[relative_spread(r["repeats_s"]) if r.get("repeats_s") else 0.0 for r in rs],
                    halves=[halves(r) for r in rs]))
    return cases, hierarchies


def _with(h: Hierarchy, **kw) -> Hierarchy:
    return h.model_copy(update=kw)


def _predict_all(cases: list[Case], hierarchies: dict[str, Hierarchy], kind: str, key: str | None = None) -> None:
    """Predict every program of `cases` under model `kind`; the hierarchy's ``step_overhead_us`` is charged per step
    here, outside the model, so that every model gets it alike (alpha-beta has no such term of its own)."""
    key = key or kind
    for c in cases:
        h = hierarchies[c.testbed]
        overhead = (h.step_overhead_us or 0.0) * 1e-6
        pl = Placement(h.model_copy(update={"step_overhead_us": None}), c.placement.axes, c.placement.matrix)
        c.predicted[key] = [predict(pl, c.request, p, c.nbytes, kind) + overhead_calls(p) * overhead for p in c.programs]


def overhead_calls(program: Program) -> int:
    """How many per-step overheads a program's time holds, as the solver's pipeline formula counts them: one per step
    run sequentially; on P pieces, one per step to fill and drain plus one per further piece on the slowest stage
    (``steps + P - 1``)."""
    steps = len(program.steps)
    return steps + program.pipeline - 1 if program.pipeline > 1 and steps > 1 else steps


def _log_error(cases: list[Case], key: str) -> float:
    errs = [abs(math.log(p / m)) for c in cases for p, m in zip(c.predicted[key], c.measured) if p > 0]
    return statistics.median(errs) if errs else math.inf


EFFICIENCY_GRID = [round(0.3 + 0.1 * i, 2) for i in range(8)]  # 0.3 .. 1.0
INNER_GRID = [0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0]


LATENCY_GRID = [1.0, 4.0, 8.0, 16.0, 32.0, 64.0]


def scaled(h: Hierarchy, efficiency: float, overhead_us: float | None, inner: float = 1.0, latency: float = 1.0) -> Hierarchy:
    """`h` with every network level's bandwidth and uplink times `efficiency` and latency times `latency`,
    the innermost level's (shared memory) bandwidth times `inner`, and the per-step overhead set."""
    levels = list(h.levels)
    if levels[-1].bandwidth_GBps is not None:
        levels[-1] = levels[-1].model_copy(update={"bandwidth_GBps": levels[-1].bandwidth_GBps * inner})
    for i, lv in enumerate(levels[:-1]):
        upd = {}
        if lv.bandwidth_GBps is not None:
            upd["bandwidth_GBps"] = lv.bandwidth_GBps * efficiency
        if lv.uplink_GBps is not None:
            upd["uplink_GBps"] = lv.uplink_GBps * efficiency
        if lv.latency_us is not None:
            upd["latency_us"] = lv.latency_us * latency
        levels[i] = lv.model_copy(update=upd)
    return h.model_copy(update={"levels": tuple(levels), "step_overhead_us": overhead_us})


def _inner_only(c: Case, i: int) -> bool:
    inner = len(c.placement.hierarchy.levels) - 1
    return all(cell.level == inner for step in c.programs[i].steps for cell in step.slice)


def _grid_fit(h: Hierarchy, name: str, cases: list[Case], effs, inners, keep=None, lats=(1.0,), kind: str = "simulator") -> tuple:
    """(error, efficiency, inner, overhead, n, latency) minimising the median |log(pred/meas)| over the programs of `cases`
    that `keep(case, index)` accepts. The overhead enters a program as ``overhead_calls * overhead`` (closed form)."""
    best = None
    for eff, inner, lat in ((e, i, la) for e in effs for i in inners for la in lats):
        _predict_all(cases, {name: scaled(h, eff, 0.0, inner, lat)}, kind, "trial")
        pairs = [(c.predicted["trial"][i], c.measured[i], overhead_calls(c.programs[i])) for c in cases
                 for i in range(len(c.programs)) if keep is None or keep(c, i)]
        for ov in OVERHEAD_GRID_US:
            err = statistics.median(abs(math.log((p + n * ov * 1e-6) / m)) for p, m, n in pairs)
            if best is None or err < best[0]:
                best = (err, eff, inner, ov, len(pairs), lat)
    return best


def fit_constants(cases: list[Case], hierarchies: dict[str, Hierarchy], contention: dict[str, float] | None = None,
                  kind: str = "simulator") -> tuple[dict[str, Hierarchy], dict]:
    """Per testbed, the constants the ping-pong microbenchmarks cannot give:

    1. shared-memory efficiency: what one rank gets of the ping-pong bandwidth when every rank is busy
       (8 ranks on 2 cores): calibration's summing rate with all ranks at once over one rank alone
       (`contention`); without it, fitted on the fit programs whose steps stay inside a node;
    2. network efficiency (what collectives get of the ping-pong bandwidth) and
    3. the per-step overhead, both on the testbed's fit cases only, minimising the median
       |log(predicted / measured)|.
    """
    contention = contention or {}
    fitted, info = {}, {}
    for name, h in hierarchies.items():
        mine = [c for c in cases if c.fit and c.testbed == name]
        if not mine:
            fitted[name], info[name] = h, {"fit_cases": 0}
            continue
        inner = contention.get(name)
        source = "calibration: summing rate all ranks at once / one rank alone"
        if inner is None:
            inner, source = 1.0, "none"
            if any(_inner_only(c, i) for c in mine for i in range(len(c.programs))):
                inner = _grid_fit(h, name, mine, [1.0], INNER_GRID, _inner_only, kind=kind)[2]
                source = "fit subset, programs inside a node"
        err, eff, _, ov, n, lat = _grid_fit(h, name, mine, EFFICIENCY_GRID, [inner], lats=LATENCY_GRID, kind=kind)
        fitted[name] = scaled(h, eff, ov, inner, lat)
        info[name] = {"network_efficiency": eff, "network_latency_factor": lat, "shared_memory_efficiency": round(inner, 4),
                      "shared_memory_efficiency_from": source, "step_overhead_us": ov,
                      "fit_cases": len(mine), "fit_programs": n, "median_abs_log_error": err}
    for c in cases:
        c.predicted.pop("trial", None)
    return fitted, info


def case_metrics(c: Case, key: str) -> dict:
    """One case's figures under model `key`: hits (ties within noise count), Spearman, errors, pick and tuner."""
    pred, right = c.predicted[key], c.right
    pick = M.model_order(pred, c.lengths)[0]
    tuned = M.tuner_choice(pred, c.intervals, c.default_index, TUNER_TOP, c.lengths)
    best = min(c.measured)
    return {
        "top1": M.hits(pred, right, 1, c.lengths),
        "top5": M.hits(pred, right, 5, c.lengths),
        "top10": M.hits(pred, right, 10, c.lengths),
        "spearman": M.spearman(pred, c.measured),
        "discordant": M.discordant_pairs(pred, c.intervals),
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


def _frac(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


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
    out = {
        "cases": n,
        "programs_measured": sum(sizes),
        "ties": sum(len(c.right) > 1 for c in cases),
        "top1": sum(p["top1"] for p in per) / n,
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
    return out


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


def contention_ratios(raw: dict) -> dict[str, float]:
    """Per testbed: calibration's summing rate per rank with all ranks at once over one rank alone."""
    out = {}
    for tb in raw["testbeds"]:
        red = (tb.get("calibration") or {}).get("reduce") or {}
        if red.get("rank0_alone_GBps") and red.get("all_at_once_median_GBps"):
            out[tb["testbed"]["name"]] = min(1.0, red["all_at_once_median_GBps"] / red["rank0_alone_GBps"])
    return out


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


def build_report(raw: dict) -> dict:
    cases, hierarchies = load_cases(raw)
    fitted, fit_info = {}, {}
    for kind in MODELS:  # every model gets the same fitting, on the same fit subset
        fitted[kind], fit_info[kind] = fit_constants(cases, hierarchies, contention_ratios(raw), kind)
        _predict_all(cases, fitted[kind], kind)
    held = [c for c in cases if not c.fit]
    protocol = raw["suite"].get("protocol", "model-chosen (before issue 10)")
    report = {"protocol": protocol,
              "split": "combos with index % fit_every == 0 (per testbed) are the fit subset; metrics on the others",
              "fit": {"cases": sum(c.fit for c in cases), "constants": fit_info["simulator"], "constants_by_model": fit_info},
              "hierarchies": {k: v.model_dump(mode="json", exclude_none=True) for k, v in fitted["simulator"].items()},
              "noise_by_size": {str(size): statistics.median(x for c in cases if c.nbytes == size for x in c.spreads)
                                for size in sorted({c.nbytes for c in cases})},
              "summary": {}, "fit_subset": {}, "by_testbed": {}, "by_size": {}, "by_collective": {}, "by_pipeline": {}}
    for key in MODELS:
        s = aggregate(held, key)
        s.update(placement_spread(held, key))
        report["summary"][key] = s
        report["fit_subset"][key] = aggregate([c for c in cases if c.fit], key)
        report["by_pipeline"][key] = by_pipeline(held, key)
        for attr, dest in (("testbed", "by_testbed"), ("nbytes", "by_size"), ("request_key", "by_collective")):
            vals = sorted({getattr(c, attr) for c in held}, key=str)
            for v in vals:
                sub = [c for c in held if getattr(c, attr) == v]
                if attr == "request_key":
                    v = v.split("(")[0]
                    sub = [c for c in held if c.request_key.split("(")[0] == v]
                report[dest].setdefault(str(v), {})[key] = aggregate(sub, key)
    report["summary"]["oracle"] = oracle(held)
    sim = report["summary"]["simulator"]  # {"cases": 0} when every combo is in the fit subset
    report["summary"]["tuner"] = {k: sim[k] for k in ("tuned_loss_5pct", "tuned_regret_median", "tuned_regret_max") if k in sim}
    report["cases"] = [{
        "testbed": c.testbed, "combo": c.combo, "fit": c.fit, "placement": c.placement.describe(), "request": c.request_key,
        "nbytes": c.nbytes,
        "right": c.right,
        "regret": {"simulator": (m := case_metrics(c, "simulator"))["regret"], "alpha-beta": case_metrics(c, "alpha-beta")["regret"],
                   "tuner": m["tuned_regret"]},
        "programs": [{"text": p.text(c.placement), "steps": len(p.steps), "pipeline": p.pipeline, "measured_s": m, "measured_ci_s": iv.to_json(), "spread": sp,
                      "simulator_s": ps, "alpha_beta_s": pa, "default": i == c.default_index, "transposes": t}
                     for i, (p, m, iv, sp, ps, pa, t) in enumerate(zip(c.programs, c.measured, c.intervals, c.spreads, c.predicted["simulator"],
                                                                       c.predicted["alpha-beta"], c.transposes))],
    } for c in cases]
    return report


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axs = plt.subplots(1, 2, figsize=(12, 5.5), sharex=True, sharey=True)
    colours = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]
    testbeds = sorted({c["testbed"] for c in report["cases"]})
    lo, hi = math.inf, 0.0
    for ax, key, label in ((axs[0], "simulator_s", "simulator"), (axs[1], "alpha_beta_s", "alpha-beta")):
        for tb, col in zip(testbeds, colours):
            for fit, marker, alpha in ((False, "o", 0.6), (True, "x", 0.35)):
                xs = [p["measured_s"] for c in report["cases"] if c["testbed"] == tb and c["fit"] == fit for p in c["programs"]]
                ys = [p[key] for c in report["cases"] if c["testbed"] == tb and c["fit"] == fit for p in c["programs"]]
                if xs:
                    ax.scatter(xs, ys, s=10, c=col, marker=marker, alpha=alpha, label=f"{tb} ({'fit' if fit else 'held out'})")
                    lo, hi = min(lo, *xs, *ys), max(hi, *xs, *ys)
        s = report["summary"][label]
        pct = lambda v: "-" if v is None else f"{v:.0%}"
        ax.set_title(f"{label}: top-1 {pct(s['top1'])}, top-10 (>10 progs) {pct(s['top10'])}, Spearman "
                     f"{'-' if s['spearman'] is None else format(s['spearman'], '.2f')}, median err {pct(s['median_rel_error'])}", fontsize=9)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured time per run (s)")
        ax.grid(True, which="both", alpha=0.2)
    for ax in axs:
        ax.plot([lo / 1.5, hi * 1.5], [lo / 1.5, hi * 1.5], "k-", lw=0.8)
        ax.plot([lo / 1.5, hi * 1.5], [lo / 1.5 * 1.15, hi * 1.5 * 1.15], "k:", lw=0.5)
        ax.plot([lo / 1.5, hi * 1.5], [lo / 1.5 / 1.15, hi * 1.5 / 1.15], "k:", lw=0.5)
    axs[0].set_ylabel("predicted time (s)")
    axs[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"p2synth: predicted vs measured, every measured program ({report['summary']['simulator']['cases']} held-out cases; dotted: ±15%)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_regret(report: dict, path: Path) -> None:
    """CDF over held-out cases of pick / measured best, for the simulator's pick, alpha-beta's and the tuner's (K = 5)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    held = [c for c in report["cases"] if not c["fit"]]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, colour in (("simulator", "tab:blue"), ("alpha-beta", "tab:orange"), ("tuner", "tab:green")):
        xs = sorted(c["regret"][key] for c in held)
        if xs:
            ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", color=colour,
                    label=f"{key} (median {statistics.median(xs):.3f}, max {max(xs):.2f})")
    ax.axvline(1.05, color="k", ls=":", lw=0.7)
    ax.set_xscale("log")
    ax.set_xlabel("measured time of the pick / measured best")
    ax.set_ylabel("fraction of held-out cases")
    ax.set_title(f"p2synth: regret of the pick ({len(held)} held-out cases, {report.get('protocol')} protocol)", fontsize=10)
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


SUMMARY_FIELDS = ("cases", "top1", "top5", "top10", "spearman", "median_rel_error", "max_rel_error", "win_fraction",
                  "max_speedup", "mean_speedup")
NEW_FIELDS = ("cases_over_10_programs", "ties", "top1_within_5pct", "pick_loss_5pct", "pick_regret_median", "pick_regret_max",
              "tuned_loss_5pct", "tuned_regret_median", "noise_median", "split_half_spearman", "split_half_rel_error")


def summary_doc(report: dict, raw_name: str, plot_path) -> dict:
    s = report["summary"]
    doc = {k: s["simulator"].get(k) for k in SUMMARY_FIELDS}
    doc["protocol"] = report.get("protocol")
    for k in (*NEW_FIELDS, "top10_over_10", "spearman_median", "spearman_over_10_programs", "spearman_3_programs",
              "discordant_pairs", "discordant_within_noise", "best_placement_picked", "cases_over_5_programs"):
        doc[k] = s["simulator"].get(k)
    doc["noise_by_size"] = report.get("noise_by_size")
    doc["placement_spread_max"] = s["simulator"].get("placement_spread_max")
    doc["placement_spread_mean"] = s["simulator"].get("placement_spread_mean")
    doc["alpha_beta"] = {k: s["alpha-beta"].get(k) for k in (*SUMMARY_FIELDS, *NEW_FIELDS)}
    doc["oracle"] = s.get("oracle")
    doc["fit_cases"] = report["fit"]["cases"]
    doc["fitted_constants"] = report["fit"]["constants"]
    doc["split"] = report["split"]
    doc["paper"] = {"win_fraction": 0.69, "max_speedup": 2.04, "mean_speedup": 1.27, "top10": ">0.9"}
    doc["targets"] = {"top1": 0.8, "top10": 0.99, "spearman": 0.9, "median_rel_error": 0.15, "pick_loss_5pct": 0.02,
                      "tuned_loss_5pct": 0.0, "tuned_regret_median": 1.02}
    doc["fitted_constants_by_model"] = report["fit"].get("constants_by_model")
    doc["reproduce"] = {
        "measure": "sudo env PATH=\"$PATH\" python -m scripts.accuracy --suite default --raw docs/accuracy/raw.json "
                   "--out docs/accuracy/report.json --plot docs/accuracy/predicted_vs_measured.png "
                   "--regret-plot docs/accuracy/regret.png --summary docs/accuracy/summary.json --fitted-dir docs/accuracy/hierarchies",
        "recompute": f"python -m scripts.accuracy --from-raw {raw_name} --out docs/accuracy/report.json "
                     "--plot docs/accuracy/predicted_vs_measured.png --regret-plot docs/accuracy/regret.png "
                     "--summary docs/accuracy/summary.json --fitted-dir docs/accuracy/hierarchies",
    }
    return doc
