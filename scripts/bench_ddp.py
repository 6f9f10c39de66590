"""A DDP training step, timed with DDP's default all-reduce against the p2synth hook with a plan tuned on the client's
backend and with a plan tuned with Open MPI.

    sudo env PATH="$PATH" python -m scripts.testbed run -- python -m scripts.bench_ddp \\
        --plan gloo-tuned.json --mpi-plan tuned.json --case 4x2-1gbit --out ddp-4x2.raw.json
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
* ``client``: the p2synth hook with ``--plan``, the plan tuned on the backend the client trains with
  (``--placement``, ``--request``), attached as ``register_p2synth_hook`` attaches it: not at all where the plan
  keeps DDP's all-reduce for every size (then the variant runs DDP's built-in all-reduce, and its hook's bucket counts
  are null);
* ``mpi``: the same hook with ``--mpi-plan``, the plan tuned with Open MPI (``runtime.tune``); only with ``--mpi-plan``;
* ``sequential``: the hook with every program of ``--plan`` forced to one piece (``pipeline`` 1); only when
  ``--variants`` names it;
* ``torch-hook``: a control, no p2synth: DDP's all-reduce as torch's own Python comm hook
  (``torch.distributed.algorithms.ddp_comm_hooks.default_hooks.allreduce_hook``), what any Python hook that runs
  DDP's all-reduce costs against DDP's built-in one; only when ``--variants`` names it.

The hook variants run ``p2synth_hook``'s guard (``--guard on``, the default: for its first buckets of each size the
hook also times DDP's all-reduce and keeps the faster) or not (``--guard off``); rank 0's ``hook.decisions()`` of
each hook variant, after the last round, go into the raw file, and its bucket counts (``hook_buckets``: reduced, and
of those run by DDP's all-reduce on the calling thread, ``direct``; every round's runs and the untimed ones).

After a warm-up round that is not recorded (the default variant first), round ``r`` (``--rounds``, default 9) runs
every variant once, the order rotated by ``r``. A run resets the parameters to the same initial values, runs
``--warmup`` untimed and ``--steps`` timed steps on the same per-rank batches, and keeps each timed step's time (the
slowest rank's) and the check of its final parameters: on every rank, every element of every parameter against the
reference, this rank's final parameters after the warm-up round's default run, and against rank 0's final
parameters of the same run (broadcast after the timed steps), at ``|a - b| <= PARAMS_ATOL + PARAMS_RTOL |b|``
(``torch.allclose``'s test; the constants say why these values). A run records the largest ``|a - b|`` over ranks and elements
(``params_max_diff``) and per parameter tensor (``params_max_diff_by_tensor``), the elements compared on a rank
(``params_elements``), the largest share of the tolerance it takes (``params_tol_share``, at most 1 where they
match) and ``params_match``. Rank 0 writes everything to the raw JSON ``--out``, with the checkout's commit
(``git rev-parse HEAD``) and whether its tracked files were changed (``dirty``), p2synth's version, the start and end
times (UTC, ISO 8601; each run's start too; ``runtime/provenance.py``), torch's version and backend, the guard, the plans and the spec, and DDP's gradient
buckets in bytes once it rebuilt them (``bucket_bytes``).

``--from-raw RAW...`` (one raw file per case) prints the table and writes it as
Markdown (``--markdown``, with a note per case under the table: commit, times, guard, bound speedup and the hooks'
decisions) and the summary JSON (``--summary``): per case and variant the median over rounds of each round's median
step time, with the 95% interval of ``p2synth.runtime.stats``; speedups are ratios of those medians. Per case:
``speedup`` (default / ``client``), ``speedup_mpi_plan`` (default / ``mpi``, null without it),
``pipelining_speedup`` (sequential / client, with ``sequential``), ``hook_vs_default`` (per hook variant, the paired
verdict of ``runtime.stats.paired_verdict`` on the rounds' step medians: faster or slower by an exact one-sided sign
test at 5% each way, within noise by a paired equivalence test with a 5% margin, else inconclusive; with its rounds
each way, the median ratio and both p-values; or "no hook attached" where the raw file's ``hook_buckets`` says the
plan attached none: that variant ran the default itself, evidence neither for a hook nor against it),
``bound_speedup`` (below), ``params_match``, the largest difference per variant, and ``commit``, ``dirty``,
``measured_at``. The summary has ``cases``, ``speedup_median``, ``speedup_min``, ``speedup_max`` (over the cases, of
``speedup``), ``cases_slower``, ``cases_faster`` and ``cases_no_hook`` (the client hook's verdicts counted),
``cases_slower_mpi_plan``, ``cases_faster_mpi_plan``, ``cases_no_hook_mpi_plan`` (the same for ``mpi``; null where
no case has it), ``verdict_test``, ``params_match``, ``params_check`` and ``rounds``. The same raw files give the
same output, byte for byte.

**bound_speedup**, per case: how much faster than DDP's default the gradient all-reduce can be at all, on the case's
spec hierarchy (``<case>.spec.json`` beside the plan, the plan's name up to its first dot; ``--spec`` overrides)::

    bound_speedup = sum over the step's buckets b of ring(b)  /  sum over the same buckets of bound(b)

* ``bound(b)``: ``hierarchies.bound.lower_bound`` of an all-reduce of ``b`` bytes over one axis placed on every device
  (what any program of the plan's can reach: the cut of each level over its one-way link rates, plus the latency
  floor);
* ``ring(b)``: gloo's ring all-reduce, DDP's default, over the flat group in rank order (rank ``r`` on device ``r``:
  consecutive ranks share a node, as the testbed launches them), priced under the same one-way link figures: ``2 (n
  - 1)`` steps, in each every rank sends ``b / n`` bytes to rank ``r + 1 mod n``; a send whose ends first differ at
  level ``l`` crosses level ``l``'s link at ``min(bandwidth, uplink)`` (in rank order it is the only send leaving its
  level-``l`` unit) after level ``l``'s latency, and a step takes its slowest send. Reduction compute is left out, as
  the bound leaves it out.

The buckets are the raw file's ``bucket_bytes``; a raw file without them counts the whole gradient as one bucket (at
MiB-sized buckets the ratio hardly depends on the split: both sides are linear in ``b`` but for latencies, which the
ring pays ``2 (n - 1)`` times and the bound once). On ``4x2`` (node links 1
Gbit/s, 2 ranks a node) the ring carries ``1.75 b`` over a node's link, the bound ``1.5 b``: 1.17; on ``2x2x2`` (rack
uplinks 400 Mbit/s) ``1.75 b`` against ``b`` over a rack uplink: 1.75; on ``3x2x2`` ``1.83 b`` against ``1.33 b``:
1.375.

Raw files of an older bench_ddp (runs with a ``checksum`` of the final parameters instead of the elementwise check,
variant ``p2synth`` for ``client``) are still read: their parameters are said to be checked by checksums only, not
elementwise (``params match`` "yes (checksums)" in the table, ``params_check`` "checksum" in the summary), with no
commit, times or bucket sizes.

Exit status: 0 done; 2 bad arguments, an unreadable raw file or spec, no torch, or a plan the hook refuses (one line
``error: ...`` on stderr).
"""

