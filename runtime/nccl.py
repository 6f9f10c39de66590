"""The CuPy backend: device buffers and NCCL collectives (``cupy.cuda.nccl``), one GPU per rank.

The rank's position among the ranks of its node (``COMM_TYPE_SHARED``)
picks the GPU (:func:`~p2synth.runtime.devices.device_index`). Each group's NCCL unique id is made on
the group's root and broadcast over the group's MPI sub-communicator as the
object CuPy made it (:func:`shared_unique_id`: bytes from CuPy 14, a tuple of
128 ints before), which is what every member's ``NcclCommunicator`` takes.
NCCL has no all-to-all collective: it is one ``send`` and one ``recv`` per
member (itself included) inside one ``groupStart``/``groupEnd``; a send_recv
(shift) is one ``send`` to the successor and one ``recv`` from the
predecessor inside one group call. Calls are queued on one stream per rank.
A pipelined program queues step ``k`` of every piece on stage stream ``k``,
ordered by events (:class:`StreamLane`), and starts its collectives one by
one in the wavefront order from the one thread that runs it; how that order
is kept on the device is :class:`LaunchOrder` (docs/runtime.md, "GPU
streams"). CuPy is optional: this module is imported only when the cupy
backend is asked for (:func:`p2synth.runtime.backends.make_backend`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from enum import Enum
from typing import Any

import numpy as np
from mpi4py import MPI

from p2synth.hierarchies.cli import one_line
from p2synth.hierarchies.program import Collective
from p2synth.runtime.backend_kind import BackendKind, BackendUnavailable, CupyMissing
from p2synth.runtime.data import CHECK_DTYPE, DTYPE
from p2synth.runtime.devices import device_index

IMPLICIT_ORDER_SINCE = 22600  # NCCL 2.26.0 as ncclGetVersion gives it: NCCL_LAUNCH_ORDER_IMPLICIT exists from there
IMPLICIT_ORDER = "NCCL_LAUNCH_ORDER_IMPLICIT"
MISSING_LIBRARY_HINT = "install the gpu extra (pip install 'p2synth[gpu]': {wheel})"


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



def shared_unique_id(comm: MPI.Intracomm, nccl: Any) -> Any:
    """The NCCL unique id of `comm`'s new communicator on every member (collective over `comm`).

    The root makes it (``get_unique_id``) and broadcasts it as the object it
    is, which is the form ``NcclCommunicator`` takes in the same CuPy:
    ``bytes`` from CuPy 14 (``NcclCommunicator(int ndev, bytes commId, int
    rank, ...)``), a tuple of 128 ints before (``tuple commId``).
    """
    return comm.bcast(nccl.get_unique_id() if comm.Get_rank() == 0 else None, root=0)


class NcclGroup:
    """A group over one NCCL communicator, bootstrapped through an MPI sub-communicator."""

    def __init__(self, comm: MPI.Intracomm, nccl: Any, stream: Any):
        self.nccl = nccl
        self.stream = stream.ptr
        self.members = comm.Get_size()
        self.rank = comm.Get_rank()
        self.comm = nccl.NcclCommunicator(comm.Get_size(), shared_unique_id(comm, nccl), comm.Get_rank())
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


class LaunchOrder(str, Enum):
    """How the NCCL operations a rank keeps in flight on several communicators and streams stay in one order.

    NCCL's user guide ("Using multiple NCCL communicators concurrently"):
    "Prior to NCCL 2.26, using multiple NCCL communicators per-device required
    serializing the order of all communication operations (via CUDA stream
    dependencies or synchronization) into a consistent total global order
    otherwise deadlocks could ensue. As of 2.26, NCCL introduces
    NCCL_LAUNCH_ORDER_IMPLICIT which when enabled implicitly creates this order
    dynamically by following the order operations are issued from the host."

    * ``implicit``: NCCL 2.26 or later with ``NCCL_LAUNCH_ORDER_IMPLICIT`` set
      to 1 (the backend sets it when unset): the host order is the order; the
      executor issues every collective from one thread in the wavefront order,
      the same on every rank. On CUDA 12.3 or later the operations may overlap.
    * ``chained``: older NCCL, or the variable set to 0: every collective's
      stream waits for an event recorded after the previous collective the
      rank issued (:class:`Chain`), a total order by stream dependencies; the
      collectives then run one at a time, local work still overlaps them.
    """

    IMPLICIT = "implicit"
    CHAINED = "chained"

    def __str__(self) -> str:
        return self.value


def launch_order(version: int, env: Mapping[str, str]) -> LaunchOrder:
    """The order to keep with NCCL `version` (as ``ncclGetVersion`` gives it: 22605 is 2.26.5) and the environment
    `env`: implicit from 2.26 unless ``NCCL_LAUNCH_ORDER_IMPLICIT`` is set to something other than 1."""
    if version >= IMPLICIT_ORDER_SINCE and env.get(IMPLICIT_ORDER, "1") == "1":
        return LaunchOrder.IMPLICIT
    return LaunchOrder.CHAINED


class Chain:
    """The ``chained`` order's total order: each collective's stream waits for the rank's previous collective."""

    def __init__(self) -> None:
        self.last: Any = None  # an event recorded after the last collective issued (reused, recorded again each time)

    def before(self, stream: Any) -> None:
        """Make `stream` wait for the previous collective (none before the first)."""
        if self.last is not None:
            stream.wait_event(self.last)

    def after(self, stream: Any) -> None:
        """Record on `stream`, after the collective just issued there, the event the next one waits for."""
        self.last = stream.record(self.last)


