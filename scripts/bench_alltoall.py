"""Hierarchical all-to-all against the flat one, measured on the emulated testbeds, beside the predictions.

    sudo env PATH="$PATH" python -m scripts.bench_alltoall --out alltoall.json --markdown alltoall.md
    python -m scripts.bench_alltoall --from-raw alltoall.raw.json                 # the table again, no testbed

Measuring runs the accuracy machinery (``scripts/accuracy``) on the
``alltoall`` suite: for each testbed (4 nodes x 2 ranks on 1 Gbit/s, and 2
racks x 2 nodes x 2 ranks with 400 Mbit/s between racks) it brings the
testbed up, calibrates its hierarchy, and runs every all_to_all program of
every placement with ``runtime.tune`` (each checked exactly, then timed in
interleaved rounds) from 4 KiB to 16 MiB. The flat program is MPI's own
``Alltoall`` over the whole group. The table lists, per testbed, placement,
request and size, every program's measured time (median of its rounds), the
simulator's and the alpha-beta model's predictions with the report's fitted hierarchy, and each one's speedup over
the flat all-to-all, measured and predicted. ``--suite alltoall-tiny`` is a
one-combo smoke run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from p2synth.hierarchies.cli import ArgumentParser, UsageError, write_text_atomic
from scripts.tables import console, markdown, table


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; UsageError on a bad one."""
    p = ArgumentParser(prog="python -m scripts.bench_alltoall", description=__doc__.split("\n")[0])
    p.add_argument("--suite", default="alltoall", help="alltoall (default), alltoall-tiny, or a suite JSON file")
    p.add_argument("--from-raw", type=Path, help="print the table from this raw measurement JSON, no testbed")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/p2synth-alltoall"), help="plans, bench outputs, hierarchies")
    p.add_argument("--out", type=Path, help="the accuracy report JSON (raw measurements beside it, .raw.json)")
    p.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    args = p.parse_args(argv)
    if args.from_raw is None and args.out is None:
        raise UsageError("give --out (to measure) or --from-raw (to print a measured table)")
    return args


def rows(report: dict) -> list[dict]:
    """One row per (case, program): measured and predicted seconds, and speedups over the flat program."""
    out = []
    for case in report["cases"]:
        if not case["request"].startswith("all_to_all("):
            continue
        flat = next(p for p in case["programs"] if p["default"])
        for p in case["programs"]:
            out.append({
                "testbed": case["testbed"], "placement": case["placement"], "request": case["request"],
                "bytes": case["nbytes"], "program": p["text"], "flat": p["default"],
                "measured_s": p["measured_s"], "simulator_s": p["simulator_s"], "alpha_beta_s": p["alpha_beta_s"],
                "speedup": flat["measured_s"] / p["measured_s"],
                "predicted_speedup": flat["simulator_s"] / p["simulator_s"] if p["simulator_s"] > 0 else None,
            })
    return out


def size_text(n: int) -> str:
    """4096 -> 4K, 16777216 -> 16M."""
    for unit, shift in (("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


COLUMNS = ("testbed", "placement", "request", "size", "program", "measured(us)", "simulator(us)", "alpha-beta(us)",
           "speedup", "predicted")


def cells(rows_: list[dict]) -> list[tuple[str, ...]]:
    """The rows' cells under :data:`COLUMNS`: times in microseconds, speedups over the flat program."""
    return [(r["testbed"], r["placement"], r["request"], size_text(r["bytes"]), ("flat " if r["flat"] else "") + r["program"],
             f"{r['measured_s'] * 1e6:.1f}", f"{r['simulator_s'] * 1e6:.1f}", f"{r['alpha_beta_s'] * 1e6:.1f}",
             f"{r['speedup']:.2f}", "-" if r["predicted_speedup"] is None else f"{r['predicted_speedup']:.2f}") for r in rows_]


def main(argv: list[str] | None = None) -> int:
    """Measure (root, testbed) or read raw measurements, then print the table; 2 on bad usage."""
    try:
        args = parse_args(argv)
        if args.from_raw is not None:
            try:
                raw = json.loads(args.from_raw.read_text())
            except (OSError, ValueError) as e:
                raise UsageError(f"cannot read raw measurements {args.from_raw}: {e}") from None
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.from_raw is None:
        from scripts.accuracy.measure import measure_suite
        from scripts.accuracy.suite import load_suite

        raw_path = args.out.with_suffix(".raw.json")
        raw = measure_suite(load_suite(args.suite), args.workdir, raw_path, log=lambda s: print(s, file=sys.stderr, flush=True))
    from scripts.accuracy.report import build_report

    report = build_report(raw)
    if args.out is not None:
        write_text_atomic(json.dumps(report, separators=(",", ":")) + "\n", args.out)
    found = cells(rows(report))
    console().print(table(COLUMNS, found, text_columns=5))
    if args.markdown is not None:
        write_text_atomic(markdown(COLUMNS, found) + "\n", args.markdown)
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
