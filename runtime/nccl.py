"""The CuPy backend: device buffers and NCCL collectives (``cupy.cuda.nccl``), one GPU per rank.

The rank's position among the ranks of its node (``COMM_TYPE_SHARED``)
picks the GPU. Each group's NCCL unique id is made on the group's root and
broadcast over the group's MPI sub-communicator. NCCL has no all-to-all
collective: it is one ``send`` and one ``recv`` per member (itself included)
inside one ``groupStart``/``groupEnd``; a send_recv (shift) is one ``send`` to
the successor and one ``recv`` from the predecessor inside one group call. Calls are queued on one stream per
rank. A pipelined program queues step ``k`` of every piece on stage stream
``k``, ordered by events (:class:`StreamLane`), and launches the steps of
each wavefront slot inside one NCCL group call
(:meth:`CupyBackend.launch_group`, docs/runtime.md). CuPy is optional: this
module is imported only when the cupy backend is asked for
(:func:`p2synth.runtime.backends.make_backend`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
from mpi4py import MPI

from p2synth.hierarchies.cli import one_line
from p2synth.hierarchies.program import Collective
from p2synth.runtime.backends import BackendKind, BackendUnavailable, CupyMissing
from p2synth.runtime.data import CHECK_DTYPE, DTYPE

NCCL_UNIQUE_ID_BYTES = 128


@contextlib.contextmanager
def nccl_group(nccl: Any) -> Iterator[None]:
    """``ncclGroupStart`` ... ``ncclGroupEnd`` around the block (the end even when the block raises).

    NCCL enqueues the operations issued inside only at the (outermost)
    ``ncclGroupEnd``, as one operation: work that must follow them on a
    stream (an event) is queued after the block.
    """
    nccl.groupStart()
    try:
        yield
    finally:
        nccl.groupEnd()



class NcclGroup:
    """A group over one NCCL communicator, bootstrapped through an MPI sub-communicator."""

    def __init__(self, comm: MPI.Intracomm, nccl: Any, stream: Any):
        uid = np.zeros(NCCL_UNIQUE_ID_BYTES, dtype=np.int64)
        if comm.Get_rank() == 0:
            uid[:] = nccl.get_unique_id()
        comm.Bcast(uid, root=0)
        self.nccl = nccl
        self.stream = stream.ptr
        self.members = comm.Get_size()
        self.rank = comm.Get_rank()
        self.comm = nccl.NcclCommunicator(comm.Get_size(), tuple(int(b) for b in uid), comm.Get_rank())
        self.types = {DTYPE: nccl.NCCL_FLOAT32, CHECK_DTYPE: nccl.NCCL_UINT64}
        self.sum = nccl.NCCL_SUM

    def _on(self, stream: int | None) -> int:
        """The stream pointer a call goes to: `stream`, else the rank's stream."""
        return self.stream if stream is None else stream

    def all_reduce(self, src: Any, dst: Any, stream: int | None = None) -> None:
        """Element-wise sum over the group, into every member's `dst`."""
        self.comm.allReduce(src.data.ptr, dst.data.ptr, src.size, self.types[src.dtype], self.sum, self._on(stream))

    def reduce_scatter(self, src: Any, dst: Any, stream: int | None = None) -> None:
        """Sum over the group; member j keeps block j of the sum in `dst`."""
        self.comm.reduceScatter(src.data.ptr, dst.data.ptr, dst.size, self.types[src.dtype], self.sum, self._on(stream))

    def all_gather(self, src: Any, dst: Any, stream: int | None = None) -> None:
        """Every member's `src`, concatenated in member order, into every `dst`."""
        self.comm.allGather(src.data.ptr, dst.data.ptr, src.size, self.types[src.dtype], self._on(stream))

    def reduce(self, src: Any, dst: Any, stream: int | None = None) -> None:
        """Sum over the group into the root's `dst`."""
        self.comm.reduce(src.data.ptr, dst.data.ptr, src.size, self.types[src.dtype], self.sum, 0, self._on(stream))

    def broadcast(self, src: Any, dst: Any, stream: int | None = None) -> None:
        """The root's `src` into every member's `dst` (ncclBroadcast is out of place)."""
        self.comm.broadcast(src.data.ptr, dst.data.ptr, dst.size, self.types[src.dtype], 0, self._on(stream))

    def all_to_all(self, src: Any, dst: Any, stream: int | None = None) -> None:
        """Block j of `src` to member j; block i of `dst` from member i: grouped send/recv, one NCCL group call."""
        members = self.members
        block = src.size // members
        step = block * src.itemsize
        kind = self.types[src.dtype]
        on = self._on(stream)
        with nccl_group(self.nccl):
            for peer in range(members):
                self.comm.send(src.data.ptr + peer * step, block, kind, peer, on)
                self.comm.recv(dst.data.ptr + peer * step, block, kind, peer, on)

    def send_recv(self, src: Any, dst: Any, stream: int | None = None, step: int = 1) -> None:
        """`src` to member ``i + step``, `dst` from member ``i - step`` (mod the group size): one send and one
        recv in one NCCL group call (a member may be its own neighbour: a group of one)."""
        me, on = self.rank, self._on(stream)
        kind = self.types[src.dtype]
        with nccl_group(self.nccl):
            self.comm.send(src.data.ptr, src.size, kind, (me + step) % self.members, on)
            self.comm.recv(dst.data.ptr, dst.size, kind, (me - step) % self.members, on)

    def free(self) -> None:
        """Destroy the NCCL communicator."""
        self.comm.destroy()


