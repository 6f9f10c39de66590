"""Run, check and time the programs of a plan across MPI ranks; rank 0 prints an nccl-tests-style table.

    mpiexec -n 8 python -m runtime.bench plan.json --placement 0 --top 5 --bytes 1M:64M --out bench.json

Every rank derives its hierarchy coordinates from its rank, the job runs the
default collective and the best ``--top`` programs of the chosen placement,
at every size, checks each result exactly and times it (see runtime/timing.py).
Exit status: 0 all results exact; 1 a wrong result, or a rank crashed (the job
is aborted); 2 bad arguments, plan or backend (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from mpi4py import MPI
from rich.console import Console
from rich.progress import Progress

from hierarchies.cli import ArgumentParser, UsageError, sizes_argument
from runtime.backends import Backend, BackendKind, BackendUnavailable, make_backend
from runtime.data import (
    ITEMSIZE,
    element_count,
    expected_values,
    input_values,
    rank_period,
    reduction_group,
)
from runtime.executor import Buffers, CompiledProgram, Executor
from runtime.job import EXIT_OK, EXIT_USAGE, EXIT_WRONG, fail_together, mpi_version, run_guarded
from runtime.layout import Role
from runtime.plan import PlanError, Selection, load_plan
from runtime.report import (
    Result,
    make_result,
    table_footer,
    table_header,
    table_row,
)
from runtime.timing import TimingConfig, time_runs


class _Parser(ArgumentParser):
    """The shared parser (errors raise UsageError), printing help on rank 0 only."""

    def print_help(self, file=None) -> None:
        """Print the help on rank 0 only."""
        if MPI.COMM_WORLD.Get_rank() == 0:
            super().print_help(file)


def _top(text: str) -> int | None:
    """``--top`` value: a count >= 0, or ``all`` (None)."""
    if text == "all":
        return None
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a count or 'all', got {text!r}")
    return int(text)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; UsageError on a bad one."""
    p = _Parser(prog="python -m runtime.bench", description=__doc__.split("\n")[0])
    p.add_argument("plan", help="the solver's result JSON (python -m solver.run ... --out plan.json)")
    p.add_argument("--placement", type=int, default=0, help="index of the placement in the plan (default 0)")
    p.add_argument("--top", type=_top, default=5, help="how many of the placement's best programs to run, or 'all' (default 5)")
    p.add_argument("--bytes", type=sizes_argument, default=None, help="SIZE or MIN:MAX[:FACTOR], e.g. 1M:64M (default: the plan's message_bytes)")
    p.add_argument("--warmup", type=int, default=TimingConfig.warmup, help=f"untimed runs per program and size (default {TimingConfig.warmup})")
    p.add_argument("--iters", type=int, default=TimingConfig.iters, help=f"timed runs per repeat (default {TimingConfig.iters})")
    p.add_argument("--repeats", type=int, default=TimingConfig.repeats, help=f"repeats; times are medians over them (default {TimingConfig.repeats})")
    p.add_argument("--backend", type=BackendKind, choices=list(BackendKind), default=BackendKind.NUMPY, help="numpy over MPI (default) or cupy over NCCL")
    p.add_argument("--progress", action="store_true", help="show the progress bar even if stderr is not a terminal (e.g. under Open MPI's mpiexec)")
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


def prepare(args: argparse.Namespace, world: MPI.Intracomm) -> Job:
    """Load the plan, choose the programs, check them and the world size; PlanError/ValueError if anything is off."""
    plan = load_plan(args.plan)
    selection = plan.select(args.placement, args.top)
    devices = selection.placement.num_devices
    if world.Get_size() != devices:
        raise PlanError(f"the plan's hierarchy has {devices} devices but the job has {world.Get_size()} ranks; run with -n {devices}")
    sizes = args.bytes or (plan.message_bytes,)
    group_size = len(reduction_group(selection.placement, selection.request, 0).members)
    for nbytes in sizes:
        element_count(nbytes, group_size)
    config = TimingConfig(warmup=args.warmup, iters=args.iters, repeats=args.repeats)
    return Job(selection, sizes, config, plan.hierarchy.name, args.progress)


def main(argv: list[str] | None = None) -> int:
    """Entry point: returns the exit status (every rank returns the same)."""
    world = MPI.COMM_WORLD
    return run_guarded(world, lambda: _main(argv, world))


