"""A PyTorch DistributedDataParallel communication hook that all-reduces each gradient bucket with a plan's program.

::

    from p2synth.solver.exports.ddp import p2synth_hook
    ddp = DistributedDataParallel(model)                      # after dist.init_process_group(...)
    ddp.register_comm_hook(None, p2synth_hook("plan.json", placement=0, request="grad_allreduce"))

The hook runs exactly what the exporter exports: :func:`p2synth_hook` renders
the placement's PyTorch module (:func:`~solver.exports.formats.export_placement`),
loads it once, calls its ``build_mesh()`` once (every process group is created
there, at attach time), and then runs one of its request functions per bucket:
the one planned for the bucket's size, or for the nearest planned size
(:mod:`solver.exports.buckets`). Each bucket is divided by the process group's
size first, as DDP's own all-reduce hook does, so training computes what the
default hook computes.

Buckets run on one worker thread in the order DDP hands them over, which is
the same on every rank; the hook returns a ``torch.futures.Future`` at once, so
the backward pass goes on computing while buckets are reduced. torch is
imported only when a hook is attached. docs/exports.md describes the hook.

A size whose planned program is DDP's own all-reduce (the client tuner keeps
it where no program beats it) runs as DDP's own all-reduce hook runs it: the
bucket divided, then one asynchronous ``dist.all_reduce`` on a process group of
the hook's own, with no guard trials (there is nothing to choose between):
started on the calling thread for a CPU bucket (gloo), so the hook costs what
DDP's Python all-reduce hook costs; on the worker thread for a GPU bucket
(NCCL), which must issue every collective of the device from one thread, in
one order on every rank (:class:`PlanHook`).

With ``guard=True`` (the default) the hook guards itself
(:mod:`solver.exports.guard`): for the first buckets of each size it alternates
the plan's program with DDP's own all-reduce (run on a process group of its
own), then keeps the faster on every rank, agreed from the slowest rank's times,
and logs the decision once per size. A plan tuned for another backend then
costs a few buckets, never the training run: where the guard keeps DDP's
all-reduce, the size's later buckets run it as a size whose pick is DDP's
all-reduce does. A trial times the reduction alone: on a GPU the worker waits
for the bucket's gradients before it starts the clock.
"""

from __future__ import annotations

import linecache
import logging
import queue
import threading
import time
import types
from pathlib import Path
from typing import Any, Callable

from p2synth.hierarchies.plan_file import PlanFile, PlanFileError, load_plan_file
from p2synth.solver.exports.buckets import BucketPlan, HookError, SizedProgram, bucket_plan, check_world
from p2synth.solver.exports.formats import ExportFormat, export_placement
from p2synth.solver.exports.guard import GUARD_TRIALS, Guard, Reduction
from p2synth.solver.exports.planning import NotExportable

LOG = logging.getLogger("p2synth")


