"""Time MPI's own collectives over all ranks, to see which Open MPI component runs them (docs/simulator.md).

    python -m scripts.testbed run -- python -m scripts.han_check
    OMPI_MCA_coll='^han' python -m scripts.testbed run -- python -m scripts.han_check

Allreduce, Reduce_scatter_block, Reduce and Bcast of float32 buffers at 4 and 16 MiB over
``MPI_COMM_WORLD``, each the median of 5 timed calls after one warm-up, between barriers. Run
once as is and once with ``OMPI_MCA_coll='^han'`` (Open MPI's hierarchical ``coll/han``
excluded, so ``coll/tuned`` runs them): the difference is HAN's. Rank 0 prints one line per
collective and size, tagged with the ``OMPI_MCA_coll`` setting. Times only; the runtime's
benchmarks (``runtime.bench``, ``runtime.tune``) check results, this does not.

    python -m scripts.testbed run -- python -m scripts.han_check --layouts

On 8 ranks of 4 nodes x 2 ranks: instead, ``Allreduce`` over two 4-rank communicators at once
(two ranks on each of two nodes, HAN's case), laid out on adjacent nodes (ranks 0-3 and 4-7) and
on alternate ones (0, 1, 4, 5 and 2, 3, 6, 7), interleaved, at 4 and 16 MiB; on any other number of
ranks it prints one line saying so and exits 2.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

SIZES_MIB = (4, 16)
REPEATS = 6  # the first is a warm-up


def main(argv: list[str] | None = None) -> int:
    """Time every collective at every size (or, with ``--layouts``, the two layouts); rank 0 prints the medians."""
    comm = MPI.COMM_WORLD
    tag = os.environ.get("OMPI_MCA_coll", "default")
    if "--layouts" in (sys.argv[1:] if argv is None else argv):
        return layouts(comm, tag)
    for mib in SIZES_MIB:
        count = (mib << 20) // 4
        src, dst = np.ones(count, np.float32), np.empty(count, np.float32)
        block = np.empty(count // comm.size, np.float32)
        calls = {"Allreduce": lambda: comm.Allreduce(src, dst),
                 "Reduce_scatter_block": lambda: comm.Reduce_scatter_block(src, block),
                 "Reduce": lambda: comm.Reduce(src, dst, root=0),
                 "Bcast": lambda: comm.Bcast(src, root=0)}
        for name, call in calls.items():
            times = [timed(comm, call) for _ in range(REPEATS)]
            if comm.rank == 0:
                print(f"{tag:8s} {mib:3d} MiB {name:22s} {1e3 * statistics.median(times[1:]):9.1f} ms", flush=True)
    return 0


def timed(comm: MPI.Comm, call) -> float:
    """Seconds of `call()` on every rank of `comm`, from a barrier before it to a barrier after it."""
    comm.Barrier()
    start = time.perf_counter()
    call()
    comm.Barrier()
    return time.perf_counter() - start


def layouts(comm: MPI.Comm, tag: str) -> int:
    """Allreduce over two concurrent 4-rank communicators, on adjacent and on alternate nodes (8 ranks, 2 per node)."""
    if comm.size != 8:
        if comm.rank == 0:
            print("han_check --layouts: needs 8 ranks (4 nodes x 2); run it on the 4 x 2 testbed", file=sys.stderr)
        return 2
    subs = {"adjacent nodes (0-3, 4-7)": comm.Split(comm.rank // 4, comm.rank),
            "alternate nodes (0,1,4,5; 2,3,6,7)": comm.Split((comm.rank // 2) % 2, comm.rank)}
    for mib in SIZES_MIB:
        count = (mib << 20) // 4
        src, dst = np.ones(count, np.float32), np.empty(count, np.float32)
        times: dict[str, list[float]] = {name: [] for name in subs}
        for _ in range(REPEATS):
            for name, sub in subs.items():  # interleaved: drift hits both alike
                times[name].append(timed(comm, lambda: sub.Allreduce(src, dst)))
        if comm.rank == 0:
            for name, ts in times.items():
                print(f"{tag:8s} {mib:3d} MiB Allreduce on {name:34s} {1e3 * statistics.median(ts[1:]):9.1f} ms", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