def _main(argv: list[str] | None, world: MPI.Intracomm) -> int:
    error = None
    try:
        args = parse_args(argv)
        job = prepare(args, world)
    except (UsageError, PlanError, ValueError) as e:
        error = str(e)
    if fail_together(world, error):
        return EXIT_USAGE
    try:
        backend = make_backend(args.backend, world)
    except BackendUnavailable as e:
        error = str(e)
    if fail_together(world, error):
        return EXIT_USAGE
    results = sweep(job, backend, world)
    wrong = sum(r.wrong for r in results)
    if world.Get_rank() == 0 and args.out is not None:
        args.out.write_text(json.dumps(bench_json(job, backend, world, results), indent=2) + "\n")
    return EXIT_WRONG if wrong else EXIT_OK


def sweep(job: Job, backend: Backend, world: MPI.Intracomm) -> list[Result]:
    """Run, check and time every program at every size; rank 0 prints the table as it goes."""
    sel = job.selection
    placement, request, collective = sel.placement, sel.request, sel.request.collective
    rank = world.Get_rank()
    group = reduction_group(placement, request, rank)
    size = len(group.members)
    period = rank_period(size, world.Get_size())
    executor = Executor(backend, placement, request, world)
    executor.connect([c.program for c in sel.candidates])
    texts = [c.program.text(placement) for c in sel.candidates]
    width = max(len(t) for t in texts) + 8
    show = rank == 0
    if show:
        for line in _preamble(job, backend, world, size):
            print(line)
        print(table_header(width), flush=True)
    console = Console(stderr=True, force_terminal=job.progress or None)
    runs = len(job.sizes) * len(sel.candidates)
    results: list[Result] = []
    # refreshed by hand between runs: a refresh thread would compete with the timed loops
    enabled = show and console.is_terminal and runs > 1
    with Progress(console=console, transient=True, auto_refresh=False, disable=not enabled) as progress:
        task = progress.add_task("runs", total=runs)
        for nbytes in job.sizes:
            count = element_count(nbytes, size)
            buffers = Buffers(backend, collective, count, size)
            backend.upload(input_values(collective, group, rank, count, period), buffers.get(Role.SEND))
            expected = expected_values(collective, group, count, period)
            default_time = None
            for cand, text in zip(sel.candidates, texts):
                compiled = executor.compile(cand.program, buffers)
                wrong = check(compiled, buffers, expected, world)
                timing = time_runs(compiled.run, backend.synchronize, world, job.config)
                default_time = default_time or timing.time_s
                result = make_result(
                    placement=sel.index, is_default=cand.is_default, position=cand.position, nbytes=count * ITEMSIZE,
                    count=count, program=cand.program.to_json(placement), text=text, predicted_s=cand.cost_s,
                    time_s=timing.time_s, time_mean_s=timing.mean_s, repeats_s=timing.repeats_s,
                    collective=collective, group_size=size, default_time_s=default_time, wrong=wrong,
                    transposes=compiled.transposes,
                )
                results.append(result)
                if show:
                    print(table_row(result, width), flush=True)
                progress.update(task, advance=1, refresh=True)
            del buffers
    executor.close()
    if show:
        for line in table_footer(results):
            print(line, flush=True)
    return results


def check(compiled: CompiledProgram, buffers: Buffers, expected: np.ndarray | None, world: MPI.Intracomm) -> int:
    """Run once on NaN-filled buffers and count the mismatching elements, summed over ranks (collective)."""
    buffers.poison()
    compiled.run()
    out = buffers.backend.download(buffers.get(Role.RECV))
    mine = np.array([0 if expected is None else np.count_nonzero(out != expected)], dtype=np.int64)
    total = np.empty_like(mine)
    world.Allreduce(mine, total, op=MPI.SUM)
    return int(total[0])


def _preamble(job: Job, backend: Backend, world: MPI.Intracomm, group_size: int) -> list[str]:
    """The '#' lines above the table: job, placement, request and timing method."""
    sel, cfg = job.selection, job.config
    axes = ",".join(sel.placement.axes[a].name for a in sorted(sel.request.axes))
    return [
        f"# p2synth runtime: {world.Get_size()} ranks, backend {backend.kind}, {mpi_version()}",
        f"# hierarchy {job.hierarchy_name} ({sel.placement.hierarchy.describe()}), placement {sel.index}: {sel.placement.describe()}",
        f"# request {sel.request.collective} over {axes} (group of {group_size}); out of place, float32",
        f"# warmup {cfg.warmup}, iters {cfg.iters}, repeats {cfg.repeats}: time = median over repeats of the max over ranks",
    ]


def bench_json(job: Job, backend: Backend, world: MPI.Intracomm, results: list[Result]) -> dict:
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
        "results": [r.to_json() for r in results],
    }


if __name__ == "__main__":
    sys.exit(main())