def p2synth_hook(plan: PlanFile | str | Path, placement: int = 0, request: str | None = None,
                 process_group: Any = None, device_type: str | None = None, guard: bool = True,
                 guard_trials: int = GUARD_TRIALS) -> "PlanHook":
    """A DDP communication hook running placement `placement`'s programs of workload request `request`.

    `plan` is a plan file (or its path); `request` names a workload request as
    the spec gave it (None: the plan's only request). `process_group` must be
    the one DDP reduces over (None: the world). `device_type` is the mesh's
    (None: "cpu" under gloo, else the module's default). `guard` alternates the
    plan's program with DDP's own all-reduce for the first `guard_trials` buckets
    of each size each, and keeps the faster (module docstring); a size whose
    planned program is DDP's all-reduce runs it on the calling thread, untried, and so do a guarded size's buckets
    after its trials where the guard kept DDP's all-reduce. Collective: call it on
    every rank, once, after ``dist.init_process_group()``. A plan that does not
    fit the job raises HookError, whose message is one line, before any
    process group is created.
    """
    import torch.distributed as dist

    plan_file, buckets, group = checked_plan(plan, placement, request, process_group)
    try:
        source = export_placement(plan_file, placement, ExportFormat.TORCH)
    except NotExportable as e:
        raise HookError(str(e)) from None
    module = load_module(source, f"p2synth_plan_{placement}")
    if device_type is None and dist.get_backend() == "gloo":
        device_type = "cpu"
    mesh = module.build_mesh(device_type)
    functions = {s.name: module.REQUESTS[s.name] for s in buckets.sizes}
    direct = frozenset(s.message_bytes for s in buckets.sizes if buckets.runs_default(s))
    guard = guard and len(direct) < len(buckets.sizes)  # some size runs a program to try
    guarded = own_group(buckets, dist.get_world_size(), dist.get_rank()) if guard else None
    # not the guard's group: the worker's collectives on it and the calling thread's could interleave differently
    # on different ranks; a guard may send a size here too, once it keeps DDP's all-reduce
    direct_group = own_group(buckets, dist.get_world_size(), dist.get_rank()) if direct or guard else None
    notes = ([f"guarded: the first {guard_trials} buckets of each size also run DDP's all-reduce"] if guard else []) + (
        [f"DDP's own all-reduce on the calling thread for {', '.join(f'{b:,}' for b in sorted(direct))} bytes"]
        if direct else [])
    LOG.info("p2synth DDP hook: %s%s", buckets.describe(), "".join(f"; {n}" for n in notes))
    return PlanHook(buckets, functions, mesh, dist.get_world_size(group),
                    (Guard(guard_trials), guarded) if guard else None, (direct, direct_group))


def register_p2synth_hook(model: Any, plan: PlanFile | str | Path, placement: int = 0, request: str | None = None,
                          process_group: Any = None, **options: Any) -> "PlanHook | None":
    """Attach the hook of :func:`p2synth_hook` (`options`: its `device_type`, `guard`, `guard_trials`) to the
    DistributedDataParallel `model`, and return it; or, where every planned size's program is DDP's own all-reduce
    (what the client tuner writes where no program beat it), attach nothing and return None. DDP's built-in
    all-reduce then runs, which a Python hook cannot match: DDP scales the gradients as it copies them into a bucket,
    while a hook must divide the bucket in a pass of its own. The plan is checked against the job either way
    (HookError, one line). Collective: call it on every rank, once, after ``dist.init_process_group()``."""
    plan_file, buckets, _ = checked_plan(plan, placement, request, process_group)
    if all(buckets.runs_default(s) for s in buckets.sizes):
        LOG.info("p2synth DDP hook: %s; every size runs DDP's own all-reduce: DDP keeps its built-in one, no hook",
                 buckets.describe())
        return None
    hook = p2synth_hook(plan_file, placement, request, process_group, **options)
    model.register_comm_hook(hook.state, hook)
    return hook


def checked_plan(plan: PlanFile | str | Path, placement: int, request: str | None,
                 process_group: Any) -> tuple[PlanFile, BucketPlan, Any]:
    """The plan file, its bucket sizes' programs and DDP's process group (`process_group`, None: the world), once
    the plan is known to fit the job: torch.distributed initialized, the job's world size the placement's devices,
    and that group the ranks each rank reduces with. HookError, one line, otherwise."""
    import torch.distributed as dist

    if not dist.is_initialized():
        raise HookError("torch.distributed is not initialized: call dist.init_process_group() before attaching the hook")
    try:
        plan_file = plan if isinstance(plan, PlanFile) else load_plan_file(plan)
        buckets = bucket_plan(plan_file, placement, request)
    except PlanFileError as e:
        raise HookError(str(e)) from None
    group = process_group if process_group is not None else dist.group.WORLD
    check_world(buckets, dist.get_world_size(), dist.get_rank(), tuple(dist.get_process_group_ranks(group)))
    return plan_file, buckets, group


