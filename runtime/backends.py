"""Where buffers live and what moves them: numpy over MPI, or CuPy over NCCL.

A backend allocates buffers (float32 for timed runs, uint64 for check runs),
copies host data in and out, repacks chunks locally, and turns an MPI sub-communicator into a :class:`GroupComm`
with the six collectives and the shift (``send_recv``: member ``i`` to member
``i + 1 mod n``). Every group call takes a source and a destination
buffer; passing the same object for both means in place. The root of every
rooted call is position 0 of the group (the member with zero slice digits).

* ``numpy``: host arrays and mpi4py's buffer methods (``Allreduce``,
  ``Reduce_scatter_block``, ``Allgather``, ``Reduce``, ``Bcast``,
  ``Alltoall``, ``Sendrecv``), never the pickle-based lower-case calls; a pipelined
  program's steps use their non-blocking forms (``Iallreduce``, ...). Always
  available.
* ``cupy``: device arrays and ``cupy.cuda.nccl``, one GPU per rank
  (runtime/nccl.py, imported only when asked for); calls are queued on a
  stream, and :meth:`Backend.synchronize` waits for it (done before every
  timer read).

A *lane* (:class:`Lane`) is where a pipelined program's work goes: the host
for numpy (steps are MPI requests), a CUDA stream for cupy (``StreamLane``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from enum import Enum
from typing import Any, Protocol

import numpy as np
from mpi4py import MPI

from p2synth.hierarchies.program import Collective
from p2synth.runtime.data import DTYPE


class BackendKind(str, Enum):
    """The available backends."""

    NUMPY = "numpy"
    CUPY = "cupy"

    def __str__(self) -> str:
        return self.value


class BackendUnavailable(RuntimeError):
    """The chosen backend cannot run here (no CuPy, no CUDA device, no NCCL...)."""


class CupyMissing(BackendUnavailable):
    """CuPy is not installed (``import cupy`` finds no module): the cupy backend is not an option here, nothing is broken.

    Every other reason the cupy backend cannot run (no CUDA driver or device,
    CuPy built without NCCL, a CuPy that fails to import) is a plain
    :class:`BackendUnavailable`: CuPy is there but broken.
    """


class GroupComm(Protocol):
    """The six collectives and the shift over one group of ranks; position 0 is the root."""

    def all_reduce(self, src: Any, dst: Any) -> None:
        """Element-wise sum over the group, into every member's `dst`."""

    def reduce_scatter(self, src: Any, dst: Any) -> None:
        """Sum over the group; member j keeps block j of the sum in `dst`."""

    def all_gather(self, src: Any, dst: Any) -> None:
        """Every member's `src`, concatenated in member order, into every `dst`."""

    def reduce(self, src: Any, dst: Any) -> None:
        """Sum over the group into the root's `dst` (the others' `dst` is untouched)."""

    def broadcast(self, src: Any, dst: Any) -> None:
        """The root's `src` into every member's `dst`."""

    def all_to_all(self, src: Any, dst: Any) -> None:
        """Block j of every member's `src` to member j, into block i of `dst` for the block from member i."""

    def send_recv(self, src: Any, dst: Any, step: int = 1) -> None:
        """`src` to member ``i + step`` (mod the group size), `dst` from member ``i - step``: a shift (`step` -1 only
        for the wrong-neighbour fault). Out of place."""

    def free(self) -> None:
        """Release the group's resources."""


class Lane(Protocol):
    """Where a pipelined program's work queues (runtime/executor.py ``Pipeline``): the host, or one CUDA stream.

    A *pending* is what :meth:`launched` and :meth:`mark` return: something a
    lane can :meth:`wait` for (an MPI request or None; a CUDA event).
    Collectives are started inside the backend's :meth:`Backend.launch_group`,
    and their pendings taken once it has closed.
    """

    def run(self, calls: Sequence[Callable[[], None]]) -> None:
        """Run (numpy) or queue (cupy) the local calls `calls`, in order."""

    def start(self, group: GroupComm, op: Collective, src: Any, dst: Any) -> Any:
        """Start `op` over `group` from `src` into `dst` without waiting for it; a launch for :meth:`launched`."""

    def launched(self, launch: Any) -> Any:
        """The pending of the collective whose :meth:`start` returned `launch`, once the launch group has closed."""

    def mark(self) -> Any:
        """A pending that is done when the work run or started on this lane so far is."""

    def wait(self, pending: Any) -> None:
        """Make this lane's later work wait until `pending` is done."""


