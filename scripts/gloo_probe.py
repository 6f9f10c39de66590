"""The gloo step probe: how long each of gloo's collectives takes on a ``nodes x ranks-per-node`` layout.

Behind ``docs/measurements/ddp/gloo-rs/gloo-steps-4x2-1gbit.txt`` (before issue 31, 64 MiB) and the
``docs/measurements/ddp/gloo-rs/gloo-steps-<case>.json`` runs that docs/measurements/ddp.md, "How well the gloo model
predicts", cites. Every rank joins a gloo job (runtime/torch_dist.py ``init_process_group``), makes the node-level groups
(one member per node: the ranks with the same local index) and the core-level groups (the ranks of one node) with
``dist.new_group``, then times, on float32 buffers of ``--size`` bytes per rank:

* all_reduce over the world;
* reduce_scatter over each core group (size -> size / ranks-per-node), then over each node group (that -> / nodes);
* all_gather over the node groups and then the core groups (back up to size);
* all_reduce over the node groups (size / ranks-per-node);
* the four RS(core) RS(node) AG(node) AG(core) steps in a row (the hierarchical program, unpipelined);
* a copy of the whole buffer (``x.clone()``);
* the two reduce_scatters and the four steps again, each reduce_scatter run by the exported module's own step
  (solver/exports/to_torch.py, ``reduce_scatter_step``), which on gloo is ``all_to_all_single`` of the blocks, then
  their sum. gloo's own ``reduce_scatter_tensor`` clones its input and all-reduces all of it, so each member sends
  ``2 (k-1)/k`` of the buffer where the exchange sends ``(k-1)/k``.

Each call runs once untimed, then ``--repeats`` times, each between barriers; a repeat's time is the slowest rank's.
Rank 0 prints the median of each in ms and writes ``--out`` (JSON: the commit and whether the checkout was dirty,
UTC start and end, torch's version, the layout and every repeat). Launch one process per rank::

    mpirun -n 8 python -m scripts.gloo_probe --nodes 4 --ranks-per-node 2 --out gloo-steps.json
    python -m scripts.testbed run -- python -m scripts.gloo_probe --out gloo-steps.json

Rank and world come from ``OMPI_COMM_WORLD_RANK``/``SIZE`` or ``RANK``/``WORLD_SIZE``. Bad arguments: one line on
stderr, exit 2.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from p2synth.hierarchies.cli import (EXIT_USAGE, ArgumentParser, UsageError, count_argument, one_line, size_argument,
                                     write_json_atomic)
from p2synth.runtime.provenance import checkout_state, utc_now
from p2synth.solver.exports.to_torch import reduce_scatter_step

MiB = 1 << 20
DTYPE_BYTES = 4  # float32
DEFAULT_SIZE = 64 * MiB


@dataclass(frozen=True)
class Call:
    """One timed call: a `name` (the JSON's key), the table's `label` and the group kind it runs over."""

    name: str
    label: str
    group: str  # world, core, node, all (the sequence), none (the copy)


def parse_args(argv: list[str] | None = None) -> Any:
    p = ArgumentParser(prog="python -m scripts.gloo_probe", description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=count_argument(1), default=4, help="nodes of the layout (default 4)")
    p.add_argument("--ranks-per-node", type=count_argument(1), default=2, help="ranks per node (default 2)")
    p.add_argument("--size", type=size_argument, default=DEFAULT_SIZE, help="bytes of float32 per rank (default 64M)")
    p.add_argument("--repeats", type=count_argument(1), default=3, help="timed calls of each (default 3)")
    p.add_argument("--out", type=Path, required=True, help="the JSON record rank 0 writes")
    p.add_argument("--ifname", help="network interface gloo binds (default: GLOO_SOCKET_IFNAME, else the only one besides lo)")
    args = p.parse_args(argv)
    block = DTYPE_BYTES * args.nodes * args.ranks_per_node
    if args.size % block:
        raise UsageError(f"--size {args.size}: must be a multiple of {block} bytes (float32 split over {args.nodes} x "
                         f"{args.ranks_per_node} ranks)")
    return args


def layout_groups(nodes: int, per_node: int) -> tuple[list[list[int]], list[list[int]]]:
    """The node-level groups (one member per node: local index c on every node) and the core-level groups (the ranks
    of one node), ranks numbered node-major as mpirun places them."""
    node_groups = [[n * per_node + c for n in range(nodes)] for c in range(per_node)]
    core_groups = [[n * per_node + c for c in range(per_node)] for n in range(nodes)]
    return node_groups, core_groups


def _mib(nbytes: float) -> str:
    return f"{nbytes / MiB:g}"


def calls(nodes: int, per_node: int, size: int) -> list[Call]:
    """The probe's calls, in order, with their table labels (as in docs/measurements/ddp/gloo-rs/gloo-steps-4x2-1gbit.txt)."""
    core = "core pairs" if per_node == 2 else "core groups"
    node = "node groups"
    a, b, c = size, size // per_node, size // (per_node * nodes)
    return [
        Call("all_reduce_world", f"all_reduce world {_mib(a)} MiB", "world"),
        Call("reduce_scatter_core", f"reduce_scatter {core} {_mib(a)}->{_mib(b)} MiB", "core"),
        Call("reduce_scatter_node", f"reduce_scatter {node} {_mib(b)}->{_mib(c)} MiB", "node"),
        Call("all_gather_node", f"all_gather {node} {_mib(c)}->{_mib(b)} MiB", "node"),
        Call("all_gather_core", f"all_gather {core} {_mib(b)}->{_mib(a)} MiB", "core"),
        Call("all_reduce_node", f"all_reduce {node} {_mib(b)} MiB", "node"),
        Call("sequence", "RS(core) RS(node) AG(node) AG(core), sequential", "all"),
        Call("copy", f"copy {_mib(a)} MiB (x.clone())", "none"),
        Call("exchange_core", f"all_to_all + sum {core} {_mib(a)}->{_mib(b)} MiB", "core"),
        Call("exchange_node", f"all_to_all + sum {node} {_mib(b)}->{_mib(c)} MiB", "node"),
        Call("sequence_exchange", "the four steps, RS as all_to_all + sum", "all"),
    ]


def summary(records: list[dict]) -> list[tuple[str, float]]:
    """(label, median ms) of each recorded call."""
    return [(r["label"], statistics.median(r["seconds"]) * 1e3) for r in records]


def table(meta: dict, records: list[dict]) -> str:
    """The text rank 0 prints: a two-line header, then one line per call with its median in ms."""
    lay = meta["layout"]
    head = [f"# gloo collectives on the {lay['nodes']} nodes x {lay['ranks_per_node']} ranks layout, torch "
            f"{meta['torch']}, float32,",
            f"# median of {meta['repeats']} timed calls after one untimed call, each between barriers "
            f"(scripts/gloo_probe.py)"]
    return "\n".join(head + [f"{label:<51}{ms:>8.1f} ms" for label, ms in summary(records)]) + "\n"


def record(meta: dict, records: list[dict]) -> dict:
    """The JSON document: the run's metadata, then every call with every repeat (seconds) and its median."""
    return {**meta, "calls": [{**r, "median_s": statistics.median(r["seconds"])} for r in records]}


def probe(args: Any) -> int:
    """Run the probe on this rank (every rank of the job calls it); 0."""
    from p2synth.runtime.torch_dist import init_process_group, rank_and_world  # imports torch lazily

    nodes, per_node, size = args.nodes, args.ranks_per_node, args.size
    _, world = rank_and_world(os.environ)
    if world != nodes * per_node:
        raise UsageError(f"{world} ranks launched for a {nodes} x {per_node} layout")
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        raise UsageError("torch is not installed (pip install -e '.[torch]')") from None
    started = utc_now()
    rank, _ = init_process_group("gloo", ifname=args.ifname)
    node_groups, core_groups = layout_groups(nodes, per_node)
    # every rank creates every group, in the same order (new_group is collective over the world)
    node_handles = [dist.new_group(g) for g in node_groups]
    core_handles = [dist.new_group(g) for g in core_groups]
    node_group = node_handles[rank % per_node]
    core_group = core_handles[rank // per_node]
    n = size // DTYPE_BYTES
    x = torch.ones(n, dtype=torch.float32)
    half = torch.empty(n // per_node, dtype=torch.float32)
    quarter = torch.empty(n // (per_node * nodes), dtype=torch.float32)
    back = torch.empty(n // per_node, dtype=torch.float32)
    full = torch.empty(n, dtype=torch.float32)
    reduce_scatter = reduce_scatter_step()  # the exported module's own: on gloo the blocks exchanged, then summed

    def sequence_exchange():
        """The four steps, each reduce_scatter as the exported module runs it."""
        quarter_ = reduce_scatter(reduce_scatter(x.view(per_node, -1), core_group, 1).view(nodes, -1), node_group, 1)
        dist.all_gather_into_tensor(back, quarter_, group=node_group)
        dist.all_gather_into_tensor(full, back, group=core_group)

    ops = {
        "all_reduce_world": lambda: dist.all_reduce(x),
        "reduce_scatter_core": lambda: dist.reduce_scatter_tensor(half, x, group=core_group),
        "reduce_scatter_node": lambda: dist.reduce_scatter_tensor(quarter, half, group=node_group),
        "all_gather_node": lambda: dist.all_gather_into_tensor(back, quarter, group=node_group),
        "all_gather_core": lambda: dist.all_gather_into_tensor(full, back, group=core_group),
        "all_reduce_node": lambda: dist.all_reduce(half, group=node_group),
        "sequence": lambda: (dist.reduce_scatter_tensor(half, x, group=core_group),
                             dist.reduce_scatter_tensor(quarter, half, group=node_group),
                             dist.all_gather_into_tensor(back, quarter, group=node_group),
                             dist.all_gather_into_tensor(full, back, group=core_group)),
        "copy": lambda: x.clone(),
        "exchange_core": lambda: reduce_scatter(x.view(per_node, -1), core_group, 1),
        "exchange_node": lambda: reduce_scatter(half.view(nodes, -1), node_group, 1),
        "sequence_exchange": sequence_exchange,
    }
    slowest = torch.zeros(1, dtype=torch.float64)
    records = []
    for call in calls(nodes, per_node, size):
        ops[call.name]()  # untimed
        seconds = []
        for _ in range(args.repeats):
            dist.barrier()
            t0 = time.perf_counter()
            ops[call.name]()
            slowest[0] = time.perf_counter() - t0
            dist.barrier()
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            seconds.append(float(slowest[0]))
        records.append({"name": call.name, "label": call.label, "group": call.group, "seconds": seconds})
    if rank == 0:
        meta = {"tool": "scripts.gloo_probe", **checkout_state(), "started_utc": started, "finished_utc": utc_now(),
                "torch": torch.__version__, "backend": "gloo", "dtype": "float32", "bytes_per_rank": size,
                "repeats": args.repeats,
                "layout": {"nodes": nodes, "ranks_per_node": per_node, "world": world,
                           "node_groups": node_groups, "core_groups": core_groups}}
        print(table(meta, records), end="", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(record(meta, records), args.out)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; the exit status."""
    try:
        return probe(parse_args(argv))
    except UsageError as e:
        if os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")) == "0":  # every rank fails alike
            print(f"error: {one_line(e)}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
