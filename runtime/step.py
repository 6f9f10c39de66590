"""Run one training step of a plan's placement for real: timed compute, the plan's programs, the pipeline sends.

    mpirun -n N python -m runtime.step plan.json --placement I [--rounds 9] [--warmup 1] [--out step.json]

The plan must have a ``step`` section (hierarchies/step.py; docs/runtime.md,
"Running a step"). Every rank runs the passes of its pipeline stage (its
coordinate on the pipeline-role axis, one stage without one) in the order of
``stage_ops``; each request plays the part ``part_of`` gives it:

* compute: a timed sleep, ``layers / p x layer_seconds / t`` per pass (``p``
  stages, ``t`` the tensor axis's size), since on shared cores a busy loop would
  measure the CPU, not the schedule;
* LAYER (tensor or expert axis): ``count / (2 x microbatches)`` blocking runs
  per pass of every such request, evenly between equal slices of the pass's compute;
* PIPELINE (send_recv over the pipeline axis): a forward pass waits for its
  activation from the previous stage (posted early with ``Irecv``) and sends its
  own to the next (``Isend``); backward passes go the other way; every received
  buffer is checked exactly after each round;
* GRADIENT (data axis): ``count`` buckets per request, in workload order, ready
  during the stage's last backward pass when its compute has reached the
  buckets' share of the bytes, reduced one after the other by a communication
  thread while the compute goes on (MPI_THREAD_MULTIPLE; without it, or on
  cupy, after the pass); what is left after the pass is the exposed time;
* AFTER (anything else): ``count`` blocking runs per request, once the pipeline is done.

Each program is checked once on tagged data first (runtime/tune.py's ``arm``).
Then ``--warmup`` untimed steps of each variant, and ``--rounds`` rounds, each
timing both variants (``best``: the plan's best programs; ``default``: every
request as its default collective), in an order that alternates per round. A
step starts after a barrier; its time is the slowest rank's, and its parts
(compute slept, layer communication, pipeline waits, exposed gradient, after)
are that rank's.

Exit status: 0 every result exact; 1 a wrong element (check run, activation,
or a timed run's output), or a rank crashed; 2 bad arguments, a plan without a
step section, a bad placement index, a job size that is not the placement's
device count, or a bad backend (one line).
"""

from __future__ import annotations

import argparse
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import numpy as np
from mpi4py import MPI
from rich.console import Console
from rich.table import Table
from rich.text import Text

from p2synth.hierarchies.cli import count_argument, enum_argument, write_json_atomic
from p2synth.hierarchies.plan_file import PlanFile, PlanFileError, PlannedPlacement, load_plan_file
from p2synth.hierarchies.step import Part, Pass, Role, StepSpec, request_part, stage_ops
from p2synth.runtime.backends import Backend, BackendKind
from p2synth.runtime.data import rank_tag
from p2synth.runtime.job import (EXIT_OK, EXIT_WRONG, RankZeroParser, mpi_version, require_out_folder,
                                 run_command)
from p2synth.runtime.plan import Selection, select
from p2synth.runtime.provenance import RunStart
from p2synth.runtime.report import out_of_bounds_line
from p2synth.runtime.stats import median_interval
from p2synth.runtime.tune import Armed, arm

ACTIVATION_DTYPE = np.dtype(np.uint64)
COMPONENTS = ("compute_s", "layer_comm_s", "pipeline_wait_s", "gradient_exposed_s", "after_s")
THREAD_LEVELS = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled", MPI.THREAD_SERIALIZED: "serialized",
                 MPI.THREAD_MULTIPLE: "multiple"}


