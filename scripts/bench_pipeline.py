"""Pipelined against sequential against the default, measured side by side in one tuner run per size.

    python -m scripts.bench_pipeline plan --hierarchy H.json --bytes 16M --out /tmp/pipe16.json
    sudo env PATH="$PATH" python -m scripts.testbed run -- python -m runtime.tune /tmp/pipe16.json \\
        --out /tmp/tuned16.json --top 5 --no-refit
    python -m scripts.bench_pipeline table /tmp/tuned16.json [/tmp/tuned64.json ...] [--hierarchy H2.json] [--markdown OUT]

``plan`` solves ``all_reduce`` over one axis ``data`` covering the whole
hierarchy H (a calibrated or fitted hierarchy file, e.g.
``docs/accuracy/hierarchies/4x2-1gbit.json``) with the simulator, takes the
best program of two or more steps at the largest piece count, and writes a
plan whose only placement lists that same program on each piece count of
``--pieces`` (most pieces first), each with the solver's own prediction (a
solve restricted to pieces ``{1, P}``; where that solve lists the program only
sequentially, as at small messages, the entry is costed the same way directly). ``runtime.tune --top K`` (K at least
the number of piece counts) then checks every one exactly and times them and
the default in interleaved rounds: medians and 95% intervals measured side by
side in one job, under the same load.

``table`` prints, per tuned plan, every measured program: its median and
interval, the prediction and measured / predicted, and its speedup over the
same program run sequentially and over the default (ratios of medians). The
prediction is the plan's own, or with ``--hierarchy`` the simulator's today on
that hierarchy (to see what a changed model or refitted hierarchy predicts for
measurements already made); ``--markdown`` also writes the table as Markdown (as in docs/measurements/pipeline.md).
Exit 2 on bad arguments, 1 if a measured program had wrong elements.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from p2synth.hierarchies.cli import ArgumentParser, UsageError, one_line, size_argument, write_text_atomic
from p2synth.hierarchies.model import Hierarchy
from p2synth.hierarchies.plan_file import PlanFileError, parse_plan_file
from p2synth.hierarchies.program import Program
from p2synth.solver.models import program_cost, program_cost_and_steps
from scripts.tables import console, markdown
from scripts.tables import table as rich_table

PIECES = (1, 2, 4, 8, 16)


def parse_args(argv):
    """The command line; UsageError on a bad one."""
    p = ArgumentParser(prog="python -m scripts.bench_pipeline", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    plan = sub.add_parser("plan", help="write the plan of one program on every piece count")
    plan.add_argument("--hierarchy", type=Path, required=True, help="hierarchy JSON (calibrated or fitted)")
    plan.add_argument("--bytes", type=size_argument, required=True, help="message size, e.g. 16M")
    plan.add_argument("--pieces", type=lambda t: tuple(int(x) for x in t.split(",")), default=PIECES,
                      help="piece counts, comma separated (default 1,2,4,8,16; 1 is always included)")
    plan.add_argument("--max-steps", type=int, default=4, help="program length bound (default 4)")
    plan.add_argument("--out", type=Path, required=True, help="the plan JSON")
    table = sub.add_parser("table", help="print the measured table of tuned plans")
    table.add_argument("tuned", type=Path, nargs="+", help="runtime.tune outputs of plans written by 'plan'")
    table.add_argument("--hierarchy", type=Path, help="predict with the simulator on this hierarchy instead of the plan's figures")
    table.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    return p.parse_args(argv)


def _solve(spec: dict) -> dict:
    """The solver's result JSON for `spec` (python -m solver.run, top 50), or UsageError with its message."""
    with tempfile.TemporaryDirectory() as tmp:
        spec_path, out = Path(tmp) / "spec.json", Path(tmp) / "plan.json"
        spec_path.write_text(json.dumps(spec))
        run = subprocess.run([sys.executable, "-m", "solver.run", str(spec_path), "--top", "50", "--out", str(out)],
                             capture_output=True, text=True)
        if run.returncode != 0:
            raise UsageError(f"solver.run failed: {run.stderr.strip().splitlines()[-1] if run.stderr.strip() else run.returncode}")
        return json.loads(out.read_text())


def build_plan(hierarchy: dict, nbytes: int, pieces: tuple[int, ...], max_steps: int) -> dict:
    """The plan: one placement listing the best multi-step program on every piece count, most pieces first."""
    pieces = tuple(sorted(set(pieces) | {1}, reverse=True))
    spec = {"hierarchy": hierarchy, "axes": [{"name": "data", "size": _devices(hierarchy)}],
            "request": {"axes": ["data"], "collective": "all_reduce"}, "message_bytes": nbytes,
            "max_steps": max_steps, "cost_model": "simulator"}
    best = _solve({**spec, "pipeline": [1, pieces[0]]})
    multi = [p for p in best["placements"][0]["programs"] if len(p["steps"]) >= 2]
    if not multi:
        raise UsageError("the hierarchy has no program of two or more steps within --max-steps")
    steps = multi[0]["steps"]
    listed = []
    for count in pieces:
        solved = _solve({**spec, "pipeline": sorted({1, count})})
        same = [p for p in solved["placements"][0]["programs"] if p["steps"] == steps and p["pipeline"] == count]
        # the solver lists a program once, at its cheapest piece count: where `count` is not that (small messages),
        # the entry is the same checked steps on `count` pieces, costed as the solver costs it
        listed.append(same[0] if same else _on_pieces(best, multi[0], count))
    best["placements"][0]["programs"] = listed
    return best


