"""The tuner judged out of sample, and the frozen model's check, from a raw document.

* :func:`tuner_out_of_sample`: a ``validate`` suite re-measured every tuned request in a separate job
  (``runtime.validate``: new processes, new rounds, the reverse order), the pick, the default and the
  runner-up. Its figures come only from that second job, never from the rounds the pick was made from.
* :func:`frozen_check`: a ``frozen`` suite recorded each program's predictions before timing it; this
  recomputes them with the code at hand, on the same calibrated hierarchy, so that a report can say
  whether it judges the model that was frozen.
"""

from __future__ import annotations

import statistics

from p2synth.hierarchies.program import Program
from scripts.accuracy.cases import combo_request, in_fit_subset, measured_hierarchy
from scripts.accuracy.programs import predict


def validation_entries(raw: dict) -> list[tuple[str, dict, dict]]:
    """(testbed, combo, validation entry) for every re-measured tuned request of `raw` that is a case: the tuner had a
    choice (two or more programs measured; where the default is the only valid program there is nothing to judge)."""
    return [(tb["testbed"]["name"], combo, v) for tb in raw["testbeds"] for combo in tb.get("combos", [])
            for v in combo.get("validation", []) if len(v["programs"]) >= 2]


def tuner_out_of_sample(raw: dict) -> dict:
    """The tuner's figures on its second, independent measurement (empty when `raw` has none).

    ``tuner_oos_cases``: tuned requests re-measured; ``tuner_oos_loss_5pct``: the fraction whose pick measured
    more than 5% slower than the default there; ``tuner_oos_regret_median`` / ``_max``: the pick's median over
    the smallest median of that job (pick, default, runner-up); ``tuner_oos_left_default``: how many picks were
    not the default, ``tuner_oos_confirmed``: how many of those the paired test confirmed again;
    ``tuner_oos_speedup_median``: the default's time over the pick's there, beside ``tuner_in_sample_speedup_median``
    (what the tuning run itself measured for the same picks)."""
    entries = [v for _, _, v in validation_entries(raw)]
    if not entries:
        return {}
    left = [v for v in entries if not v["pick_is_default"]]
    return {
        "tuner_oos_cases": len(entries),
        "tuner_oos_loss_5pct": sum(v["loss_5pct"] for v in entries) / len(entries),
        "tuner_oos_regret_median": statistics.median(v["regret"] for v in entries),
        "tuner_oos_regret_max": max(v["regret"] for v in entries),
        "tuner_oos_left_default": len(left),
        "tuner_oos_confirmed": sum(v["confirmed"] for v in left),
        "tuner_oos_speedup_median": statistics.median(1.0 / v["pick_over_default"] for v in left) if left else None,
        "tuner_in_sample_speedup_median": statistics.median(v["in_sample_speedup"] for v in left) if left else None,
    }


def held_out_validation(raw: dict) -> list[dict]:
    """The validation entries of the held-out combos only (the split of ``cases.in_fit_subset``)."""
    fit_every = int(raw["suite"].get("fit_every", 4))
    return [v for name, combo, v in validation_entries(raw) if not in_fit_subset(name, combo, fit_every)]


def frozen_check(raw: dict, tolerance: float = 1e-9) -> dict | None:
    """Whether the code at hand predicts what the frozen model predicted before the measurement, for every program of
    `raw` that recorded ``predicted_at_start_s``: the programs compared, the largest relative difference per model, and
    ``identical`` (every difference within `tolerance`). None when `raw` recorded no predictions."""
    worst: dict[str, float] = {}
    count = 0
    for tb in raw["testbeds"]:
        if "hierarchy" not in tb:
            continue
        h = measured_hierarchy(tb)
        for combo in tb.get("combos", []):
            pl, req = combo_request(h, combo)
            for r in combo.get("results", []):
                recorded = r.get("predicted_at_start_s")
                if not recorded:
                    continue
                count += 1
                program = Program.from_json(r["program"], pl)
                for kind, then in recorded.items():
                    now = predict(pl, req, program, r["nbytes"], kind)
                    worst[kind] = max(worst.get(kind, 0.0), abs(now - then) / then)
    if not count:
        return None
    return {"commit": raw.get("model", {}).get("commit"), "programs": count, "max_rel_diff": worst,
            "identical": all(d <= tolerance for d in worst.values())}
