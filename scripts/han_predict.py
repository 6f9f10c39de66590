"""Predict the flat calls a ``scripts.han_check`` run timed, with the simulator on a hierarchy (docs/simulator.md).

    python -m scripts.han_predict docs/accuracy/hierarchies/4x2-200mbit.json docs/measurements/issue10-han-4x2-200mbit.txt

Reads the run's ``default`` lines (Open MPI with ``coll/han``, each call over every rank of the
hierarchy), predicts each call as one step over all the hierarchy's levels, and prints measured,
predicted and their ratio per line, then the median ratio. Exit codes: 0 done, 2 a file that cannot
be read or holds no ``default`` line (one line on stderr).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

from pydantic import ValidationError

from p2synth.hierarchies import Axis, Collective, Hierarchy, Placement, Request
from p2synth.hierarchies import abstract
from p2synth.solver.cost import step_seconds
from p2synth.solver.simulator import Simulator

CALLS = {"Allreduce": Collective.ALL_REDUCE, "Reduce_scatter_block": Collective.REDUCE_SCATTER,
         "Reduce": Collective.REDUCE, "Bcast": Collective.BROADCAST}
LINE = re.compile(r"default\s+(\d+) MiB (\w+)\s+([\d.]+) ms")


def predicted_seconds(h: Hierarchy, op: Collective, nbytes: int) -> float:
    """The simulator's time for `op` over every device of `h` at `nbytes`, as one step."""
    placement = Placement(h, (Axis(name="data", size=h.num_devices),), (h.counts,))
    n = len(h.levels)
    sim = Simulator(placement, Request(frozenset({0}), op), float(nbytes))
    return step_seconds(sim, abstract.start_state(op, n), op, (1 << n) - 1, n)


def main(argv: list[str] | None = None) -> int:
    """Print measured, predicted and ratio per timed call, then the median ratio."""
    ap = argparse.ArgumentParser(prog="python -m scripts.han_predict", description=__doc__.split("\n")[0])
    ap.add_argument("hierarchy", type=Path, help="hierarchy JSON (e.g. a fitted one in docs/accuracy/hierarchies/)")
    ap.add_argument("run", type=Path, help="a han_check output file (docs/measurements/issue10-han-*.txt)")
    args = ap.parse_args(argv)
    try:
        h = Hierarchy.model_validate_json(args.hierarchy.read_text())
        lines = [m for m in map(LINE.match, args.run.read_text().splitlines()) if m and m.group(2) in CALLS]
    except (OSError, ValidationError) as e:
        print(f"han_predict: cannot read {args.hierarchy} or {args.run}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    if not lines:
        print(f"han_predict: {args.run} holds no 'default' line of han_check; run han_check first", file=sys.stderr)
        return 2
    ratios = []
    for m in lines:
        mib, op, ms = int(m.group(1)), CALLS[m.group(2)], float(m.group(3))
        predicted = 1e3 * predicted_seconds(h, op, mib << 20)
        ratios.append(ms / predicted)
        print(f"{mib:3d} MiB {op.value:15s} measured {ms:8.1f} ms  predicted {predicted:8.1f} ms  ratio {ratios[-1]:.2f}")
    print(f"median measured / predicted: {statistics.median(ratios):.2f} over {len(ratios)} calls")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