class StreamLane:
    """The cupy backend's lane: one CUDA stream; local work and NCCL calls are queued on it, events order lanes."""

    def __init__(self, stream: Any):
        self.stream = stream

    def run(self, calls: Sequence[Callable[[], None]]) -> None:
        """Queue `calls` (CuPy kernels and copies) on this lane's stream."""
        with self.stream:
            for call in calls:
                call()

    def start(self, group: NcclGroup, op: Collective, src: Any, dst: Any) -> None:
        """Issue `op` over `group` for this lane's stream (NCCL enqueues it when the launch group ends)."""
        getattr(group, op.value)(src, dst, stream=self.stream.ptr)

    def launched(self, launch: None) -> Any:
        """An event recorded after the collective, now that the group call has enqueued it."""
        return self.mark()

    def mark(self) -> Any:
        """An event recorded on the stream now: done when everything queued so far is."""
        return self.stream.record()

    def wait(self, pending: Any) -> None:
        """Later work on this stream waits for the event `pending` (the host does not wait)."""
        self.stream.wait_event(pending)


def load_cupy() -> tuple[Any, Any, int]:
    """CuPy, its NCCL module and the number of CUDA devices.

    CupyMissing when CuPy is not installed; BackendUnavailable when it is but
    cannot run: it fails to import, its NCCL module is missing or was not
    built, or the CUDA runtime fails (no driver, no device).
    """
    try:
        import cupy
    except Exception as e:  # ModuleNotFoundError for cupy itself; ImportError of a broken install, ...
        if isinstance(e, ModuleNotFoundError) and e.name == "cupy":
            raise CupyMissing(f"cupy backend unavailable: {type(e).__name__}: {e}") from None
        raise BackendUnavailable(f"cupy backend unavailable: CuPy is installed but fails: {type(e).__name__}: {one_line(e)}") from None
    try:
        from cupy.cuda import nccl

        devices = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # ImportError (no NCCL), CUDARuntimeError (no driver, no device), ...
        raise BackendUnavailable(f"cupy backend unavailable: CuPy is installed but fails: {type(e).__name__}: {one_line(e)}") from None
    if not getattr(nccl, "available", False):
        raise BackendUnavailable("cupy backend unavailable: CuPy is installed but was built without NCCL")
    return cupy, nccl, devices


class CupyBackend:
    """Device buffers on this rank's GPU, NCCL for communication."""

    kind = BackendKind.CUPY
    reduce_scatter_by_exchange = False  # ncclReduceScatter is a ring already

    def __init__(self, world: MPI.Intracomm):
        node = world.Split_type(MPI.COMM_TYPE_SHARED)  # collective: before anything that may fail on one rank
        local_rank, local_size = node.Get_rank(), node.Get_size()
        node.Free()
        cupy, nccl, devices = load_cupy()
        if local_size > devices:
            raise BackendUnavailable(
                f"cupy backend unavailable: {local_size} ranks on this node but {devices} GPU(s); it needs one GPU per rank"
            )
        self.cupy = cupy
        self.nccl = nccl
        self.device = cupy.cuda.Device(local_rank)
        self.device.use()
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.stream.use()
        self.stage_streams: list[Any] = []

    def empty(self, count: int, dtype: np.dtype = DTYPE) -> Any:
        """A new device array."""
        return self.cupy.empty(count, dtype=dtype)

    def upload(self, host: np.ndarray, dst: Any) -> None:
        """Copy `host` to the device buffer `dst`."""
        dst.set(host, stream=self.stream)
        self.stream.synchronize()

    def download(self, buf: Any) -> np.ndarray:
        """A host copy of the device buffer `buf` (waits for the stream)."""
        return buf.get(stream=self.stream)

    def fill(self, buf: Any, value: int | float) -> None:
        """Set every element of `buf` to `value`."""
        buf.fill(value)

    def transpose(self, src: Any, dst: Any, shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
        """Repack `src` (viewed with `shape`, axes permuted by `axes`) into `dst`, on the device."""
        self.cupy.copyto(dst.reshape([shape[a] for a in axes]), src.reshape(shape).transpose(axes))

    def synchronize(self) -> None:
        """Wait for this rank's stream."""
        self.stream.synchronize()

    def group(self, comm: MPI.Intracomm) -> NcclGroup:
        """The NCCL group over `comm`'s members."""
        return NcclGroup(comm, self.nccl, self.stream)

    def main_lane(self) -> StreamLane:
        """The rank's stream (sequential programs, the split and the merge of pipelined ones)."""
        return StreamLane(self.stream)

    def stage_lanes(self, count: int) -> tuple[StreamLane, ...]:
        """One non-blocking stream per pipeline stage, made on first use and kept (stage k of every program shares one)."""
        while len(self.stage_streams) < count:
            self.stage_streams.append(self.cupy.cuda.Stream(non_blocking=True))
        return tuple(StreamLane(s) for s in self.stage_streams[:count])

    def launch_group(self) -> AbstractContextManager[None]:
        """One NCCL group call: the collectives started inside are launched together, as one operation.

        A pipelined run keeps collectives of several communicators in flight on
        several streams. NCCL's user guide warns that this can deadlock
        ("Using multiple NCCL communicators concurrently", in "Creating a
        Communicator"), and gives the safe form: calls on several
        communicators merged by ncclGroupStart/ncclGroupEnd are treated as
        one call ("Group Calls"), and a group over several streams is one
        operation that synchronizes them ("CUDA Stream Semantics: Mixing
        Multiple Streams within the same ncclGroupStart/End() group"). The
        executor issues each wavefront slot's collectives inside one group,
        in the same order on every rank, so NCCL operations never interleave
        differently on two ranks: one group after the other.
        """
        return nccl_group(self.nccl)
