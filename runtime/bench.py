"""Run, check and time the programs of a plan across MPI ranks; rank 0 prints an nccl-tests-style table.

    mpiexec -n 8 python -m runtime.bench plan.json --placement 0 --top 5 --bytes 1M:64M --out bench.json
    mpiexec -n 8 python -m runtime.bench plan.json --inject swap-chunks      # a self-test of the check

Every rank derives its hierarchy coordinates from its rank, the job runs the
default collective and the best ``--top`` programs of the chosen placement,
at every size: each program first runs once on tagged uint64 data and is
checked exactly (runtime/data.py), then is timed on float32 buffers of the
stated bytes (runtime/timing.py), whose output is checked too. With
``--inject KIND`` each program runs once on tagged data with that fault
(runtime/faults.py) and nothing is timed.
Exit status: 0 all results exact; 1 a wrong result, or a rank crashed (the job
is aborted); 2 bad arguments, plan or backend, or an ``--inject`` KIND that
applies to none of the programs (one line on stderr). With ``--inject``: 3 the
check caught the fault in every run it struck and the programs it did not
strike were exact; 4 some run hid the fault from the check; 1 a program the
fault did not strike was wrong.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from mpi4py import MPI
from rich.console import Console
from rich.progress import Progress

from p2synth.hierarchies.bound import lower_bound
from p2synth.hierarchies.cli import enum_argument, sizes_argument
from p2synth.hierarchies.layout import plan_layout
from p2synth.runtime.backends import Backend, BackendKind
from p2synth.runtime.data import (
    ITEMSIZE,
    DataFactory,
    Group,
    element_count,
    index_bits,
    reduction_group,
    tagged_data,
    timed_expected,
    timed_input,
)
from p2synth.runtime.executor import Buffers, Executor
from p2synth.runtime.faults import Fault, FaultKind, place_fault
from p2synth.runtime.job import (
    EXIT_DETECTED,
    EXIT_MISSED,
    EXIT_OK,
    EXIT_WRONG,
    mpi_version,
    RankZeroParser,
    run_command,
)
from p2synth.runtime.layout import Role
from p2synth.hierarchies.plan_file import PlanFileError, load_plan_file
from p2synth.runtime.plan import Selection, select
from p2synth.runtime.report import (
    InjectResult,
    Result,
    Verdict,
    inject_footer,
    inject_header,
    inject_row,
    make_result,
    table_footer,
    table_header,
    table_row,
    verdict,
)
from p2synth.runtime.timing import TimingConfig, time_runs


def _top(text: str) -> int | None:
    """``--top`` value: a count >= 0, or ``all`` (None)."""
    if text == "all":
        return None
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a count or 'all', got {text!r}")
    return int(text)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; UsageError on a bad one."""
    p = RankZeroParser(prog="python -m runtime.bench", description=__doc__.split("\n")[0])
    p.add_argument("plan", help="the solver's result JSON (python -m solver.run ... --out plan.json)")
    p.add_argument("--placement", type=int, default=0, help="index of the placement in the plan (default 0)")
    p.add_argument("--request", default=None, help="name of the request to run, for a workload plan with several (default: the only one)")
    p.add_argument("--top", type=_top, default=5, help="how many of the placement's best programs to run, or 'all' (default 5)")
    p.add_argument("--bytes", type=sizes_argument, default=None, help="SIZE or MIN:MAX[:FACTOR], e.g. 1M:64M (default: the plan's message_bytes)")
    p.add_argument("--warmup", type=int, default=TimingConfig.warmup, help=f"untimed runs per program and size (default {TimingConfig.warmup})")
    p.add_argument("--iters", type=int, default=TimingConfig.iters, help=f"timed runs per repeat (default {TimingConfig.iters})")
    p.add_argument("--repeats", type=int, default=TimingConfig.repeats, help=f"repeats; times are medians over them (default {TimingConfig.repeats})")
    p.add_argument("--backend", type=enum_argument(BackendKind), default=BackendKind.NUMPY, metavar="{numpy,cupy}", help="numpy over MPI (default) or cupy over NCCL")
    p.add_argument("--progress", action="store_true", help="show the progress bar even if stderr is not a terminal (e.g. under Open MPI's mpiexec)")
    p.add_argument("--inject", type=enum_argument(FaultKind), default=None, metavar="KIND",
                   help=f"run every program once with this fault and nothing timed, to show the check sees it: {', '.join(map(str, FaultKind))}")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here (rank 0)")
    return p.parse_args(argv)


