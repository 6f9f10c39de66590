"""Re-measure recorded combos of an accuracy run on the testbed as it is now, and compare with the record.

    python -m scripts.testbed up ...     # the testbed the combos were recorded on (docs/testbed.md)
    python -m scripts.accuracy.remeasure docs/accuracy/raw.json --testbed 4x2-1gbit --size 4M --combo 2 --combo 21

Per combo: a workload plan of exactly the programs the record measured at that size (the default
included; ``measure.combo_plan``), timed by ``runtime.tune`` with the record's knobs (warm-up, iters,
repeats) on the running testbed; it prints the default's recorded and new medians and, over every
program, the median, smallest and largest of new / recorded, one table row per combo (printed at the
end, and before the error line when a tuner run fails). The record is not changed: this checks
whether a recorded measurement reproduces. Exit codes: 0 done; 1 a tuner run failed; 2 bad arguments
(an unknown testbed, combo or size; one line on stderr).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from p2synth.hierarchies import Axis, Hierarchy, Placement
from p2synth.hierarchies.cli import EXIT_USAGE, ArgumentParser, parse_size
from p2synth.hierarchies.program import Program
from scripts.accuracy.measure import combo_plan


def recorded(raw: dict, testbed: str, combo: int, size: int) -> tuple[dict, list[dict], int, str]:
    """The plan of combo `combo` of `testbed` at `size` from the raw document `raw`, its recorded result entries
    (the default first), the iters per repeat it used and the combo's description; ValueError naming what is missing."""
    names = [t["testbed"]["name"] for t in raw["testbeds"]]
    if testbed not in names:
        raise ValueError(f"--testbed {testbed}: not in the record (it has {', '.join(names)})")
    tb = raw["testbeds"][names.index(testbed)]
    c = next((x for x in tb["combos"] if x["index"] == combo), None)
    if c is None:
        raise ValueError(f"--combo {combo}: {testbed} has combos 0..{len(tb['combos']) - 1}")
    results = sorted((x for x in c["results"] if x["nbytes"] == size), key=lambda x: not x["default"])
    if not results or not results[0]["default"]:
        raise ValueError(f"--size {size}: combo {combo} of {testbed} has no measurement at that size")
    h = Hierarchy.model_validate(tb["hierarchy"])
    pl = Placement(h, tuple(Axis(name=a, size=s) for a, s in c["axes"]), tuple(tuple(r) for r in c["matrix"]))
    default, *others = (Program.from_json(x["program"], pl) for x in results)
    plan = combo_plan(h, pl, c["request"]["axes"], c["request"]["collective"], default, others, [size])
    suite = raw["suite"]
    label = f"{pl.describe()} {c['request']['collective']}({','.join(c['request']['axes'])})"
    return plan, results, suite["iters_small"] if size < suite["small_below"] else suite["iters"], label


def compare(results: list[dict], tuned: dict) -> tuple[float, float, list[float]]:
    """(recorded default, new default, new / recorded of every program both measured), in seconds and ratios."""
    body = tuned["placements"][0]["requests"][0]
    new = {_key(body["default"], True): body["default"]["measured_s"]}
    for e in body["programs"]:
        if "measured_s" in e:
            new.setdefault(_key(e, False), e["measured_s"])
    ratios = [new[_key(x["program"], x["default"])] / x["time_s"] for x in results if _key(x["program"], x["default"]) in new]
    return results[0]["time_s"], new[_key(body["default"], True)], ratios


def _key(program: dict, is_default: bool) -> str:
    return json.dumps([program["steps"], 1 if is_default else program.get("pipeline", 1)])


def main(argv: list[str] | None = None) -> int:
    """Re-measure each requested combo and print the comparison."""
    ap = ArgumentParser(prog="python -m scripts.accuracy.remeasure", description=__doc__.split("\n")[0])
    ap.add_argument("raw", type=Path, help="the accuracy run's raw JSON (docs/accuracy/raw.json)")
    ap.add_argument("--testbed", required=True, help="the testbed's name in the record (the running testbed must be that one)")
    ap.add_argument("--size", required=True, help="message size, e.g. 4M")
    ap.add_argument("--combo", type=int, action="append", required=True, help="combo index (repeatable)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/p2synth-remeasure"), help="plans and tuned files")
    try:
        args = ap.parse_args(argv)
        raw = json.loads(args.raw.read_text())
        size = parse_size(args.size)
        runs = [(combo, *recorded(raw, args.testbed, combo, size)) for combo in args.combo]
    except (OSError, ValueError, KeyError) as e:  # UsageError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    args.workdir.mkdir(parents=True, exist_ok=True)
    table, console = comparison_table(), Console()
    for combo, plan, results, iters, label in runs:
        try:
            old, new, ratios = remeasure(args.workdir, combo, plan, len(results) - 1, iters, raw["suite"], results)
        except RuntimeError as e:
            if table.row_count:
                console.print(table)
            print(f"error: {e}", file=sys.stderr)
            return 1
        table.add_row(str(combo), label, args.size, f"{old * 1e3:.1f}", f"{new * 1e3:.1f}", str(len(ratios)),
                      f"{statistics.median(ratios):.2f}", f"{min(ratios):.2f}", f"{max(ratios):.2f}")
    console.print(table)
    return 0


def comparison_table() -> Table:
    """The table main prints: per combo, the default's recorded and new median and new / recorded over its programs."""
    table = Table()
    for name in ("combo", "placement and request", "size"):
        table.add_column(name)
    for name in ("default recorded (ms)", "default now (ms)", "programs", "now / recorded median", "min", "max"):
        table.add_column(name, justify="right")
    return table


def remeasure(workdir: Path, combo: int, plan: dict, top: int, iters: int, suite: dict,
              results: list[dict]) -> tuple[float, float, list[float]]:
    """Time `plan` (combo `combo`'s recorded programs) with ``runtime.tune`` on the running testbed, with the record's
    knobs, and compare with the record (``compare``); RuntimeError naming the combo when the tuner fails."""
    plan_path, tuned_path = workdir / f"plan-{combo}.json", workdir / f"tuned-{combo}.json"
    plan_path.write_text(json.dumps(plan))
    cmd = [sys.executable, "-m", "scripts.testbed", "run", "--", "python", "-m", "runtime.tune", str(plan_path),
           "--out", str(tuned_path), "--top", str(top), "--no-refit", "--warmup", str(suite["warmup"]),
           "--iters", str(iters), "--repeats", str(suite["repeats"])]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"combo {combo}: runtime.tune exited {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}")
    return compare(results, json.loads(tuned_path.read_text()))


if __name__ == "__main__":
    raise SystemExit(main())
