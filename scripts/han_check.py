"""Does the simulator's coll/han term predict my cluster? Time Open MPI's own collectives, then predict them.

    mpirun -n 8 python -m scripts.han_check measure --out run.txt
    OMPI_MCA_coll='^han' mpirun -n 8 python -m scripts.han_check measure --out run.txt
    python -m scripts.han_check predict fitted.json run.txt

``measure`` (one rank per device, as calibration; on the emulated cluster after
``python -m scripts.testbed run --``) times ``Allreduce``, ``Reduce_scatter_block``,
``Reduce`` and ``Bcast`` of float32 buffers over ``MPI_COMM_WORLD`` at every size of
``--sizes`` (default 4 and 16 MiB), each the median of 5 timed calls after one warm-up,
between barriers. Rank 0 prints a table and, with ``--out``, appends one record per call,
tagged with the ``OMPI_MCA_coll`` setting (``default`` when unset): run it once as is and
once with ``OMPI_MCA_coll='^han'`` (Open MPI's hierarchical ``coll/han`` excluded, so
``coll/tuned`` runs the calls) into the same file, and the difference is coll/han's. Times
only; ``runtime.bench`` checks results, this does not.

``measure --layouts`` (8 ranks, 4 nodes x 2): ``Allreduce`` over two 4-rank communicators
at once (two ranks on each of two nodes, coll/han's case), on adjacent nodes (ranks 0-3 and
4-7) and on alternate ones (0, 1, 4, 5 and 2, 3, 6, 7), interleaved.

``predict`` reads the ``default`` records of a run (the calls coll/han ran, each over every
rank) and predicts each as one step over all the levels of HIERARCHY, the calibrated or
fitted hierarchy of the same machine with ``library`` ``open-mpi`` (the simulator's coll/han
term applies to it); it prints measured, predicted and their ratio per call, then the median
ratio. docs/simulator.md ("Open MPI's hierarchical component") has what it found on the
testbeds (docs/measurements/han/).

Exit codes: 0 done; 2 bad arguments, a file that cannot be read or holds no ``default``
record, a hierarchy without ``library`` ``open-mpi``, or ``--layouts`` on other than 8
ranks (one line on stderr, from rank 0).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from p2synth.hierarchies import Axis, Collective, Hierarchy, Placement, Request, abstract
from p2synth.hierarchies.cli import EXIT_USAGE, ArgumentParser, UsageError, one_line, sizes_argument
from p2synth.hierarchies.model import CollectiveLibrary, ReduceScatterRun
from scripts.tables import console, table

MiB = 1 << 20
REPEATS = 6  # the first is a warm-up
LAYOUT_RANKS = 8
CALLS = {"Allreduce": Collective.ALL_REDUCE, "Reduce_scatter_block": Collective.REDUCE_SCATTER,
         "Reduce": Collective.REDUCE, "Bcast": Collective.BROADCAST}
RECORD = re.compile(r"default\s+(\d+) MiB (\w+)\s+([\d.]+) ms$")  # a flat call coll/han ran (not a --layouts one)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; UsageError on a bad one."""
    p = ArgumentParser(prog="python -m scripts.han_check", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    m = sub.add_parser("measure", help="time MPI's own collectives over all ranks (under mpirun)")
    m.add_argument("--sizes", type=sizes_argument, default=(4 * MiB, 16 * MiB),
                   help="message sizes, whole MiB: SIZE or MIN:MAX[:FACTOR] (default 4M and 16M)")
    m.add_argument("--layouts", action="store_true", help="Allreduce over two 4-rank groups on adjacent and alternate nodes")
    m.add_argument("--out", type=Path, help="append one record per call to this file (rank 0)")
    r = sub.add_parser("predict", help="the simulator's time beside every call coll/han ran in a measured run")
    r.add_argument("hierarchy", type=Path, help="the machine's calibrated or fitted hierarchy JSON (library open-mpi)")
    r.add_argument("run", type=Path, help="a file that 'measure --out' wrote")
    args = p.parse_args(argv)
    if args.command == "measure" and any(n % MiB for n in args.sizes):
        raise UsageError("--sizes: every size must be a whole number of MiB (e.g. 4M:64M)")
    return args


def record(tag: str, nbytes: int, call: str, seconds: float) -> str:
    """One record of a run file: the OMPI_MCA_coll setting, the size, the call and its median in ms."""
    return f"{tag:8s} {nbytes // MiB:3d} MiB {call:22s} {1e3 * seconds:11.3f} ms"


# ---- measure (under mpirun) -----------------------------------------------------------------------------------
def timed(comm, call: Callable[[], object]) -> float:
    """Seconds of `call()` on every rank of `comm`, from a barrier before it to a barrier after it."""
    comm.Barrier()
    start = time.perf_counter()
    call()
    comm.Barrier()
    return time.perf_counter() - start


def median_time(comm, call: Callable[[], object]) -> float:
    """The median of `call`'s timed runs after one warm-up."""
    return statistics.median([timed(comm, call) for _ in range(REPEATS)][1:])


def flat_calls(comm, nbytes: int) -> dict[str, Callable[[], object]]:
    """MPI's own collectives over all of `comm` at `nbytes` of float32, by the name records give them."""
    count = nbytes // 4
    src, dst = np.ones(count, np.float32), np.empty(count, np.float32)
    block = np.empty(count // comm.size, np.float32)
    return {"Allreduce": lambda: comm.Allreduce(src, dst),
            "Reduce_scatter_block": lambda: comm.Reduce_scatter_block(src, block),
            "Reduce": lambda: comm.Reduce(src, dst, root=0),
            "Bcast": lambda: comm.Bcast(src, root=0)}


def layout_times(comm, nbytes: int) -> dict[str, float]:
    """Median Allreduce times over two concurrent 4-rank communicators, on adjacent and on alternate nodes,
    interleaved so that drift hits both alike."""
    subs = {"adjacent nodes (0-3, 4-7)": comm.Split(comm.rank // 4, comm.rank),
            "alternate nodes (0,1,4,5; 2,3,6,7)": comm.Split((comm.rank // 2) % 2, comm.rank)}
    count = nbytes // 4
    src, dst = np.ones(count, np.float32), np.empty(count, np.float32)
    times: dict[str, list[float]] = {name: [] for name in subs}
    for _ in range(REPEATS):
        for name, sub in subs.items():
            times[name].append(timed(comm, lambda: sub.Allreduce(src, dst)))
    return {f"Allreduce on {name}": statistics.median(ts[1:]) for name, ts in times.items()}


def measure(args: argparse.Namespace) -> int:
    """Time every call at every size; rank 0 prints the table and appends the records to ``--out``."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if args.layouts and comm.size != LAYOUT_RANKS:
        raise UsageError(f"--layouts needs {LAYOUT_RANKS} ranks (4 nodes x 2), the job has {comm.size}")
    tag = os.environ.get("OMPI_MCA_coll", "default")
    rows = []
    for nbytes in args.sizes:
        if args.layouts:
            rows += [(call, nbytes, t) for call, t in layout_times(comm, nbytes).items()]
        else:
            rows += [(call, nbytes, median_time(comm, run)) for call, run in flat_calls(comm, nbytes).items()]
    if comm.rank == 0:
        title = f"MPI's own calls over {comm.size} ranks, median of {REPEATS - 1} after a warm-up; OMPI_MCA_coll={tag}"
        console().print(table(("call", "size (MiB)", "median (ms)"),
                              [(call, n // MiB, f"{1e3 * t:.1f}") for call, n, t in rows], title=title))
        if args.out is not None:
            try:
                with args.out.open("a") as f:
                    f.writelines(record(tag, n, call, t) + "\n" for call, n, t in rows)
            except OSError as e:
                raise UsageError(f"cannot append to --out {args.out}: {e.strerror}") from None
    return 0


# ---- predict ----------------------------------------------------------------------------------------------------
def predicted_seconds(h: Hierarchy, op: Collective, nbytes: int) -> float:
    """The simulator's time for `op` over every device of `h` at `nbytes`, as one step of MPI's own call (a
    reduce_scatter is ``MPI_Reduce_scatter_block``: ``reduce_scatter: library``)."""
    from p2synth.solver.cost import step_seconds  # here, not above: the ranks of 'measure' need no solver (nor Z3)
    from p2synth.solver.simulator import Simulator

    h = h.model_copy(update={"reduce_scatter": ReduceScatterRun.LIBRARY})
    placement = Placement(h, (Axis(name="data", size=h.num_devices),), (h.counts,))
    n = len(h.levels)
    sim = Simulator(placement, Request(frozenset({0}), op), float(nbytes))
    return step_seconds(sim, abstract.start_state(op, n), op, (1 << n) - 1, n)


def read_run(hierarchy: Path, run: Path) -> tuple[Hierarchy, list[tuple[int, Collective, float]]]:
    """The hierarchy and the run's coll/han records as (bytes, collective, measured seconds); UsageError if either
    cannot be read, the hierarchy is not Open MPI's or the run holds no such record."""
    try:
        h = Hierarchy.model_validate_json(hierarchy.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read hierarchy {hierarchy}: {one_line(e)}") from None
    if h.library is not CollectiveLibrary.OPEN_MPI:
        raise UsageError(f"hierarchy {hierarchy} has no \"library\": \"open-mpi\"; the coll/han term applies only to it")
    try:
        found = [RECORD.match(line.strip()) for line in run.read_text().splitlines()]
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read run {run}: {one_line(e)}") from None
    calls = [(int(m[1]) * MiB, CALLS[m[2]], float(m[3]) / 1e3) for m in found if m and m[2] in CALLS]
    if not calls:
        raise UsageError(f"{run} holds no 'default' record of 'han_check measure'; measure without OMPI_MCA_coll first")
    return h, calls


def predict(args: argparse.Namespace) -> int:
    """Print measured, predicted and their ratio per call, then the median ratio."""
    h, calls = read_run(args.hierarchy, args.run)
    rows, ratios = [], []
    for nbytes, op, measured in calls:
        predicted = predicted_seconds(h, op, nbytes)
        ratios.append(measured / predicted)
        rows.append((op.value, nbytes // MiB, f"{1e3 * measured:.1f}", f"{1e3 * predicted:.1f}", f"{ratios[-1]:.2f}"))
    out = console()
    out.print(table(("collective", "size (MiB)", "measured (ms)", "predicted (ms)", "measured / predicted"), rows,
                    title=f"{args.run} predicted on {h.describe()}"))
    out.print(f"median measured / predicted: {statistics.median(ratios):.2f} over {len(ratios)} calls")
    return 0


def launcher_rank() -> int:
    """This process's rank as the MPI launcher set it (0 outside a job): who prints a usage error before MPI starts."""
    for name in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; the exit status."""
    try:
        args = parse_args(argv)
        return measure(args) if args.command == "measure" else predict(args)
    except UsageError as e:
        if launcher_rank() == 0:
            print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