def own_group(buckets: BucketPlan, world_size: int, rank: int) -> Any:
    """A new process group of the ranks `rank` reduces with (the guard's, and the client tuner's DDP all-reduce);
    collective over the world: every rank creates every reduction group, in the same order, and keeps its own."""
    import torch.distributed as dist

    mine = None
    for ranks in sorted({buckets.group(r) for r in range(world_size)}):
        group = dist.new_group(list(ranks))
        if rank in ranks:
            mine = group
    return mine


def load_module(source: str, name: str) -> types.ModuleType:
    """Run a generated module's `source` as a new module called `name` (tracebacks show its lines)."""
    filename = f"<{name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = types.ModuleType(name)
    module.__file__ = filename
    exec(compile(source, filename, "exec"), module.__dict__)
    return module


class PlanHook:
    """The hook :func:`p2synth_hook` returns: ``hook(state, bucket)`` queues the bucket and returns its Future.

    `state` is what to register it with (None: the hook keeps its own state); `reduced` counts the
    buckets reduced so far, `direct` those of them that ran DDP's own all-reduce untried (the sizes of `direct`'s
    set, and the sizes for which the guard kept it, after their trials; on `direct`'s group);
    :meth:`decisions` says what the guard kept; :meth:`close` stops the worker thread.

    One thread per device: every collective of a bucket on a GPU (NCCL) is issued by the worker thread, in the
    order DDP hands the buckets over, the same on every rank. NCCL's user guide: "it is not safe to issue
    operations in parallel to independent communicators on the same device from several threads", and "users must
    ensure the order of host-side launches matches for all devices". Buckets on the CPU (gloo) run DDP's
    all-reduce from the calling thread (:meth:`runs_on_caller`), as DDP's own hook does: gloo's groups do not
    share a device queue, and the worker's hand-off cost that path 1-6% (docs/exports.md).
    """

    state = None

    def __init__(self, plan: BucketPlan, functions: dict[str, Callable], mesh: Any, divisor: int,
                 guard: tuple[Guard, Any] | None = None, direct: tuple[frozenset[int], Any] = (frozenset(), None)):
        self.plan = plan
        self.reduced = self.direct = 0
        self._counting = threading.Lock()  # the worker and the backend's callback threads both count reduced buckets
        self._direct_sizes, self._direct_group = direct
        self._guard, self._guard_group = guard if guard is not None else (None, None)
        self.__name__ = self.__qualname__ = "p2synth_hook"  # DDP reads a hook's names, as of a function
        self._functions, self._mesh, self._divisor = functions, mesh, divisor
        self._chosen: dict[int, SizedProgram] = {}
        self._decided: dict[int, threading.Event] = {}  # per guarded bucket size: set once the guard decided
        self._failed = False  # a bucket failed on the worker: nothing waits for a decision any more
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._worker = threading.Thread(target=self._work, name="p2synth-ddp-hook", daemon=True)
        self._worker.start()

    def __call__(self, state, bucket):  # DDP checks that a parameter is called `bucket`, and any annotations
        """Queue `bucket` for the worker (or, for a CPU bucket of a size that runs DDP's all-reduce, start it here);
        the returned Future completes with the reduced bucket."""
        buffer = bucket.buffer()
        nbytes = buffer.numel() * buffer.element_size()
        sized = self.choose(nbytes)
        if self.runs_on_caller(buffer, sized):  # as DDP's own hook runs it
            work = ddp_all_reduce(buffer, self._direct_group, self._divisor, async_op=True)
            return work.get_future().then(self._done_direct)
        import torch

        future = torch.futures.Future(devices=[buffer.device] if buffer.is_cuda else None)
        ready = None
        if buffer.is_cuda:  # the worker's stream must wait for the gradients copied into the bucket
            ready = torch.cuda.Event()
            ready.record()
        self._jobs.put((buffer, sized, future, ready))
        return future

    def runs_on_caller(self, buffer: Any, sized: SizedProgram) -> bool:
        """Whether `buffer` runs DDP's all-reduce on the calling thread: a CPU bucket (gloo) of a size whose pick is
        DDP's all-reduce, or that comes after its size's trial buckets where the guard kept it (counted, so the
        same bucket on every rank; such a bucket waits for the decision, which the worker takes once the trial
        buckets are reduced). Buckets on a GPU never do: the worker issues all their collectives."""
        if buffer.is_cuda:
            return False
        if sized.message_bytes in self._direct_sizes:
            return True
        nbytes = buffer.numel() * buffer.element_size()
        if self._guard is None or not self._guard.call(nbytes):
            return False
        self._decision(nbytes).wait()
        return self._guard.kept(nbytes) is Reduction.DEFAULT

    def _decision(self, nbytes: int) -> threading.Event:
        """The event set once the guard decided for buckets of `nbytes` bytes (or a bucket failed on the worker)."""
        event = self._decided.setdefault(nbytes, threading.Event())
        if self._failed:
            event.set()
        return event

    def _done_direct(self, future: Any) -> Any:
        """The reduced bucket of a finished direct all-reduce (counted)."""
        with self._counting:
            self.reduced += 1
            self.direct += 1
        return future.value()[0]

    def choose(self, nbytes: int) -> SizedProgram:
        """The program for buckets of `nbytes` bytes; the first time a size is not planned, says so in the log."""
        sized = self._chosen.get(nbytes)
        if sized is None:
            sized = self._chosen[nbytes] = self.plan.choose(nbytes)
            if not self.plan.covers(nbytes):
                LOG.warning("p2synth DDP hook: no program of %s is planned for %s-byte buckets; "
                            "running the one planned for %s bytes (the nearest planned size)",
                            self.plan.request, f"{nbytes:,}", f"{sized.message_bytes:,}")
        return sized

    def chosen(self) -> dict[int, SizedProgram]:
        """The program chosen for each bucket size (bytes) met so far."""
        return dict(self._chosen)

    def decisions(self) -> dict[int, dict]:
        """Per bucket size (bytes) met so far, what the guard kept and the slowest-rank times it decided on
        (``kept`` None: still on trial); empty without a guard."""
        return {} if self._guard is None else self._guard.decisions()

    def close(self) -> None:
        """Stop the worker thread once the queued buckets are reduced."""
        self._jobs.put(None)
        self._worker.join()

    def _work(self) -> None:
        """The worker thread: reduce the queued buckets in order, completing each Future."""
        import torch

        while (job := self._jobs.get()) is not None:
            buffer, sized, future, ready = job
            try:
                if ready is not None:
                    torch.cuda.set_device(buffer.device)
                if self._reduce(buffer, sized, ready, future):
                    continue  # an asynchronous all-reduce completes the Future
                with self._counting:
                    self.reduced += 1
                future.set_result(buffer)
            except Exception as e:  # noqa: BLE001  (DDP raises it from the Future, in the backward pass)
                self._failed = True  # a bucket waiting for a decision must not wait for ever
                for event in list(self._decided.values()):
                    event.set()
                future.set_exception(e)

    def _reduce(self, buffer: Any, sized: SizedProgram, ready: Any, future: Any) -> bool:
        """Average `buffer` with the plan's program, or, as the plan or the guard says, DDP's all-reduce, timing the
        guard's trials; True where an asynchronous all-reduce was started that completes `future` itself."""
        nbytes = buffer.numel() * buffer.element_size()
        on_trial = self._guard is not None and sized.message_bytes not in self._direct_sizes and self._guard.kept(nbytes) is None
        if not on_trial:
            if ready is not None:
                _current_stream().wait_event(ready)
            if sized.message_bytes in self._direct_sizes or (self._guard is not None and self._guard.kept(nbytes) is Reduction.DEFAULT):
                self._direct_on_worker(buffer, future)
                return True
            reduce_bucket(buffer, self._functions[sized.name], self._mesh, sized.multiple, self._divisor)
            return False
        ran = self._guard.next(nbytes)
        if ready is not None:  # the trial times the reduction alone, not the backward compute of the bucket
            ready.synchronize()
            _current_stream().wait_event(ready)
        start = time.perf_counter()
        if ran is Reduction.PLAN:
            reduce_bucket(buffer, self._functions[sized.name], self._mesh, sized.multiple, self._divisor)
        else:
            ddp_all_reduce(buffer, self._guard_group, self._divisor)
        if buffer.is_cuda:
            _current_stream().synchronize()
        kept = self._guard.record(nbytes, ran, time.perf_counter() - start, lambda local: self._slowest(local, buffer.device))
        if kept is not None:
            self._decision(nbytes).set()
            record = self._guard.decisions()[nbytes]
            LOG.info("p2synth DDP hook guard: %s-byte buckets keep %s (median of the slowest rank's %d trials: "
                     "plan %.4g ms, DDP's all-reduce %.4g ms)", f"{nbytes:,}",
                     "the plan's program" if kept is Reduction.PLAN else "DDP's own all-reduce", record["trials"],
                     record["plan_median_s"] * 1e3, record["default_median_s"] * 1e3)
        return False

    def _direct_on_worker(self, buffer: Any, future: Any) -> None:
        """Start DDP's all-reduce of `buffer` on the direct group (asynchronous); its completion completes `future`."""
        work = ddp_all_reduce(buffer, self._direct_group, self._divisor, async_op=True)

        def done(finished: Any) -> None:
            try:
                future.set_result(self._done_direct(finished))
            except Exception as e:  # noqa: BLE001  (the all-reduce failed: DDP raises it from the Future)
                future.set_exception(e)

        work.get_future().then(done)

    def _slowest(self, local: list[float], device: Any) -> list[float]:
        """The elementwise maximum of `local` over the reduction group (the guard's agreement; collective), through
        a tensor on the bucket's `device`: under NCCL the guard's group has no CPU backend."""
        import torch
        import torch.distributed as dist

        times = torch.tensor(local, dtype=torch.float64, device=device)
        dist.all_reduce(times, op=dist.ReduceOp.MAX, group=self._guard_group)
        return times.tolist()


