"""A recording stand-in for torch and torch.distributed: numpy tensors and simulated ranks in threads.

It supports exactly what the exported PyTorch modules (solver/exports/to_torch.py)
use, so that CI can run them without torch. :class:`World` runs one function
per rank, each in its own thread; a collective waits until every member of its
group has started it (the group and the call's sequence number on that group
name it), checks that they all make the same call, and computes each member's
result from all their inputs. An ``async_op=True`` call returns a work whose
``wait()`` writes the result into the output buffer, so a module that reads a
buffer before waiting reads stale data; a blocking call writes at once.

Every rank records its calls as :class:`Launch` and :class:`Wait` events: the
op, the group's ranks in group-rank order, whether it is asynchronous, and the
*pieces* of its input: run with ``labels=True``, every collective carries
labels instead of values (a summing step checks that its members' labels
agree and keeps them; a non-root keeps its own after a reduce), so an input
labelled with each element's piece shows which pieces each call works on.
With ``labels=False`` the values are summed, and a non-root's buffer after a
reduce is poisoned, as torch leaves it undefined. ``torch.sum`` over dim 0
combines its rows as a summing step does (labels or values), and
``dist.get_backend`` answers the world's `backend` (default ``nccl``; the
modules run some steps differently on ``gloo``).

``install(world)`` returns the modules ``torch``, ``torch.distributed``,
``torch.cuda`` and ``torch.distributed.device_mesh`` to put into
``sys.modules`` while a generated module is imported.

:class:`NcclLikeTorch` is another stand-in, for the DDP hook, its guard and the
client tuner on one rank: process groups bound to a GPU that refuse a tensor on
any other device, as NCCL's do, and record the thread of every collective.
"""

from __future__ import annotations

import math
import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

POISON = -(10**6)  # what a buffer holds before anything writes it, and a non-root after a reduce
MIXED = -2  # the label of an element whose members' labels disagreed in a summing step
TIMEOUT_S = 20.0  # a rank waiting this long for its group's other members: the ranks' calls differ


@dataclass(frozen=True)
class Launch:
    """A collective started on a rank: op, group ranks (group-rank order), asynchronous or not, input pieces."""

    op: str
    group: tuple[int, ...]
    is_async: bool
    pieces: frozenset[int] | None


@dataclass(frozen=True)
class Wait:
    """A wait for the rank's `launch`-th launch (0-based)."""

    launch: int


class RankMismatch(AssertionError):
    """The members of a group made different calls, or some never made theirs."""


@dataclass
class _Meeting:
    """One collective call on one group: each member's call and input, by member index."""

    calls: dict[int, tuple]
    inputs: dict[int, np.ndarray]
    read: int = 0


