"""The accuracy report from raw measurements: held-out split, fitted constants, figures per model and per case.

Every cost model gets the same fitting (``fit.fit_constants``) on the fit subset (the combos a hash
of whose description is a multiple of the suite's ``fit_every``: ``cases.in_fit_subset``); the figures
(``aggregate``) are on the other combos, overall and by testbed, size and collective, beside the
baselines that need no model (``baselines``), the tuner's figures on its second measurement and the
frozen model's check (``validation``). The cases come from ``cases.load_cases``.
"""

from __future__ import annotations

import statistics

from scripts.accuracy.aggregate import aggregate, by_pipeline, case_metrics, oracle, placement_spread
from scripts.accuracy.baselines import baselines
from scripts.accuracy.cases import RECORDED, Case, contention_ratios, load_cases
from scripts.accuracy.fit import fit_constants, predict_all
from scripts.accuracy.validation import frozen_check, tuner_out_of_sample

MODELS = ("simulator", "alpha-beta")
SPLIT = ("combos whose SHA-256 of (testbed, axes, placement matrix, request) is a multiple of fit_every are the fit "
         "subset; metrics on the others")
BREAKDOWNS = (("testbed", "by_testbed"), ("nbytes", "by_size"), ("collective", "by_collective"))


def build_report(raw: dict) -> dict:
    """The report of a raw document: the split, each model's fitted constants and hierarchies, the noise per size,
    each model's figures over the held-out cases (overall, by testbed, size, collective and pipelining) and over the
    fit subset, the simulator's predictions recorded before timing over the same held-out cases (``summary.recorded``,
    where every program recorded one: a frozen campaign's headline), the oracle's and the tuner's, and every case with every measured program."""
    cases, hierarchies = load_cases(raw)
    fitted, fit_info = {}, {}
    for kind in MODELS:  # every model gets the same fitting, on the same fit subset
        fitted[kind], fit_info[kind] = fit_constants(cases, hierarchies, contention_ratios(raw), kind)
        predict_all(cases, fitted[kind], kind)
    held = [c for c in cases if not c.fit]
    protocol = raw["suite"].get("protocol", "model-chosen (before issue 10)")
    report = {"protocol": protocol,
              "split": SPLIT, "model": raw.get("model"), "frozen_check": frozen_check(raw),
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
        for attr, dest in BREAKDOWNS:
            for value in sorted({_group(c, attr) for c in held}, key=str):
                sub = [c for c in held if _group(c, attr) == value]
                report[dest].setdefault(str(value), {})[key] = aggregate(sub, key)
    if held and all(RECORDED in c.predicted for c in held):  # a frozen campaign: its headline (issue 47)
        report["summary"][RECORDED] = aggregate(held, RECORDED)
    report["summary"]["oracle"] = oracle(held)
    report["summary"]["baselines"] = baselines(held)
    report["summary"]["tuner_oos"] = tuner_out_of_sample(raw)
    sim = report["summary"]["simulator"]  # {"cases": 0} when every combo is in the fit subset
    report["summary"]["tuner"] = {k: sim[k] for k in ("tuned_loss_5pct", "tuned_regret_median", "tuned_regret_max") if k in sim}
    report["cases"] = [case_row(c) for c in cases]
    return report


def _group(c: Case, attr: str):
    """The value of case `c` a breakdown groups by: its testbed, its size or its request's collective."""
    return c.request_key.split("(")[0] if attr == "collective" else getattr(c, attr)


def case_row(c: Case) -> dict:
    """One case of the report's case table: where and what, its right answers, each pick's regret and every measured
    program with its median, 95% interval, spread and both models' predictions."""
    sim = case_metrics(c, "simulator")
    return {
        "testbed": c.testbed, "combo": c.combo, "fit": c.fit, "placement": c.placement.describe(), "request": c.request_key,
        "nbytes": c.nbytes,
        "right": c.right, "best": c.best,
        "regret": {"simulator": sim["regret"], "alpha-beta": case_metrics(c, "alpha-beta")["regret"],
                   "tuner": sim["tuned_regret"]},
        "programs": [{"text": p.text(c.placement), "steps": len(p.steps), "pipeline": p.pipeline, "measured_s": m,
                      "measured_ci_s": iv.to_json(), "measured_repeats_s": list(r), "spread": sp, "simulator_s": ps,
                      "alpha_beta_s": pa, "default": i == c.default_index, "transposes": t}
                     for i, (p, m, iv, r, sp, ps, pa, t) in enumerate(zip(c.programs, c.measured, c.intervals, c.rounds,
                                                                          c.spreads, c.predicted["simulator"],
                                                                          c.predicted["alpha-beta"], c.transposes))],
    }
