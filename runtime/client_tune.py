"""Tune a plan on the backend the training job runs: time the DDP hook's programs as exported PyTorch functions over
torch.distributed, in the job's own process groups, and write the pick into the plan the hook reads.

    mpiexec -n N p2synth tune --client torch PLAN --out TUNED [--request NAME] [--placement I] [--top K]
    torchrun --nproc-per-node N $(which p2synth) tune --client torch PLAN --out TUNED
    sudo python -m scripts.testbed run -- python -m runtime.client_tune PLAN --out TUNED

``runtime.tune`` times the programs with Open MPI; a DDP job runs them with gloo
(CPU) or NCCL (GPU), which price the same steps differently (gloo's steps
inside a node go through TCP, and its rings send each unit's share through one
member).
This tuner judges the programs by the backend that will run them. For every
planned size of request ``--request`` (the sizes the hook chooses among) of
placement ``--placement``, the candidates are **DDP's own all-reduce**
(``dist.all_reduce`` over the reduction group, after dividing by its size, as
DDP's default hook does) and the plan's best ``--top`` programs, each run as the
hook runs it (``solver.exports.ddp.reduce_bucket`` on the function of the
exported module, whose process groups ``build_mesh`` makes once).

Every candidate is first checked exactly: one run on tagged int64 data
(``runtime/data.py``: every element carries its index and its rank's tag, so a
misplaced, dropped or doubled element shows), every element of every rank
compared with the exact sum. Then the candidates are timed in interleaved rounds
(``runtime/measure.py``: warm-up, then per round every candidate once, ``--iters``
runs each, the slowest rank's time), on float32 buckets of the planned size
holding the group size in every element (divided, then summed back to it: each
run leaves the same values, and every timed output is checked to equal it). The
pick is ``runtime.tune``'s rule: the measured-fastest candidate if it beats DDP's
all-reduce by ``--min-gain`` under the paired sign test, else the default.

**Out of sample.** The pick was chosen from the rounds that measured it, so its
gain is optimistic. ``--validate-repeats R`` (default: as many as ``--repeats``;
0 skips) then times the default, the pick and the runner-up again in R new
interleaved rounds, in the reverse order, and judges the pick on those alone,
as ``runtime.validate`` does (``validation`` below). The same processes run them:
new rounds, not a new job. Each validated program's entry also says what it costs
the hosts' CPUs: ``cpu_s``, the CPU seconds a run takes summed over the ranks
(``time.process_time`` around each run, every thread of the process: the
backend's own threads too; warm-up runs included), and ``cpu_cores``, that over
its median time (how many cores' worth it keeps busy). Where the job computes on
the same cores (gloo on CPUs), a program that keeps more cores busy alone loses
more of its gain inside the training step.

``TUNED`` is the plan file as ``runtime.tune`` writes it (the pick first in each
size's programs, ``picked``, ``measured_*`` figures, ``default`` measured), so the
hook and ``python -m solver.exports`` run the pick (DDP's own all-reduce when the
default is picked); ``tuned`` records ``client`` (torch), the backend, the torch
version, the rule, and the p2synth version, checkout commit and UTC start and end
(``runtime/provenance.py``); each tuned size gets ``validation``.

Exit status: 0 tuned and every result exact; 1 a wrong result; 2 bad arguments,
plan, or no torch (one line, from rank 0).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from p2synth.hierarchies.cli import (EXIT_USAGE, ArgumentParser, UsageError, count_argument, fraction_argument,
                                     write_json_atomic)
from p2synth.hierarchies.plan_file import PlanFile, PlanFileError, load_plan_file
from p2synth.hierarchies.program import Collective
from p2synth.runtime.data import TaggedData, element_count, reduction_group
from p2synth.runtime.devices import launcher_device
from p2synth.runtime.job import EXIT_OK, EXIT_WRONG, require_out_folder
from p2synth.runtime.plan import Selection, select
from p2synth.runtime.provenance import RunStart
from p2synth.runtime.stats import CONFIDENCE, LEVEL, MIN_GAIN, pick
from p2synth.runtime.timing import TimingConfig
from p2synth.runtime.torch_dist import TorchWorld, init_process_group, rank_and_world
from p2synth.runtime.tune import Outcome, Task, tuned_document
from p2synth.runtime.validate import verdict
from p2synth.solver.exports.buckets import BucketPlan, HookError, bucket_plan
from p2synth.solver.exports.ddp import ddp_all_reduce, load_module, own_group, reduce_bucket
from p2synth.solver.exports.planning import ExportRequest
from p2synth.solver.exports.to_torch import export_torch

BACKENDS = ("gloo", "nccl")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; UsageError on a bad one."""
    p = ArgumentParser(prog="p2synth tune --client torch", description=__doc__.split("\n")[0])
    p.add_argument("plan", help="the solver's plan (python -m solver.run ... --out plan.json), or a plan runtime.tune tuned")
    p.add_argument("--out", type=Path, required=True, help="write the tuned plan here (rank 0)")
    p.add_argument("--client", choices=["torch"], default="torch", help="the framework the job trains with (torch)")
    p.add_argument("--backend", choices=BACKENDS, default=None, help="torch.distributed backend (default: nccl with CUDA, else gloo)")
    p.add_argument("--placement", type=count_argument(0), default=0, help="the plan's placement the hook runs (default 0)")
    p.add_argument("--request", default=None, help="the workload request the hook runs (default: the plan's only one)")
    p.add_argument("--top", type=count_argument(1), default=3, help="the plan's best K programs per size, timed with DDP's all-reduce (default 3)")
    p.add_argument("--warmup", type=count_argument(0), default=1, help="untimed runs per candidate before the rounds (default 1)")
    p.add_argument("--iters", type=count_argument(1), default=2, help="timed runs per candidate and round (default 2)")
    p.add_argument("--repeats", type=count_argument(2), default=9, help="interleaved rounds (default 9: the sign test then needs 8 wins)")
    p.add_argument("--validate-repeats", type=count_argument(0), default=None, help="new rounds judging the pick (default: --repeats; 0: none)")
    p.add_argument("--min-gain", type=fraction_argument, default=MIN_GAIN, help="leave the default only for a program faster by at least this fraction (default 0.02)")
    p.add_argument("--ifname", default=None, help="the network interface gloo and the rendezvous use (default: GLOO_SOCKET_IFNAME, or the only one besides lo)")
    args = p.parse_args(argv)
    if args.validate_repeats is None:
        args.validate_repeats = args.repeats
    return args