class World:
    """Simulated ranks: runs one function per rank in threads and carries out their collectives."""

    def __init__(self, size: int, labels: bool = False, backend: str = "nccl"):
        self.size = size
        self.labels = labels
        self.backend = backend  # what dist.get_backend says of every group
        self.records: list[list[Launch | Wait]] = [[] for _ in range(size)]
        self._local = threading.local()
        self._cond = threading.Condition()
        self._meetings: dict[tuple, _Meeting] = {}
        self._sequence: list[dict[tuple[int, ...], int]] = [{} for _ in range(size)]
        self._failed = False

    @property
    def rank(self) -> int:
        """The rank of the calling thread."""
        return self._local.rank

    def run(self, fn: Callable[[int], Any]) -> list[Any]:
        """fn(rank) on every rank, each in its own thread; the results by rank (a rank's exception is raised)."""
        results: list[Any] = [None] * self.size
        errors: list[BaseException | None] = [None] * self.size

        def main(rank: int) -> None:
            self._local.rank = rank
            try:
                results[rank] = fn(rank)
            except BaseException as e:  # handed to the caller below
                errors[rank] = e
                with self._cond:
                    self._failed = True
                    self._cond.notify_all()

        threads = [threading.Thread(target=main, args=(r,), daemon=True) for r in range(self.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT_S * 2)
        failed = sorted((e for e in errors if e is not None), key=lambda e: isinstance(e, RankMismatch))
        if failed:  # the root cause first: a rank's own error before the others' "failed first"
            raise failed[0]
        if any(t.is_alive() for t in threads):
            raise RankMismatch("some ranks never finished")
        return results

    def collective(self, op: str, group: tuple[int, ...], index: int, data: np.ndarray, call: tuple, is_async: bool) -> np.ndarray:
        """Start `op` on `group` as member `index` with input `data`; record it; this member's result (flat)."""
        rank = self.rank
        pieces = frozenset(np.unique(data).tolist()) if self.labels else None
        self.records[rank].append(Launch(op, group, is_async, pieces))
        seq = self._sequence[rank].get(group, 0)
        self._sequence[rank][group] = seq + 1
        key = (group, seq)
        with self._cond:
            meeting = self._meetings.setdefault(key, _Meeting({}, {}))
            meeting.calls[index] = (op, *call)
            meeting.inputs[index] = np.array(data, copy=True).reshape(-1)
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: len(meeting.inputs) == len(group) or self._failed, TIMEOUT_S):
                raise RankMismatch(f"rank {rank}: {op} on group {group} (call {seq} there) never met its members")
            if len(meeting.inputs) < len(group):
                raise RankMismatch(f"rank {rank}: {op} on group {group}: another rank failed first")
            meeting.read += 1
            if meeting.read == len(group):
                del self._meetings[key]
        if len(set(meeting.calls.values())) != 1:
            raise RankMismatch(f"group {group}, call {seq}: the members' calls differ: {meeting.calls}")
        inputs = [meeting.inputs[i] for i in range(len(group))]
        return self._result(op, inputs, index, call)

    def _result(self, op: str, inputs: list[np.ndarray], index: int, call: tuple = ()) -> np.ndarray:
        """Member `index`'s result of `op` over the members' flat `inputs` (a send_recv's `call` ends in its shift)."""
        k = len(inputs)
        if op == "send_recv":  # member i's input goes to member i + step
            return inputs[(index - call[-1]) % k]
        if op == "all_reduce":
            return self.combine(inputs)
        if op == "reduce":
            if index == 0:
                return self.combine(inputs)
            return inputs[index] if self.labels else np.full_like(inputs[index], POISON)
        if op == "broadcast":
            return inputs[0]
        if op == "reduce_scatter":
            return self.combine(inputs).reshape(k, -1)[index]
        if op == "all_gather":
            return np.concatenate(inputs)
        if op == "all_to_all":
            return np.concatenate([x.reshape(k, -1)[index] for x in inputs])
        raise ValueError(f"no collective {op}")

    def combine(self, inputs: list[np.ndarray]) -> np.ndarray:
        """The sum of the inputs, or with labels the common label (MIXED where they differ)."""
        if not self.labels:
            return np.sum(inputs, axis=0, dtype=inputs[0].dtype)
        first = inputs[0]
        same = np.all([x == first for x in inputs], axis=0)
        return np.where(same, first, MIXED)

    def record(self, event: Wait) -> None:
        """Record a wait on the calling rank."""
        self.records[self.rank].append(event)

    def launches(self, rank: int) -> int:
        """How many collectives `rank` has started."""
        return sum(isinstance(e, Launch) for e in self.records[rank])


# -- tensors ------------------------------------------------------------------------


class Tensor:
    """A torch.Tensor stand-in over a numpy array (views share memory as torch's do)."""

    def __init__(self, array: np.ndarray):
        self.a = array

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.a.shape)

    def dim(self) -> int:
        return self.a.ndim

    def numel(self) -> int:
        return int(self.a.size)

    def contiguous(self) -> Tensor:
        return self if self.a.flags.c_contiguous else Tensor(np.ascontiguousarray(self.a))

    def view(self, *shape: Any) -> Tensor:
        """A view, never a copy: like torch, refused where the memory does not allow it."""
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        out = self.a.view()
        try:
            out.shape = shape
        except AttributeError as e:
            raise RuntimeError(f"view of a non-contiguous tensor: {e}") from None
        return Tensor(out)

    def reshape(self, *shape: Any) -> Tensor:
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        return Tensor(self.a.reshape(shape))

    def permute(self, *axes: int) -> Tensor:
        return Tensor(self.a.transpose(axes))

    def transpose(self, a: int, b: int) -> Tensor:
        return Tensor(np.swapaxes(self.a, a, b))

    def movedim(self, source: list[int], destination: list[int]) -> Tensor:
        return Tensor(np.moveaxis(self.a, source, destination))

    def new_empty(self, shape: tuple[int, ...]) -> Tensor:
        return Tensor(np.full(shape, POISON, dtype=self.a.dtype))

    def __getitem__(self, index: Any) -> Tensor:
        return Tensor(self.a[index])

    def tolist(self) -> list:
        return self.a.tolist()

    def numpy(self) -> np.ndarray:
        return self.a


