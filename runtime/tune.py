"""Measure the plan's candidates on this machine and pick, per request, the program that is really faster.

    mpirun -n N python -m runtime.tune plan.json --out tuned.json [--top K] [--placements P]
    sudo python -m scripts.testbed run -- python -m runtime.tune plan.json --out tuned.json

For every request of the plan's first P placements (default all), the job runs
the default and the model's best K programs (default 5) at the request's own
message size. Each program first runs once on tagged data and is checked
exactly (as runtime.bench does), then all of them are timed in interleaved
repeats (A B C, A B C, ...; runtime/measure.py), and the timed outputs are
checked too. Per program we keep the median over repeats and a
distribution-free 95% interval (runtime/stats.py). The *pick* is the
measured-fastest program if it beats the default by at least ``--min-gain``
(default 2%) in enough of their paired rounds that an exact one-sided sign test
rejects chance at the 5% level (8 rounds of 9; runtime/stats.py,
``paired_faster``), else the default: the tuner never trades the default for a
program it cannot tell apart from it. The pick is chosen from the same rounds
that measured it, so its gain is optimistic (the best of K looks better than it
is): ``python -m runtime.validate tuned.json`` re-measures it in a fresh job.

``tuned.json`` is the plan file with, added:

* per measured program (the default included): ``measured_s`` (median),
  ``measured_ci_s`` ([low, high]), ``measured_repeats_s``, ``wrong``;
* per request: ``picked`` (the program, its figures, ``is_default`` and
  ``plan_position``); the request's ``programs`` re-ordered: the pick first (the
  default is listed as a program when it is the pick), then the other measured
  ones by median, then the unmeasured ones in the plan's order, so that
  ``runtime.bench --top 1`` and ``python -m solver.exports`` use the pick;
* per placement: ``measured_total_s`` (sum over requests of count x the pick's
  median) and ``plan_index``; the measured placements come first, fastest
  first, the others follow in the plan's order;
* at the top: ``tuned`` (job, timing, rule, and where the hierarchy went).

It also writes a refitted hierarchy (``--hierarchy-out``, default OUT with
``.hierarchy.json``): the plan's hierarchy with each level's latency, bandwidth
and uplink fitted from ping-pong and concurrent-flow measurements taken in the
same job (runtime/calibration.py, the code of ``python -m scripts.calibrate``),
up to the largest message size tuned; it loads as the ``hierarchy`` of the next
spec. ``--no-refit`` skips it.

Exit status: 0 tuned and every result exact; 1 a wrong result, or a rank
crashed (the job is aborted); 2 bad arguments, plan or backend (one line).
"""

from __future__ import annotations

import argparse
import copy
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from mpi4py import MPI
from rich.console import Console
from rich.progress import Progress

from p2synth.hierarchies.cli import count_argument, enum_argument, fraction_argument, write_json_atomic, write_text_atomic
from p2synth.hierarchies.plan_file import PlanFile, PlanFileError, load_plan_file
from p2synth.runtime.backends import Backend, BackendKind
from p2synth.runtime.bench import Job, Runner, mismatches
from p2synth.runtime.calibration import MiB, Bench, fitted_hierarchy, library_of, measure_level, message_sizes, significant
from p2synth.runtime.data import element_count, tagged_data, timed_expected, timed_input
from p2synth.runtime.executor import Buffers, CompiledProgram
from p2synth.runtime.job import (EXIT_OK, EXIT_WRONG, RankZeroParser, mpi_version, require_out_folder,
                                 run_command)
from p2synth.runtime.layout import Role
from p2synth.runtime.measure import Measured, interleaved
from p2synth.runtime.plan import Selection, select
from p2synth.runtime.provenance import RunStart
from p2synth.runtime.report import out_of_bounds_line
from p2synth.runtime.stats import CONFIDENCE, LEVEL, MIN_GAIN, pick
from p2synth.runtime.timing import TimingConfig