def _placement_and_request(plan: dict):
    """The only placement and request of a plan written by :func:`build_plan` (or its tuned result)."""
    planned = parse_plan_file(plan).placement(0)
    return planned.placement, planned.request().named.request


def _on_pieces(plan: dict, entry: dict, count: int) -> dict:
    """`entry` (a checked program of `plan`'s only placement and request) run on `count` pieces, with the simulator's
    cost and per-piece step costs, as the solver would report them."""
    placement, request = _placement_and_request(plan)
    program = Program.from_json({**entry, "pipeline": count}, placement)
    cost, stages = program_cost_and_steps(placement, request, program, plan["message_bytes"], "simulator")
    return {**entry, "pipeline": count, "cost_s": cost, "step_costs_s": list(stages)}


def _devices(hierarchy: dict) -> int:
    """How many devices the hierarchy has."""
    n = 1
    for level in hierarchy["levels"]:
        n *= level["count"]
    return n


def predictions(tuned: dict, hierarchy: Hierarchy) -> dict[int, float]:
    """The simulator's prediction on `hierarchy` of every program of a tuned plan (the default's too), by ``id`` of
    its JSON entry."""
    entry = tuned["placements"][0]
    placement, request = _placement_and_request({**tuned, "hierarchy": json.loads(hierarchy.model_dump_json())})
    return {id(p): program_cost(placement, request, Program.from_json(p, placement), tuned["message_bytes"], "simulator")
            for p in [entry["default"], *entry["programs"]]}


def table(tuned: dict, hierarchy: Hierarchy | None = None) -> tuple[list[tuple[str, ...]], int]:
    """The rows (cells under :data:`COLUMNS`) of one tuned plan and its wrong-element count; predictions from
    `hierarchy` when given."""
    placement = tuned["placements"][0]
    cost = predictions(tuned, hierarchy) if hierarchy else {id(p): p["cost_s"] for p in [placement["default"], *placement["programs"]]}
    default = placement["default"]
    measured = [p for p in placement["programs"] if "measured_s" in p and not p.get("is_default")]
    sequential = next((p for p in measured if p.get("pipeline", 1) == 1), None)
    listed = [default] + sorted(measured, key=lambda q: -q.get("pipeline", 1))
    rows, size = [], tuned["message_bytes"]
    for p in listed:
        name = "default" if p is default else f"P = {p.get('pipeline', 1)}"
        low, high = p["measured_ci_s"]
        vs_seq = f"{sequential['measured_s'] / p['measured_s']:.2f}" if sequential and p is not default else ""
        rows.append((f"{size >> 20} MiB", name, f"{p['measured_s'] * 1e3:.1f}", f"[{low * 1e3:.1f}, {high * 1e3:.1f}]",
                     f"{cost[id(p)] * 1e3:.1f}", f"{p['measured_s'] / cost[id(p)]:.2f}", vs_seq,
                     f"{default['measured_s'] / p['measured_s']:.2f}", str(p.get("wrong", 0))))
    return rows, sum(int(p.get("wrong", 0)) for p in listed)


COLUMNS = ("size", "program", "measured (ms)", "95% interval", "predicted (ms)", "measured / predicted",
           "speedup over sequential", "speedup over default", "wrong")


def main(argv=None) -> int:
    """Run the command line; the exit status."""
    try:
        args = parse_args(argv)
        if args.command == "plan":
            try:
                hierarchy = json.loads(args.hierarchy.read_text())
            except (OSError, ValueError) as e:
                raise UsageError(f"--hierarchy: cannot read {args.hierarchy}: {e}") from None
            plan = build_plan(hierarchy, args.bytes, args.pieces, args.max_steps)
            write_text_atomic(json.dumps(plan, indent=1) + "\n", args.out)
            steps = " -> ".join(f"{s['op']}" for s in plan["placements"][0]["programs"][0]["steps"])
            print(f"wrote {args.out}: {steps} on {', '.join(str(p['pipeline']) for p in plan['placements'][0]['programs'])} pieces")
            return 0
        hierarchy = None
        if args.hierarchy:
            try:
                hierarchy = Hierarchy.model_validate_json(args.hierarchy.read_text())
            except (OSError, ValueError) as e:
                raise UsageError(f"--hierarchy: cannot read {args.hierarchy}: {one_line(e)}") from None
        rows, wrong = [], 0
        for path in args.tuned:
            try:
                found, bad = table(json.loads(path.read_text()), hierarchy)
            except (OSError, ValueError, KeyError, PlanFileError) as e:
                raise UsageError(f"{path}: not a tuned plan of scripts.bench_pipeline ({one_line(e)})") from None
            rows += found
            wrong += bad
        console().print(rich_table(COLUMNS, rows, text_columns=2))
        if args.markdown is not None:
            write_text_atomic(markdown(COLUMNS, rows) + "\n", args.markdown)
        return 1 if wrong else 0
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
