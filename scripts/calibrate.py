"""Measure each level's latency and bandwidth over MPI and write a hierarchy file with fitted figures.

Run with one rank per device of the hierarchy, ranks placed as the hierarchy numbers
them (consecutive per node, as ``mpirun`` and the testbed place them)::

    sudo python -m scripts.testbed run -- python -m scripts.calibrate --hierarchy testbed-hierarchy.json --out fitted.json
    mpirun -n 8 python -m scripts.calibrate --hierarchy h.json --out fitted.json

For each level ``l`` with two or more children:

* ping-pong between rank 0 and the first rank of the next level-``l`` unit (their
  outermost differing level is ``l``), small and large messages, one-way time =
  round trip / 2, median over iterations after warm-up;
* ``alpha`` (latency_us) and ``beta`` (bandwidth_GBps) of ``t(s) = alpha + s / beta``:
  ``1/beta`` the least-squares slope over the large sizes, ``alpha`` the median time of
  the small ones (see :func:`fit_alpha_beta`);
* concurrent: every rank of unit 0 sends to its counterpart in unit 1 at once; the
  aggregate rate out of the unit (``senders * bytes / (t - alpha)``) is the uplink
  (``uplink_GBps``), the figure that says how the unit's devices share its way out.

Once for the whole job: the rate at which a rank sums float32 data (``a += b``) while
every rank does so, written as ``reduce_GBps`` where the hierarchy model has that field.

``--out`` gets a plain hierarchy (``Hierarchy.model_validate_json`` loads it); the raw
measurements and fits go to a sidecar, ``--raw`` (default ``OUT`` with ``.calibration.json``).

Exit codes: 0 written; 1 measurement failed (the job is aborted); 2 bad arguments or a
hierarchy that does not match the number of ranks.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np
from rich.table import Table

from p2synth.hierarchies.cli import ArgumentParser, UsageError, size_argument
from p2synth.hierarchies.model import Hierarchy, Level
from p2synth.runtime.calibration import (  # the measuring and the fit live in the runtime, which the tuner shares
    LARGE,
    REDUCE_BYTES,
    REDUCE_WINDOW_S,
    SMALL,
    Bench,
    Fit,
    KiB,
    MiB,
    fit_alpha_beta,
    fitted_hierarchy,
    library_of,
    measure_level,
    message_sizes,
    significant,
)
from scripts.tables import console, table

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
__all__ = ["LARGE", "Fit", "fit_alpha_beta", "fitted_hierarchy", "main", "message_sizes"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; UsageError on a bad one."""
    p = ArgumentParser(prog="python -m scripts.calibrate", description=__doc__.split("\n")[0])
    p.add_argument("--hierarchy", required=True, help="hierarchy JSON (levels outermost first), e.g. testbed-hierarchy.json")
    p.add_argument("--out", required=True, help="write the fitted hierarchy JSON here")
    p.add_argument("--raw", help="write raw measurements and fits here (default: OUT with .calibration.json)")
    p.add_argument("--max-bytes", type=size_argument, default=16 * MiB, help="largest message (default 16M; K/M suffixes)")
    p.add_argument("--iters", type=int, default=5, help="timed iterations for large messages (default 5)")
    p.add_argument("--small-iters", type=int, default=30, help=f"timed iterations for messages up to {SMALL // KiB} KiB (default 30)")
    p.add_argument("--warmup", type=int, default=2, help="untimed iterations before each size (default 2)")
    p.add_argument("--name", help="name of the fitted hierarchy (default: the input's name + '-fitted')")
    args = p.parse_args(argv)
    if args.iters < 1 or args.small_iters < 1 or args.warmup < 0:
        raise UsageError("--iters and --small-iters must be at least 1, --warmup at least 0")
    if args.max_bytes < 64 * KiB:
        raise UsageError("--max-bytes must be at least 64K (the bandwidth fit needs large messages)")
    return args


FIGURES = ("latency_us", "bandwidth_GBps", "uplink_GBps", "duplex_efficiency")