from __future__ import annotations

import copy
import json
import math
import os
import statistics
import sys
import tempfile
from enum import Enum
from pathlib import Path

from p2synth.hierarchies.bound import lower_bound
from p2synth.hierarchies.cli import EXIT_USAGE, ArgumentParser, UsageError, one_line, write_json_atomic, write_text_atomic
from p2synth.hierarchies.model import Hierarchy
from p2synth.hierarchies.placement import Axis, Placement
from p2synth.hierarchies.program import Collective, Request
from p2synth.runtime.stats import (EQUIVALENCE_MARGIN, FASTER, LEVEL, NO_HOOK, SLOWER, Interval, median_interval,
                                   paired_verdict, verdict_text)
from p2synth.runtime.torch_dist import default_ifname, init_process_group, rank_and_world
from p2synth.runtime.provenance import RunStart, utc_now
from scripts.tables import console, markdown
from scripts.tables import table as rich_table

# The elementwise check of a run's final parameters, |a - b| <= PARAMS_ATOL + PARAMS_RTOL |b| (torch.allclose's test).
# Measured with the default model and run (4 x Linear(2048, 2048), batch 8, lr 1e-3, 2 + 5 SGD steps, 8 gloo ranks on
# one host), every hook's final parameters against DDP's default all-reduce's, on every rank:
# * the parameters: |p| at most 0.0221 (median 0.0111); one step moves a parameter by 5.5e-7 at most, the whole run by
#   1.5e-6 at most: far less than the "lr * grad ~ 1e-4" one might guess, so atol must be small;
# * the same average summed in another order (the p2synth hook with the tuned 4x2 and 2x2x2 plans, guard off; a hook
#   summing the ranks in reverse order): largest |a - b| 1.9e-9 (2^-29, one float32 ulp at |p| ~ 0.02), most elements
#   equal; DDP's own allreduce_hook (divide, then sum) is bit-identical. Share of this tolerance: 0.011;
# * wrong hooks: skipping the reduction, largest |a - b| 3.0e-6 (share 216); summing instead of averaging 1.0e-5
#   (700); the bucket shifted by one element 2.0e-6 (106); only each bucket's first half reduced 1.1e-6 (77).
# So about 90 times the reordering noise and 1/77 of the smallest fault; atol 1e-6 would let the half-reduced hook
# through (share 0.99). A longer run or a larger --lr moves the faults further, the noise hardly.
PARAMS_RTOL = 1e-5
PARAMS_ATOL = 1e-8
CHECKSUM_RTOL = 1e-5  # raw files of an older bench_ddp: each checksum within this share of its scale


class Variant(str, Enum):
    """How a variant all-reduces each gradient bucket."""

    DEFAULT = "default"
    CLIENT = "client"
    MPI = "mpi"
    SEQUENTIAL = "sequential"
    TORCH_HOOK = "torch-hook"  # a control: DDP's all-reduce as torch's own Python comm hook, no p2synth