class Variant(str, Enum):
    """Which program every request runs: the plan's best, or its default collective."""

    BEST = "best"
    DEFAULT = "default"

    def __str__(self) -> str:
        return self.value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; UsageError on a bad one."""
    p = RankZeroParser(prog="python -m runtime.step", description=__doc__.split("\n")[0])
    p.add_argument("plan", help="the solver's result JSON of a spec with a step section")
    p.add_argument("--placement", type=count_argument(0), default=0, help="index of the placement in the plan (default 0)")
    p.add_argument("--rounds", type=count_argument(1), default=9, help="timed rounds, each one step of both variants (default 9)")
    p.add_argument("--warmup", type=count_argument(0), default=1, help="untimed steps of each variant first (default 1)")
    p.add_argument("--backend", type=enum_argument(BackendKind), default=BackendKind.NUMPY, metavar="{numpy,cupy}",
                   help="numpy over MPI (default) or cupy over NCCL")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here (rank 0)")
    p.add_argument("--poll-sleep-us", type=count_argument(0), default=0, metavar="US",
                   help="wait for the pipeline's receives and sends by testing them every US microseconds, asleep in "
                        "between, instead of inside MPI (default 0: inside MPI)")
    p.add_argument("--trace", type=Path, default=None, help="write every rank's passes, layer runs, receive waits and buckets here (rank 0)")
    p.add_argument("--corrupt", type=int, default=None, help=argparse.SUPPRESS)  # tests: this rank sends wrong activations
    return p.parse_args(argv)


@dataclass(frozen=True)
class StepRequest:
    """A workload request as the step runs it: its part, count, and (but for the pipeline part) its default and best."""

    name: str
    part: Part
    count: int
    message_bytes: int
    selection: Selection | None  # None for the pipeline part: it is run as point-to-point sends


@dataclass(frozen=True)
class StepJob:
    """What every rank runs, validated the same way on every rank."""

    plan: PlanFile
    planned: PlannedPlacement
    step: StepSpec
    requests: tuple[StepRequest, ...]
    pipeline_axis: int | None  # index of the pipeline-role axis (None: one stage)
    stages: int
    tensor: int
    activation_bytes: int  # bytes each pipeline send carries


def prepare(args: argparse.Namespace, world: MPI.Intracomm) -> StepJob:
    """Load the plan and choose every request's programs; PlanFileError/ValueError (one line) if anything is off."""
    plan = load_plan_file(args.plan)
    step = plan.step
    if step is None:
        raise PlanFileError(f"{args.plan}: the plan has no step section: plan a spec with a \"step\" section "
                            "(docs/workloads.md) to run its step")
    planned = plan.placement(args.placement)
    devices = planned.placement.num_devices
    if world.Get_size() != devices:
        raise PlanFileError(f"placement {args.placement} has {devices} devices but the job has {world.Get_size()} ranks; "
                            f"run with -n {devices}")
    for out in (args.out, args.trace):
        if out is not None:
            require_out_folder(out)
    try:
        pipeline_axis = step.axis_index(Role.PIPELINE, plan.axes)
        tensor = step.axis_size(Role.TENSOR, plan.axes)
    except ValueError as e:
        raise PlanFileError(f"step: {e}") from None
    requests = []
    for r in planned.requests:
        named = r.named
        part = request_part(step, plan.axes, named.request)
        if part is Part.LAYER and named.count % (2 * step.microbatches):
            raise PlanFileError(f"request {named.name}: count {named.count} is not a multiple of 2 x microbatches "
                                f"({2 * step.microbatches}): a layer request runs count / (2 x microbatches) times a pass")
        if named.message_bytes <= 0:
            raise PlanFileError(f"request {named.name}: the plan gives no message_bytes to run at")
        selection = None
        if part is not Part.PIPELINE:
            selection = select(plan, args.placement, 1, named.name if plan.is_workload else None)
            selection.check_size(named.message_bytes, world.Get_size())
        requests.append(StepRequest(named.name, part, named.count, named.message_bytes, selection))
    return StepJob(plan, planned, step, tuple(requests), pipeline_axis, step.axis_size(Role.PIPELINE, plan.axes), tensor,
                   sum(r.message_bytes for r in requests if r.part is Part.PIPELINE))


# ---- one rank's step ------------------------------------------------------------------------


@dataclass
class Figures:
    """One rank's step: its time from the barrier to its end, and where the time went (seconds)."""

    step_s: float = 0.0
    compute_s: float = 0.0
    layer_comm_s: float = 0.0
    pipeline_wait_s: float = 0.0
    gradient_exposed_s: float = 0.0
    after_s: float = 0.0

    def vector(self) -> list[float]:
        """The step time, then the components in COMPONENTS order."""
        return [self.step_s, *(getattr(self, c) for c in COMPONENTS)]