@dataclass(frozen=True)
class Job:
    """Everything a sweep needs, validated the same way on every rank."""

    selection: Selection
    sizes: tuple[int, ...]
    config: TimingConfig
    hierarchy_name: str
    progress: bool
    inject: FaultKind | None = None
    faults: tuple[Fault | None, ...] = ()  # with --inject: the fault of each candidate, None where it does not apply


def prepare(args: argparse.Namespace, world: MPI.Intracomm) -> Job:
    """Load the plan, choose the programs, check them, the world size and the sizes; PlanFileError/ValueError if anything is off."""
    plan = load_plan_file(args.plan)
    selection = select(plan, args.placement, args.top, args.request)
    placement, request = selection.placement, selection.request
    devices = placement.num_devices
    if world.Get_size() != devices:
        raise PlanFileError(f"the plan's hierarchy has {devices} devices but the job has {world.Get_size()} ranks; run with -n {devices}")
    sizes = args.bytes or (selection.message_bytes,)
    group_size = reduction_group(placement, request, 0).size
    for nbytes in sizes:
        index_bits(devices, element_count(nbytes, group_size, selection.pieces))
    config = TimingConfig(warmup=args.warmup, iters=args.iters, repeats=args.repeats)
    faults: tuple[Fault | None, ...] = ()
    if args.inject is not None:
        faults = tuple(place_fault(args.inject, placement, request, plan_layout(placement, request, c.program), c.program.pipeline)
                       for c in selection.candidates)
        if not any(faults):
            raise PlanFileError(
                f"--inject {args.inject} applies to none of the {len(faults)} selected program(s): it needs {args.inject.needs}; "
                "choose another kind, or more programs (--top all)"
            )
    return Job(selection, sizes, config, plan.hierarchy.name, args.progress, args.inject, faults)


def main(argv: list[str] | None = None, data: DataFactory = tagged_data) -> int:
    """Entry point: returns the exit status (every rank returns the same).

    `data` makes the check runs' data (scripts/fault_audit.py passes another scheme).
    """
    return run_command(argv, parse_args, prepare, functools.partial(_bench, data=data))


def _bench(args: argparse.Namespace, job: Job, backend: Backend, world: MPI.Intracomm, data: DataFactory) -> int:
    results: list[Result] | list[InjectResult]
    if job.inject is not None:
        results = inject_sweep(job, backend, world, data)
        status = inject_status(results)
    else:
        results = sweep(job, backend, world, data)
        status = EXIT_WRONG if any(r.wrong or r.wrong_timed for r in results) else EXIT_OK
    if world.Get_rank() == 0 and args.out is not None:
        args.out.write_text(json.dumps(bench_json(job, backend, world, results), indent=2) + "\n")
    return status


