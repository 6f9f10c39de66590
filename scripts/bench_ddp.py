"""A DDP training step, timed with DDP's default all-reduce against the p2synth hook, pipelined and forced sequential.

    sudo env PATH="$PATH" python -m scripts.testbed run -- python -m scripts.bench_ddp \\
        --plan tuned.json --case 4x2-1gbit --out ddp-4x2.raw.json
    python -m scripts.bench_ddp --from-raw ddp-4x2.raw.json ddp-2x2x2.raw.json \\
        --markdown TABLE --summary SUMMARY      # the table and ddp-summary.json of docs/measurements

One process per rank (rank and world from ``OMPI_COMM_WORLD_RANK`` / ``_SIZE``,
or ``RANK`` / ``WORLD_SIZE``), PyTorch's gloo backend on CPU. Rank 0's address
(``MASTER_ADDR``) is its address on ``--ifname``: on the testbed every node has
one interface, ``p2s-eth0``, used by default where it exists; elsewhere the
loopback. Rank 0 opens the rendezvous store on a free port and sends address and
port to the other ranks over MPI (mpi4py); ``--master-addr`` and ``--master-port``
override both. Gloo binds ``--ifname`` too (``GLOO_SOCKET_IFNAME``): the namespaces'
hostnames resolve to nothing, and gloo would fall back to the loopback.

The model is ``--layers`` Linear layers of ``--width`` x ``--width`` (default
enough layers for ``--mib 64`` MiB of float32 gradients), batch ``--batch``, MSE
loss against fixed targets, plain SGD. Each variant gets its own
``DistributedDataParallel`` (``bucket_cap_mb=--bucket-mib``), built once:

* ``default``: no hook, DDP's own all-reduce (averaged);
* ``p2synth``: the p2synth hook with the plan ``--plan`` (``--placement``, ``--request``);
* ``sequential``: the same hook with every program of the plan forced to one piece (``pipeline`` 1).

After a warm-up round that is not recorded, round ``r`` (``--rounds``, default 9) runs every variant once, the
order rotated by ``r``. A run resets the parameters to the same initial values, runs ``--warmup`` untimed and
``--steps`` timed steps on the same per-rank batches, and keeps each timed step's time (the slowest rank's) and a
checksum of the final parameters (sum, sum of absolute values, sum of squares, float64). Rank 0 writes everything
to the raw JSON ``--out``.

``--from-raw RAW...`` (one raw file per case) prints the table and writes it as
Markdown (``--markdown``) and the summary JSON (``--summary``): per case and
variant the median over rounds of each round's median step time, with the 95%
interval of ``p2synth.runtime.stats``; speedups are ratios of those medians. The
summary has ``cases`` (one record per case), ``speedup_median``, ``speedup_min``,
``speedup_max`` (over the cases, of default / p2synth step time), ``params_match``
(every run's final parameters within ``PARAMS_RTOL`` of the case's first default
run, and equal on every rank) and ``rounds``. The same raw files give the same
output, byte for byte.

Exit status: 0 done; 2 bad arguments, an unreadable raw file, no torch, or a plan the hook refuses (one line
``error: ...`` on stderr).
"""

from __future__ import annotations

import copy
import fcntl
import json
import math
import os
import socket
import statistics
import struct
import sys
import tempfile
from enum import Enum
from pathlib import Path

from p2synth.hierarchies.cli import EXIT_USAGE, ArgumentParser, UsageError, one_line, write_json_atomic, write_text_atomic
from p2synth.runtime.stats import faster_beyond_noise, median_interval
from scripts.tables import console, markdown
from scripts.tables import table as rich_table
from scripts.testbed.config import NODE_IF

PARAMS_RTOL = 1e-5  # final parameters match when each checksum differs by at most this share of its scale
SIOCGIFADDR = 0x8915


class Variant(str, Enum):
    """How a variant all-reduces each gradient bucket."""

    DEFAULT = "default"
    P2SYNTH = "p2synth"
    SEQUENTIAL = "sequential"


