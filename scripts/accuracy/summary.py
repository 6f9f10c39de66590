"""The summary document (docs/accuracy/summary.json, docs/accuracy/frozen/summary.json): the headline figures of the
held-out cases (a frozen campaign's from the predictions recorded before timing, ``recorded_before_timing``; the
top-level figures after a post-hoc fit, as ``headline`` says), the baselines' beside them under the same rules, alpha-beta's, the tuner judged out of sample, the
fitted constants, the noise per size, the frozen model's commit and check, and how to reproduce them."""

from __future__ import annotations

from scripts.accuracy.baselines import FIGURES as BASELINE_FIGURES

SUMMARY_FIELDS = ("cases", "top1_strict", "top1", "top5", "top10", "spearman", "median_rel_error", "max_rel_error",
                  "win_fraction", "max_speedup", "mean_speedup")
NEW_FIELDS = ("cases_over_10_programs", "ties", "top1_within_5pct", "pick_loss_5pct", "pick_regret_median", "pick_regret_max",
              "tuned_loss_5pct", "tuned_regret_median", "noise_median", "split_half_spearman", "split_half_rel_error")
TUNER_OOS_FIELDS = ("tuner_oos_cases", "tuner_oos_loss_5pct", "tuner_oos_regret_median", "tuner_oos_regret_max",
                    "tuner_oos_left_default", "tuner_oos_confirmed", "tuner_oos_speedup_median", "tuner_in_sample_speedup_median")
ALPHA_BETA_FIELDS = (*SUMMARY_FIELDS, *NEW_FIELDS, "spearman_median", "spearman_pooled")  # alpha-beta's column
RECORDED_FIELDS = (*SUMMARY_FIELDS, "ties", "top1_within_5pct", "pick_loss_5pct", "pick_regret_median", "pick_regret_max",
                   "spearman_median", "spearman_pooled")  # the frozen model's predictions recorded before timing
HEADLINE = {True: "recorded_before_timing: the simulator's predictions the frozen model recorded before each program's "
                  "first timed run (predicted_at_start_s), nothing fitted after; the top-level figures and alpha_beta "
                  "are post hoc, after constants fitted on this campaign's own fit subset",
            False: "post hoc: the top-level figures come after constants fitted on this campaign's own fit subset "
                   "(no predictions were recorded before timing)"}
TARGETS = {"top1_strict": 0.7, "top1_strict_over_always_default": 0.25, "top1": 0.8, "top10": 0.99, "spearman": 0.9,
           "median_rel_error": 0.15, "pick_loss_5pct": 0.02, "tuner_oos_loss_5pct": 0.0, "tuner_oos_cases": 40, "tuned_loss_5pct": 0.0,
           "tuned_regret_median": 1.02}
DOCS = {"default": "docs/accuracy", "frozen": "docs/accuracy/frozen", "exchange": "docs/accuracy/exchange",
        "frozen-3x2x2": "docs/accuracy/frozen-3x2x2", "frozen-6x2": "docs/accuracy/frozen-6x2",
        "frozen-4x3": "docs/accuracy/frozen-4x3", "frozen-2x2x3": "docs/accuracy/frozen-2x2x3",
        "frozen-4x2x2": "docs/accuracy/frozen-4x2x2"}  # where each suite's files live


def summary_doc(report: dict, raw_name: str, suite: str = "default") -> dict:
    """The summary of `report` (suite `suite`), recomputed from raw file(s) `raw_name`: the simulator's figures, the
    baselines', alpha-beta's and the oracle's, the tuner out of sample, the targets, the paper's figures and the
    commands that measure and recompute it."""
    s = report["summary"]
    sim = s["simulator"]
    doc = {k: sim.get(k) for k in SUMMARY_FIELDS}
    doc["protocol"] = report.get("protocol")
    for k in (*NEW_FIELDS, "top10_over_10", "spearman_median", "spearman_pooled", "spearman_pooled_size_only",
              "spearman_over_10_programs", "spearman_3_programs",
              "discordant_pairs", "discordant_within_noise", "best_placement_picked", "cases_over_5_programs"):
        doc[k] = sim.get(k)
    recorded = s.get("recorded")
    doc["headline"] = HEADLINE[recorded is not None]
    doc["recorded_before_timing"] = None if recorded is None else {k: recorded.get(k) for k in RECORDED_FIELDS}
    doc["ties_rule"] = "Wilcoxon signed-rank test on the paired rounds' log ratios, two-sided, level 0.05 (scipy)"
    doc["tuned_is_in_sample"] = ("tuned_*: runtime.tune's rule applied to the same rounds that judge it; the tuner_oos_* "
                                 "figures judge it on a separate measurement")
    base = s.get("baselines", {})
    for kind, figures in base.items():
        for k in BASELINE_FIGURES:
            doc[f"{k}_{kind}"] = figures.get(k)
    doc["baselines"] = base
    for k in TUNER_OOS_FIELDS:
        doc[k] = s.get("tuner_oos", {}).get(k)
    doc["noise_by_size"] = report.get("noise_by_size")
    doc["placement_spread_max"] = sim.get("placement_spread_max")
    doc["placement_spread_mean"] = sim.get("placement_spread_mean")
    doc["alpha_beta"] = {k: s["alpha-beta"].get(k) for k in ALPHA_BETA_FIELDS}
    doc["oracle"] = s.get("oracle")
    doc["fit_cases"] = report["fit"]["cases"]
    doc["fitted_constants"] = report["fit"]["constants"]
    doc["split"] = report["split"]
    doc["model"] = report.get("model")
    doc["frozen_check"] = report.get("frozen_check")
    doc["paper"] = {"win_fraction": 0.69, "max_speedup": 2.04, "mean_speedup": 1.27, "top10": ">0.9"}
    doc["targets"] = TARGETS
    doc["fitted_constants_by_model"] = report["fit"].get("constants_by_model")
    where = DOCS.get(suite, f"<{suite}-folder>")
    files = (f"--out {where}/report.json --plot {where}/predicted_vs_measured.png --regret-plot {where}/regret.png "
             f"--summary {where}/summary.json --fitted-dir {where}/hierarchies")
    doc["reproduce"] = {
        "measure": f"sudo env PATH=\"$PATH\" python -m scripts.accuracy --suite {suite} --raw {where}/raw.json {files}",
        "recompute": f"python -m scripts.accuracy --from-raw {raw_name} {files}",
    }
    return doc
