"""The held-out cases whose pick loses to the default; predicted / measured by kind of program, with a campaign's fitted constants and with its calibrated hierarchy
alone, and how the calibrated hierarchy alone would have picked:

    python -m scripts.accuracy.by_kind docs/accuracy/frozen-4x2x2/raw.json

"Kind": the request's collective and the program's step count (1 is the flat library call, the default). The fitted
figures are the report's predictions (``report.json`` beside the raw file); the calibrated ones the simulator's on
the hierarchy calibration wrote, before the fit subset's constants. This tells a term the fit widens from one the
calibrated model already has.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from p2synth.hierarchies.cli import ArgumentParser
from scripts.accuracy import metrics as M
from scripts.accuracy.cases import Case, load_cases
from scripts.accuracy.fit import predict_all
from scripts.accuracy.table import print_text, read_document
from scripts.tables import markdown

CALIBRATED = "calibrated"  # the key of the simulator's predictions on the calibrated hierarchy, before any fit


def _ratios(cases: list[Case], fitted: dict) -> dict[tuple[str, int], tuple[list[float], list[float]]]:
    """(collective, steps) -> (fitted predicted / measured, calibrated predicted / measured) over every program;
    the calibrated predictions are ``predicted[CALIBRATED]`` (:func:`fit.predict_all`)."""
    out: dict[tuple[str, int], tuple[list[float], list[float]]] = {}
    for c in cases:
        for i, p in enumerate(c.programs):
            fit, cal = out.setdefault((str(c.request.collective), len(p.steps)), ([], []))
            fit.append(fitted[(c.combo, c.nbytes)][i] / c.measured[i])
            cal.append(c.predicted[CALIBRATED][i] / c.measured[i])
    return out


def _median(xs: list[float]) -> str:
    """The median and quartiles of `xs`, as the docs print them."""
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return f"{statistics.median(xs):.2f} ({q[0]:.2f}-{q[2]:.2f})"


def calibrated_picks(cases: list[Case]) -> tuple[int, int, int]:
    """(held-out cases with two or more programs, those whose calibrated-only pick measures > 5% slower than the
    default, those whose calibrated-only pick is the measured fastest), from ``predicted[CALIBRATED]``."""
    n = loss = strict = 0
    for c in cases:
        if c.fit or len(c.programs) < 2:
            continue
        pred = c.predicted[CALIBRATED]
        pick = min(range(len(pred)), key=pred.__getitem__)
        n, loss = n + 1, loss + M.loses(c.measured, pick, c.default_index)
        strict += c.measured[pick] == min(c.measured)
    return n, loss, strict


def losing_picks(report: dict) -> str:
    """The report's held-out cases whose pick (the fitted simulator's) measures > 5% slower than the default, as a
    table: the default's and the pick's measured ms [95%] / predicted ms."""
    def cell(p: dict) -> str:
        lo, hi = (1e3 * x for x in p["measured_ci_s"])
        return f"{1e3 * p['measured_s']:.1f} [{lo:.1f}, {hi:.1f}] / {1e3 * p['simulator_s']:.1f}"
    rows = []
    for c in report["cases"]:
        if c["fit"] or len(c["programs"]) < 2:
            continue
        default = next(p for p in c["programs"] if p["default"])
        pick = min(c["programs"], key=lambda p: p["simulator_s"])
        if M.loses([default["measured_s"], pick["measured_s"]], 1, 0):
            rows.append([f"`{c['request']}`, {c['placement']}", cell(default), f"`{pick['text']}` {cell(pick)}"])
    return markdown(("case", "default: measured ms [95%] / predicted", "pick: measured ms [95%] / predicted"), rows)


def by_kind(raw: dict, report: dict) -> str:
    """The table and the calibrated model's pick figures, as text."""
    cases, hierarchies = load_cases(raw)
    predict_all(cases, hierarchies, "simulator", CALIBRATED)  # once: both figures below read them
    fitted = {(c["combo"], c["nbytes"]): [p["simulator_s"] for p in c["programs"]] for c in report["cases"]}
    rows = [[col, str(steps), str(len(fit)), _median(fit), _median(cal)]
            for (col, steps), (fit, cal) in sorted(_ratios(cases, fitted).items())]
    n, loss, strict = calibrated_picks(cases)
    return (losing_picks(report) + "\n\n"
            + markdown(("collective", "steps", "programs", "fitted: predicted / measured", "calibrated alone"), rows)
            + f"\n\nthe calibrated hierarchy alone, on {n} held-out cases: the pick > 5% slower than the default in "
              f"{loss}, the measured fastest in {strict} ({strict / n:.2f})")


def main(argv: list[str] | None = None) -> int:
    """Print the table for one campaign's raw file (its report.json beside it); the exit status."""
    p = ArgumentParser(prog="python -m scripts.accuracy.by_kind", description=__doc__.split("\n")[0])
    p.add_argument("raw", type=Path, help="a campaign's raw.json, with the report.json --from-raw wrote beside it")

    def text() -> str:
        args = p.parse_args(argv)
        return by_kind(read_document(args.raw, "raw"), read_document(args.raw.with_name("report.json"), "report"))
    return print_text(text, "a raw file and report of scripts.accuracy")


if __name__ == "__main__":
    sys.exit(main())