HOOKED = (Variant.CLIENT, Variant.MPI, Variant.SEQUENTIAL)  # the variants that run the p2synth hook
JUDGED = HOOKED + (Variant.TORCH_HOOK,)  # the variants the table judges against the default
LEGACY_NAMES = {"p2synth": Variant.MPI.value}  # older raw files: their hook ran the plan runtime.tune tuned (MPI)
VERDICT_TEST = (f"exact one-sided sign test over the paired rounds' step medians, level {LEVEL} each way; within "
                f"noise: paired TOST, margin {EQUIVALENCE_MARGIN:.0%}; runtime.stats.paired_verdict")


# --- the p2synth hook: the one place that calls its API ---------------------------------------------------------

def attach_p2synth_hook(model, plan_path: Path, placement: int, request: str, guard: bool = True):
    """Attach the p2synth hook for `plan_path` to the DDP `model` as a user would (``register_p2synth_hook``;
    collective: every rank, in the same order); the hook, or None where the plan keeps DDP's all-reduce for every
    size and so attaches none. ``guard=`` is passed only to turn the guard off."""
    from p2synth.solver.exports.ddp import register_p2synth_hook

    return register_p2synth_hook(model, plan_path, placement=placement, request=request,
                                 **({} if guard else {"guard": False}))


def hook_decisions(hook) -> dict[str, dict]:
    """What `hook`'s guard decided per bucket size, keyed by the size in bytes as text, in increasing size (empty for
    a hook without ``decisions()`` or a guard)."""
    decided = getattr(hook, "decisions", lambda: {})()
    return {str(n): decided[n] for n in sorted(decided, key=int)}


def hook_buckets(hook) -> dict[str, int] | None:
    """How many buckets `hook` reduced (``reduced``) and how many of them ran DDP's all-reduce on the calling thread
    (``direct``: a size whose pick is DDP's all-reduce, or whose guard kept it after its trials); None for a hook
    that does not count them."""
    if not hasattr(hook, "reduced") or not hasattr(hook, "direct"):
        return None
    return {"reduced": hook.reduced, "direct": hook.direct}


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


# --- the training loop (torch imported here only) ---------------------------------------------------------------

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


def make_batches(args, rank: int) -> list:
    """This rank's (input, target) pairs of every step of a run, the same for every run."""
    import torch

    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    return [(torch.randn(args.batch, args.width, generator=gen), torch.randn(args.batch, args.width, generator=gen))
            for _ in range(args.warmup + args.steps)]


def params_gaps(params, reference, rtol: float = PARAMS_RTOL, atol: float = PARAMS_ATOL) -> list[tuple[int, float, float]]:
    """Every element of every tensor of `params` against the same-shaped tensor of `reference`, per tensor: the
    elements compared, the largest ``|a - b|`` and the largest share of the tolerance it takes,
    ``|a - b| / (atol + rtol |b|)`` (0 for an empty tensor); they match (``torch.allclose``) where that share is at
    most 1. A NaN on either side is infinitely far."""
    import torch

    params, reference = list(params), list(reference)
    if len(params) != len(reference) or any(a.shape != b.shape for a, b in zip(params, reference)):
        raise ValueError("the parameters and their reference differ in number or shapes")
    out = []
    with torch.no_grad():
        for a, b in zip(params, reference):
            if a.numel() == 0:
                out.append((0, 0.0, 0.0))
                continue
            gap = (a.detach() - b.detach()).abs_().nan_to_num_(nan=math.inf)
            largest = gap.max().item()
            share = gap.div_(b.detach().abs().mul_(rtol).add_(atol)).nan_to_num_(nan=math.inf).max().item()
            out.append((a.numel(), largest, share))
    return out


def params_gap(params, reference, rtol: float = PARAMS_RTOL, atol: float = PARAMS_ATOL) -> tuple[float, float]:
    """The largest ``|a - b|`` and the largest share of the tolerance over every tensor (:func:`params_gaps`)."""
    gaps = params_gaps(params, reference, rtol, atol)
    return max((g[1] for g in gaps), default=0.0), max((g[2] for g in gaps), default=0.0)


def params_mismatch(params, reference, rtol: float = PARAMS_RTOL, atol: float = PARAMS_ATOL) -> float | None:
    """None where every element of `params` is within the tolerance of `reference` (:func:`params_gap`), else the
    largest ``|a - b|``."""
    largest, share = params_gap(params, reference, rtol, atol)
    return None if share <= 1.0 else largest


def final_params(module) -> list:
    """`module`'s parameters as new tensors, one per parameter."""
    return [p.detach().clone() for p in module.parameters()]


