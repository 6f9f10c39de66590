"""Benchmark: what several TCP flows get of a shaped outer link, one way, converging, and both ways at once.

    sudo env PATH="$PATH" python -m scripts.testbed up --nodes 4 --ranks-per-node 2 --inter-node 1gbit --racks 2 --inter-rack 400mbit
    sudo env PATH="$PATH" python -m scripts.testbed run -- python -m scripts.flows --hierarchy testbed-hierarchy.json --out flows.json

It checks the simulator's traffic accounting for the outermost level (``solver/cost.py``'s
``level_time``: flows leaving one unit share its ``uplink_GBps``, each direction on its own),
on the patterns collectives make. Unit 0 is the first outer unit (ranks ``0..d-1``), unit 1
the next (``d..2d-1``). Per pattern and flow count ``F``, ``--iters`` timed rounds (barrier,
every flow moves ``--bytes``, the slowest rank's time), median; the aggregate rate one way is
``F * bytes / time``:

* ``parallel``: ranks ``0..F-1`` each send to ``d..d+F-1`` (what calibrate's concurrent send does);
* ``converging``: ``F`` senders of unit 0 (one per inner unit first) all send to rank ``d``;
* ``both-ways``: ranks ``0..F-1`` and ``d..d+F-1`` exchange at once (Sendrecv): data one way
  shares each tbf queue with the other way's ACKs, as in ring and recursive-halving steps.

Rank 0 prints a table (rate per pattern over the single-flow rate) and writes ``--out``.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np

from p2synth.hierarchies.cli import ArgumentParser, size_argument
from p2synth.hierarchies.model import Hierarchy

PATTERNS = ("parallel", "converging", "both-ways")


def parse_args(argv):
    p = ArgumentParser(prog="python -m scripts.flows", description=__doc__.split("\n")[0])
    p.add_argument("--hierarchy", required=True, help="the testbed's hierarchy file (testbed-hierarchy.json)")
    p.add_argument("--out", type=Path, required=True, help="JSON results (rank 0)")
    p.add_argument("--bytes", type=size_argument, default=4 << 20, help="bytes per flow per round (default 4M)")
    p.add_argument("--iters", type=int, default=7, help="timed rounds per pattern and flow count (default 7)")
    return p.parse_args(argv)


def senders(pattern: str, flows: int, d: int, inner: int) -> list[tuple[int, int]]:
    """(source, destination) pairs of one round; `inner` = devices per inner unit inside unit 0."""
    if pattern == "converging":
        spread = [u * inner + r for r in range(inner) for u in range(d // inner)]  # one per inner unit first
        return [(s, d) for s in spread[:flows]]
    return [(i, d + i) for i in range(flows)]


def round_time(comm, pattern: str, pairs: list[tuple[int, int]], buf: np.ndarray, rbufs: list[np.ndarray]) -> float:
    """One round: barrier, every pair's transfer, this rank's elapsed time; the max over ranks (on all)."""
    from mpi4py import MPI

    rank = comm.Get_rank()
    comm.Barrier()
    t0 = MPI.Wtime()
    reqs = []
    for i, (src, dst) in enumerate(pairs):
        if pattern == "both-ways":
            if rank == src:
                comm.Sendrecv(buf, dest=dst, sendtag=1, recvbuf=rbufs[0], source=dst, recvtag=1)
            elif rank == dst:
                comm.Sendrecv(buf, dest=src, sendtag=1, recvbuf=rbufs[0], source=src, recvtag=1)
        else:
            if rank == src:
                reqs.append(comm.Isend(buf, dest=dst, tag=2))
            elif rank == dst:
                reqs.append(comm.Irecv(rbufs[i], source=src, tag=2))
    MPI.Request.Waitall(reqs)
    return comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)


def main(argv=None) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    args = parse_args(argv)
    h = Hierarchy.model_validate_json(Path(args.hierarchy).read_text())
    if comm.Get_size() != h.num_devices:
        if comm.Get_rank() == 0:
            print(f"error: the hierarchy has {h.num_devices} devices, the job {comm.Get_size()} ranks", file=sys.stderr)
        return 2
    d = h.devices_below(0)
    inner = h.devices_below(1) if len(h.levels) > 2 else 1
    buf = np.ones(args.bytes, dtype=np.uint8)
    rbufs = [np.empty(args.bytes, dtype=np.uint8) for _ in range(d)]
    counts = [f for f in (1, 2, 4, 8) if f <= d]
    rows = []
    for pattern in PATTERNS:
        for flows in counts:
            pairs = senders(pattern, flows, d, inner)
            round_time(comm, pattern, pairs, buf, rbufs)  # warm-up
            times = [round_time(comm, pattern, pairs, buf, rbufs) for _ in range(args.iters)]
            t = statistics.median(times)
            rows.append({"pattern": pattern, "flows": flows, "pairs": pairs, "median_s": t, "times_s": times,
                         "rate_GBps": flows * args.bytes / t / 1e9})
    if comm.Get_rank() == 0:
        single = next(r["rate_GBps"] for r in rows if r["pattern"] == "parallel" and r["flows"] == 1)
        print(f"# outer level {h.levels[0].name}: units of {d} devices; {args.bytes} B per flow; median of {args.iters}; "
              f"nominal {h.levels[0].bandwidth_GBps} GB/s")
        print(f"{'pattern':<11} {'flows':>5} {'time(ms)':>10} {'rate(GB/s)':>11} {'vs 1 flow':>10} {'spread':>7}")
        for r in rows:
            spread = (max(r["times_s"]) - min(r["times_s"])) / r["median_s"]
            r["vs_single_flow"] = r["rate_GBps"] / single
            print(f"{r['pattern']:<11} {r['flows']:>5} {r['median_s'] * 1e3:>10.2f} {r['rate_GBps']:>11.4f} "
                  f"{r['vs_single_flow']:>10.2f} {spread:>7.2f}")
        args.out.write_text(json.dumps({"hierarchy": h.model_dump(mode="json", exclude_none=True), "bytes": args.bytes,
                                        "iters": args.iters, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