# --- the p2synth hook: the one place that calls its API ---------------------------------------------------------

def attach_p2synth_hook(model, plan_path: Path, placement: int, request: str) -> None:
    """Register the p2synth hook for `plan_path` on the DDP `model` (collective: every rank, in the same order)."""
    from p2synth.solver.exports.ddp import p2synth_hook

    hook = p2synth_hook(plan_path, placement=placement, request=request)
    model.register_comm_hook(hook.state, hook)


def sequential_plan(plan: dict) -> dict:
    """`plan` with every program (every JSON object with a ``steps`` list) run on one piece: ``pipeline`` 1."""
    out = copy.deepcopy(plan)
    stack = [out]
    while stack:
        node = stack.pop()
        if isinstance(node, dict) and isinstance(node.get("steps"), list):
            node["pipeline"] = 1
        stack += node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
    return out


def round_order(variants: list[Variant], r: int) -> list[Variant]:
    """The order of round `r`: the variants rotated left by `r`."""
    k = r % len(variants)
    return variants[k:] + variants[:k]


# --- where rank 0 is --------------------------------------------------------------------------------------------

def rank_and_world(env: dict[str, str]) -> tuple[int, int]:
    """This process's rank and the world size, from Open MPI's variables or torchrun's; UsageError without either."""
    for rank_key, size_key in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("RANK", "WORLD_SIZE")):
        if rank_key in env and size_key in env:
            return int(env[rank_key]), int(env[size_key])
    raise UsageError("no rank: launch one process per rank with mpirun (OMPI_COMM_WORLD_RANK) or torchrun (RANK)")


def interface_address(name: str) -> str:
    """The IPv4 address of the network interface `name`; UsageError if it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError as e:
            raise UsageError(f"--ifname {name}: no IPv4 address ({e.strerror})") from None
    return socket.inet_ntoa(packed[20:24])


def default_ifname() -> str:
    """The testbed's node interface where this node has it, else the loopback."""
    return NODE_IF if NODE_IF in (name for _, name in socket.if_nameindex()) else "lo"


# --- the training loop (torch imported here only) ---------------------------------------------------------------

def init_distributed(args, rank: int, world: int):
    """Join the gloo process group: rank 0 hosts the store; its address and port reach the others over MPI unless
    --master-addr and --master-port both give them."""
    import torch.distributed as dist

    os.environ.setdefault("GLOO_SOCKET_IFNAME", args.ifname)
    address, port, store = args.master_addr, args.master_port, None
    if rank == 0:
        address = address or interface_address(args.ifname)
        store = dist.TCPStore(address, port, world, is_master=True, wait_for_workers=False)
        port = store.port
    if args.master_addr is None or args.master_port == 0:
        from mpi4py import MPI

        address, port = MPI.COMM_WORLD.bcast((address, port), root=0)
    if store is None:
        store = dist.TCPStore(address, port, world, is_master=False)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)


def build_model(args, seed: int):
    """The Linear stack, the same initial values on every rank and for every variant."""
    import torch

    torch.manual_seed(seed)
    layers = []
    for i in range(args.layers):
        layers.append(torch.nn.Linear(args.width, args.width))
        if i + 1 < args.layers:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def checksum(model) -> list[float]:
    """Sum, sum of absolute values and sum of squares of every parameter, in float64."""
    import torch

    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])
        return [flat.sum().item(), flat.abs().sum().item(), flat.square().sum().item()]