@dataclass(frozen=True)
class SizeTask:
    """One planned size of the hook's request: its selection (default first), bytes, and the exported function names."""

    selection: Selection
    nbytes: int
    functions: tuple[str | None, ...]  # per candidate: its function in the module (None: DDP's own all-reduce)
    multiples: tuple[int, ...]  # per candidate: element count a bucket is padded to a multiple of


def prepare(args: argparse.Namespace, world_size: int) -> tuple[PlanFile, BucketPlan, list[SizeTask], str]:
    """Load the plan, the hook's programs (its BucketPlan), every size's candidates (each checked by the concrete
    semantics), and the module's source; PlanFileError / HookError (one line) if anything is off."""
    plan = load_plan_file(args.plan)
    require_out_folder(args.out)
    buckets = bucket_plan(plan, args.placement, args.request)
    devices = buckets.placement.num_devices
    if world_size != devices:
        raise PlanFileError(f"the plan's placement {args.placement} is for {devices} devices but the job has "
                            f"{world_size} ranks; run {devices} ranks")
    tasks, requests = [], []
    for sized in buckets.sizes:
        sel = select(plan, args.placement, args.top, sized.name)
        names, multiples = [], []
        for i, c in enumerate(sel.candidates):
            if c.is_default:
                names.append(None)
                multiples.append(1)
                continue
            name = f"size{len(tasks)}_candidate{i}"
            requests.append(ExportRequest(name, sel.request, c.program, sized.message_bytes))
            names.append(name)
            multiples.append(sized.group_size * c.program.pipeline)
        tasks.append(SizeTask(sel, sized.message_bytes, tuple(names), tuple(multiples)))
    return plan, buckets, tasks, export_torch(buckets.placement, requests)