def check_params(params: list, reference: list) -> dict:
    """The run's parameter check (collective): this rank's final `params` (one tensor per parameter) against its
    `reference` and against rank 0's final parameters, elementwise; over every rank, per tensor the largest
    difference (``params_max_diff_by_tensor``), and overall the largest difference and share of the tolerance and
    the elements this rank compared against each of the two (``params_elements``)."""
    import torch
    import torch.distributed as dist

    first = [t.clone() for t in params]
    for t in first:
        dist.broadcast(t, src=0)
    gaps = [params_gaps(params, reference), params_gaps(params, first)]
    worst = torch.tensor([max(g[i][1] for g in gaps) for i in range(len(params))]
                         + [max(g[i][2] for g in gaps) for i in range(len(params))], dtype=torch.float64)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    values = worst.tolist()
    largest, shares = values[:len(params)], values[len(params):]
    return {"params_max_diff": max(largest, default=0.0), "params_tol_share": max(shares, default=0.0),
            "params_match": max(shares, default=0.0) <= 1.0, "params_elements": sum(g[0] for g in gaps[0]),
            "params_max_diff_by_tensor": largest}


def one_run(ddp, initial, batches, args, reference=None) -> tuple[dict, object]:
    """Reset, train warm-up + timed steps; the run's record (the timed steps' times, the slowest rank's, and
    :func:`check_params` against `reference`, None: against this run's own parameters, for the reference run) and
    this rank's final flat parameters."""
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
    params = final_params(ddp.module)
    return {"step_s": slowest.tolist(), **check_params(params, params if reference is None else reference)}, params


def build_variants(args, variants: list[Variant], tmp: Path) -> tuple[dict, dict]:
    """One DDP model per variant, each with its hook attached; the models and the hooks (per hook variant). The
    sequential plan is written in `tmp`, which must outlive the models. Every rank builds them in the same order (the
    hook's process groups are collective)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    plans = {Variant.CLIENT: args.plan, Variant.MPI: args.mpi_plan, Variant.SEQUENTIAL: tmp / "sequential.json"}
    if Variant.SEQUENTIAL in variants:
        plans[Variant.SEQUENTIAL].write_text(json.dumps(sequential_plan(json.loads(args.plan.read_text()))))
    models, hooks = {}, {}
    for v in variants:
        models[v] = DDP(build_model(args, args.seed), bucket_cap_mb=args.bucket_mib)
        if v is Variant.TORCH_HOOK:
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

            models[v].register_comm_hook(None, allreduce_hook)
        elif v is not Variant.DEFAULT:
            try:
                hooks[v] = attach_p2synth_hook(models[v], plans[v], args.placement, args.request, args.guard == "on")
            except Exception as e:  # noqa: BLE001  (the hook's refusal, whatever its type, is one line)
                raise UsageError(f"the p2synth hook failed on {plans[v]} ({v.value}): {one_line(e)}") from None
    return models, hooks


def run_rounds(models: dict, args, rank: int) -> list[dict]:
    """A warm-up round (not recorded; the default first: its final parameters are the reference), then every round,
    variants in rotated order; the runs' records."""
    initial = [p.detach().clone() for p in build_model(args, args.seed).parameters()]
    batches = make_batches(args, rank)
    variants = list(models)
    _, reference = one_run(models[Variant.DEFAULT], initial, batches, args)
    for v in variants:  # first-iteration set-up, thread pools, connections
        if v is not Variant.DEFAULT:
            one_run(models[v], initial, batches, args, reference)
    runs = []
    for r in range(args.rounds):
        for position, v in enumerate(round_order(variants, r)):
            started = utc_now()
            record, _ = one_run(models[v], initial, batches, args, reference)
            runs.append({"round": r, "position": position, "variant": v.value, "started_at": started, **record})
            if rank == 0:
                print(f"round {r} {v.value}: median step {statistics.median(record['step_s']) * 1e3:.1f} ms, "
                      f"params {'match' if record['params_match'] else 'DIFFER'} (max |diff| "
                      f"{record['params_max_diff']:.2g})", file=sys.stderr, flush=True)
    return runs


def ddp_bucket_bytes(ddp) -> list[int] | None:
    """The byte sizes of `ddp`'s gradient buckets once DDP rebuilt them after its first iteration, from its logging
    data; None where this torch does not say."""
    try:
        data = ddp._get_ddp_logging_data()
        text = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes")
        return [int(n) for n in str(text).split(",")]
    except Exception:  # noqa: BLE001  (a private API: whatever it raises, the sizes are unknown)
        return None