class Runner:
    """One rank's side of a sweep: its group, the executor with every needed slice connected, the check."""

    def __init__(self, job: Job, backend: Backend, world: MPI.Intracomm, data: DataFactory):
        sel = job.selection
        self.job, self.backend, self.world, self.data = job, backend, world, data
        self.collective = sel.request.collective
        self.group: Group = reduction_group(sel.placement, sel.request, world.Get_rank())
        self.executor = Executor(backend, sel.placement, sel.request, world)
        self.executor.connect([c.program for c in sel.candidates], extra=tuple(f.slice for f in job.faults if f and f.slice))
        self.texts = [c.program.text(sel.placement) for c in sel.candidates]
        self.width = max(len(t) for t in self.texts) + 8

    def check_all(self, count: int, faults: tuple[Fault | None, ...]) -> list[int]:
        """Run every candidate once on the check data (with its fault, if any); its mismatches, summed over ranks."""
        data = self.data(self.collective, self.group, count, self.world.Get_size())
        buffers = Buffers(self.backend, self.collective, count, self.group.size, data.dtype)
        self.backend.upload(data.input(), buffers.get(Role.SEND))
        expected = data.expected()
        wrong = []
        for cand, fault in zip(self.job.selection.candidates, faults):
            compiled = self.executor.compile(cand.program, buffers, fault)
            buffers.poison(data.poison)
            compiled.run()
            self.backend.synchronize()
            wrong.append(mismatches(self.backend.download(buffers.get(Role.RECV)), expected, self.world))
        return wrong

    def show(self, line: str) -> None:
        """Print `line` on rank 0."""
        if self.world.Get_rank() == 0:
            print(line, flush=True)

    def close(self) -> None:
        """Free the communicators."""
        self.executor.close()


def sweep(job: Job, backend: Backend, world: MPI.Intracomm, data: DataFactory = tagged_data) -> list[Result]:
    """Check, run and time every program at every size; rank 0 prints the table as it goes."""
    sel = job.selection
    runner = Runner(job, backend, world, data)
    collective, group, width = runner.collective, runner.group, runner.width
    for line in _preamble(job, backend, world, group.size):
        runner.show(line)
    runner.show(table_header(width))
    show = world.Get_rank() == 0
    console = Console(stderr=True, force_terminal=job.progress or None)
    runs = len(job.sizes) * len(sel.candidates)
    results: list[Result] = []
    # refreshed by hand between runs: a refresh thread would compete with the timed loops
    enabled = show and console.is_terminal and runs > 1
    with Progress(console=console, transient=True, auto_refresh=False, disable=not enabled) as progress:
        task = progress.add_task("runs", total=runs)
        for nbytes in job.sizes:
            count = element_count(nbytes, group.size, sel.pieces)
            wrongs = runner.check_all(count, (None,) * len(sel.candidates))
            buffers = Buffers(backend, collective, count, group.size)
            backend.upload(timed_input(collective, group, count), buffers.get(Role.SEND))
            expected = timed_expected(collective, group)
            default_time = None
            for cand, text, wrong in zip(sel.candidates, runner.texts, wrongs):
                compiled = runner.executor.compile(cand.program, buffers)
                buffers.poison(float("nan"))
                timing = time_runs(compiled.run, backend.synchronize, world, job.config)
                wrong_timed = mismatches(backend.download(buffers.get(Role.RECV)), expected, world)
                default_time = default_time or timing.time_s
                result = make_result(
                    placement=sel.index, is_default=cand.is_default, position=cand.position, nbytes=count * ITEMSIZE,
                    count=count, program=cand.program.to_json(sel.placement), text=text, predicted_s=cand.cost_s,
                    time_s=timing.time_s, time_mean_s=timing.mean_s, repeats_s=timing.repeats_s,
                    collective=collective, group_size=group.size, default_time_s=default_time, wrong=wrong,
                    wrong_timed=wrong_timed, transposes=compiled.transposes,
                    bound_s=lower_bound(sel.placement, sel.request, count * ITEMSIZE).seconds,
                )
                results.append(result)
                runner.show(table_row(result, width))
                progress.update(task, advance=1, refresh=True)
            del buffers
    runner.close()
    for line in table_footer(results):
        runner.show(line)
    return results


