"""The summary document (docs/accuracy/summary.json): the headline figures of the held-out cases, alpha-beta's beside
them, the fitted constants, the noise per size and how to reproduce them."""

from __future__ import annotations


SUMMARY_FIELDS = ("cases", "top1", "top5", "top10", "spearman", "median_rel_error", "max_rel_error", "win_fraction",
                  "max_speedup", "mean_speedup")
NEW_FIELDS = ("cases_over_10_programs", "ties", "top1_within_5pct", "pick_loss_5pct", "pick_regret_median", "pick_regret_max",
              "tuned_loss_5pct", "tuned_regret_median", "noise_median", "split_half_spearman", "split_half_rel_error")


def summary_doc(report: dict, raw_name: str) -> dict:
    """The summary of `report`, recomputed from raw file(s) `raw_name`: the simulator's figures, alpha-beta's and the
    oracle's, the targets, the paper's figures and the commands that measure and recompute it."""
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
