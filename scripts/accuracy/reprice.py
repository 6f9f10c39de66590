"""How a change of the simulator's Open MPI prices scores on recorded campaigns, before any new measurement:

    python -m scripts.accuracy.reprice docs/accuracy/raw.json docs/accuracy/frozen*/raw.json docs/accuracy/exchange/raw.json

Each campaign's cases are priced twice on its calibrated hierarchy (no fitted constants), once under each set of
pricing fields in ``PRICES``, with every other field as recorded: the prices the model had from issue 32 to issue 47
(``before``), and the prices calibration writes now (``now``). Both columns share the recorded coll/han and
reduce_scatter fields, so they differ only by coll/tuned's terms. Scored over every case with two or more programs,
fit subset included (this judges a design on the data it was designed from: post hoc, never a headline): the
share whose pick is the measured fastest, the share whose pick measures more than 5% slower than the default, and
the median relative error over every program.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from p2synth.hierarchies.cli import ArgumentParser
from p2synth.hierarchies.model import HanAllGather, HanBroadcast, TunedAllReduce, TunedTrees
from scripts.accuracy import metrics as M
from scripts.accuracy.cases import Case, load_cases
from scripts.accuracy.fit import predict_all
from scripts.accuracy.table import print_text, read_document
from scripts.tables import markdown

# The coll/han fields every column shares (what calibration has written since issue 32), and each column's coll/tuned fields.
SHARED = {"han_broadcast": HanBroadcast.BINOMIAL, "han_all_gather": HanAllGather.HIERARCHICAL}
PRICES = {
    "before": {**SHARED, "tuned_all_reduce": TunedAllReduce.RULES, "tuned_trees": TunedTrees.FASTEST},
    "now": {**SHARED, "tuned_all_reduce": TunedAllReduce.DISTANCE_DOUBLING, "tuned_trees": TunedTrees.RULES},
}


def scores(cases: list[Case], key: str) -> tuple[int, float, float, float]:
    """(cases with two or more programs, share picked strictly fastest, share picked > 5% slower than the default,
    median relative error over their programs) of the predictions ``predicted[key]``."""
    n = strict = loss = 0
    errors: list[float] = []
    for c in cases:
        if len(c.programs) < 2:
            continue
        pred = c.predicted[key]
        pick = M.model_order(pred, [len(p.steps) for p in c.programs])[0]
        n, strict, loss = n + 1, strict + (c.measured[pick] == min(c.measured)), loss + M.loses(c.measured, pick, c.default_index)
        errors += [M.rel_error(p, m) for p, m in zip(pred, c.measured)]
    return n, strict / n, loss / n, statistics.median(errors)


def reprice(raw: dict) -> dict[str, tuple[int, float, float, float]]:
    """Each column of ``PRICES``: the campaign's :func:`scores` with its hierarchies under those fields."""
    cases, hierarchies = load_cases(raw)
    out = {}
    for name, fields in PRICES.items():
        priced = {tb: h.model_copy(update=fields) for tb, h in hierarchies.items()}
        predict_all(cases, priced, "simulator", name)
        out[name] = scores(cases, name)
    return out


def table(paths: list[Path]) -> str:
    """The markdown table over the raw files `paths`: per campaign, each score before -> now."""
    rows = []
    for path in paths:
        s = reprice(read_document(path, "raw"))
        b, n = s["before"], s["now"]
        rows.append([path.parent.name if path.parent.name != "accuracy" else "main", str(b[0]),
                     f"{b[1]:.2f} -> {n[1]:.2f}", f"{b[2]:.3f} -> {n[2]:.3f}", f"{b[3]:.3f} -> {n[3]:.3f}"])
    return markdown(("campaign", "cases", "pick the measured fastest", "pick > 5% slower than the default",
                     "median relative error"), rows)


def main(argv: list[str] | None = None) -> int:
    """Print the table for the raw files given; the exit status (2: a file that is not an accuracy raw file)."""
    p = ArgumentParser(prog="python -m scripts.accuracy.reprice", description=__doc__.split("\n")[0])
    p.add_argument("raw", type=Path, nargs="+", help="accuracy campaigns' raw.json files")
    return print_text(lambda: table(p.parse_args(argv).raw), "a raw file of scripts.accuracy")


if __name__ == "__main__":
    sys.exit(main())