REFIT_MAX_BYTES = 16 * MiB  # the refit's ping-pong stops here (or at the largest tuned size, if smaller)
REFIT_MIN_BYTES = 64 * 1024  # ... and never below this (the bandwidth fit needs large messages)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; UsageError on a bad one."""
    p = RankZeroParser(prog="python -m runtime.tune", description=__doc__.split("\n")[0])
    p.add_argument("plan", help="the solver's result JSON (python -m solver.run ... --out plan.json)")
    p.add_argument("--out", type=Path, required=True, help="write the tuned plan here (rank 0)")
    p.add_argument("--top", type=count_argument(0), default=5, help="the model's best K programs per request, measured with the default (default 5)")
    p.add_argument("--placements", type=count_argument(1), default=None, help="tune the plan's first P placements (default all)")
    p.add_argument("--warmup", type=count_argument(0), default=2, help="untimed runs per program before the repeats (default 2)")
    p.add_argument("--iters", type=count_argument(1), default=5, help="timed runs per repeat (default 5)")
    p.add_argument("--repeats", type=count_argument(2), default=9, help="interleaved repeats per program (default 9: the 95%% interval "
                   "is then the 2nd to 8th fastest; from 6 on an interval reaches 95%%)")
    p.add_argument("--min-gain", type=fraction_argument, default=MIN_GAIN, help="leave the default only for a program faster by "
                   "at least this fraction in the paired test (default 0.02)")
    p.add_argument("--hierarchy-out", type=Path, default=None, help="where the refitted hierarchy goes (default OUT with .hierarchy.json)")
    p.add_argument("--no-refit", action="store_true", help="do not measure the levels nor write a refitted hierarchy")
    p.add_argument("--backend", type=enum_argument(BackendKind), default=BackendKind.NUMPY, metavar="{numpy,cupy}", help="numpy over MPI (default) or cupy over NCCL")
    p.add_argument("--progress", action="store_true", help="show the progress bar even if stderr is not a terminal")
    args = p.parse_args(argv)
    if args.hierarchy_out is None:
        args.hierarchy_out = args.out.with_suffix(".hierarchy.json")
    return args


@dataclass(frozen=True)
class Task:
    """One request of one placement to tune: its selection and the message size it is timed at."""

    selection: Selection
    nbytes: int
    count: int  # occurrences per step (workload plans; 1 otherwise)
    top: int | None  # how many of the plan's programs were considered (None: all)
    min_gain: float = MIN_GAIN  # the pick's least gain over the default (runtime.stats.pick)


@dataclass(frozen=True)
class Outcome:
    """What tuning one request measured: per candidate (the default first) its figures and wrong elements; the pick."""

    task: Task
    measured: tuple[Measured, ...]
    wrong: tuple[int, ...]
    picked: int


def prepare(args: argparse.Namespace, world: MPI.Intracomm) -> tuple[PlanFile, list[Task]]:
    """Load the plan, choose and check every request's candidates; PlanFileError/ValueError if anything is off."""
    plan = load_plan_file(args.plan)
    total = len(plan.entries)
    if total == 0:
        raise PlanFileError("the plan has no placements to tune")
    count = total if args.placements is None else args.placements
    if count > total:
        raise PlanFileError(f"--placements {count}: the plan has {total} placement(s)")
    require_out_folder(args.out)
    tasks = []
    for index in range(count):
        planned = plan.placement(index)
        if world.Get_size() != planned.placement.num_devices:
            raise PlanFileError(f"the plan's hierarchy has {planned.placement.num_devices} devices but the job has "
                                f"{world.Get_size()} ranks; run with -n {planned.placement.num_devices}")
        for r in planned.requests:
            sel = select(plan, index, args.top, r.named.name if plan.is_workload else None)
            nbytes = sel.message_bytes
            if nbytes <= 0:
                raise PlanFileError(f"request {r.named.name}: the plan gives no message_bytes to tune at")
            sel.check_size(nbytes, world.Get_size())
            tasks.append(Task(sel, nbytes, r.named.count, args.top, args.min_gain))
    return plan, tasks


def main(argv: list[str] | None = None) -> int:
    """Entry point: returns the exit status (every rank returns the same)."""
    return run_command(argv, parse_args, prepare, _tune)


def _tune(args: argparse.Namespace, prepared: tuple[PlanFile, list[Task]], backend: Backend, world: MPI.Intracomm) -> int:
    plan, tasks = prepared
    config = TimingConfig(warmup=args.warmup, iters=args.iters, repeats=args.repeats)
    rank0 = world.Get_rank() == 0
    start = RunStart.now() if rank0 else None  # git runs once, on the rank that writes
    console = Console(stderr=True, force_terminal=args.progress or None)
    outcomes: list[Outcome] = []
    # refreshed by hand between repeats: a refresh thread would compete with the timed loops
    with Progress(console=console, transient=True, auto_refresh=False, disable=not (rank0 and console.is_terminal)) as progress:
        bar = progress.add_task("tuning", total=len(tasks) * config.repeats)
        for task in tasks:
            sel = task.selection
            progress.update(bar, description=f"placement {sel.index} {sel.request_name}: {len(sel.candidates)} programs "
                                             f"at {task.nbytes} B", refresh=True)
            outcomes.append(tune_request(task, backend, world, config, lambda _r: progress.update(bar, advance=1, refresh=True)))
    hierarchy = None
    if not args.no_refit:
        hierarchy = refit(plan, world, max(t.nbytes for t in tasks))
    status = EXIT_WRONG if any(any(o.wrong) for o in outcomes) else EXIT_OK
    if rank0:
        if hierarchy is not None:
            write_text_atomic(hierarchy.model_dump_json(indent=2, exclude_none=True) + "\n", args.hierarchy_out)
        doc = tuned_document(plan, outcomes, {
            "ranks": world.Get_size(), "backend": str(backend.kind), "mpi": mpi_version(),
            "timing": {"warmup": config.warmup, "iters": config.iters, "repeats": config.repeats, "order": "interleaved"},
            "top": args.top, "placements_measured": len({t.selection.index for t in tasks}),
            "confidence": CONFIDENCE, "min_gain": args.min_gain, "level": LEVEL,
            "rule": f"pick = the smallest median if it is faster than the default by more than {args.min_gain:g} in enough "
                    f"paired rounds for a one-sided exact sign test at level {LEVEL:g}, else the default",
            "hierarchy_file": None if hierarchy is None else str(args.hierarchy_out),
            **start.record(),
        })
        write_json_atomic(doc, args.out)
        for line in summary_lines(outcomes):
            print(line, flush=True)
    return status