def measure(args, rank: int, world: int) -> dict | None:
    """Every round of every variant; the raw record on rank 0 (None elsewhere)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    start = RunStart.now() if rank == 0 else None  # git runs once, on the rank that writes
    init_process_group("gloo", args.ifname, args.master_addr, args.master_port)
    backend = dist.get_backend()
    variants = [Variant(v) for v in args.variants]
    with tempfile.TemporaryDirectory() as tmp:
        models, hooks = build_variants(args, variants, Path(tmp))
        runs = run_rounds(models, args, rank)
    decisions = {v.value: hook_decisions(hook) for v, hook in hooks.items()}
    counted = {v.value: hook_buckets(hook) for v, hook in hooks.items()}
    buckets = ddp_bucket_bytes(models[Variant.DEFAULT])
    dist.destroy_process_group()
    if rank != 0:
        return None
    grad_bytes = sum(p.numel() * p.element_size() for p in models[variants[0]].module.parameters())
    return {"case": args.case, "world": world, **start.record(),
            "torch": torch.__version__, "backend": backend, "plan": str(args.plan),
            "mpi_plan": None if args.mpi_plan is None else str(args.mpi_plan),
            "spec": None if args.spec is None else str(args.spec), "placement": args.placement, "request": args.request,
            "guard": args.guard, "model": {"layers": args.layers, "width": args.width, "batch": args.batch,
                                           "grad_bytes": grad_bytes},
            "bucket_cap_mb": args.bucket_mib, "bucket_bytes": buckets, "warmup": args.warmup, "steps": args.steps,
            "rounds": args.rounds, "variants": [v.value for v in variants], "params_check": "elementwise",
            "params_rtol": PARAMS_RTOL, "params_atol": PARAMS_ATOL, "decisions": decisions, "hook_buckets": counted,
            "runs": runs}


# --- the all-reduce's bound speedup (module docstring) ---------------------------------------------------------

def ring_allreduce_s(h: Hierarchy, nbytes: float) -> float:
    """Seconds of gloo's ring all-reduce of `nbytes` over every device of `h` in rank order, priced on `h`'s one-way
    link figures (module docstring, ``ring(b)``): ``2 (n - 1)`` steps of the slowest send of ``nbytes / n`` bytes.
    In rank order each unit's devices are consecutive, so one send at most leaves a unit in a step: it gets the whole
    uplink, up to its link's bandwidth."""
    n = h.num_devices
    step = 0.0
    for r in range(n if n > 1 else 0):
        a, b = h.coords(r), h.coords((r + 1) % n)
        link = h.links[next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)]  # the outermost level it crosses
        rate = link.bandwidth if link.uplink is None else min(link.bandwidth, link.uplink)
        step = max(step, link.latency + nbytes / n / rate)
    return 2 * (n - 1) * step


def bound_allreduce_s(h: Hierarchy, nbytes: float) -> float:
    """``hierarchies.bound.lower_bound`` of an all-reduce of `nbytes` over one axis placed on every device of `h`."""
    placement = Placement(h, (Axis(name="data", size=h.num_devices),), (h.counts,))
    return lower_bound(placement, Request(frozenset({0}), Collective.ALL_REDUCE), nbytes).seconds


def bound_speedup(h: Hierarchy, bucket_bytes: list[int]) -> float:
    """The all-reduce speedup over DDP's default that the lower bound allows, over a step's buckets (module
    docstring), to three decimals."""
    ring = math.fsum(ring_allreduce_s(h, b) for b in bucket_bytes)
    return round(ring / math.fsum(bound_allreduce_s(h, b) for b in bucket_bytes), 3)


def spec_hierarchy(path: Path, world: int) -> Hierarchy:
    """The hierarchy of the spec file `path`, which must have `world` devices; UsageError otherwise."""
    from p2synth.solver.spec import SpecError, parse_spec, resolve_hierarchy

    try:
        h = resolve_hierarchy(parse_spec(path.read_text()).hierarchy)
    except OSError as e:
        raise UsageError(f"{path}: unreadable spec ({e.strerror})") from None
    except SpecError as e:
        raise UsageError(f"{path}: not a spec ({one_line(e)})") from None
    if h.num_devices != world:
        raise UsageError(f"{path}: its hierarchy has {h.num_devices} devices, but the case ran {world} ranks")
    return h


def spec_beside(plan: Path) -> Path:
    """The case's spec file beside a plan file: the plan's name up to its first dot, then ``.spec.json``
    (``x.tuned.json``, ``x.client-tuned.json``, ``x.gloo.plan.json`` -> ``x.spec.json``)."""
    return plan.with_name(f"{plan.name.split('.')[0]}.spec.json")


def find_spec(raw: dict, raw_path: Path) -> Path | None:
    """The case's spec: the one the raw file names, else the one beside its plan (:func:`spec_beside`), else
    ``<case>.spec.json``; each tried as written, then by its name in the raw file's folder. None where there is none."""
    names = [Path(raw["spec"])] if raw.get("spec") else []
    if raw.get("plan"):
        names.append(spec_beside(Path(raw["plan"])))
    names.append(Path(f"{raw['case']}.spec.json"))
    for name in names:
        for path in (name, raw_path.parent / name.name):
            if path.is_file():
                return path
    return None


# --- from the raw data: the table and the summary ---------------------------------------------------------------

def checksums_close(a: list[float], b: list[float], rtol: float = CHECKSUM_RTOL) -> bool:
    """Older raw files: two checksums (sum, sum |p|, sum p^2) match, the sums within `rtol` of sum |p|, the squares
    within `rtol`."""
    scale = (max(abs(a[1]), abs(b[1])), max(abs(a[1]), abs(b[1])), max(abs(a[2]), abs(b[2])))
    return all(abs(x - y) <= rtol * s for x, y, s in zip(a, b, scale))


