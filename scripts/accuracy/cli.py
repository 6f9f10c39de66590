"""``python -m scripts.accuracy``: measure a suite on the testbed (root) or recompute from raw JSON.

    sudo python -m scripts.accuracy --suite default --out accuracy.json --plot docs/accuracy/predicted_vs_measured.png
    sudo python -m scripts.accuracy --suite default --testbed 4x2-1gbit --resume docs/accuracy/raw.json \
        --raw resumed.raw.json --out accuracy.json
    python -m scripts.accuracy --from-raw docs/accuracy/raw.json --out accuracy.json --plot docs/accuracy/predicted_vs_measured.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from p2synth.hierarchies.cli import EXIT_USAGE, ArgumentParser, UsageError


def parse_args(argv):
    p = ArgumentParser(prog="python -m scripts.accuracy", description=__doc__.split("\n")[0])
    p.add_argument("--suite", default="default", help="suite name (default, tiny) or a suite JSON file")
    p.add_argument("--testbed", action="append", default=[], metavar="NAME",
                   help="measure only this testbed of the suite (repeatable); merge the raw files afterwards with --from-raw")
    p.add_argument("--from-raw", type=Path, nargs="+", help="recompute the report from raw measurement JSON(s), no testbed; "
                   "several files are merged (their testbeds side by side; the first file's suite gives the split)")
    p.add_argument("--resume", type=Path, metavar="RAW", help="an earlier raw document of the same suite: keep its "
                   "combos and measure only the missing ones (with --testbed, only there; its other testbeds are kept)")
    p.add_argument("--raw", type=Path, default=None, help="where to write raw measurements (default: OUT with .raw.json); "
                   "with several --from-raw files, where to write the merged raw document")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/p2synth-accuracy"), help="plans, bench outputs, hierarchies")
    p.add_argument("--out", type=Path, required=True, help="the report JSON")
    p.add_argument("--plot", type=Path, help="predicted-vs-measured PNG")
    p.add_argument("--regret-plot", type=Path, help="CDF of pick / measured best (simulator, alpha-beta, tuner) PNG")
    p.add_argument("--summary", type=Path, help="also write the summary JSON here (e.g. docs/accuracy/summary.json)")
    p.add_argument("--fitted-dir", type=Path, help="write each testbed's fitted hierarchy (calibration + fitted constants) here")
    return p.parse_args(argv)


def main(argv=None) -> int:
    """Measure a suite (or read raw measurements), write the report and what else is asked, print the summary table;
    0 done, 2 bad arguments or a missing dependency (one line on stderr)."""
    try:
        args = parse_args(argv)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    for path in (args.out, args.raw, args.summary, args.plot, args.regret_plot):  # a new campaign's folder
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
    try:  # before measuring: a run of hours must not end without its report
        from scripts.accuracy.report import build_report
    except ModuleNotFoundError as e:
        print(f"error: the accuracy report needs {e.name}: pip install -e '.[scripts]'", file=sys.stderr)
        return 2
    if args.from_raw:
        raw = merge_raw([json.loads(p.read_text()) for p in args.from_raw])
        raw_name = " ".join(str(p) for p in args.from_raw)
        if len(args.from_raw) > 1 and args.raw:
            args.raw.write_text(json.dumps(raw, separators=(",", ":")) + "\n")
            raw_name = str(args.raw)
    else:
        from scripts.accuracy.measure import measure_suite
        from scripts.accuracy.suite import load_suite

        suite = load_suite(args.suite)
        unknown = sorted(set(args.testbed) - {tb.name for tb in suite.testbeds})
        if unknown:
            print(f"error: --testbed {unknown[0]}: not in suite {suite.name}; its testbeds: "
                  f"{', '.join(tb.name for tb in suite.testbeds)}", file=sys.stderr)
            return 2
        resume = _resume(args.resume, suite) if args.resume else None
        if args.resume and resume is None:
            return 2
        raw_path = args.raw or args.out.with_suffix(".raw.json")
        if args.resume and raw_path.resolve() == args.resume.resolve():
            print(f"error: --raw {raw_path}: write the resumed run elsewhere than the document it resumes", file=sys.stderr)
            return 2
        raw = measure_suite(suite, args.workdir, raw_path, log=lambda s: print(s, file=sys.stderr, flush=True),
                            only=tuple(args.testbed), resume=resume)
        raw_name = str(raw_path)
    from scripts.accuracy.summary import summary_doc

    report = build_report(raw)
    report["raw"] = raw_name
    args.out.write_text(json.dumps(report, separators=(",", ":")) + "\n")
    if args.plot or args.regret_plot:
        from scripts.accuracy.plots import plot, plot_regret

        if args.plot:
            plot(report, args.plot)
        if args.regret_plot:
            plot_regret(report, args.regret_plot)
    if args.fitted_dir:
        args.fitted_dir.mkdir(parents=True, exist_ok=True)
        for name, h in report["hierarchies"].items():
            (args.fitted_dir / f"{name}.json").write_text(json.dumps(h, indent=2) + "\n")
    if args.summary:
        args.summary.write_text(json.dumps(summary_doc(report, raw_name, raw["suite"].get("name", "default")), indent=2) + "\n")
    console = Console()
    console.print(summary_table(report))
    oos = report["summary"].get("tuner_oos")
    if oos:
        console.print(f"tuner out of sample: {oos['tuner_oos_cases']} re-measured picks, loss > 5% in "
                      f"{oos['tuner_oos_loss_5pct']:.3f}, median regret {oos['tuner_oos_regret_median']:.3f}, "
                      f"{oos['tuner_oos_confirmed']} of {oos['tuner_oos_left_default']} picks that left the default confirmed")
    if report.get("frozen_check"):
        f = report["frozen_check"]
        console.print(f"model frozen at {f['commit']}: the code at hand predicts {'identically' if f['identical'] else 'DIFFERENTLY'} "
                      f"on {f['programs']} programs (largest relative difference {max(f['max_rel_diff'].values()):.2g})")
    return 0


def _resume(path: Path, suite) -> dict | None:
    """The raw document `path` if it is one of `suite`; else None, with one line on stderr."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        print(f"error: --resume {path}: not a readable raw JSON document ({e.__class__.__name__})", file=sys.stderr)
        return None
    from scripts.accuracy.cases import ran_library_reduce_scatter
    from scripts.accuracy.measure import measured_with

    if not measured_with(doc, suite):
        print(f"error: --resume {path}: not a raw document of suite {suite.name}; resume with the suite it was "
              f"measured with", file=sys.stderr)
        return None
    if ran_library_reduce_scatter(doc):
        print(f"error: --resume {path}: measured when the runtime called MPI_Reduce_scatter_block (no reduce_scatter "
              f"in its hierarchies); new combos would run the exchange: measure the suite anew", file=sys.stderr)
        return None
    return doc


