"""One reduce_scatter, all_gather or all_to_all step, several ways, side by side: what the runtime should run (issue 32).

    python -m scripts.testbed up --nodes 4 --ranks-per-node 2 --inter-node 1gbit
    python -m scripts.testbed run -- python -m scripts.bench_reduce_scatter --bytes 64M --rounds 7
    python -m scripts.testbed run -- python -m scripts.bench_reduce_scatter --collective all_gather --bytes 64M
    python -m scripts.testbed run -- python -m scripts.bench_reduce_scatter --collective all_to_all --flat --bytes 64M

Over every rank of a ``nodes x ranks_per_node`` job (ranks consecutive per
node, as ``testbed`` places them), the node step of a two-step program at
message size M: one group per local rank, one member per node. For
reduce_scatter, ``RS(data@node)`` of ``RS(data@core) -> RS(data@node)``: each
member holds M / ranks_per_node bytes (float32) and keeps a 1/k block of their
sum. For all_gather, ``AG(data@node)`` of ``AG(data@node) -> AG(data@core)``:
each member holds a 1/k block and ends with the group's M / ranks_per_node
bytes. For all_to_all, ``A2A(data@node)`` of ``A2A(data@node) ->
A2A(data@core)``: each member holds M / ranks_per_node bytes, block j for
member j. With ``--flat``, the one step over every rank instead (each holding
M, or a 1/size block for all_gather). Forms, timed in interleaved rounds (alternating order), each round's
time the slowest rank's, after one untimed run each:

* reduce_scatter: ``library``, ``MPI_Reduce_scatter_block`` (the runtime's
  ``MpiGroup``); ``alltoall`` / ``ialltoall``, ``MPI_Alltoall`` /
  ``MPI_Ialltoall`` of the blocks, then the sum of the received blocks;
  ``pairwise`` / ``pairwise-started``, the runtime's ``PairwiseExchange``,
  blocking, and started then waited (what a pipelined step does);
* all_gather and all_to_all: ``library`` / ``ilibrary``, ``MPI_Allgather`` /
  ``MPI_Iallgather`` or ``MPI_Alltoall`` / ``MPI_Ialltoall`` (what the runtime
  runs); ``pairwise``, the same one-peer-a-round exchange (``PairwiseRounds``),
  each received block straight into its place.

Every form's output is checked exactly (integer-valued floats) before timing.
Prints per form the median, the fastest round, and the median over the step's
one-way bound: the off-node share of the step's larger side (the
reduce_scatter's input, the all_gather's output), ``(k-1)/k`` for a node step,
through the node's link at ``--link-GBps``: every local rank's group for a node
step; once per node for a flat reduce_scatter or all_gather (what a node must
receive or send at least), once per rank for a flat all_to_all.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from mpi4py import MPI

from p2synth.hierarchies.cli import sizes_argument
from p2synth.hierarchies.program import Collective
from p2synth.runtime.backends import MpiGroup, PairwiseExchange, PairwiseRounds
from p2synth.runtime.provenance import checkout_state


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(prog="python -m scripts.bench_reduce_scatter", description=__doc__.split("\n\n")[0])
    p.add_argument("--collective", choices=("reduce_scatter", "all_gather", "all_to_all"), default="reduce_scatter",
                   help="the step's collective (default reduce_scatter)")
    p.add_argument("--flat", action="store_true", help="time the flat step over every rank, not the node step")
    p.add_argument("--bytes", type=sizes_argument, default=(64 << 20,), help="message size M (default 64M)")
    p.add_argument("--ranks-per-node", type=int, default=2, help="ranks per node (default 2)")
    p.add_argument("--rounds", type=int, default=7, help="interleaved timed rounds (default 7)")
    p.add_argument("--link-GBps", type=float, default=0.1195, help="one-way payload rate of a node link (default: the "
                   "4x2-1gbit calibration, 0.1195)")
    return p.parse_args(argv)


def moved_forms(group: MpiGroup, op: Collective, src: np.ndarray, dst: np.ndarray) -> dict:
    """Each all_gather or all_to_all form as a call running the step once from `src` into `dst`: MPI's own call,
    blocking and not, and the pairwise exchange."""
    call = getattr(group, op.value)
    return {
        "library": lambda: call(src, dst),
        "ilibrary": lambda: call(src, dst, nonblocking=True).Wait(),
        "pairwise": lambda: PairwiseRounds(group.comm, src, dst, None, op).Wait(),
    }


def step_data(op: Collective, group: MpiGroup, count: int, members: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """This member's input, output buffer, exact expected output and forms for a step of `op` whose larger side is
    `count` float32 elements, over the group of world ranks `members` (integer-valued floats, so sums are exact)."""
    k, me = len(members), group.comm.Get_rank()
    ramp = np.arange(count, dtype=np.float32) % 1024
    if op is Collective.REDUCE_SCATTER:
        src = ramp + members[me]
        dst, scratch = np.empty(count // k, np.float32), np.empty(count, np.float32)
        return src, dst, ramp.reshape(k, -1)[me] * k + sum(members), forms(group, src, dst, scratch)
    if op is Collective.ALL_GATHER:  # member j's block, valued by j, lands j-th
        src = ramp[: count // k] + me * 1024
        expected = (ramp[: count // k][None, :] + 1024 * np.arange(k, dtype=np.float32)[:, None]).ravel()
    else:  # all_to_all: member i's block j, valued by (i, j), lands i-th at member j
        src = ramp + me * 1024
        expected = (ramp.reshape(k, -1)[me][None, :] + 1024 * np.arange(k, dtype=np.float32)[:, None]).ravel()
    dst = np.empty(count, np.float32)
    return src, dst, expected, moved_forms(group, op, src, dst)


def forms(group: MpiGroup, src: np.ndarray, dst: np.ndarray, scratch: np.ndarray) -> dict:
    """Each reduce_scatter form as a call running the step once from `src` into `dst`."""
    k = group.comm.Get_size()
    exchange = PairwiseExchange(group, scratch[: dst.size])

    def summed() -> None:
        blocks = scratch.reshape(k, -1)
        np.add(blocks[0], blocks[1], out=dst)
        for block in blocks[2:]:
            np.add(dst, block, out=dst)

    return {
        "library": lambda: group.reduce_scatter(src, dst),
        "alltoall": lambda: (group.all_to_all(src, scratch), summed()),
        "ialltoall": lambda: (group.all_to_all(src, scratch, nonblocking=True).Wait(), summed()),
        "pairwise": lambda: exchange.reduce_scatter(src, dst),
        "pairwise-started": lambda: exchange.start(Collective.REDUCE_SCATTER, src, dst).Wait(),
    }


def step_text(op: Collective, flat: bool) -> str:
    """The timed step, and the program it is the node step of."""
    x = op.short
    if flat:
        return f"{x}(data@node,data@core), the flat step"
    program = f"{x}(data@core) -> {x}(data@node)" if op is Collective.REDUCE_SCATTER else f"{x}(data@node) -> {x}(data@core)"
    return f"{x}(data@node) of {program}"


def bound_seconds(op: Collective, flat: bool, k: int, count: int, ranks_per_node: int, link_GBps: float) -> float:
    """The step's one-way bound: the off-node share of its larger side (`count` float32 elements per member of `k`)
    through a node's link, for every local rank's group of a node step; once per node for a flat reduce_scatter or
    all_gather (what a node must receive or send at least), once per rank for a flat all_to_all."""
    off_node = (k - (ranks_per_node if flat else 1)) / k
    copies = ranks_per_node if not flat or op is Collective.ALL_TO_ALL else 1
    return off_node * count * 4 * copies / (link_GBps * 1e9)


def timed(world: MPI.Intracomm, runs: dict, dst: np.ndarray, expected: np.ndarray, rounds: int) -> dict[str, list[float]]:
    """Each form's output checked exactly first (SystemExit naming a wrong one), then its time per interleaved
    round (alternating order), the slowest rank's."""
    for name, run in runs.items():
        dst.fill(np.nan)
        world.Barrier()
        run()
        wrong = world.allreduce(int(np.count_nonzero(dst != expected)))
        if wrong:
            raise SystemExit(f"{name}: {wrong} wrong elements")
    times: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(rounds):
        for name, run in (list(runs.items()) if r % 2 == 0 else list(runs.items())[::-1]):
            world.Barrier()
            t = time.perf_counter()
            run()
            times[name].append(world.allreduce(time.perf_counter() - t, op=MPI.MAX))
    return times