def inject_sweep(job: Job, backend: Backend, world: MPI.Intracomm, data: DataFactory = tagged_data) -> list[InjectResult]:
    """Run every program once per size with the job's fault (where it applies) and check it; nothing is timed."""
    sel = job.selection
    runner = Runner(job, backend, world, data)
    for line in _preamble(job, backend, world, runner.group.size):
        runner.show(line)
    runner.show(inject_header(runner.width))
    plans = [plan_layout(sel.placement, sel.request, c.program) for c in sel.candidates]
    sites = [None if f is None else f.describe(sel.placement, p) for f, p in zip(job.faults, plans)]
    results: list[InjectResult] = []
    for nbytes in job.sizes:
        count = element_count(nbytes, runner.group.size, sel.pieces)
        wrongs = runner.check_all(count, job.faults)
        for cand, text, site, wrong in zip(sel.candidates, runner.texts, sites, wrongs):
            result = InjectResult(
                placement=sel.index, is_default=cand.is_default, position=cand.position, bytes=count * ITEMSIZE, count=count,
                program=cand.program.to_json(sel.placement), text=text, fault=site, wrong=wrong, verdict=verdict(site is not None, wrong),
            )
            results.append(result)
            runner.show(inject_row(result, runner.width))
    runner.close()
    for line in inject_footer(str(job.inject), results):
        runner.show(line)
    return results


def inject_status(results: list[InjectResult]) -> int:
    """Exit status of an --inject run: 4 if the check missed a fault, else 1 if a control was wrong, else 3."""
    if any(r.verdict is Verdict.MISSED for r in results):
        return EXIT_MISSED
    if any(r.verdict is Verdict.NOT_APPLICABLE and r.wrong for r in results):
        return EXIT_WRONG
    return EXIT_DETECTED


def mismatches(out: np.ndarray, expected: np.ndarray | float | None, world: MPI.Intracomm) -> int:
    """Elements of `out` that differ from `expected` (None: nothing checked), summed over ranks (collective)."""
    mine = np.array([0 if expected is None else np.count_nonzero(out != expected)], dtype=np.int64)
    total = np.empty_like(mine)
    world.Allreduce(mine, total, op=MPI.SUM)
    return int(total[0])


def _preamble(job: Job, backend: Backend, world: MPI.Intracomm, group_size: int) -> list[str]:
    """The '#' lines above the table: job, placement, request and timing method (or the injected fault)."""
    sel, cfg = job.selection, job.config
    axes = ",".join(sel.placement.axes[a].name for a in sorted(sel.request.axes))
    lines = [
        f"# p2synth runtime: {world.Get_size()} ranks, backend {backend.kind}, {mpi_version()}",
        f"# hierarchy {job.hierarchy_name} ({sel.placement.hierarchy.describe()}), placement {sel.index}: {sel.placement.describe()}",
        f"# request {sel.request.collective} over {axes} (group of {group_size}); out of place",
    ]
    if job.inject is not None:
        return lines + [f"# injected fault: {job.inject}, one check run per program on tagged uint64 data, nothing timed"]
    return lines + [
        "# check: one run on tagged uint64 data, compared exactly; timed runs: float32 (all ones, output checked)",
        f"# warmup {cfg.warmup}, iters {cfg.iters}, repeats {cfg.repeats}: time = median over repeats of the max over ranks",
        f"# of bound: time / the lower bound at that size on {job.hierarchy_name}'s link figures (docs/model.md, \"Lower bound\")",
    ]


def bench_json(job: Job, backend: Backend, world: MPI.Intracomm, results: list[Result] | list[InjectResult]) -> dict:
    """The --out document: the job's setting and one entry per (program, size)."""
    sel = job.selection
    return {
        "world_size": world.Get_size(),
        "backend": str(backend.kind),
        "mpi": mpi_version(),
        "hierarchy": job.hierarchy_name,
        "placement": sel.index,
        "matrix": [list(r) for r in sel.placement.matrix],
        "request": {"axes": [sel.placement.axes[a].name for a in sorted(sel.request.axes)], "collective": str(sel.request.collective)},
        "timing": {"warmup": job.config.warmup, "iters": job.config.iters, "repeats": job.config.repeats},
        "inject": None if job.inject is None else str(job.inject),
        "results": [r.to_json() for r in results],
    }


if __name__ == "__main__":
    sys.exit(main())