@dataclass
class Runners:
    """The job's candidates made runnable: the module's mesh and functions, DDP's group, and the backend's device."""

    module: Any
    mesh: Any
    group: Any  # the rank's reduction group, for DDP's own all-reduce
    group_size: int
    device: str

    def reduction(self, function: str | None, multiple: int, divisor: int) -> Callable[[], Any]:
        """A function reducing a flat tensor in place as the hook does: divided by `divisor` first (1: a plain sum,
        for the exact check on int64 data), then DDP's own all-reduce (`function` None) or the module's function."""
        if function is None:
            return lambda x: ddp_all_reduce(x, self.group, divisor)
        fn = self.module.REQUESTS[function]
        return lambda x: reduce_bucket(x, fn, self.mesh, multiple, divisor)

    def world(self) -> TorchWorld:
        """The default group as runtime/measure.py times with it, its tensors on the backend's device."""
        return TorchWorld(self.device)

    def synchronize(self) -> None:
        """Wait for the device (CUDA); nothing on the CPU."""
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()


def connect(source: str, buckets: BucketPlan, backend: str, rank: int, world_size: int) -> Runners:
    """Load the exported module, build its mesh, and make the rank's reduction group (collective: every rank makes
    every group, in the same order, as the hook's guard does)."""
    module = load_module(source, "p2synth_client_tune")
    device = "cuda" if backend == "nccl" else "cpu"
    if device == "cuda":
        import torch

        torch.cuda.set_device(launcher_device(os.environ, torch.cuda.device_count()))
    mesh = module.build_mesh(device)
    group_size = buckets.sizes[0].group_size
    return Runners(module, mesh, own_group(buckets, world_size, rank), group_size, device)


def check_exact(task: SizeTask, runners: Runners, rank: int, world_size: int) -> list[int]:
    """Per candidate, the wrong elements of one run on tagged int64 data, summed over ranks (collective)."""
    import torch
    import torch.distributed as dist

    sel = task.selection
    count = element_count(task.nbytes, runners.group_size, sel.pieces)
    data = TaggedData(Collective.ALL_REDUCE, reduction_group(sel.placement, sel.request, rank), count, world_size)
    expected = torch.from_numpy(data.expected().view(np.int64)).to(runners.device)
    wrong = []
    for function, multiple in zip(task.functions, task.multiples):
        x = torch.from_numpy(data.input().view(np.int64)).to(runners.device)
        out = runners.reduction(function, multiple, 1)(x)
        runners.synchronize()
        wrong.append(int((out.view(-1) != expected).sum()))
    total = torch.tensor(wrong, dtype=torch.int64, device=runners.device)
    dist.all_reduce(total)
    return [int(w) for w in total.tolist()]


