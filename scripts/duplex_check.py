"""Benchmark analysis: the reduce_scatter order measurement predicted with and without the two-way term.

    python -m scripts.duplex_check

Reads docs/measurements/issue10-*.json (the calibrated 2x2x2 hierarchy, scripts.flows output, the tuned
reduce_scatter plan); sets the rack and node levels duplex_efficiency from the flows benchmark (both-ways over
parallel rate, 4 and 2 pairs) and prints per size the median measured/predicted, the median relative error,
Spearman and the pick regret, with and without the term (docs/simulator.md, "Two-way traffic").
"""
import json
import statistics
import sys
from p2synth.hierarchies.model import Hierarchy
from p2synth.hierarchies.placement import Axis, Placement
from p2synth.hierarchies.program import Program
from scripts.accuracy.programs import make_request, predict
from scripts.accuracy.metrics import spearman


def main() -> int:
    """Print the comparison (see the module docstring)."""
    h0 = Hierarchy.model_validate_json(open("docs/measurements/issue10-2x2x2-calibrated.json").read())
    tuned = json.load(open("docs/measurements/issue10-reduce-scatter-order-2x2x2.json"))
    flows = json.load(open("docs/measurements/issue10-flows-2x2x2.json"))
    rate = {(r["pattern"], r["flows"]): r["rate_GBps"] for r in flows["rows"]}
    rack = rate[("both-ways", 4)] / rate[("parallel", 4)]
    node = rate[("both-ways", 2)] / rate[("parallel", 2)]
    print(f"duplex from scripts.flows: rack (4 pairs) {rack:.3f}, 2 pairs {node:.3f}")
    levels = list(h0.levels)
    levels[0] = levels[0].model_copy(update={"duplex_efficiency": round(rack, 3)})
    levels[1] = levels[1].model_copy(update={"duplex_efficiency": round(node, 3)})
    h1 = h0.model_copy(update={"levels": tuple(levels)})
    for w, body in zip(tuned["workload"], tuned["placements"][0]["requests"]):
        n = w["message_bytes"]
        for name, h in (("calibrated", h0), ("with duplex", h1)):
            pl = Placement(h, (Axis(name="data", size=8),), ((2, 2, 2),))
            req = make_request(pl, ("data",), "reduce_scatter")
            seen, meas, pred = set(), [], []
            for e in [body["default"], *body["programs"]]:
                if "measured_s" not in e: continue
                p = Program.from_json(e, pl)
                if p in seen: continue
                seen.add(p); meas.append(e["measured_s"]); pred.append(predict(pl, req, p, n, "simulator"))
            ratios = [m / p for m, p in zip(meas, pred)]
            best = min(range(len(meas)), key=meas.__getitem__); pick = min(range(len(pred)), key=pred.__getitem__)
            print(f"{n:>8} B {name:12} median meas/pred {statistics.median(ratios):.2f}  median |err| {statistics.median(abs(r-1)/1 for r in [p/m for m,p in zip(meas,pred)]):.2f}  "
                  f"Spearman {spearman(pred, meas):.3f}  pick regret {meas[pick]/meas[best]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