def _current_stream() -> Any:
    """The calling thread's current CUDA stream."""
    import torch

    return torch.cuda.current_stream()


def ddp_all_reduce(buffer: Any, group: Any, divisor: int, async_op: bool = False) -> Any:
    """What DDP's own all-reduce hook computes, in place: `buffer` divided by `divisor` (1: not divided), then
    ``dist.all_reduce`` over `group`; `buffer`, or with `async_op` the all-reduce's work (the result is in
    `buffer` once it completes)."""
    import torch.distributed as dist

    if divisor != 1:
        buffer.div_(divisor)
    work = dist.all_reduce(buffer, group=group, async_op=async_op)
    return work if async_op else buffer


def reduce_bucket(buffer: Any, function: Callable, mesh: Any, multiple: int, divisor: int) -> Any:
    """Average the flat tensor `buffer` over its group in place with the request `function` of the plan's module.

    The buffer is divided by `divisor` first (as DDP's all-reduce hook does; 1: not divided, so integer
    buffers sum exactly),
    zero-padded to a multiple of `multiple` elements for the run, and unpadded.
    """
    import torch

    n = buffer.numel()
    if divisor != 1:
        buffer.div_(divisor)
    padded = -(-n // multiple) * multiple
    x = buffer if padded == n else torch.cat([buffer, buffer.new_zeros(padded - n)])
    out = function(x, mesh)
    if out.data_ptr() != buffer.data_ptr():
        buffer.copy_(out.view(-1)[:n])
    return buffer