def time_candidates(task: SizeTask, runners: Runners, chosen: list[int], config: TimingConfig,
                    reverse: bool = False) -> tuple[list, list[int], list[float]]:
    """Time candidates `chosen` (indices into the task's) in interleaved rounds on float32 buckets of the planned size;
    their Measured figures, the wrong elements of each one's last timed output, and each one's CPU seconds a run
    (:class:`CpuClock`) summed over the ranks (collective)."""
    import torch
    import torch.distributed as dist

    from p2synth.runtime.measure import interleaved

    n = runners.group_size
    order = chosen[::-1] if reverse else list(chosen)
    buffers = {i: torch.full((task.nbytes // 4,), float(n), dtype=torch.float32, device=runners.device) for i in order}
    reduce = {i: runners.reduction(task.functions[i], task.multiples[i], n) for i in order}
    clocks = {i: CpuClock() for i in order}
    runs = [lambda i=i: clocks[i].run(lambda: reduce[i](buffers[i])) for i in order]
    measured = interleaved(runs, runners.synchronize, runners.world(), config)
    by_index = dict(zip(order, measured))
    wrong = torch.tensor([int((buffers[i] != float(n)).sum()) for i in chosen], dtype=torch.int64, device=runners.device)
    dist.all_reduce(wrong)
    cpu = torch.tensor([clocks[i].per_run_s() for i in chosen], dtype=torch.float64, device=runners.device)
    dist.all_reduce(cpu)
    return [by_index[i] for i in chosen], [int(w) for w in wrong.tolist()], [float(c) for c in cpu.tolist()]


@dataclass
class CpuClock:
    """The CPU time this process (every thread: the backend's too, gloo's among them) spends in one candidate's runs:
    ``time.process_time`` around each, so a run's count includes its wait for the other ranks only as far as
    that wait burns CPU."""

    seconds: float = 0.0
    runs: int = 0

    def run(self, fn: Callable[[], Any]) -> Any:
        """Run `fn`, adding its CPU time."""
        t0 = time.process_time()
        try:
            return fn()
        finally:
            self.seconds += time.process_time() - t0
            self.runs += 1

    def per_run_s(self) -> float:
        """CPU seconds a run, on average over every run so far (warm-ups included); 0 before any."""
        return self.seconds / self.runs if self.runs else 0.0


def tune_size(task: SizeTask, runners: Runners, config: TimingConfig, top: int, min_gain: float,
              rank: int, world_size: int) -> Outcome:
    """Check every candidate of one size exactly, time them, and pick (runtime.tune's rule)."""
    wrong = check_exact(task, runners, rank, world_size)
    measured, timed_wrong, _ = time_candidates(task, runners, list(range(len(task.functions))), config)
    picked = pick([m.repeats_s for m in measured], 0, min_gain)
    return Outcome(Task(task.selection, task.nbytes, 1, top, min_gain), tuple(measured),
                   tuple(a + b for a, b in zip(wrong, timed_wrong)), picked)


def validate_size(task: SizeTask, outcome: Outcome, runners: Runners, config: TimingConfig) -> dict:
    """Judge the pick on new rounds (the reverse order): the default, the pick and the runner-up timed again;
    the ``validation`` entry of runtime.validate."""
    medians = [m.median_s for m in outcome.measured]
    others = sorted((i for i in range(1, len(medians)) if i != outcome.picked), key=lambda i: (medians[i], i))
    chosen = [0] + ([outcome.picked] if outcome.picked else []) + others[:1]
    measured, wrong, cpu = time_candidates(task, runners, chosen, config, reverse=True)
    sel = task.selection
    subset = Selection(sel.index, sel.placement, sel.request, sel.request_name, sel.message_bytes,
                       tuple(sel.candidates[i] for i in chosen))
    again = Outcome(Task(subset, task.nbytes, 1, outcome.task.top, outcome.task.min_gain), tuple(measured),
                    tuple(wrong), 0)
    judged = verdict(again, chosen.index(outcome.picked), outcome.task.min_gain)
    for program, m, c in zip(judged["programs"], measured, cpu):
        program.update(cpu_s=round(c, 6), cpu_cores=round(c / m.median_s, 3))
    return {**judged, "repeats": config.repeats, "order": "reverse of the tuning rounds"}


def tuned_plan(plan: PlanFile, outcomes: list[Outcome], validations: list[dict | None], info: dict,
               placement: int) -> dict:
    """runtime.tune's tuned document of `outcomes`, each size's ``validation`` added."""
    doc = tuned_document(plan, outcomes, info)
    entry = next(e for e in doc["placements"] if e["plan_index"] == placement)
    names = plan.request_names()
    for o, v in zip(outcomes, validations):
        if v is not None:
            entry["requests"][names.index(o.task.selection.request_name)]["validation"] = v
    return doc


def summary_line(o: Outcome, validation: dict | None) -> str:
    """One line per tuned size: the pick and its gain over DDP's all-reduce, in tuning and in validation."""
    sel = o.task.selection
    chosen = sel.candidates[o.picked]
    label = "DDP's all-reduce (the default)" if chosen.is_default else f"#{chosen.position} {chosen.program.text(sel.placement)}"
    d, p = o.measured[0].median_s, o.measured[o.picked].median_s
    line = (f"# {sel.request_name} ({o.task.nbytes:,} B, {len(sel.candidates)} candidates): picked {label}  "
            f"{p * 1e3:.1f} ms, DDP's all-reduce {d * 1e3:.1f} ms, speedup {d / p:.2f}")
    if validation is not None:
        line += (f"; validation: pick/default {validation['pick_over_default']:.3f}"
                 f"{', confirmed' if validation['confirmed'] else ''}{', LOSS' if validation['loss_5pct'] else ''}")
    return line + f"  wrong {sum(o.wrong)}"


def main(argv: list[str] | None = None) -> int:
    """Entry point (one process per rank); the exit status, the same on every rank."""
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))  # errors: one line, rank 0
    try:
        args = parse_args(argv)
        _, world_size = rank_and_world(os.environ)
        plan, buckets, tasks, source = prepare(args, world_size)
        try:
            import torch
        except ImportError:
            raise UsageError("PyTorch is not installed: install p2synth[torch] in the job's environment") from None
        backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    except (UsageError, PlanFileError, HookError, ValueError) as e:
        if rank == 0:
            print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    return _run(args, plan, buckets, tasks, source, backend)


def _run(args: argparse.Namespace, plan: PlanFile, buckets: BucketPlan, tasks: list[SizeTask], source: str,
         backend: str) -> int:
    """Join the job, tune every size, validate, write the plan (rank 0); the exit status."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    rank, world_size = init_process_group(backend, args.ifname)
    start = RunStart.now() if rank == 0 else None  # git runs once, on the rank that writes
    runners = connect(source, buckets, backend, rank, world_size)
    config = TimingConfig(warmup=args.warmup, iters=args.iters, repeats=args.repeats)
    outcomes, validations = [], []
    for task in tasks:
        outcome = tune_size(task, runners, config, args.top, args.min_gain, rank, world_size)
        validation = None
        if args.validate_repeats:
            again = TimingConfig(warmup=args.warmup, iters=args.iters, repeats=args.validate_repeats)
            validation = validate_size(task, outcome, runners, again)
        outcomes.append(outcome)
        validations.append(validation)
        if rank == 0:
            print(summary_line(outcome, validation), file=sys.stderr, flush=True)
    wrong = sum(sum(o.wrong) for o in outcomes) + sum(sum(p["wrong"] for p in v["programs"]) for v in validations if v)
    if rank == 0:
        info = {"client": "torch", "backend": backend, "torch": torch.__version__, "ranks": world_size,
                "timing": {"warmup": config.warmup, "iters": config.iters, "repeats": config.repeats,
                           "order": "interleaved", "validate_repeats": args.validate_repeats},
                "top": args.top, "placements_measured": 1, "confidence": CONFIDENCE, "min_gain": args.min_gain,
                "level": LEVEL, "hierarchy_file": None,
                "rule": f"pick = the smallest median if it is faster than DDP's all-reduce by more than {args.min_gain:g} "
                        f"in enough paired rounds for a one-sided exact sign test at level {LEVEL:g}, else the default",
                "median_speedup": round(statistics.median(o.measured[0].median_s / o.measured[o.picked].median_s
                                                          for o in outcomes), 4),
                **start.record()}
        write_json_atomic(tuned_plan(plan, outcomes, validations, info, args.placement), args.out)
        print(f"# wrote {args.out}; wrong elements: {wrong}", file=sys.stderr, flush=True)
    dist.destroy_process_group()
    return EXIT_WRONG if wrong else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
