"""How well the cost model predicts what the DDP hook's programs cost on the job's backend: predicted against measured,
per program, from the plans ``p2synth tune --client torch`` wrote.

    python -m scripts.ddp_model_accuracy docs/measurements/ddp/*.client-tuned.json --markdown TABLE

A client-tuned plan holds, for every planned bucket size, DDP's own all-reduce (the request's ``default``, the plan's
one all-reduce over the group) and the programs the tuner timed, each with the solver's prediction ``cost_s`` (under
the plan's hierarchy: its ``library`` and calibrated figures) and the tuner's median ``measured_s``. Per program the
table gives both and their ratio; per size, whether the model ranks the measured-fastest first, and the Spearman
rank correlation of predicted and measured times (over 4 programs it takes the values -1 to 1 in steps of 0.2: a
small sample, shown, not summarised). The programs are the ones the tuner timed: the model's own best, so the table
shows how the model prices its picks, not an accuracy on programs chosen without it. The default's entry is listed once per size, even when the tuner picked it and
the tuned plan lists it among the programs too.

Exit status: 0; 2 an unreadable file, or one the client tuner did not write (one line).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from scipy.stats import spearmanr

from p2synth.hierarchies.cli import EXIT_USAGE, ArgumentParser, UsageError, one_line, write_text_atomic
from p2synth.hierarchies.program import Collective
from scripts.tables import console, markdown
from scripts.tables import table as rich_table

COLUMNS = ("case", "bucket (bytes)", "program", "pieces", "predicted (ms)", "measured (ms)", "measured / predicted")


def program_text(entry: dict) -> str:
    """A program entry's steps as ``RS(node,core) -> AR(rack)`` (level names of the slices)."""
    return " -> ".join(f"{Collective(s['op']).short}({','.join(level for _, level in s['slice'])})" for s in entry["steps"])


def measured_programs(request: dict) -> list[tuple[str, dict]]:
    """The request's measured programs, DDP's all-reduce first (labelled ``default``), each once."""
    default = request["default"]
    rows = [("default", default)]
    for p in request["programs"]:
        if "measured_s" in p and p["steps"] != default["steps"]:
            rows.append(("program", p))
    return rows


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation of `xs` and `ys` (scipy's); None below 3 points or without variation."""
    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return round(float(spearmanr(xs, ys).statistic), 3)


def case_rows(path: Path) -> tuple[list[tuple[str, ...]], list[dict]]:
    """The table rows of one client-tuned plan and one record per bucket size; UsageError if it is not one."""
    try:
        doc = json.loads(path.read_text())
        if doc.get("tuned", {}).get("client") != "torch":
            raise ValueError("not written by p2synth tune --client torch")
        case = path.name.split(".")[0]
        entry = next(e for e in doc["placements"] if "measured_total_s" in e)
        rows, sizes = [], []
        for request in entry["requests"]:
            programs = measured_programs(request)
            predicted = [p["cost_s"] for _, p in programs]
            measured = [p["measured_s"] for _, p in programs]
            for (label, p) in programs:
                text = "DDP's all-reduce" if label == "default" else program_text(p)
                rows.append((case, f"{request['message_bytes']:,}", text, str(p["pipeline"]), f"{p['cost_s'] * 1e3:.1f}",
                             f"{p['measured_s'] * 1e3:.1f}", f"{p['measured_s'] / p['cost_s']:.2f}"))
            best_predicted = min(range(len(programs)), key=lambda i: predicted[i])
            best_measured = min(range(len(programs)), key=lambda i: measured[i])
            sizes.append({"case": case, "bucket_bytes": request["message_bytes"], "programs": len(programs),
                          "model_ranks_fastest_first": best_predicted == best_measured,
                          "spearman": spearman(predicted, measured),
                          "default_measured_over_predicted": round(measured[0] / predicted[0], 3),
                          "library": doc["hierarchy"].get("library")})
        return rows, sizes
    except (OSError, ValueError, KeyError, TypeError, StopIteration) as e:
        raise UsageError(f"{path}: not a client-tuned plan ({one_line(e)})") from None


def main(argv: list[str] | None = None) -> int:
    """Print (and with --markdown write) the table; the exit status."""
    p = ArgumentParser(prog="python -m scripts.ddp_model_accuracy", description=__doc__.split("\n")[0])
    p.add_argument("tuned", type=Path, nargs="+", help="plans written by p2synth tune --client torch")
    p.add_argument("--markdown", type=Path, help="write the table and the per-size lines as Markdown here")
    try:
        args = p.parse_args(argv)
        rows, sizes = [], []
        for path in args.tuned:
            r, s = case_rows(path)
            rows += r
            sizes += s
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    console().print(rich_table(COLUMNS, rows, text_columns=4))
    lines = [f"* {s['case']}, {s['bucket_bytes']:,} B ({s['library']} model, {s['programs']} programs): Spearman "
             f"{s['spearman']}, the model's fastest is the measured fastest: {'yes' if s['model_ranks_fastest_first'] else 'no'}, "
             f"DDP's all-reduce measured / predicted {s['default_measured_over_predicted']}" for s in sizes]
    for line in lines:
        print(line)
    if args.markdown:
        write_text_atomic(markdown(COLUMNS, rows) + "\n\n" + "\n".join(lines) + "\n", args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
