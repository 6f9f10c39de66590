"""Overhead of the runtime: its flat all_reduce program vs a direct MPI Allreduce, in one job.

    mpiexec -n 8 python -m scripts.bench_runtime [--bytes 1M:64M] [--iters 5] [--repeats 7] [--out FILE]

The hierarchy is ``node 2 x core N/2`` for an even world size N (``core N``
otherwise), one axis ``data`` over all of it. Both contenders use the same
sub-communicator (the one the runtime split for the flat slice) and the same
buffers, out of place; their repeats alternate (runtime first on even
repeats, direct first on odd ones), so drift hits both alike. Each repeat is
timed as nccl-tests does (runtime/timing.py); the table gives medians over
repeats of the max over ranks, and ``ratio = direct time / runtime time``
(the runtime's throughput relative to the direct call; goal >= 0.95 from 1 MiB),
and ``paired``, the median over repeats of the same ratio taken repeat by
repeat (each pair ran back to back, so it is less exposed to a noisy machine).
Both contenders are checked exactly, once on the tagged uint64 data of
runtime/data.py and once on the timed float32 buffers. Exit status 1 if a
check fails.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from functools import partial
from pathlib import Path

import numpy as np
from mpi4py import MPI

from p2synth.hierarchies import Axis, Collective, Hierarchy, Placement, Request, default_program
from p2synth.runtime.backends import NumpyBackend
from p2synth.runtime.data import ITEMSIZE, element_count, reduction_group, tagged_data, timed_expected, timed_input
from p2synth.runtime.executor import Buffers, Executor
from p2synth.runtime.job import EXIT_OK, EXIT_USAGE, EXIT_WRONG, RankZeroParser, mpi_version, run_guarded
from p2synth.runtime.layout import Role
from p2synth.hierarchies.cli import UsageError, sizes_argument
from p2synth.runtime.timing import measure, summarize
from scripts.tables import console, table

GOAL = 0.95


COLUMNS = ("size (B)", "runtime (us)", "direct (us)", "runtime algbw (GB/s)", "direct algbw (GB/s)", "ratio", "paired")


def row_cells(row: dict) -> tuple[str, ...]:
    """One size's cells under :data:`COLUMNS`: medians in microseconds, algorithm bandwidths, both ratios."""
    n, rt, direct = row["bytes"], row["runtime_s"], row["direct_s"]
    return (str(n), f"{rt * 1e6:.1f}", f"{direct * 1e6:.1f}", f"{n / rt / 1e9:.3f}", f"{n / direct / 1e9:.3f}",
            f"{row['ratio']:.3f}", f"{row['paired_ratio']:.3f}")


