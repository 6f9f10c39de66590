"""One rank's side of ``runtime.step``: its stage, its passes (timed compute cut by the layer runs), the pipeline
sends and receives, and the gradient buckets' communication thread (:class:`StepRank`)."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from p2synth.hierarchies.step import Pass, Part, stage_ops
from p2synth.runtime.backends import Backend
from p2synth.runtime.data import rank_tag
from p2synth.runtime.step_job import StepJob, Variant
from p2synth.runtime.tune import Armed, arm

ACTIVATION_DTYPE = np.dtype(np.uint64)
COMPONENTS = ("compute_s", "layer_comm_s", "pipeline_wait_s", "gradient_exposed_s", "after_s")


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