def is_legacy(raw: dict) -> bool:
    """Whether `raw` comes from an older bench_ddp: runs with a checksum, not the elementwise check."""
    return "params_check" not in raw and any("checksum" in run for run in raw["runs"])


def upgraded(raw: dict) -> dict:
    """`raw` in this version's terms: an older raw file's variant ``p2synth`` is ``client``, and each run's
    ``params_match`` is its checksum's against the case's first default run, and its ranks' agreement."""
    if not is_legacy(raw):
        return raw
    reference = next(run["checksum"] for run in raw["runs"] if run["variant"] == Variant.DEFAULT.value)
    runs = [{**run, "variant": LEGACY_NAMES.get(run["variant"], run["variant"]),
             "params_match": bool(run["ranks_agree"]) and checksums_close(run["checksum"], reference)}
            for run in raw["runs"]]
    return {**raw, "variants": [LEGACY_NAMES.get(v, v) for v in raw["variants"]], "params_check": "checksum",
            "runs": runs}


def round_medians(raw: dict, variant: str) -> list[float]:
    """`variant`'s median step time of each round, in round order."""
    runs = sorted((run for run in raw["runs"] if run["variant"] == variant), key=lambda run: run["round"])
    return [statistics.median(run["step_s"]) for run in runs]


def hook_attached(raw: dict, variant: str) -> bool:
    """Whether `variant` ran a hook: not where the raw file says its hook reduced no bucket because none was attached
    (``hook_buckets`` null: the plan keeps DDP's all-reduce for every size); raw files without ``hook_buckets`` and
    the torch-hook control always ran one."""
    counted = raw.get("hook_buckets")
    return variant == Variant.TORCH_HOOK.value or not counted or variant not in counted or counted[variant] is not None


def verdict(raw: dict, variant: str) -> dict:
    """A hook variant's steps against the default's on their paired rounds (``runtime.stats.paired_verdict``), or
    :data:`NO_HOOK` where the variant attached none: it ran the default itself, evidence neither for a hook nor
    against it."""
    if not hook_attached(raw, variant):
        return {"verdict": NO_HOOK}
    return paired_verdict(round_medians(raw, variant), round_medians(raw, Variant.DEFAULT.value)).to_json()


def speedup(intervals: dict[str, Interval], slow: Variant, fast: Variant) -> float | None:
    """`slow`'s median step over `fast`'s, to three decimals; None without `fast`."""
    if fast.value not in intervals:
        return None
    return round(intervals[slow.value].median / intervals[fast.value].median, 3)


def case_record(raw: dict, bound: float | None = None) -> dict:
    """One case's figures: per variant the median and interval over rounds of the round medians, speedups, verdicts,
    the parameters' check, and what and when was measured; `bound` is the case's bound speedup (None: no spec)."""
    raw = upgraded(raw)
    variants = raw["variants"]
    if Variant.DEFAULT.value not in variants or not any(v.value in variants for v in HOOKED):
        raise ValueError("a case needs the variant default and a hook variant")
    intervals = {}
    for v in variants:
        medians = [statistics.median(run["step_s"]) for run in raw["runs"] if run["variant"] == v]
        intervals[v] = median_interval(medians)
    record = {"case": raw["case"], "world": raw["world"], "grad_bytes": raw["model"]["grad_bytes"],
              "rounds": raw["rounds"], "commit": raw.get("commit"), "dirty": raw.get("dirty"),
              "measured_at": raw.get("started_at"), "guard": raw.get("guard"), "torch": raw.get("torch")}
    for v, iv in intervals.items():
        record[f"{v}_ms"] = _ms(iv.median)
        record[f"{v}_ci_ms"] = [_ms(iv.low), _ms(iv.high)]
    record["speedup"] = speedup(intervals, Variant.DEFAULT, Variant.CLIENT)
    record["speedup_mpi_plan"] = speedup(intervals, Variant.DEFAULT, Variant.MPI)
    if Variant.SEQUENTIAL.value in intervals:
        hooked = Variant.CLIENT if Variant.CLIENT.value in intervals else Variant.MPI
        record["pipelining_speedup"] = speedup(intervals, Variant.SEQUENTIAL, hooked)
    record["hook_vs_default"] = {v.value: verdict(raw, v.value) for v in JUDGED if v.value in intervals}
    record["bound_speedup"] = bound
    record["bucket_bytes"] = raw.get("bucket_bytes")
    record["decisions"] = raw.get("decisions", {})
    if raw.get("hook_buckets"):  # raw files before it have none
        record["hook_buckets"] = raw["hook_buckets"]
    record.update(params_fields(raw))
    return record