@dataclass
class Trace:
    """One rank's events of one step (perf_counter seconds, comparable across ranks of one host)."""

    variant: str
    round: int  # -1: a warm-up step
    start: float = 0.0
    end: float = 0.0
    events: list[dict] = field(default_factory=list)


def activation(sender: int, kind: Pass, microbatch: int, microbatches: int, count: int) -> np.ndarray:
    """The exact activation `sender` sends for (pass, microbatch): its element index plus a tag of all three."""
    key = rank_tag((sender * 2 + (kind is Pass.BACKWARD)) * microbatches + microbatch)
    return np.arange(count, dtype=ACTIVATION_DTYPE) + np.uint64(key)


class Bucketer:
    """The gradient buckets' communication thread: runs the buckets handed to it one after the other (FIFO)."""

    def __init__(self) -> None:
        self.todo: queue.Queue = queue.Queue()
        self.done: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._loop, name="gradient-buckets", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while (item := self.todo.get()) is not None:
            run, event = item
            try:
                event["start"] = time.perf_counter()
                run()
                event["end"] = time.perf_counter()
                self.done.put(None)
            except BaseException as e:  # handed to the main thread, which raises it (and the job aborts)
                self.done.put(e)

    def hand(self, run: Callable[[], None], event: dict) -> None:
        """Queue one bucket's run; `event` gets its start and end times."""
        self.todo.put((run, event))

    def wait(self, buckets: int) -> None:
        """Wait until `buckets` handed buckets are done (raise what a bucket raised)."""
        for _ in range(buckets):
            error = self.done.get()
            if error is not None:
                raise error

    def stop(self) -> None:
        """End the thread."""
        self.todo.put(None)
        self.thread.join()


