"""Measure each level's latency and bandwidth over MPI (or gloo) and write a hierarchy file with fitted figures.

Run with one rank per device of the hierarchy, ranks placed as the hierarchy numbers
them (consecutive per node, as ``mpirun`` and the testbed place them)::

    sudo python -m scripts.testbed run -- python -m scripts.calibrate --hierarchy testbed-hierarchy.json --out fitted.json
    mpirun -n 8 python -m scripts.calibrate --hierarchy h.json --out fitted.json

``--client torch`` runs the same measurements and fits over torch.distributed's gloo backend
(``runtime/torch_comm.py``) and writes ``"library": "gloo"``: gloo moves every byte over TCP, also
inside a node (loopback), so an MPI calibration (shared memory inside a node) misprices gloo's inner
levels. Launch it with mpiexec, the testbed's ``run`` (the rendezvous goes over MPI; ``--ifname`` or
``GLOO_SOCKET_IFNAME`` picks the interface) or torchrun::

    sudo env PATH="$PATH" python -m scripts.testbed run -- python -m scripts.calibrate --client torch --hierarchy testbed-hierarchy.json --out fitted-gloo.json
    torchrun --nproc-per-node 4 -m scripts.calibrate --client torch --hierarchy h.json --out fitted-gloo.json

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
measurements and fits go to a sidecar, ``--raw`` (default ``OUT`` with ``.calibration.json``), with what ran them
under ``run`` (``runtime/provenance.py``: the p2synth version, the checkout's commit, the UTC start and end).

Exit codes: 0 written; 1 measurement failed (the job is aborted); 2 bad arguments or a
hierarchy that does not match the number of ranks (one line, from rank 0).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np
from rich.table import Table

from p2synth.hierarchies.cli import ArgumentParser, UsageError, size_argument, write_text_atomic
from p2synth.hierarchies.model import CollectiveLibrary, Hierarchy, Level
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
from p2synth.runtime.provenance import RunStart
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
    p.add_argument("--client", choices=("mpi", "torch"), default="mpi",
                   help="measure over MPI (mpi4py; default) or over torch.distributed's gloo backend (torch)")
    p.add_argument("--ifname", help="with --client torch: the network interface gloo binds "
                                    "(default: GLOO_SOCKET_IFNAME, else the only one besides lo)")
    args = p.parse_args(argv)
    if args.ifname and args.client != "torch":
        raise UsageError("--ifname needs --client torch (MPI picks its interfaces itself)")
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


def client_of(argv: list[str] | None) -> str:
    """The ``--client`` asked for, read before the job is joined (mpi when absent or unreadable: the full parse then
    says what is wrong)."""
    p = ArgumentParser(add_help=False)
    p.add_argument("--client", default="mpi")
    try:
        return p.parse_known_args(argv)[0].client
    except UsageError:
        return "mpi"


def load_hierarchy(path: str) -> Hierarchy:
    try:
        return Hierarchy.model_validate_json(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot load hierarchy {path}: {str(e).splitlines()[0]}") from None


def calibrate(args: argparse.Namespace, h: Hierarchy, bench: Bench, world: int, library: CollectiveLibrary | None,
              runs_on: dict) -> None:
    """Measure every level and the summing rate, fit, and (rank 0) write OUT and the raw sidecar and print the table;
    `runs_on` goes into the sidecar (the MPI library, or torch's version and backend). Collective."""
    rank = bench.comm.rank()
    start = RunStart.now() if rank == 0 else None  # git runs once, on the rank that writes
    sizes = message_sizes(args.max_bytes)
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
        fitted = fitted_hierarchy(h, results, args.name, reduce_GBps, library)
        out = Path(args.out)
        raw = Path(args.raw) if args.raw else out.with_suffix(".calibration.json")
        write_text_atomic(fitted.model_dump_json(indent=2, exclude_none=True) + "\n", out)
        write_text_atomic(json.dumps({
            "hierarchy_in": json.loads(h.model_dump_json(exclude_none=True)),
            "hierarchy_out": str(out), "ranks": world, **runs_on, "run": start.record(),
            "iters": args.iters, "small_iters": args.small_iters, "warmup": args.warmup,
            "levels": [results[l] for l in sorted(results)],
            "reduce": {"bytes": min(args.max_bytes, REDUCE_BYTES), "window_s": REDUCE_WINDOW_S,
                       "rank0_alone_GBps": significant(reduce_alone / 1e9),
                       "all_at_once_per_rank_GBps": [significant(r / 1e9) for r in reduce_rates],
                       "all_at_once_median_GBps": significant(reduce_GBps)},
        }, indent=2) + "\n", raw)
        console(stderr=True).print(report(h, fitted, results))
        print(f"reduce (a += b, float32): {reduce_alone / 1e9:.3g} GB/s for one rank alone, {reduce_GBps:.3g} GB/s "
              f"per rank with all {world} at once", file=sys.stderr)
        print(f"calibrate: wrote {out} and {raw}", file=sys.stderr)
    bench.comm.barrier()


def main(argv: list[str] | None = None) -> int:
    if client_of(argv) == "torch":
        return main_torch(argv)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    try:  # everything here is deterministic, so every rank takes the same branch
        args = parse_args(argv)
        h = load_hierarchy(args.hierarchy)
        if comm.Get_size() != h.num_devices:
            raise UsageError(f"the hierarchy has {h.num_devices} devices ({h.describe()}) but the job has "
                             f"{comm.Get_size()} ranks; run with -n {h.num_devices}")
    except UsageError as e:
        if rank == 0:
            print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        bench = Bench(comm, args.iters, args.small_iters, args.warmup, np.zeros(args.max_bytes, dtype=np.uint8))
        calibrate(args, h, bench, comm.Get_size(), library_of(MPI.Get_library_version()),
                  {"mpi": MPI.Get_library_version().splitlines()[0]})
        return EXIT_OK
    except Exception as e:  # noqa: BLE001  (one rank failing must not leave the others waiting forever)
        print(f"calibrate: rank {rank}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        comm.Abort(EXIT_FAILED)
        return EXIT_FAILED


def main_torch(argv: list[str] | None) -> int:
    """``--client torch``: join the job's torch.distributed gloo group (runtime/torch_dist.py) and calibrate over it."""
    from p2synth.runtime.torch_dist import init_process_group, interface_address, rank_and_world  # torch: lazily

    try:
        rank = rank_and_world(os.environ)[0]  # who prints a usage error
    except UsageError:
        rank = 0
    try:  # every rank sees the same arguments, files and variables, so every rank takes the same branch
        args = parse_args(argv)
        h = load_hierarchy(args.hierarchy)
        rank, world = rank_and_world(os.environ)
        if world != h.num_devices:
            raise UsageError(f"the hierarchy has {h.num_devices} devices ({h.describe()}) but the job has "
                             f"{world} ranks; run {h.num_devices} processes")
        if args.ifname:
            interface_address(args.ifname)  # on every rank, before any waits for rank 0's store
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            raise UsageError("torch is not installed (pip install -e '.[torch]')") from None
    except UsageError as e:
        if rank == 0:
            print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        from p2synth.runtime.torch_comm import TorchComm

        init_process_group("gloo", ifname=args.ifname)
        bench = Bench(TorchComm(), args.iters, args.small_iters, args.warmup, np.zeros(args.max_bytes, dtype=np.uint8))
        calibrate(args, h, bench, world, CollectiveLibrary.GLOO, {"client": "torch", "backend": "gloo",
                                                                   "torch": torch.__version__})
        dist.destroy_process_group()
        return EXIT_OK
    except Exception as e:  # noqa: BLE001  (one rank failing must not leave the others waiting forever)
        print(f"calibrate: rank {rank}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        if "OMPI_COMM_WORLD_RANK" in os.environ:  # under mpiexec / the testbed: end the whole job
            from mpi4py import MPI

            MPI.COMM_WORLD.Abort(EXIT_FAILED)
        sys.stderr.flush()
        os._exit(EXIT_FAILED)  # under torchrun the launcher stops the other ranks; no teardown that could wait on them


if __name__ == "__main__":
    sys.exit(main())