def params_fields(raw: dict) -> dict:
    """The case's parameter check: ``params_check`` (elementwise, or checksum for older raw files),
    ``params_match`` (every run), and per variant the largest difference and share of the tolerance (None for older
    raw files)."""
    runs = raw["runs"]
    fields = {"params_check": raw["params_check"], "params_match": all(run["params_match"] for run in runs),
              "params_max_diff": None, "params_tol_share": None}
    if raw["params_check"] == "elementwise":
        for key in ("params_max_diff", "params_tol_share"):
            fields[key] = {v: max(r[key] for r in runs if r["variant"] == v) for v in raw["variants"]}
    return fields


def cases_with(records: list[dict], variant: Variant, said: str) -> int | None:
    """How many cases' `variant` got the verdict `said` against the default; None where no case has the variant."""
    verdicts = [r["hook_vs_default"][variant.value]["verdict"] for r in records if variant.value in r["hook_vs_default"]]
    return sum(v == said for v in verdicts) if verdicts else None


def summary(records: list[dict]) -> dict:
    """The summary JSON of the cases' records: the speedups, and per plan (``client``; ``_mpi_plan``: ``mpi``) how
    many cases the paired test found slower and faster, and in how many no hook was attached."""
    speedups = [r["speedup"] for r in records if r["speedup"] is not None] or [None]
    checksummed = ", ".join(r["case"] for r in records if r["params_check"] != "elementwise")
    known = None not in speedups
    counts = {f"cases_{name}{suffix}": cases_with(records, variant, said)
              for suffix, variant in (("", Variant.CLIENT), ("_mpi_plan", Variant.MPI))
              for name, said in (("slower", SLOWER), ("faster", FASTER), ("no_hook", NO_HOOK))}
    return {"cases": records, "speedup_median": round(statistics.median(speedups), 3) if known else None,
            "speedup_min": min(speedups) if known else None, "speedup_max": max(speedups) if known else None,
            **counts, "verdict_test": VERDICT_TEST,
            "params_match": all(r["params_match"] for r in records),
            "params_check": f"checksum, not elementwise: {checksummed}" if checksummed else "elementwise",
            "rounds": min(r["rounds"] for r in records)}


COLUMNS = ("case", "variant", "step (ms)", "95% interval (ms)", "speedup over default", "vs default (paired rounds)",
           "speedup over sequential", "params match", "largest difference (share of tolerance)")


def params_cells(r: dict, v: str) -> tuple[str, str]:
    """The table's params cells of variant `v` of case record `r`."""
    if r["params_check"] != "elementwise":
        return ("yes" if r["params_match"] else "NO") + " (checksums)", "-"
    diff, share = r["params_max_diff"][v], r["params_tol_share"][v]
    return ("yes" if share <= 1.0 else "NO"), f"{diff:.1e} ({share:.2g})"


def table_rows(records: list[dict]) -> list[tuple[str, ...]]:
    """The table: one row per case and variant, default first."""
    rows = []
    for r in records:
        for v in Variant:
            if f"{v.value}_ms" in r:
                low, high = r[f"{v.value}_ci_ms"]
                hooked = Variant.CLIENT if f"{Variant.CLIENT.value}_ms" in r else Variant.MPI
                pipelining = r.get("pipelining_speedup") if v is hooked else None
                vs_sequential = "" if pipelining is None else f"{pipelining:.2f}"
                rows.append((r["case"], v.value, f"{r[f'{v.value}_ms']:.1f}", f"[{low:.1f}, {high:.1f}]",
                             f"{r['default_ms'] / r[f'{v.value}_ms']:.2f}",
                             verdict_text(r["hook_vs_default"][v.value]) if v.value in r["hook_vs_default"] else "",
                             vs_sequential, *params_cells(r, v.value)))
    return rows


def notes(records: list[dict]) -> list[str]:
    """The lines under the table, one per case and one per hook variant with guard decisions: what was measured,
    when, the guard, the bound speedup and what the guard kept."""
    lines = []
    for r in records:
        if r["params_check"] != "elementwise":
            lines.append(f"- {r['case']}: a raw file of an older bench_ddp: no commit or times recorded; parameters "
                         f"checked by checksums only, not elementwise; {bound_text(r)}")
            continue
        commit = (r["commit"] or "unknown")[:12] + (" (dirty)" if r["dirty"] else "")
        lines.append(f"- {r['case']}: commit {commit}, measured {r['measured_at']}; guard {r['guard']}; "
                     f"torch {r['torch']}; {bound_text(r)}")
        for v, decided in r["decisions"].items():
            if decided:
                said = "; ".join(f"{n} bytes: {json.dumps(d, sort_keys=True)}" for n, d in decided.items())
                lines.append(f"  - {v} hook's guard (rank 0): {said}")
        for v, counted in r.get("hook_buckets", {}).items():
            if counted:
                lines.append(f"  - {v} hook (rank 0): {counted['reduced']} buckets reduced, {counted['direct']} of them "
                             "by DDP's all-reduce on the calling thread")
    return lines


def bound_text(r: dict) -> str:
    """The bound speedup as a note says it."""
    if r["bound_speedup"] is None:
        return "bound speedup unknown (no spec)"
    buckets = "the buckets" if r["bucket_bytes"] else "the whole gradient as one bucket"
    return f"the all-reduce's bound speedup {r['bound_speedup']:.3f} (over {buckets})"