def tune_request(task: Task, backend, world: MPI.Intracomm, config: TimingConfig, after_repeat,
                 reverse: bool = False) -> Outcome:
    """Check every candidate on tagged data, time them in interleaved repeats, check the timed outputs; the pick.

    Each round runs the candidates in the selection's order (the default first), or from the last to the first
    with `reverse` (runtime.validate: another order than the tuning run's)."""
    sel = task.selection
    armed = arm(sel, task.nbytes, backend, world)
    wrong = list(armed.wrong)
    compiled = armed.compiled
    order = list(range(len(compiled)))[::-1 if reverse else 1]
    in_order = interleaved([compiled[i].run for i in order], backend.synchronize, world, config, after_repeat)
    measured = [in_order[order.index(i)] for i in range(len(compiled))]
    for i, program in enumerate(compiled):  # each program's own output of a timed-size run, checked
        armed.buffers.poison(float("nan"))
        program.run()
        backend.synchronize()
        wrong[i] += armed.timed_wrong()
    armed.close()
    return Outcome(task, tuple(measured), tuple(wrong), pick([m.repeats_s for m in measured], 0, task.min_gain))


@dataclass
class Armed:
    """A request's candidates, each checked once on tagged data, then compiled on float32 buffers of the timed size.

    ``wrong``: per candidate, the check run's wrong elements (summed over ranks).
    ``timed_wrong`` checks what the receive buffer holds now against the timed runs' exact output."""

    runner: Runner
    buffers: Buffers
    compiled: list[CompiledProgram]
    wrong: tuple[int, ...]
    expected: float | None

    def timed_wrong(self) -> int:
        """Wrong elements of the receive buffer against the timed runs' output, summed over ranks (collective)."""
        return mismatches(self.runner.backend.download(self.buffers.get(Role.RECV)), self.expected, self.runner.world)

    def close(self) -> None:
        """Free the buffers and the communicators."""
        del self.buffers
        self.runner.close()


def arm(sel: Selection, nbytes: int, backend, world: MPI.Intracomm) -> Armed:
    """Connect, check (tagged data, exactly) and compile every candidate of `sel` at `nbytes` (collective)."""
    job = Job(sel, (nbytes,), TimingConfig(), sel.placement.hierarchy.name, False)
    runner = Runner(job, backend, world, tagged_data)
    count = element_count(nbytes, runner.group.size, sel.pieces)
    wrong = runner.check_all(count, (None,) * len(sel.candidates))
    buffers = Buffers(backend, runner.collective, count, runner.group.size)
    backend.upload(timed_input(runner.collective, runner.group, count), buffers.get(Role.SEND))
    compiled = [runner.executor.compile(c.program, buffers) for c in sel.candidates]
    return Armed(runner, buffers, compiled, tuple(wrong), timed_expected(runner.collective, runner.group))


def refit(plan: PlanFile, world: MPI.Intracomm, largest: int):
    """The plan's hierarchy with every level (count >= 2) re-measured and fitted (on rank 0; None elsewhere)."""
    h = plan.hierarchy
    max_bytes = min(max(largest, REFIT_MIN_BYTES), REFIT_MAX_BYTES)
    bench = Bench(world, iters=3, small_iters=10, warmup=1, buf=np.zeros(max_bytes, dtype=np.uint8))
    sizes = message_sizes(max_bytes)
    results = {}
    for level, lv in enumerate(h.levels):
        if lv.count >= 2:
            res = measure_level(bench, h, level, sizes, max_bytes)
            if res is not None:
                results[level] = res
    world.Barrier()
    if world.Get_rank() != 0:
        return None
    for res in results.values():
        if "fit_error" in res:
            print(f"warning: level {res['level']}: not refitted ({res['fit_error']}); it keeps the plan's figures",
                  file=sys.stderr, flush=True)
    return fitted_hierarchy(h, results, f"{h.name}-tuned", library=library_of(MPI.Get_library_version()))