def merge_raw(raws: list[dict]) -> dict:
    """One raw document from several runs: their testbeds side by side, the first run's suite for the split."""
    if len(raws) == 1:
        return raws[0]
    names = [tb["testbed"]["name"] for r in raws for tb in r["testbeds"]]
    if len(set(names)) != len(names):
        raise SystemExit(f"error: testbed names repeat across the raw files: {names}")
    return {"suite": raws[0]["suite"], "suites": [r["suite"] for r in raws], "started": raws[0].get("started"),
            "finished": raws[-1].get("finished"), "testbeds": [tb for r in raws for tb in r["testbeds"]]}


SUMMARY_ROWS = ("cases", "ties", "top1_strict", "top1", "top1_within_5pct", "top5", "cases_over_5_programs", "top10", "cases_over_10_programs", "spearman",
                "median_rel_error", "max_rel_error", "pick_loss_5pct", "pick_regret_median", "pick_regret_max",
                "tuned_loss_5pct", "tuned_regret_median", "noise_median", "win_fraction", "max_speedup", "mean_speedup",
                "placement_spread_max", "placement_spread_mean")


def summary_table(report: dict) -> Table:
    """The held-out figures of the simulator, alpha-beta and the two baselines side by side, one metric a row."""
    sim, ab = report["summary"]["simulator"], report["summary"]["alpha-beta"]
    base = report["summary"].get("baselines", {})
    table = Table(title=f"held-out cases: {sim['cases']} (fit cases: {report['fit']['cases']})",
                  caption=f"protocol: {report.get('protocol')}")
    table.add_column("metric")
    table.add_column("simulator", justify="right")
    table.add_column("alpha-beta", justify="right")
    for kind in base:
        table.add_column(kind.replace("_", "-"), justify="right")
    for k in SUMMARY_ROWS:
        table.add_row(k, _cell(sim.get(k)), _cell(ab.get(k)), *(_cell(b.get(k)) for b in base.values()))
    return table


def _cell(value) -> str:
    """A figure as the table shows it: three decimals for a fraction or ratio, '-' for none."""
    return "-" if value is None else (f"{value:.3f}" if isinstance(value, float) else str(value))