def one_run(ddp, initial, batches, args) -> tuple[list[float], list[float], bool]:
    """Reset, train warm-up + timed steps; the timed steps' times (slowest rank), rank 0's checksum, ranks agree."""
    import time

    import torch
    import torch.distributed as dist

    with torch.no_grad():
        for p, p0 in zip(ddp.module.parameters(), initial):
            p.copy_(p0)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    dist.barrier()
    times = []
    for x, y in batches:
        start = time.perf_counter()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - start)
    slowest = torch.tensor(times[args.warmup:], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    mine = torch.tensor(checksum(ddp.module), dtype=torch.float64)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    agree = all(params_close(e.tolist(), mine.tolist()) for e in every)
    return slowest.tolist(), mine.tolist(), agree


def build_variants(args, variants: list[Variant], tmp: Path) -> dict:
    """One DDP model per variant, each with its hook attached; the sequential plan is written in `tmp`, which must
    outlive the models. Every rank builds them in the same order (the hook's process groups are collective)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    plans = {Variant.P2SYNTH: args.plan, Variant.SEQUENTIAL: tmp / "sequential.json"}
    if Variant.SEQUENTIAL in variants:
        plans[Variant.SEQUENTIAL].write_text(json.dumps(sequential_plan(json.loads(args.plan.read_text()))))
    models = {}
    for v in variants:
        models[v] = DDP(build_model(args, args.seed), bucket_cap_mb=args.bucket_mib)
        if v is not Variant.DEFAULT:
            try:
                attach_p2synth_hook(models[v], plans[v], args.placement, args.request)
            except Exception as e:  # noqa: BLE001  (the hook's refusal, whatever its type, is one line)
                raise UsageError(f"the p2synth hook failed on {plans[v]} ({v.value}): {one_line(e)}") from None
    return models


def run_rounds(models: dict, args, rank: int) -> list[dict]:
    """A warm-up round (not recorded), then every round, variants in rotated order; the runs' records."""
    import torch

    initial = [p.detach().clone() for p in build_model(args, args.seed).parameters()]
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    batches = [(torch.randn(args.batch, args.width, generator=gen), torch.randn(args.batch, args.width, generator=gen))
               for _ in range(args.warmup + args.steps)]
    variants = list(models)
    for v in variants:  # first-iteration set-up, thread pools, connections
        one_run(models[v], initial, batches, args)
    runs = []
    for r in range(args.rounds):
        for position, v in enumerate(round_order(variants, r)):
            step_s, sums, agree = one_run(models[v], initial, batches, args)
            runs.append({"round": r, "position": position, "variant": v.value, "step_s": step_s, "checksum": sums,
                         "ranks_agree": agree})
            if rank == 0:
                print(f"round {r} {v.value}: median step {statistics.median(step_s) * 1e3:.1f} ms", file=sys.stderr, flush=True)
    return runs


def measure(args, rank: int, world: int) -> dict | None:
    """Every round of every variant; the raw record on rank 0 (None elsewhere)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    init_distributed(args, rank, world)
    variants = [Variant(v) for v in args.variants]
    with tempfile.TemporaryDirectory() as tmp:
        models = build_variants(args, variants, Path(tmp))
        runs = run_rounds(models, args, rank)
    dist.destroy_process_group()
    if rank != 0:
        return None
    grad_bytes = sum(p.numel() * p.element_size() for p in models[variants[0]].module.parameters())
    return {"case": args.case, "world": world, "torch": torch.__version__, "plan": str(args.plan),
            "placement": args.placement, "request": args.request,
            "model": {"layers": args.layers, "width": args.width, "batch": args.batch, "grad_bytes": grad_bytes},
            "bucket_cap_mb": args.bucket_mib, "warmup": args.warmup, "steps": args.steps, "rounds": args.rounds,
            "variants": [v.value for v in variants], "runs": runs}


# --- from the raw data: the table and the summary ---------------------------------------------------------------

def params_close(a: list[float], b: list[float], rtol: float = PARAMS_RTOL) -> bool:
    """Two checksums (sum, sum |p|, sum p^2) match: the sums within `rtol` of sum |p|, the squares within `rtol`."""
    scale = (max(abs(a[1]), abs(b[1])), max(abs(a[1]), abs(b[1])), max(abs(a[2]), abs(b[2])))
    return all(abs(x - y) <= rtol * s for x, y, s in zip(a, b, scale))


def case_record(raw: dict) -> dict:
    """One case's figures: per variant the median and interval over rounds of the round medians, speedups, match."""
    variants = raw["variants"]
    if Variant.DEFAULT.value not in variants or Variant.P2SYNTH.value not in variants:
        raise ValueError("a case needs the variants default and p2synth")
    intervals = {}
    for v in variants:
        medians = [statistics.median(run["step_s"]) for run in raw["runs"] if run["variant"] == v]
        intervals[v] = median_interval(medians)
    reference = next(run["checksum"] for run in raw["runs"] if run["variant"] == Variant.DEFAULT.value)
    default, hook = intervals[Variant.DEFAULT.value], intervals[Variant.P2SYNTH.value]
    record = {"case": raw["case"], "world": raw["world"], "grad_bytes": raw["model"]["grad_bytes"], "rounds": raw["rounds"]}
    for v, iv in intervals.items():
        record[f"{v}_ms"] = _ms(iv.median)
        record[f"{v}_ci_ms"] = [_ms(iv.low), _ms(iv.high)]
    record["speedup"] = round(default.median / hook.median, 3)
    if Variant.SEQUENTIAL.value in intervals:
        record["pipelining_speedup"] = round(intervals[Variant.SEQUENTIAL.value].median / hook.median, 3)
    record["hook_vs_default"] = ("faster beyond noise" if faster_beyond_noise(hook, default)
                                 else "slower beyond noise" if faster_beyond_noise(default, hook) else "within noise")
    record["params_match"] = all(run["ranks_agree"] and params_close(run["checksum"], reference) for run in raw["runs"])
    return record


def summary(records: list[dict]) -> dict:
    """The summary JSON of the cases' records."""
    speedups = [r["speedup"] for r in records]
    return {"cases": records, "speedup_median": round(statistics.median(speedups), 3), "speedup_min": min(speedups),
            "speedup_max": max(speedups), "params_match": all(r["params_match"] for r in records),
            "rounds": min(r["rounds"] for r in records)}


COLUMNS = ("case", "variant", "step (ms)", "95% interval (ms)", "speedup over default", "speedup over sequential",
           "params match")


def table_rows(records: list[dict]) -> list[tuple[str, ...]]:
    """The table: one row per case and variant, default first."""
    rows = []
    for r in records:
        for v in Variant:
            if f"{v.value}_ms" in r:
                low, high = r[f"{v.value}_ci_ms"]
                vs_sequential = f"{r['pipelining_speedup']:.2f}" if v is Variant.P2SYNTH and "pipelining_speedup" in r else ""
                rows.append((r["case"], v.value, f"{r[f'{v.value}_ms']:.1f}", f"[{low:.1f}, {high:.1f}]",
                             f"{r['default_ms'] / r[f'{v.value}_ms']:.2f}", vs_sequential, "yes" if r["params_match"] else "NO"))
    return rows


def from_raw(paths: list[Path]) -> list[dict]:
    """The case records of the raw files, in order; UsageError on an unreadable file or a repeated case."""
    records = []
    for path in paths:
        try:
            records.append(case_record(json.loads(path.read_text())))
        except (OSError, ValueError, KeyError, TypeError, StopIteration) as e:
            raise UsageError(f"{path}: not a raw file of scripts.bench_ddp ({one_line(e)})") from None
    names = [r["case"] for r in records]
    if len(set(names)) != len(names):
        raise UsageError(f"a case appears twice in the raw files: {names}")
    return records


# --- the command line -------------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None):
    """The command line; UsageError on a bad one."""
    p = ArgumentParser(prog="python -m scripts.bench_ddp", description=__doc__.split("\n")[0])
    p.add_argument("--from-raw", type=Path, nargs="+", metavar="RAW", help="rebuild the table and summary from raw files")
    p.add_argument("--markdown", type=Path, help="with --from-raw: write the table as Markdown here")
    p.add_argument("--summary", type=Path, help="with --from-raw: write the summary JSON here")
    p.add_argument("--plan", type=Path, help="the (tuned) plan file the hook runs")
    p.add_argument("--out", type=Path, help="the raw JSON (rank 0 writes it)")
    p.add_argument("--case", default=None, help="the case's name in the table (default: N ranks)")
    p.add_argument("--placement", type=int, default=0, help="the plan's placement (default 0)")
    p.add_argument("--request", default="grad_allreduce", help="the plan's request (default grad_allreduce)")
    p.add_argument("--variants", type=lambda t: [Variant(v).value for v in t.split(",")],
                   default=[v.value for v in Variant], help="comma separated (default default,p2synth,sequential)")
    p.add_argument("--rounds", type=int, default=9, help="interleaved rounds (default 9)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per run (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per run (default 2)")
    p.add_argument("--mib", type=int, default=64, help="gradient MiB at least (default 64), unless --layers")
    p.add_argument("--width", type=int, default=2048, help="layer width (default 2048)")
    p.add_argument("--layers", type=int, help="Linear layers (default: enough for --mib)")
    p.add_argument("--batch", type=int, default=8, help="samples per rank and step (default 8)")
    p.add_argument("--bucket-mib", type=float, default=25.0, help="DDP bucket_cap_mb (default 25, DDP's)")
    p.add_argument("--lr", type=float, default=1e-3, help="SGD learning rate (default 1e-3)")
    p.add_argument("--seed", type=int, default=0, help="initial values and batches (default 0)")
    p.add_argument("--ifname", default=None, help="the interface gloo and rank 0's address use (default p2s-eth0 or lo)")
    p.add_argument("--master-addr", help="rank 0's address (default: its --ifname address, sent over MPI)")
    p.add_argument("--master-port", type=int, default=0, help="the store's port (default: a free one, sent over MPI)")
    args = p.parse_args(argv)
    if args.from_raw is None:
        if args.plan is None or args.out is None:
            raise UsageError("give --plan PLAN and --out RAW to measure, or --from-raw RAW... to rebuild the table")
        if not args.plan.is_file():
            raise UsageError(f"--plan {args.plan}: no such file")
        if min(args.rounds, args.steps) < 1 or args.warmup < 0 or min(args.mib, args.width, args.batch) < 1:
            raise UsageError("--rounds, --steps, --mib, --width and --batch must be positive, --warmup not negative")
        if Variant.DEFAULT.value not in args.variants or Variant.P2SYNTH.value not in args.variants:
            raise UsageError("--variants must include default and p2synth")
        args.layers = args.layers or math.ceil(args.mib * 2**20 / (4 * args.width * (args.width + 1)))
        args.ifname = args.ifname or default_ifname()
    return args


def main(argv: list[str] | None = None) -> int:
    """Measure (one process per rank) or rebuild from raw files; the exit status."""
    rank = 0
    try:
        args = parse_args(argv)
        if args.from_raw is not None:
            records = from_raw(args.from_raw)
            console().print(rich_table(COLUMNS, table_rows(records), text_columns=2))
            if args.markdown:
                write_text_atomic(markdown(COLUMNS, table_rows(records)) + "\n", args.markdown)
            if args.summary:
                write_json_atomic(summary(records), args.summary)
            return 0
        rank, world = rank_and_world(dict(os.environ))
        args.case = args.case or f"{world} ranks"
        try:
            import torch  # noqa: F401
        except ImportError:
            raise UsageError("PyTorch is not installed (python -m scripts.check_clients makes an environment with it)") from None
        raw = measure(args, rank, world)
        if raw is not None:
            write_json_atomic({**raw, "command": ["python", "-m", "scripts.bench_ddp", *(argv or sys.argv[1:])]}, args.out)
        return 0
    except UsageError as e:
        if rank == 0:  # in a job every rank fails alike: one line, from rank 0
            print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE


def _ms(seconds: float) -> float:
    """Seconds as milliseconds, rounded to the microsecond (so the summary is the same on every rebuild)."""
    return round(seconds * 1e3, 3)


if __name__ == "__main__":
    sys.exit(main())
