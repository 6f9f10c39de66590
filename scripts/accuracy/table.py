"""The accuracy tables docs/accuracy/campaigns.md shows, made from the summary files, so that the docs say what they say.

    python -m scripts.accuracy.table docs/accuracy/frozen/summary.json docs/accuracy/summary.json
    python -m scripts.accuracy.table --breakdowns docs/accuracy/report.json

Per summary: each model's figures beside the two baselines' (always the default, a uniform random pick) and the
targets; for a frozen campaign, first the simulator's predictions recorded before timing (the headline), then the
figures after the post-hoc fit, named so; and, where the campaign re-measured the tuner's picks, one line on the tuner judged out of sample.
With ``--breakdowns``, a report's held-out figures by testbed, size and collective. tests/test_accuracy_files.py
checks that docs/accuracy holds exactly this output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from p2synth.hierarchies.cli import EXIT_USAGE, ArgumentParser, UsageError, one_line
from scripts.tables import markdown

COLUMNS = ("", "simulator", "alpha-beta", "always the default", "random pick", "target")
# a frozen campaign's: the predictions recorded before timing first, the headline; the fitted figures named post hoc
RECORDED_COLUMNS = ("", "simulator, recorded before timing (headline)", "simulator, post-hoc fit", "alpha-beta, post-hoc fit",
                    "always the default", "random pick", "target")


def _f(x, pct: bool = False, times: bool = False) -> str:
    """A figure as the README prints it: '-' for none, a percentage, a ratio with 'x', or two decimals."""
    if x is None:
        return "-"
    if pct:
        return f"{100 * x:.0f}%" if x >= 0.1 or x == 0 else f"{100 * x:.1f}%"
    return f"{x:.2f}x" if times else f"{x:.2f}"


def rows(s: dict) -> list[list[str]]:
    """The table's rows for summary `s`."""
    ab, d, r = s["alpha_beta"], s["baselines"]["always_default"], s["baselines"]["random"]
    t = s["targets"]
    models = [m for m in (s.get("recorded_before_timing"), s, ab) if m is not None]
    line = lambda label, key, target="", **kw: [label, *(_f(m.get(key), **kw) for m in models), _f(d.get(key), **kw),
                                                _f(r.get(key), **kw), target]
    return [
        line("top-1 strict: the pick is the measured-fastest", "top1_strict",
             f">= {t['top1_strict']}, and the default's + {t['top1_strict_over_always_default']}"),
        line("top-1, ties count (paired Wilcoxon test, 5%)", "top1", f">= {t['top1']}"),
        line("top-10, cases with > 10 programs", "top10", f">= {t['top10']}"),
        line("Spearman, mean over cases (the headline)", "spearman", f">= {t['spearman']}"),
        line("Spearman, median over cases", "spearman_median"),
        line("Spearman, every program pooled (sizes order most of it)", "spearman_pooled"),
        line("median relative error", "median_rel_error", f"<= {_f(t['median_rel_error'], pct=True)}", pct=True),
        line("pick > 5% slower than the default", "pick_loss_5pct", f"<= {_f(t['pick_loss_5pct'], pct=True)}", pct=True),
        line("median regret (pick / measured best)", "pick_regret_median", times=True),
        line("pick beats the default", "win_fraction", pct=True),
        line("mean speedup over the default", "mean_speedup", times=True),
    ]


def tuner_line(s: dict) -> str | None:
    """The tuner judged on its second measurement, in one sentence (None when the campaign did not re-measure): the
    picks that left the default counted apart from the kept defaults, which cannot lose (issue 47)."""
    if not s.get("tuner_oos_cases"):
        return None
    cases, left = s["tuner_oos_cases"], s["tuner_oos_left_default"]
    losses = round(s["tuner_oos_loss_5pct"] * cases)  # a kept default is never slower than itself: every loss left it
    return (f"`runtime.tune`'s pick, re-measured in a separate job (`runtime.validate`) on {cases} cases: {left} picks "
            f"left the default and {cases - left} kept it (a kept default cannot lose); {losses} of the {left} that "
            f"left it more than 5% slower than the default (target 0), median regret over all {cases} "
            f"{_f(s['tuner_oos_regret_median'], times=True)}, worst {_f(s['tuner_oos_regret_max'], times=True)}; "
            f"{s['tuner_oos_confirmed']} of the {left} confirmed faster again.")


def table(s: dict) -> str:
    """Markdown: the table, then the tuner's line if any."""
    out = markdown(RECORDED_COLUMNS if s.get("recorded_before_timing") else COLUMNS, rows(s))
    line = tuner_line(s)
    return out + ("\n\n" + line if line else "")


BREAKDOWN_COLUMNS = ("cases", "ties", "sim top1_strict", "sim top1", "sim spearman", "sim median_rel_error",
                     "sim pick_loss_5pct", "sim pick_regret_max", "noise_median", "ab top1_strict", "ab spearman",
                     "ab median_rel_error")


def breakdowns(report: dict) -> str:
    """Markdown: the held-out figures of `report` by testbed, by size and by collective, one table each."""
    out = []
    for label, dest in (("testbed", "by_testbed"), ("size", "by_size"), ("collective", "by_collective")):
        body = []
        for value, models in sorted(report[dest].items(), key=lambda kv: (int(kv[0]) if kv[0].isdigit() else 0, kv[0])):
            sim, ab = models["simulator"], models["alpha-beta"]
            figure = lambda x: "-" if x is None else (f"{x:.2f}" if isinstance(x, float) else str(x))
            body.append([value, *(figure(x) for x in (sim["cases"], sim["ties"], sim["top1_strict"], sim["top1"], sim["spearman"],
                                                      sim["median_rel_error"], sim["pick_loss_5pct"], sim["pick_regret_max"],
                                                      sim["noise_median"], ab["top1_strict"], ab["spearman"], ab["median_rel_error"]))])
        out.append(markdown((label, *BREAKDOWN_COLUMNS), body))
    return "\n\n".join(out)


def read_document(path: Path, kind: str) -> dict:
    """The JSON document at `path`; UsageError in one line where it is missing or not a `kind` file."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise UsageError(f"{path}: not a readable {kind} file ({one_line(e)})") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: not a {kind} file (a JSON object is expected)")
    return doc


def print_text(make_text, what: str) -> int:
    """Print the text ``make_text()`` returns and return 0; where it raises UsageError, or KeyError or TypeError on a
    file that is not `what`, one line on stderr and EXIT_USAGE (the tools' shared ending)."""
    try:
        text = make_text()
    except (UsageError, KeyError, TypeError) as e:
        print(f"error: {e if isinstance(e, UsageError) else f'not {what}: {one_line(e)}'}", file=sys.stderr)
        return EXIT_USAGE
    print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Print each named summary's table (or, with ``--breakdowns``, each named report's), a blank line between; the
    exit status (2, with one line on stderr, for a missing or malformed file)."""
    p = ArgumentParser(prog="python -m scripts.accuracy.table", description=__doc__.split("\n")[0])
    p.add_argument("files", type=Path, nargs="+", metavar="FILE",
                   help="summary files (scripts.accuracy --summary), or with --breakdowns report files (--out)")
    p.add_argument("--breakdowns", action="store_true", help="print the reports' held-out figures by testbed, size and collective")
    try:
        args = p.parse_args(argv)
        make, kind = (breakdowns, "report") if args.breakdowns else (table, "summary")
        text = "\n\n".join(make(read_document(path, kind)) for path in args.files)
    except KeyError as e:
        print(f"error: not a {kind} file of scripts.accuracy: it lacks {e}", file=sys.stderr)
        return EXIT_USAGE
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