def _stack(tensors: list[Tensor], dim: int = 0) -> Tensor:
    return Tensor(np.stack([t.a for t in tensors], axis=dim))


def _empty_like(t: Tensor) -> Tensor:
    return t.new_empty(t.shape)


def _summing(world: World) -> Callable:
    """torch.sum(t, dim=0, out=o) on `world`: the rows combined as a summing step combines its members' inputs."""

    def total(t: Tensor, dim: int, out: Tensor) -> Tensor:
        assert dim == 0 and t.dim() == 2, "the modules sum the rows of a [members, block] buffer"
        out.a[...] = world.combine(list(t.a)).reshape(out.shape)
        return out

    return total


# -- torch.distributed ------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """A process group: its ranks in group-rank order."""

    ranks: tuple[int, ...]


class Work:
    """An asynchronous collective: `wait()` writes its result into the output buffer."""

    def __init__(self, world: World, number: int, out: Tensor, result: np.ndarray):
        self.world, self.number, self.out, self.result = world, number, out, result
        self.done = False

    def wait(self) -> bool:
        self.world.record(Wait(self.number))
        if not self.done:
            self.out.a[...] = self.result.reshape(self.out.shape)
            self.done = True
        return True


class Mesh:
    """A DeviceMesh stand-in: dims over ranks row-major, a group per dim."""

    def __init__(self, world: World, shape: tuple[int, ...], names: tuple[str, ...]):
        self.world, self.names = world, names
        self.mesh = Tensor(np.arange(math.prod(shape)).reshape(shape))
        self.ndim = len(shape)

    def size(self, dim: int) -> int:
        return self.mesh.shape[dim]

    def get_group(self, name: str) -> Group:
        axis = self.names.index(name)
        coords = np.argwhere(self.mesh.a == self.world.rank)[0]
        line = tuple(np.moveaxis(self.mesh.a, axis, -1)[tuple(np.delete(coords, axis))].tolist())
        return Group(line)


def _distributed(world: World) -> types.ModuleType:
    """The torch.distributed stand-in over `world`."""
    dist = types.ModuleType("torch.distributed")

    def start(op: str, group: Group, src: Tensor, out: Tensor, async_op: bool, *call: Any) -> Work | None:
        index = group.ranks.index(world.rank)
        number = world.launches(world.rank)
        result = world.collective(op, group.ranks, index, src.a, (src.shape, out.shape, *call), async_op)
        work = Work(world, number, out, result)
        if async_op:
            return work
        work.done = True
        out.a[...] = result.reshape(out.shape)
        return None

    def all_reduce(tensor, group, async_op=False):
        return start("all_reduce", group, tensor, tensor, async_op)

    def reduce(tensor, group_dst, group, async_op=False):
        assert group_dst == 0, "the exports reduce to group rank 0"
        return start("reduce", group, tensor, tensor, async_op, group_dst)

    def broadcast(tensor, group_src, group, async_op=False):
        assert group_src == 0, "the exports broadcast from group rank 0"
        return start("broadcast", group, tensor, tensor, async_op, group_src)

    def reduce_scatter_single(output, input, group, async_op=False):
        return start("reduce_scatter", group, input, output, async_op)

    def all_gather_single(output, input, group, async_op=False):
        return start("all_gather", group, input, output, async_op)

    def all_to_all_single(output, input, group, async_op=False):
        return start("all_to_all", group, input, output, async_op)

    def isend(*args):
        raise AssertionError("the exports send only inside batch_isend_irecv")

    def irecv(*args):
        raise AssertionError("the exports receive only inside batch_isend_irecv")

    @dataclass(frozen=True)
    class P2POp:
        op: Callable
        tensor: Tensor
        peer: int
        group: Group

    def batch_isend_irecv(ops):
        """One send and one receive on one group, the same shift on every member: a "send_recv" meeting."""
        [send] = [o for o in ops if o.op is isend]
        [recv] = [o for o in ops if o.op is irecv]
        group = send.group
        assert recv.group == group, "the send and the receive of a shift go over one group"
        k, index = len(group.ranks), group.ranks.index(world.rank)
        step = (group.ranks.index(send.peer) - index) % k
        assert (index - group.ranks.index(recv.peer)) % k == step, "receives from the member the shift sends from"
        return [start("send_recv", group, send.tensor, recv.tensor, True, step)]

    def get_world_size(group):
        return len(group.ranks)

    def get_rank(group):
        return group.ranks.index(world.rank)

    def get_global_rank(group, group_rank):
        return group.ranks[group_rank]

    def get_backend(group=None):
        return world.backend

    dist.P2POp = P2POp
    for fn in (isend, irecv, batch_isend_irecv, get_world_size, get_rank, get_global_rank, get_backend):
        setattr(dist, fn.__name__, fn)

    def new_subgroups_by_enumeration(ranks_per_subgroup_list):
        groups = [Group(tuple(r)) for r in ranks_per_subgroup_list]
        mine = next(g for g in groups if world.rank in g.ranks)
        return mine, groups

    for fn in (all_reduce, reduce, broadcast, reduce_scatter_single, all_gather_single, all_to_all_single,
               new_subgroups_by_enumeration):
        setattr(dist, fn.__name__, fn)
    return dist