def main(argv: list[str] | None = None) -> int:
    """Time the forms on this job; rank 0 prints the table."""
    args = parse_args(argv)
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    node, local = divmod(rank, args.ranks_per_node)
    comm = world.Split(color=0 if args.flat else local, key=rank if args.flat else node)
    group, k, op = MpiGroup(comm), comm.Get_size(), Collective(args.collective)
    nbytes = args.bytes[0]
    # the step's larger side, in float32 elements: a node step holds 1/ranks_per_node of the message
    count = nbytes // (1 if args.flat else args.ranks_per_node) // 4 // k * k
    src, dst, expected, runs = step_data(op, group, count, comm.allgather(rank))
    times = timed(world, runs, dst, expected, args.rounds)
    comm.Free()
    if rank == 0:
        bound = bound_seconds(op, args.flat, k, count, args.ranks_per_node, args.link_GBps)
        checkout = checkout_state()
        print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} commit {checkout['commit']} dirty {checkout['dirty']}")
        print(f"# {step_text(op, args.flat)}, {size} ranks ({size // args.ranks_per_node} nodes x {args.ranks_per_node}), "
              f"{nbytes >> 20} MiB, {args.rounds} rounds; one-way bound {bound * 1e3:.1f} ms; every output exact")
        for name, ts in times.items():
            median = statistics.median(ts)
            print(f"{name:18s} median {median * 1e3:8.1f} ms   fastest {min(ts) * 1e3:8.1f} ms   median / bound {median / bound:5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