class Backend(Protocol):
    """Buffers and group communicators of one kind.

    `reduce_scatter_by_exchange`: the executor runs every reduce_scatter step
    as an all_to_all of the group's blocks and a local sum of the received
    blocks (:meth:`sum_blocks`, which only such backends need), not as the
    group's ``reduce_scatter``.
    """

    kind: BackendKind
    reduce_scatter_by_exchange: bool

    def empty(self, count: int, dtype: np.dtype = DTYPE) -> Any:
        """A new buffer of `count` elements of `dtype` (contents undefined)."""

    def upload(self, host: np.ndarray, dst: Any) -> None:
        """Copy the host array `host` into `dst`."""

    def download(self, buf: Any) -> np.ndarray:
        """A host copy of `buf`."""

    def fill(self, buf: Any, value: int | float) -> None:
        """Set every element of `buf` to `value`."""

    def transpose(self, src: Any, dst: Any, shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
        """Write `src`, viewed with `shape` and its axes permuted by `axes`, into `dst` (a local repack)."""

    def synchronize(self) -> None:
        """Wait until every queued operation has finished."""

    def group(self, comm: MPI.Intracomm) -> GroupComm:
        """The group communicator over the members of the MPI sub-communicator `comm`."""

    def main_lane(self) -> Lane:
        """The lane of sequential work: synchronize waits for it."""

    def stage_lanes(self, count: int) -> tuple[Lane, ...]:
        """One lane per stage (step) of a pipelined program of `count` steps."""

    def launch_group(self) -> AbstractContextManager[None]:
        """A context inside which the collectives started on lanes form one launch (one NCCL group call on cupy)."""


# -- numpy over MPI -------------------------------------------------------------


class MpiGroup:
    """A group over an MPI sub-communicator, with numpy buffers."""

    def __init__(self, comm: MPI.Intracomm):
        self.comm = comm
        self.is_root = comm.Get_rank() == 0

    def start(self, op: Collective, src: np.ndarray, dst: np.ndarray) -> MPI.Request:
        """Start `op` as an MPI-3 non-blocking collective (``Iallreduce``, ``Ireduce_scatter_block``, ...); its request."""
        return getattr(self, op.value)(src, dst, nonblocking=True)

    # Each collective makes the blocking call, or with nonblocking=True starts the non-blocking one and returns its request.

    def all_reduce(self, src: np.ndarray, dst: np.ndarray, nonblocking: bool = False) -> MPI.Request | None:
        """Element-wise sum over the group, into every member's `dst`."""
        call = self.comm.Iallreduce if nonblocking else self.comm.Allreduce
        return call(MPI.IN_PLACE if src is dst else src, dst, op=MPI.SUM)

    def reduce_scatter(self, src: np.ndarray, dst: np.ndarray, nonblocking: bool = False) -> MPI.Request | None:
        """Sum over the group; member j keeps block j of the sum in `dst`."""
        call = self.comm.Ireduce_scatter_block if nonblocking else self.comm.Reduce_scatter_block
        return call(src, dst, op=MPI.SUM)

    def all_gather(self, src: np.ndarray, dst: np.ndarray, nonblocking: bool = False) -> MPI.Request | None:
        """Every member's `src`, concatenated in member order, into every `dst`."""
        call = self.comm.Iallgather if nonblocking else self.comm.Allgather
        return call(src, dst)

    def reduce(self, src: np.ndarray, dst: np.ndarray, nonblocking: bool = False) -> MPI.Request | None:
        """Sum over the group into the root's `dst`."""
        call = self.comm.Ireduce if nonblocking else self.comm.Reduce
        if self.is_root:
            return call(MPI.IN_PLACE if src is dst else src, dst, op=MPI.SUM, root=0)
        return call(src, None, op=MPI.SUM, root=0)

    def broadcast(self, src: np.ndarray, dst: np.ndarray, nonblocking: bool = False) -> MPI.Request | None:
        """The root's `src` into every member's `dst` (MPI broadcasts in place, so the root copies first)."""
        if self.is_root and src is not dst:
            np.copyto(dst, src)
        call = self.comm.Ibcast if nonblocking else self.comm.Bcast
        return call(dst, root=0)

    def all_to_all(self, src: np.ndarray, dst: np.ndarray, nonblocking: bool = False) -> MPI.Request | None:
        """Block j of `src` to member j; block i of `dst` from member i (out of place)."""
        call = self.comm.Ialltoall if nonblocking else self.comm.Alltoall
        return call(src, dst)

    def send_recv(self, src: np.ndarray, dst: np.ndarray, nonblocking: bool = False, step: int = 1) -> MPI.Request | None:
        """`src` to member ``i + step``, `dst` from member ``i - step`` (mod the group size; out of place):
        ``Sendrecv``, or ``Isend`` and ``Irecv`` with one request for both."""
        n, me = self.comm.Get_size(), self.comm.Get_rank()
        to, frm = (me + step) % n, (me - step) % n
        if not nonblocking:
            self.comm.Sendrecv(src, dest=to, sendtag=SHIFT_TAG, recvbuf=dst, source=frm, recvtag=SHIFT_TAG)
            return None
        return _Both(self.comm.Irecv(dst, source=frm, tag=SHIFT_TAG), self.comm.Isend(src, dest=to, tag=SHIFT_TAG))

    def free(self) -> None:
        """Nothing to release: the executor frees the MPI sub-communicator."""


SHIFT_TAG = 25  # the MPI tag of send_recv's messages (point-to-point on the group's own communicator)


class _Both:
    """The non-blocking send_recv's pending: its receive and its send, done when both are (``Wait``)."""

    def __init__(self, *requests: MPI.Request):
        self.requests = list(requests)

    def Wait(self) -> None:  # noqa: N802 (an MPI.Request's name, as HostLane.wait calls it)
        MPI.Request.Waitall(self.requests)


class HostLane:
    """The numpy backend's lane: local work runs at once; a step is a non-blocking MPI collective, pending until its Wait."""

    def run(self, calls: Sequence[Callable[[], None]]) -> None:
        """Run `calls` now, in order."""
        for call in calls:
            call()

    def start(self, group: MpiGroup, op: Collective, src: np.ndarray, dst: np.ndarray) -> MPI.Request:
        """Start `op` over `group` (non-blocking); its request."""
        return group.start(op, src, dst)

    def launched(self, launch: MPI.Request) -> MPI.Request:
        """The request is the pending."""
        return launch

    def mark(self) -> None:
        """Host work is done when it returns: nothing to wait for."""

    def wait(self, pending: MPI.Request | None) -> None:
        """Complete `pending` (``MPI_Wait``, which also progresses every other outstanding request)."""
        if pending is not None:
            pending.Wait()


class NumpyBackend:
    """Host buffers, MPI for communication.

    A reduce_scatter step runs as an exchange: ``MPI_Alltoall``
    (``MPI_Ialltoall`` when pipelined) of the group's blocks, then
    :meth:`sum_blocks`. Open MPI's own ``MPI_Reduce_scatter_block`` is a
    reduce to one member plus a linear scatter for large blocks in groups of
    fewer than 8, and its non-blocking form always is; the exchange sends
    every member ``(k-1)/k`` of its data, as a bandwidth-optimal schedule does
    (docs/runtime.md, "Reduce-scatter steps").
    """

    kind = BackendKind.NUMPY
    reduce_scatter_by_exchange = True

    def empty(self, count: int, dtype: np.dtype = DTYPE) -> np.ndarray:
        """A new host array."""
        return np.empty(count, dtype=dtype)

    def upload(self, host: np.ndarray, dst: np.ndarray) -> None:
        """Copy `host` into `dst`."""
        np.copyto(dst, host)

    def download(self, buf: np.ndarray) -> np.ndarray:
        """A copy of `buf`."""
        return buf.copy()

    def fill(self, buf: np.ndarray, value: int | float) -> None:
        """Set every element of `buf` to `value`."""
        buf.fill(value)

    def transpose(self, src: np.ndarray, dst: np.ndarray, shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
        """Repack `src` (viewed with `shape`, axes permuted by `axes`) into `dst`."""
        np.copyto(dst.reshape([shape[a] for a in axes]), src.reshape(shape).transpose(axes))

    def sum_blocks(self, src: np.ndarray, dst: np.ndarray, blocks: int) -> None:
        """``dst`` = the sum of the `blocks` equal blocks of `src`, in block order (wrapping for integers)."""
        parts = src.reshape(blocks, -1)
        if blocks == 1:
            np.copyto(dst, parts[0])
            return
        np.add(parts[0], parts[1], out=dst)
        for part in parts[2:]:
            np.add(dst, part, out=dst)

    def synchronize(self) -> None:
        """Host calls are synchronous: nothing to wait for."""

    def group(self, comm: MPI.Intracomm) -> MpiGroup:
        """The MPI group over `comm`."""
        return MpiGroup(comm)

    def main_lane(self) -> HostLane:
        """The host."""
        return _HOST

    def stage_lanes(self, count: int) -> tuple[HostLane, ...]:
        """The host, `count` times: the steps' requests are what overlaps."""
        return (_HOST,) * count

    def launch_group(self) -> AbstractContextManager[None]:
        """Nothing to group: MPI orders the non-blocking collectives by their start order on each communicator."""
        return contextlib.nullcontext()


_HOST = HostLane()


def make_backend(kind: BackendKind, world: MPI.Intracomm) -> Backend:
    """The backend of `kind` for this rank; BackendUnavailable with the reason if it cannot run."""
    if kind is BackendKind.CUPY:
        from p2synth.runtime.nccl import CupyBackend  # CuPy is optional: loaded only when asked for

        return CupyBackend(world)
    return NumpyBackend()