def install(world: World) -> dict[str, types.ModuleType]:
    """The stand-in modules by name (torch, torch.cuda, torch.distributed, torch.distributed.device_mesh)."""
    torch = types.ModuleType("torch")
    torch.stack, torch.empty_like, torch.from_numpy, torch.sum = _stack, _empty_like, Tensor, _summing(world)
    torch.cuda = types.SimpleNamespace(is_available=lambda: False)
    torch.distributed = _distributed(world)
    device_mesh = types.ModuleType("torch.distributed.device_mesh")
    device_mesh.init_device_mesh = lambda device_type, shape, mesh_dim_names: Mesh(world, tuple(shape), tuple(mesh_dim_names))
    torch.distributed.device_mesh = device_mesh
    return {"torch": torch, "torch.cuda": torch.cuda, "torch.distributed": torch.distributed,
            "torch.distributed.device_mesh": device_mesh}


# -- a process group on one rank that acts as NCCL's: the DDP hook and the client tuner ----------------------------


class DeviceTensor:
    """A flat float tensor on a device ("cpu", "cuda:0", ...): what the hook and the tuner hand to collectives."""

    def __init__(self, values: Any, device: str = "cpu"):
        self.a = np.array(values, dtype=np.float64).reshape(-1)
        self.device = device
        self.is_cuda = device.startswith("cuda")

    def numel(self) -> int:
        return int(self.a.size)

    def element_size(self) -> int:
        return 4  # a float32 bucket's size

    def div_(self, d: float) -> DeviceTensor:
        self.a /= d
        return self

    def data_ptr(self) -> int:
        return id(self)

    def tolist(self) -> list:
        return self.a.tolist()