class StreamLane:
    """The cupy backend's lane: one CUDA stream; local work and NCCL calls are queued on it, events order lanes.

    `chain` (None under the implicit order) puts every collective issued on any
    lane of the backend into one total order (:class:`LaunchOrder`).
    """

    def __init__(self, stream: Any, chain: Chain | None = None):
        self.stream = stream
        self.chain = chain

    def run(self, calls: Sequence[Callable[[], None]]) -> None:
        """Queue `calls` (CuPy kernels and copies) on this lane's stream."""
        with self.stream:
            for call in calls:
                call()

    def start(self, group: NcclGroup, op: Collective, src: Any, dst: Any, reuse: Any = None) -> Any:
        """Issue `op` over `group` on this lane's stream; an event recorded after it (into `reuse` if given)."""
        if self.chain is not None:
            self.chain.before(self.stream)
        getattr(group, op.value)(src, dst, stream=self.stream.ptr)
        if self.chain is not None:
            self.chain.after(self.stream)
        return self.mark(reuse)

    def mark(self, reuse: Any = None) -> Any:
        """An event recorded on the stream now (into `reuse` if given): done when everything queued so far is."""
        return self.stream.record(reuse)

    def wait(self, pending: Any) -> None:
        """Later work on this stream waits for the event `pending` (the host does not wait)."""
        self.stream.wait_event(pending)


def load_cupy() -> tuple[Any, Any, int]:
    """CuPy, its NCCL module and the number of CUDA devices.

    CupyMissing when CuPy is not installed; BackendUnavailable when it is but
    cannot run: it fails to import, its NCCL module is missing or cannot load
    NCCL (CuPy's wheels ship no NCCL: it comes from ``nvidia-nccl-cu12``),
    NVRTC, which compiles CuPy's kernels, cannot be loaded (no CUDA toolkit
    and no ``nvidia-cuda-nvrtc-cu12``), or the CUDA runtime fails (no driver,
    no device).
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
        raise BackendUnavailable("cupy backend unavailable: CuPy is installed but cannot load NCCL (libnccl.so.2); "
                                 + MISSING_LIBRARY_HINT.format(wheel="nvidia-nccl-cu12"))
    try:
        cupy.cuda.nvrtc.getVersion()  # CuPy loads NVRTC when it compiles its first kernel: fail here, not there
    except Exception as e:  # noqa: BLE001  (CuPy 13: OSError/ImportError from the loader; 14: cuda.pathfinder's)
        raise BackendUnavailable(f"cupy backend unavailable: CuPy is installed but cannot load NVRTC, which compiles its "
                                 f"kernels ({type(e).__name__}: {one_line(e)}); "
                                 + MISSING_LIBRARY_HINT.format(wheel="nvidia-cuda-nvrtc-cu12")) from None
    return cupy, nccl, devices


class CupyBackend:
    """Device buffers on this rank's GPU (``device_index``), NCCL for communication, in one :class:`LaunchOrder`."""

    kind = BackendKind.CUPY
    reduce_scatter_by_exchange = False  # ncclReduceScatter is a ring already

    def __init__(self, world: MPI.Intracomm):
        node = world.Split_type(MPI.COMM_TYPE_SHARED)  # collective: before anything that may fail on one rank
        local_rank, local_size = node.Get_rank(), node.Get_size()
        node.Free()
        cupy, nccl, devices = load_cupy()
        index = device_index(local_rank, local_size, devices, os.environ.get("CUDA_VISIBLE_DEVICES"))
        self.order = launch_order(nccl.get_version(), os.environ)
        if self.order is LaunchOrder.IMPLICIT:
            os.environ[IMPLICIT_ORDER] = "1"  # NCCL reads it at its first launch, after this
        self.chain = Chain() if self.order is LaunchOrder.CHAINED else None
        self.cupy = cupy
        self.nccl = nccl
        self.device = cupy.cuda.Device(index)
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
        return StreamLane(self.stream, self.chain)

    def stage_lanes(self, count: int) -> tuple[StreamLane, ...]:
        """One non-blocking stream per pipeline stage, made on first use and kept (stage k of every program shares one);
        their collectives keep the backend's :class:`LaunchOrder`."""
        while len(self.stage_streams) < count:
            self.stage_streams.append(self.cupy.cuda.Stream(non_blocking=True))
        return tuple(StreamLane(s, self.chain) for s in self.stage_streams[:count])