def measured_figures(m: Measured, wrong: int) -> dict:
    """A measured program's figures as tuned.json writes them."""
    return {"measured_s": significant(m.median_s, 6), "measured_ci_s": [significant(x, 6) for x in m.interval.to_json()],
            "measured_repeats_s": [significant(x, 6) for x in m.repeats_s], "wrong": wrong}


def tuned_document(plan: PlanFile, outcomes: list[Outcome], info: dict) -> dict:
    """The plan's JSON with the measured figures, the picks, the programs and placements re-ordered (see the module doc)."""
    doc = copy.deepcopy(plan.document)
    entries = doc["placements"]
    totals: dict[int, float] = {}
    for o in outcomes:
        sel = o.task.selection
        entry = entries[sel.index]
        body = entry["requests"][plan.request_names().index(sel.request_name)] if plan.is_workload else entry
        figures = [measured_figures(m, w) for m, w in zip(o.measured, o.wrong)]
        body["default"].update(figures[0])
        planned = plan.placement(sel.index).request(sel.request_name if plan.is_workload else None).programs
        measured_positions = {}
        for cand, fig in zip(sel.candidates[1:], figures[1:]):
            body["programs"][cand.position].update(fig)
            measured_positions[cand.position] = fig["measured_s"]
        # a top-K program equal to the default ran once, as the default: it gets the default's figures
        top = len(planned) if o.task.top is None else o.task.top
        for position, entry in enumerate(planned[:top]):
            if entry.program == sel.candidates[0].program:
                body["programs"][position].update(figures[0])
                measured_positions[position] = figures[0]["measured_s"]
        chosen = sel.candidates[o.picked]
        picked_entry = body["default"] if chosen.is_default else body["programs"][chosen.position]
        body["picked"] = {**copy.deepcopy(picked_entry), "is_default": chosen.is_default, "plan_position": chosen.position,
                          "speedup_over_default": significant(o.measured[0].median_s / o.measured[o.picked].median_s, 4)}
        # the pick first (the default's own entry when the plan lists it, else a copy), then the measured, then the rest
        first_position = chosen.position
        if chosen.is_default:
            first_position = next((q for q in measured_positions if planned[q].program == chosen.program), None)
        programs = list(enumerate(body["programs"]))
        rest = sorted(((q, e) for q, e in programs if q in measured_positions and q != first_position),
                      key=lambda qe: (measured_positions[qe[0]], qe[0]))
        unmeasured = [e for q, e in programs if q not in measured_positions]
        first = [copy.deepcopy(body["default"])] if first_position is None else [body["programs"][first_position]]
        body["programs"] = first + [e for _, e in rest] + unmeasured
        totals[sel.index] = totals.get(sel.index, 0.0) + o.task.count * o.measured[o.picked].median_s
    for index, entry in enumerate(entries):
        entry["plan_index"] = index
        if index in totals:
            entry["measured_total_s"] = significant(totals[index], 6)
    measured = sorted((i for i in totals), key=lambda i: (totals[i], i))
    doc["placements"] = [entries[i] for i in measured] + [e for i, e in enumerate(entries) if i not in totals]
    doc["tuned"] = info
    return doc


def summary_lines(outcomes: list[Outcome]) -> list[str]:
    """One line per tuned request: the pick, its median and interval against the default's."""
    lines = []
    for o in outcomes:
        sel = o.task.selection
        d, p = o.measured[0], o.measured[o.picked]
        chosen = sel.candidates[o.picked]
        label = "default" if chosen.is_default else f"#{chosen.position}"
        lines.append(
            f"# placement {sel.index} {sel.request_name} ({o.task.nbytes} B, {len(sel.candidates)} programs): picked {label} "
            f"{chosen.program.text(sel.placement)}  {p.median_s * 1e6:.1f} us [{p.interval.low * 1e6:.1f}, {p.interval.high * 1e6:.1f}]"
            f"  default {d.median_s * 1e6:.1f} us [{d.interval.low * 1e6:.1f}, {d.interval.high * 1e6:.1f}]"
            f"  speedup {d.median_s / p.median_s:.2f}  wrong {sum(o.wrong)}"
        )
    wrong = sum(sum(o.wrong) for o in outcomes)
    lines.append(out_of_bounds_line(wrong))
    return lines


if __name__ == "__main__":
    sys.exit(main())