class NcclLikeTorch:
    """A stand-in for torch on one rank whose process groups behave as NCCL's do for what the hook and tuner check.

    * A group (``group(name)``) is bound to one device, `device`; ``dist.all_reduce`` refuses a tensor on any
      other, a CPU tensor as torch does ("No backend type associated with device type cpu"), and records
      ``(thread id, group name, op, async)`` in `calls` for every collective it runs (on one rank the sum
      is the input).
    * CUDA's ordering as far as the hook's timer sees it: a bucket's ready ``cuda.Event`` is done `compute_s`
      after it is recorded (the backward compute of the bucket), ``Event.synchronize`` waits for that, and
      ``current_stream().synchronize()`` waits for every event its stream was told to wait for.
    * ``futures.Future`` completes from any thread; ``then`` runs its callback when the future completes.

    ``modules()`` gives ``torch`` and ``torch.distributed`` for ``sys.modules``.
    """

    float64 = "float64"

    def __init__(self, device: str = "cuda:0", compute_s: float = 0.0):
        self.device, self.compute_s = device, compute_s
        self.calls: list[tuple[int, str, str, bool]] = []
        self.devices_set: list[str] = []
        self._lock = threading.Lock()
        self.futures = types.SimpleNamespace(Future=_Future)
        self.cuda = self._cuda()
        self.distributed = self._distributed()

    def modules(self) -> dict[str, types.ModuleType]:
        """What to put into sys.modules."""
        torch = types.ModuleType("torch")
        for name in ("float64", "futures", "cuda", "distributed", "tensor"):
            setattr(torch, name, getattr(self, name))
        return {"torch": torch, "torch.distributed": self.distributed, "torch.cuda": self.cuda}

    def group(self, name: str) -> types.SimpleNamespace:
        """A process group called `name` on this rank's device."""
        return types.SimpleNamespace(name=name, device=self.device)

    def tensor(self, values: Any, dtype: Any = None, device: str | None = None) -> DeviceTensor:
        """torch.tensor: on `device` (the CPU if None, as torch's default)."""
        return DeviceTensor(values, "cpu" if device is None else str(device))

    def _distributed(self) -> types.SimpleNamespace:
        def all_reduce(tensor, op=None, group=None, async_op=False):
            if group is None:
                group = self.group("world")
            if tensor.device != group.device:
                kind = tensor.device.split(":")[0]
                raise RuntimeError(f"No backend type associated with device type {kind}" if kind != "cuda" else
                                   f"Tensor on device {tensor.device} is not on the expected device {group.device}")
            with self._lock:
                self.calls.append((threading.get_ident(), group.name, "max" if op == "MAX" else "sum", async_op))
            return types.SimpleNamespace(get_future=lambda: _Future.done([tensor])) if async_op else None

        def barrier(device_ids=None):
            with self._lock:
                self.calls.append((threading.get_ident(), "world", f"barrier on {device_ids}", False))

        return types.SimpleNamespace(all_reduce=all_reduce, ReduceOp=types.SimpleNamespace(MAX="MAX"), barrier=barrier)

    def _cuda(self) -> types.SimpleNamespace:
        compute_s = self.compute_s
        streams = threading.local()

        class Event:
            def __init__(self):
                self.ready_at = 0.0

            def record(self):
                self.ready_at = time.monotonic() + compute_s

            def synchronize(self):
                time.sleep(max(0.0, self.ready_at - time.monotonic()))

        class Stream:
            def __init__(self):
                self.pending = 0.0

            def wait_event(self, event):
                self.pending = max(self.pending, event.ready_at)

            def synchronize(self):
                time.sleep(max(0.0, self.pending - time.monotonic()))

        def current_stream():
            if not hasattr(streams, "stream"):
                streams.stream = Stream()
            return streams.stream

        return types.SimpleNamespace(Event=Event, current_stream=current_stream, is_available=lambda: True,
                                     current_device=lambda: int(self.device.partition(":")[2] or 0),
                                     set_device=self.devices_set.append, synchronize=lambda: current_stream().synchronize())


class _Future:
    """torch.futures.Future's part the hook uses: set_result / set_exception from any thread, wait, value, then."""

    def __init__(self, devices: Any = None):
        self._done, self._value, self._error = threading.Event(), None, None
        self._callbacks: list[Callable] = []
        self._lock = threading.Lock()

    @classmethod
    def done(cls, value: Any) -> _Future:
        """A future that already holds `value`."""
        future = cls()
        future.set_result(value)
        return future

    def set_result(self, value: Any) -> None:
        self._finish(value, None)

    def set_exception(self, error: BaseException) -> None:
        self._finish(None, error)

    def _finish(self, value: Any, error: BaseException | None) -> None:
        with self._lock:
            self._value, self._error = value, error
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def wait(self, timeout: float = 10.0) -> Any:
        assert self._done.wait(timeout), "the future never completed"
        if self._error is not None:
            raise self._error
        return self._value

    def value(self) -> Any:
        return self.wait(0)

    def then(self, callback: Callable) -> _Future:
        chained = _Future()

        def run(parent: _Future) -> None:
            try:
                chained.set_result(callback(parent))
            except Exception as e:  # noqa: BLE001
                chained.set_exception(e)

        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(run)
                return chained
        run(self)
        return chained