def read_raw(path: Path) -> dict:
    """The raw file's JSON object; UsageError where it is none."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: not a raw file of scripts.bench_ddp ({one_line(e)})") from None
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: not a raw file of scripts.bench_ddp (not a JSON object)")
    return raw


def case_bound(raw: dict, raw_path: Path, spec: Path | None) -> float | None:
    """The case's bound speedup on `spec` (None: the one :func:`find_spec` finds), over the raw file's buckets or the
    whole gradient; None without a spec."""
    spec = spec or find_spec(raw, raw_path)
    if spec is None:
        return None
    buckets = raw.get("bucket_bytes") or [raw["model"]["grad_bytes"]]
    return bound_speedup(spec_hierarchy(spec, raw["world"]), buckets)


def from_raw(paths: list[Path], specs: list[Path] | None = None) -> list[dict]:
    """The case records of the raw files, in order (`specs`: one per raw file, else each found); UsageError on an
    unreadable file or spec, or a repeated case."""
    records = []
    for i, path in enumerate(paths):
        raw = read_raw(path)
        try:
            records.append(case_record(raw, case_bound(raw, path, specs[i] if specs else None)))
        except UsageError:
            raise
        except (ValueError, KeyError, TypeError, StopIteration) as e:
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
    p.add_argument("--spec", type=Path, nargs="+", metavar="SPEC",
                   help="the case's spec, for the bound speedup (default: <plan>.spec.json beside the plan); with "
                        "--from-raw one per raw file")
    p.add_argument("--plan", type=Path, help="the plan tuned on the client's backend (variant client)")
    p.add_argument("--mpi-plan", type=Path, help="the plan tuned with Open MPI (variant mpi; none without it)")
    p.add_argument("--guard", choices=("on", "off"), default="on", help="the hook's guard (default on)")
    p.add_argument("--out", type=Path, help="the raw JSON (rank 0 writes it)")
    p.add_argument("--case", default=None, help="the case's name in the table (default: N ranks)")
    p.add_argument("--placement", type=int, default=0, help="the plan's placement (default 0)")
    p.add_argument("--request", default="grad_allreduce", help="the plan's request (default grad_allreduce)")
    p.add_argument("--variants", type=lambda t: [Variant(v).value for v in t.split(",")], default=None,
                   help="comma separated (default default,client and mpi with --mpi-plan; sequential and torch-hook on request)")
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
    if args.from_raw is not None:
        if args.spec is not None and len(args.spec) != len(args.from_raw):
            raise UsageError(f"--spec: give one per raw file ({len(args.from_raw)}), not {len(args.spec)}")
        return args
    check_measure_args(args)
    return args


def check_measure_args(args) -> None:
    """Complete and check the arguments of a measurement; UsageError on bad ones."""
    if args.plan is None or args.out is None:
        raise UsageError("give --plan PLAN and --out RAW to measure, or --from-raw RAW... to rebuild the table")
    for option, path in (("--plan", args.plan), ("--mpi-plan", args.mpi_plan)):
        if path is not None and not path.is_file():
            raise UsageError(f"{option} {path}: no such file")
    if min(args.rounds, args.steps) < 1 or args.warmup < 0 or min(args.mib, args.width, args.batch) < 1:
        raise UsageError("--rounds, --steps, --mib, --width and --batch must be positive, --warmup not negative")
    if args.variants is None:
        args.variants = [Variant.DEFAULT.value, Variant.CLIENT.value] + ([Variant.MPI.value] if args.mpi_plan else [])
    if Variant.DEFAULT.value not in args.variants or Variant.CLIENT.value not in args.variants:
        raise UsageError("--variants must include default and client")
    if len(set(args.variants)) != len(args.variants):
        raise UsageError("--variants names a variant twice")
    if Variant.MPI.value in args.variants and args.mpi_plan is None:
        raise UsageError("--variants mpi needs --mpi-plan PLAN")
    if args.spec is not None and (len(args.spec) != 1 or not args.spec[0].is_file()):
        raise UsageError(f"--spec {' '.join(map(str, args.spec))}: give one spec file")
    args.spec = args.spec[0] if args.spec else spec_beside(args.plan) if spec_beside(args.plan).is_file() else None
    args.layers = args.layers or math.ceil(args.mib * 2**20 / (4 * args.width * (args.width + 1)))
    args.ifname = args.ifname or default_ifname(os.environ)


def main(argv: list[str] | None = None) -> int:
    """Measure (one process per rank) or rebuild from raw files; the exit status."""
    rank = 0
    try:
        args = parse_args(argv)
        if args.from_raw is not None:
            records = from_raw(args.from_raw, args.spec)
            console().print(rich_table(COLUMNS, table_rows(records), text_columns=2))
            print("\n".join(notes(records)))
            if args.markdown:
                write_text_atomic(markdown(COLUMNS, table_rows(records)) + "\n\n" + "\n".join(notes(records)) + "\n",
                                  args.markdown)
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
