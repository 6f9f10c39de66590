"""Benchmark analysis: measured / predicted time of every program of a tuned one-placement plan, by repack count.

    python -m scripts.order_ratios docs/measurements/issue10-2x2x2-calibrated.json \
        docs/measurements/issue10-reduce-scatter-order-2x2x2.json

The tuned file is ``runtime.tune``'s output for a workload plan holding one request at several
sizes (as scripts/accuracy builds them); the hierarchy is the calibrated one the predictions use
(no fitted constants). Prints, per size, every measured program sorted by its median with its 95%
interval, the simulator's and alpha-beta's predictions and the runtime's repacks, then the median
measured/simulator ratio per repack count: whether programs that repack are off by more than the
others (docs/simulator.md, "Step order and repacking").
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from p2synth.hierarchies.model import Hierarchy
from p2synth.hierarchies.placement import Axis, Placement
from p2synth.hierarchies.program import Program
from p2synth.runtime.layout import plan_layout
from scripts.accuracy.programs import make_request, predict


def main(argv: list[str]) -> int:
    h = Hierarchy.model_validate_json(Path(argv[0]).read_text())
    tuned = json.loads(Path(argv[1]).read_text())
    axes = tuple(Axis(**a) for a in tuned["axes"])
    pl = Placement(h, axes, tuple(tuple(r) for r in tuned["placements"][0]["matrix"]))
    for w, body in zip(tuned["workload"], tuned["placements"][0]["requests"]):
        req = make_request(pl, tuple(w["axes"]), w["collective"])
        n, rows, seen = w["message_bytes"], [], set()
        for e in [body["default"], *body["programs"]]:
            p = Program.from_json(e, pl) if "measured_s" in e else None
            if p is None or p in seen:
                continue
            seen.add(p)
            sim, ab = predict(pl, req, p, n, "simulator"), predict(pl, req, p, n, "alpha-beta")
            rows.append((e["measured_s"], e["measured_ci_s"], sim, ab, plan_layout(pl, req, p).transposes, p.text(pl)))
        print(f"== {w['collective']} {n} B")
        for m, ci, sim, ab, t, text in sorted(rows):
            print(f"{m * 1e3:8.1f} ms [{ci[0] * 1e3:7.1f},{ci[1] * 1e3:7.1f}]  sim {sim * 1e3:7.1f} ({m / sim:4.2f}x)  "
                  f"ab {ab * 1e3:7.1f}  repacks {t}  {text}")
        for t in sorted({r[4] for r in rows}):
            ratios = [m / sim for m, _, sim, _, tt, _ in rows if tt == t]
            print(f"  repacks {t}: n={len(ratios)} measured/sim median {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