def report(h: Hierarchy, fitted: Hierarchy, results: dict[int, dict]) -> Table:
    """Each level's figures before -> after the fit, and why a level was not measured or not fitted."""

    def change(old: Level, new: Level, figure: str) -> str:
        a, b = getattr(old, figure), getattr(new, figure)
        return f"{'-' if a is None else f'{a:g}'} -> {'-' if b is None else f'{b:g}'}"

    rows = []
    for l, (old, new) in enumerate(zip(h.levels, fitted.levels)):
        note = "" if l in results else "not measured: count 1"
        if "fit_error" in results.get(l, {}):
            note = f"not fitted: {results[l]['fit_error']}; figures kept"
        rows.append((old.name, *(change(old, new, f) for f in FIGURES), note))
    return table(("level", *FIGURES, "note"), rows, title="calibrate: the input's figures -> the fitted ones")


def main(argv: list[str] | None = None) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    try:  # everything here is deterministic, so every rank takes the same branch
        args = parse_args(argv)
        try:
            h = Hierarchy.model_validate_json(Path(args.hierarchy).read_text())
        except (OSError, ValueError) as e:
            raise UsageError(f"cannot load hierarchy {args.hierarchy}: {str(e).splitlines()[0]}") from None
        if comm.Get_size() != h.num_devices:
            raise UsageError(f"the hierarchy has {h.num_devices} devices ({h.describe()}) but the job has "
                             f"{comm.Get_size()} ranks; run with -n {h.num_devices}")
    except UsageError as e:
        if rank == 0:
            print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        sizes = message_sizes(args.max_bytes)
        bench = Bench(comm, args.iters, args.small_iters, args.warmup, np.zeros(args.max_bytes, dtype=np.uint8))
        results = {}
        for l, lv in enumerate(h.levels):
            if lv.count < 2:
                continue
            if rank == 0:
                print(f"calibrate: level {lv.name} (ranks 0 and {h.devices_below(l)}) ...", file=sys.stderr, flush=True)
            res = measure_level(bench, h, l, sizes, args.max_bytes)
            if rank == 0:
                results[l] = res
        reduce_alone, reduce_rates = bench.reduce_rates(min(args.max_bytes, REDUCE_BYTES))
        if rank == 0:
            reduce_GBps = statistics.median(reduce_rates) / 1e9
            fitted = fitted_hierarchy(h, results, args.name, reduce_GBps, library_of(MPI.Get_library_version()))
            out = Path(args.out)
            raw = Path(args.raw) if args.raw else out.with_suffix(".calibration.json")
            out.write_text(fitted.model_dump_json(indent=2, exclude_none=True) + "\n")
            raw.write_text(json.dumps({
                "hierarchy_in": json.loads(h.model_dump_json(exclude_none=True)),
                "hierarchy_out": str(out), "ranks": comm.Get_size(), "mpi": MPI.Get_library_version().splitlines()[0],
                "iters": args.iters, "small_iters": args.small_iters, "warmup": args.warmup,
                "levels": [results[l] for l in sorted(results)],
                "reduce": {"bytes": min(args.max_bytes, REDUCE_BYTES), "window_s": REDUCE_WINDOW_S,
                           "rank0_alone_GBps": significant(reduce_alone / 1e9),
                           "all_at_once_per_rank_GBps": [significant(r / 1e9) for r in reduce_rates],
                           "all_at_once_median_GBps": significant(reduce_GBps)},
            }, indent=2) + "\n")
            console(stderr=True).print(report(h, fitted, results))
            print(f"reduce (a += b, float32): {reduce_alone / 1e9:.3g} GB/s for one rank alone, {reduce_GBps:.3g} GB/s "
                  f"per rank with all {comm.Get_size()} at once", file=sys.stderr)
            print(f"calibrate: wrote {out} and {raw}", file=sys.stderr)
        comm.Barrier()
        return EXIT_OK
    except Exception as e:  # noqa: BLE001  (one rank failing must not leave the others waiting forever)
        print(f"calibrate: rank {rank}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        comm.Abort(EXIT_FAILED)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