def flat_placement(world_size: int) -> Placement:
    """``node 2 x core N/2`` (or ``core N``) with one axis ``data`` spanning it."""
    counts = {"node": 2, "core": world_size // 2} if world_size % 2 == 0 and world_size > 2 else {"core": world_size}
    hierarchy = Hierarchy(name=f"bench-{world_size}", levels=tuple({"name": n, "count": c} for n, c in counts.items()))
    return Placement(hierarchy, (Axis(name="data", size=world_size),), (tuple(counts.values()),))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (the same on every rank); UsageError on a bad one."""
    p = RankZeroParser(prog="python -m scripts.bench_runtime", description=__doc__.split("\n")[0])
    p.add_argument("--bytes", type=sizes_argument, default=sizes_argument("1M:64M"), help="SIZE or MIN:MAX[:FACTOR] (default 1M:64M)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs of each contender per size (default 2)")
    p.add_argument("--iters", type=int, default=5, help="timed runs per repeat (default 5)")
    p.add_argument("--repeats", type=int, default=7, help="repeats per size; medians over them (default 7)")
    p.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = p.parse_args(argv)
    if args.iters < 1 or args.repeats < 1 or args.warmup < 0:
        raise UsageError("--iters and --repeats must be at least 1, --warmup at least 0")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; rank 0 prints the table (and writes --out). Exit 2 on bad arguments (rank 0 says why)."""
    world = MPI.COMM_WORLD
    try:
        args = parse_args(argv)
    except UsageError as e:
        if world.Get_rank() == 0:
            print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    return run_guarded(world, lambda: compare(args, world))


def compare(args: argparse.Namespace, world: MPI.Intracomm) -> int:
    """Time both contenders at every size; returns the exit status."""
    placement = flat_placement(world.Get_size())
    request = Request(frozenset({0}), Collective.ALL_REDUCE)
    program = default_program(placement, request)
    backend = NumpyBackend()
    executor = Executor(backend, placement, request, world)
    executor.connect([program])
    comm = executor.communicator(program.steps[0].slice)
    rank, size = world.Get_rank(), world.Get_size()
    group = reduction_group(placement, request, rank)
    rows, wrong = [], 0
    for nbytes in args.bytes:
        count = element_count(nbytes, size)
        data = tagged_data(Collective.ALL_REDUCE, group, count, size)
        for dtype, values, expected, poison in (
            (data.dtype, data.input(), data.expected(), data.poison),
            (np.dtype(np.float32), timed_input(Collective.ALL_REDUCE, group, count), timed_expected(Collective.ALL_REDUCE, group), float("nan")),
        ):  # the check buffers first, then the timed ones (which stay for the timing below)
            buffers = Buffers(backend, Collective.ALL_REDUCE, count, size, dtype)
            send, recv = buffers.get(Role.SEND), buffers.get(Role.RECV)
            backend.upload(values, send)
            contenders = (executor.compile(program, buffers).run, partial(comm.Allreduce, send, recv, op=MPI.SUM))
            for run in contenders:
                buffers.poison(poison)
                run()
                wrong += int(np.count_nonzero(recv != expected))
        for run in contenders:
            for _ in range(args.warmup):
                run()
        times: tuple[list[float], list[float]] = ([], [])
        for r in range(args.repeats):
            order = (0, 1) if r % 2 == 0 else (1, 0)
            for i in order:
                times[i].append(measure(contenders[i], backend.synchronize, world, args.iters))
        rt, mpi = summarize(times[0], world), summarize(times[1], world)
        ratio = mpi.time_s / rt.time_s
        paired = statistics.median(d / r for d, r in zip(mpi.repeats_s, rt.repeats_s))
        nbytes = count * ITEMSIZE
        rows.append({"bytes": nbytes, "runtime_s": rt.time_s, "direct_s": mpi.time_s, "ratio": ratio, "paired_ratio": paired,
                     "runtime_repeats_s": list(rt.repeats_s), "direct_repeats_s": list(mpi.repeats_s)})
        del buffers
    executor.close()
    total = np.empty(1, dtype=np.int64)
    world.Allreduce(np.array([wrong], dtype=np.int64), total, op=MPI.SUM)
    if rank == 0:
        title = (f"runtime flat all_reduce vs direct Allreduce, {size} ranks, {placement.hierarchy.describe()}, warmup "
                 f"{args.warmup}, iters {args.iters}, repeats {args.repeats}; medians of the max over ranks")
        console().print(table(COLUMNS, [row_cells(r) for r in rows], title=title, text_columns=0))
        large = [r for r in rows if r["bytes"] >= 2**20]
        if large:
            ratios, paired = [r["ratio"] for r in large], [r["paired_ratio"] for r in large]
            print(f"# at >= 1 MiB: ratio median {statistics.median(ratios):.3f}, min {min(ratios):.3f}; "
                  f"paired median {statistics.median(paired):.3f}, min {min(paired):.3f} (goal >= {GOAL})")
        print(f"# wrong values: {int(total[0])} {'OK' if total[0] == 0 else 'FAILED'}", flush=True)
        if args.out is not None:
            args.out.write_text(json.dumps({"world_size": size, "mpi": mpi_version(), "rows": rows}, indent=2) + "\n")
    return EXIT_WRONG if total[0] else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
