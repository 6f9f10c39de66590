"""Time MPI's own collectives over all ranks, to see which Open MPI component runs them (docs/simulator.md).

    python -m scripts.testbed run -- python -m scripts.han_check
    OMPI_MCA_coll='^han' python -m scripts.testbed run -- python -m scripts.han_check

Allreduce, Reduce_scatter_block, Reduce and Bcast of float32 buffers at 4 and 16 MiB over
``MPI_COMM_WORLD``, each the median of 5 timed calls after one warm-up, between barriers. Run
once as is and once with ``OMPI_MCA_coll='^han'`` (Open MPI's hierarchical ``coll/han``
excluded, so ``coll/tuned`` runs them): the difference is HAN's. Rank 0 prints one line per
collective and size, tagged with the ``OMPI_MCA_coll`` setting. Times only; the runtime's
benchmarks (``runtime.bench``, ``runtime.tune``) check results, this does not.
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np
from mpi4py import MPI

SIZES_MIB = (4, 16)
REPEATS = 6  # the first is a warm-up


def main() -> int:
    """Time every collective at every size; rank 0 prints the medians."""
    comm = MPI.COMM_WORLD
    tag = os.environ.get("OMPI_MCA_coll", "default")
    for mib in SIZES_MIB:
        count = (mib << 20) // 4
        src, dst = np.ones(count, np.float32), np.empty(count, np.float32)
        block = np.empty(count // comm.size, np.float32)
        calls = {"Allreduce": lambda: comm.Allreduce(src, dst),
                 "Reduce_scatter_block": lambda: comm.Reduce_scatter_block(src, block),
                 "Reduce": lambda: comm.Reduce(src, dst, root=0),
                 "Bcast": lambda: comm.Bcast(src, root=0)}
        for name, call in calls.items():
            times = []
            for _ in range(REPEATS):
                comm.Barrier()
                start = time.perf_counter()
                call()
                comm.Barrier()
                times.append(time.perf_counter() - start)
            if comm.rank == 0:
                print(f"{tag:8s} {mib:3d} MiB {name:22s} {1e3 * statistics.median(times[1:]):9.1f} ms", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