class StepRank:
    """This rank's side of the step: its stage, its passes, the armed requests and the pipeline neighbours."""

    def __init__(self, job: StepJob, backend: Backend, world: MPI.Intracomm, overlap: bool, corrupt: bool,
                 poll_sleep_s: float = 0.0):
        self.job, self.backend, self.world = job, backend, world
        self.poll_sleep_s = poll_sleep_s
        step, placement = job.step, job.planned.placement
        rank = world.Get_rank()
        coords = placement.axis_coords(rank)
        self.stage = 0 if job.pipeline_axis is None else coords[job.pipeline_axis]
        self.ops = stage_ops(step.schedule, self.stage, job.stages, step.microbatches)
        forward, backward = step.pass_seconds(job.stages, job.tensor)
        self.compute = {Pass.FORWARD: forward, Pass.BACKWARD: backward}
        self.last_backward = max(i for i, (kind, _) in enumerate(self.ops) if kind is Pass.BACKWARD)
        self.neighbours = {-1: None, 1: None}
        if job.pipeline_axis is not None:
            by_coords = {placement.axis_coords(r): r for r in range(world.Get_size())}
            for d in (-1, 1):
                if 0 <= self.stage + d < job.stages:
                    near = list(coords)
                    near[job.pipeline_axis] += d
                    self.neighbours[d] = by_coords[tuple(near)]
        self.pipe = world.Dup()  # the pipeline's sends: tags of their own, apart from every collective
        self.elements = max(1, job.activation_bytes // ACTIVATION_DTYPE.itemsize)
        self.armed: list[Armed | None] = [None if r.selection is None else arm(r.selection, r.message_bytes, backend, world)
                                          for r in job.requests]
        self.check_wrong = sum(sum(a.wrong) for a in self.armed if a is not None)
        # per variant, per request: the compiled program (the best is the default's when the plan has no other)
        self.runs = {v: [None if a is None else a.compiled[0 if v is Variant.DEFAULT else -1].run for a in self.armed]
                     for v in Variant}
        self.layer_order = self._layer_order()
        self.buckets = [i for i, r in enumerate(job.requests) if r.part is Part.GRADIENT for _ in range(r.count)]
        bucket_bytes = np.cumsum([job.requests[i].message_bytes for i in self.buckets], dtype=np.float64)
        self.bucket_ready = tuple(float(b / bucket_bytes[-1]) for b in bucket_bytes) if self.buckets else ()
        self.bucketer = Bucketer() if overlap and self.buckets else None
        self.sends = self._send_buffers(corrupt)
        self.received = {(kind, j): np.empty(self.elements, ACTIVATION_DTYPE) for kind, j in self.ops if self._source(kind) is not None}

    def _layer_order(self) -> tuple[int, ...]:
        """The layer requests' runs in one pass: round-robin over the requests, each count / (2 x microbatches) times."""
        per_pass = {i: r.count // (2 * self.job.step.microbatches) for i, r in enumerate(self.job.requests) if r.part is Part.LAYER}
        most = max(per_pass.values(), default=0)
        return tuple(i for k in range(most) for i, n in per_pass.items() if k < n)

    def _source(self, kind: Pass) -> int | None:
        """The rank a pass's input comes from: the previous stage (forward), the next (backward); None at the ends."""
        return self.neighbours[-1 if kind is Pass.FORWARD else 1]

    def _target(self, kind: Pass) -> int | None:
        """The rank a pass's output goes to."""
        return self.neighbours[1 if kind is Pass.FORWARD else -1]

    def _tag(self, kind: Pass, microbatch: int) -> int:
        return (kind is Pass.BACKWARD) * self.job.step.microbatches + microbatch

    def _send_buffers(self, corrupt: bool) -> dict[tuple[Pass, int], np.ndarray]:
        out = {}
        for kind, j in self.ops:
            if self._target(kind) is not None:
                buf = activation(self.world.Get_rank(), kind, j, self.job.step.microbatches, self.elements)
                if corrupt:
                    buf[-1] += np.uint64(1)
                out[(kind, j)] = buf
        return out

    def _wait(self, requests: list[MPI.Request]) -> None:
        """Wait for pipeline requests: inside MPI, or (poll_sleep_s > 0) by testing them, asleep in between, so that
        a waiting rank leaves shared cores to the ranks in collectives."""
        if self.poll_sleep_s <= 0:
            MPI.Request.Waitall(requests)
            return
        while not MPI.Request.Testall(requests):
            time.sleep(self.poll_sleep_s)

    def _sleep(self, seconds: float, figures: Figures) -> None:
        if seconds > 0:
            t0 = time.perf_counter()
            time.sleep(seconds)
            figures.compute_s += time.perf_counter() - t0

    def _blocking(self, run: Callable[[], None]) -> float:
        """Run one program to completion; its seconds."""
        t0 = time.perf_counter()
        run()
        self.backend.synchronize()
        return time.perf_counter() - t0

    def _pass(self, kind: Pass, j: int, runs: list, figures: Figures, trace: Trace | None, buckets: bool) -> None:
        """One pass: its compute, cut by the layer runs (and, in the last backward pass, by the buckets' ready times)."""
        total = self.compute[kind]
        n = len(self.layer_order)
        events = [((k + 1) / (n + 1), 1, i) for k, i in enumerate(self.layer_order)]
        if buckets:
            events += [(ready, 0, k) for k, ready in enumerate(self.bucket_ready)]  # a bucket before a layer run at a tie
        done = 0.0
        for share, is_layer, i in sorted(events):
            self._sleep(total * (share - done), figures)
            done = share
            if is_layer:
                t0 = time.perf_counter()
                figures.layer_comm_s += self._blocking(runs[i])
                if trace is not None:
                    trace.events.append({"kind": "layer", "request": i, "start": t0, "end": time.perf_counter()})
            else:
                event = {"kind": "bucket", "index": i, "ready": time.perf_counter()}
                if trace is not None:
                    trace.events.append(event)
                assert self.bucketer is not None
                self.bucketer.hand(self._bucket_run(runs[self.buckets[i]]), event)
        self._sleep(total * (1 - done), figures)

    def _bucket_run(self, run: Callable[[], None]) -> Callable[[], None]:
        def bucket() -> None:
            run()
            self.backend.synchronize()
        return bucket

    def run(self, variant: Variant, trace: Trace | None) -> Figures:
        """One step of `variant` (collective): from a barrier to this rank's end."""
        runs = self.runs[variant]
        figures = Figures()
        self.world.Barrier()
        start = time.perf_counter()
        receives = {key: self.pipe.Irecv(buf, source=self._source(key[0]), tag=self._tag(*key))
                    for key, buf in self.received.items()}
        sends = []
        for index, (kind, j) in enumerate(self.ops):
            if (kind, j) in receives:
                t0 = time.perf_counter()
                self._wait([receives[(kind, j)]])
                t1 = time.perf_counter()
                figures.pipeline_wait_s += t1 - t0
                if trace is not None:
                    trace.events.append({"kind": "recv", "pass": str(kind), "microbatch": j, "start": t0, "end": t1})
            overlap = index == self.last_backward and self.bucketer is not None
            t0 = time.perf_counter()
            self._pass(kind, j, runs, figures, trace, overlap)
            t1 = time.perf_counter()
            if trace is not None:
                trace.events.append({"kind": str(kind), "microbatch": j, "start": t0, "end": t1})
            if (kind, j) in self.sends:
                sends.append(self.pipe.Isend(self.sends[(kind, j)], dest=self._target(kind), tag=self._tag(kind, j)))
        pass_end = time.perf_counter()
        if self.bucketer is not None:
            self.bucketer.wait(len(self.buckets))
        else:
            for k, i in enumerate(self.buckets):  # no overlap: after the pass, one after the other
                event = {"kind": "bucket", "index": k, "ready": pass_end, "start": time.perf_counter()}
                self._blocking(runs[i])
                event["end"] = time.perf_counter()
                if trace is not None:
                    trace.events.append(event)
        figures.gradient_exposed_s = time.perf_counter() - pass_end
        t0 = time.perf_counter()
        self._wait(sends)
        figures.pipeline_wait_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        for i, r in enumerate(self.job.requests):
            if r.part is Part.AFTER:
                for _ in range(r.count):
                    self._blocking(runs[i])
        end = time.perf_counter()
        figures.after_s = end - t0
        figures.step_s = end - start
        if trace is not None:
            trace.start, trace.end = start, end
        return figures

    def poison(self) -> None:
        """Fill every output buffer with what no result holds, before a step (untimed)."""
        for a in self.armed:
            if a is not None:
                a.buffers.poison(float("nan"))
        for buf in self.received.values():
            buf.fill(0)

    def wrong_activations(self) -> int:
        """Received activations that differ from what their sender sends, summed over ranks (collective)."""
        mine = 0
        for (kind, j), buf in self.received.items():
            expected = activation(self._source(kind), kind, j, self.job.step.microbatches, self.elements)
            mine += int(np.count_nonzero(buf != expected))
        total = np.zeros(1, dtype=np.int64)
        self.world.Allreduce(np.array([mine], dtype=np.int64), total, op=MPI.SUM)
        return int(total[0])

    def wrong_outputs(self) -> int:
        """Wrong elements in the requests' outputs after a step (the last run of each), summed over ranks (collective)."""
        return sum(a.timed_wrong() for a in self.armed if a is not None)

    def close(self) -> None:
        """Stop the thread, free the communicators."""
        if self.bucketer is not None:
            self.bucketer.stop()
        for a in self.armed:
            if a is not None:
                a.close()
        self.pipe.Free()


# ---- the job --------------------------------------------------------------------------------


@dataclass
class VariantRounds:
    """The rounds of one variant: per round the slowest rank's step time and components."""

    rounds: list[list[float]] = field(default_factory=list)  # [step_s, *COMPONENTS] per round

    def summary(self) -> dict:
        """Median and 95% interval of the step time; medians of the components; the rounds."""
        columns = list(zip(*self.rounds))
        interval = median_interval(columns[0])
        out = {"step_s": interval.median, "step_ci_s": interval.to_json(), "coverage": interval.coverage}
        out |= {c: float(np.median(col)) for c, col in zip(COMPONENTS, columns[1:])}
        out["rounds"] = [dict(zip(("step_s", *COMPONENTS), r)) for r in self.rounds]
        return out


def slowest(figures: Figures, world: MPI.Intracomm) -> list[float]:
    """The figures of the rank whose step took longest (collective)."""
    everyone = np.empty((world.Get_size(), 1 + len(COMPONENTS)), dtype=np.float64)
    world.Allgather(np.array(figures.vector(), dtype=np.float64), everyone)
    return [float(x) for x in everyone[int(np.argmax(everyone[:, 0]))]]


def main(argv: list[str] | None = None) -> int:
    """Entry point: returns the exit status (every rank returns the same)."""
    return run_command(argv, parse_args, prepare, _step)


def _step(args: argparse.Namespace, job: StepJob, backend: Backend, world: MPI.Intracomm) -> int:
    level = MPI.Query_thread()
    overlap = level == MPI.THREAD_MULTIPLE and backend.kind is BackendKind.NUMPY
    rank0 = world.Get_rank() == 0
    start = RunStart.now() if rank0 else None  # git runs once, on the rank that writes
    ranker = StepRank(job, backend, world, overlap, args.corrupt == world.Get_rank(), args.poll_sleep_us * 1e-6)
    if ranker.check_wrong:
        if rank0:
            print(f"error: {ranker.check_wrong} wrong element(s) in the check runs on tagged data; nothing timed",
                  file=sys.stderr, flush=True)
        ranker.close()
        return EXIT_WRONG
    traces: list[Trace] = []
    measured = {v: VariantRounds() for v in Variant}
    wrong_activations = wrong_outputs = 0
    plan = [(v, -1) for _ in range(args.warmup) for v in Variant]
    plan += [(v, r) for r in range(args.rounds) for v in (list(Variant) if r % 2 == 0 else list(Variant)[::-1])]
    for variant, round_ in plan:
        trace = Trace(str(variant), round_) if args.trace is not None else None
        ranker.poison()
        figures = ranker.run(variant, trace)
        worst = slowest(figures, world)
        if round_ >= 0:
            measured[variant].rounds.append(worst)
        wrong_activations += ranker.wrong_activations()
        wrong_outputs += ranker.wrong_outputs()
        if trace is not None:
            traces.append(trace)
    ranker.close()
    wrong = wrong_activations + wrong_outputs
    all_traces = world.gather((clock_id(), [t.__dict__ for t in traces]), root=0) if args.trace is not None else None
    if rank0:
        doc = step_document(job, args, backend, world, level, overlap, measured,
                            {"check": 0, "activations": wrong_activations, "outputs": wrong_outputs})
        doc["run"] = start.record()
        if args.out is not None:
            write_json_atomic(doc, args.out)
        if all_traces is not None:
            write_json_atomic(trace_document(job, all_traces, args.poll_sleep_us), args.trace)
        Console(width=160).print(step_table(doc))
        for line in preamble(doc):
            print(line, flush=True)
        print(out_of_bounds_line(wrong), flush=True)
    return EXIT_WRONG if wrong else EXIT_OK


def clock_id() -> str:
    """What names this rank's perf_counter clock: the kernel's boot id (one per host, shared by every process and
    network namespace on it), or the host name where there is none."""
    try:
        return "boot:" + Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "host:" + socket.gethostname()


def trace_document(job: StepJob, traces: list[tuple[str, list[dict]]], poll_sleep_us: int = 0) -> dict:
    """The --trace document: the layer requests (index, name, axes); how the pipeline's waits waited
    (`poll_sleep_us`, 0: inside MPI); per rank its clock, axis coordinates, stage and steps (warm-ups first, then the
    rounds in the order they ran), each with its passes, layer runs, receive waits and buckets (perf_counter seconds:
    they compare across ranks with the same clock)."""
    ranks = []
    for rank, (clock, steps) in enumerate(traces):
        coords = job.planned.placement.axis_coords(rank)
        stage = 0 if job.pipeline_axis is None else coords[job.pipeline_axis]
        ranks.append({"rank": rank, "clock": clock, "coords": list(coords), "stage": stage, "steps": steps})
    layers = [{"request": i, "name": r.name, "axes": sorted(job.planned.requests[i].named.request.axes),
               "message_bytes": r.message_bytes}
              for i, r in enumerate(job.requests) if r.part is Part.LAYER]
    return {"axes": [a.name for a in job.plan.axes], "pipeline_axis": job.pipeline_axis, "layers": layers,
            "poll_sleep_us": poll_sleep_us, "ranks": ranks}


def step_document(job: StepJob, args: argparse.Namespace, backend: Backend, world: MPI.Intracomm, level: int,
                  overlap: bool, measured: dict[Variant, VariantRounds], wrong: dict[str, int]) -> dict:
    """The --out document (docs/runtime.md, "Running a step")."""
    placement = job.planned.placement
    entry = job.plan.entries[job.planned.index]
    predicted = entry.get("step")
    requests = []
    for r in job.requests:
        item = {"name": r.name, "part": str(r.part), "count": r.count, "message_bytes": r.message_bytes}
        if r.selection is not None:
            cands = r.selection.candidates
            item |= {"default": cands[0].program.text(placement), "best": cands[-1].program.text(placement)}
        requests.append(item)
    return {
        "placement": job.planned.index,
        "matrix": [list(row) for row in placement.matrix],
        "description": placement.describe(),
        "ranks": world.Get_size(),
        "backend": str(backend.kind),
        "mpi": mpi_version(),
        "mpi_thread_level": THREAD_LEVELS.get(level, str(level)),
        "gradient_overlap": overlap,
        "gradient_overlap_note": None if overlap else (
            "cupy: buckets run after the last backward pass" if backend.kind is BackendKind.CUPY
            else "MPI is not THREAD_MULTIPLE: buckets run after the last backward pass"),
        "step": job.step.model_dump(mode="json", exclude_none=True),
        "stages": job.stages,
        "tensor": job.tensor,
        "activation_bytes": job.activation_bytes,
        "requests": requests,
        "timing": {"warmup": args.warmup, "rounds": args.rounds, "order": "interleaved, alternating per round",
                   "poll_sleep_us": args.poll_sleep_us},
        "variants": {str(v): measured[v].summary() for v in Variant},
        "predicted": predicted if isinstance(predicted, dict) else None,
        "wrong": wrong,
    }


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def step_table(doc: dict) -> Table:
    """Per variant the measured step (median and interval) and its parts; the plan's prediction beside them."""
    table = Table(title=Text(f"placement {doc['placement']}: {doc['description']} (ms; median of {doc['timing']['rounds']} "
                             "rounds, parts of the slowest rank)"), title_justify="left")
    for col in ("variant", "step", "95% interval", "compute", "layer comm", "pipeline wait", "gradient exposed", "after"):
        table.add_column(col, justify="left" if col == "variant" else "right")
    for name, v in doc["variants"].items():
        low, high = v["step_ci_s"]
        table.add_row(name, _ms(v["step_s"]), Text(f"[{_ms(low)}, {_ms(high)}]"), *(_ms(v[c]) for c in COMPONENTS))
    p = doc["predicted"]
    if p:
        wait = None if p.get("pipeline_comm_s") is None else p["pipeline_comm_s"] + p.get("bubble_s", 0.0)
        table.add_row("predicted", _ms(p.get("step_s")), "", _ms(p.get("compute_s")), _ms(p.get("layer_comm_s")),
                      _ms(wait), _ms(p.get("gradient_exposed_s")), _ms(p.get("after_s")))
    return table


def preamble(doc: dict) -> list[str]:
    """The '#' lines under the table: the job, the step, what ran."""
    step = doc["step"]
    lines = [
        f"# p2synth step: {doc['ranks']} ranks, backend {doc['backend']}, {doc['mpi']}, MPI thread level {doc['mpi_thread_level']}",
        f"# {step['schedule']}, {doc['stages']} stage(s), {step['microbatches']} microbatches, {step['layers']} layers, "
        f"tensor {doc['tensor']}; " + (f"activations {doc['activation_bytes']} B a send" if doc["stages"] > 1 else "no pipeline sends"),
        "# pipeline wait = blocked on pipeline receives and sends (bubble and exposed sends); predicted: pipeline_comm_s + bubble_s",
    ]
    if doc["timing"].get("poll_sleep_us"):
        lines.append(f"# pipeline waits: tested every {doc['timing']['poll_sleep_us']} us, asleep in between")
    if not doc["gradient_overlap"]:
        lines.append(f"# gradient buckets not overlapped: {doc['gradient_overlap_note']}")
    for r in doc["requests"]:
        programs = f"best {r['best']}, default {r['default']}" if "best" in r else "point-to-point sends"
        lines.append(f"# {r['name']}: {r['part']}, {r['count']} x {r['message_bytes']} B: {programs}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
