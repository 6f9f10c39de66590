"""The accuracy report's figures: predicted against measured time of every program, and the regret CDF (matplotlib)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path


def plot(report: dict, path: Path) -> None:
    """Predicted against measured time of every measured program, log-log, the simulator beside alpha-beta; held-out
    cases as dots and the fit subset as crosses, one colour per testbed."""
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
