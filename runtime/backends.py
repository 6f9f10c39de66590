"""Where buffers live and what moves them: numpy over MPI, or CuPy over NCCL.

A backend allocates buffers (float32 for timed runs, uint64 for check runs),
copies host data in and out, repacks chunks locally, and turns an MPI sub-communicator into a :class:`GroupComm`
with the six collectives. Every group call takes a source and a destination
buffer; passing the same object for both means in place. The root of every
rooted call is position 0 of the group (the member with zero slice digits).

* ``numpy``: host arrays and mpi4py's buffer methods (``Allreduce``,
  ``Reduce_scatter_block``, ``Allgather``, ``Reduce``, ``Bcast``,
  ``Alltoall``), never the pickle-based lower-case calls. Always available.
* ``cupy``: device arrays and ``cupy.cuda.nccl``. One GPU per rank: the rank's
  position among the ranks of its node (``COMM_TYPE_SHARED``) picks the GPU.
  Each group's NCCL unique id is made on the group's root and broadcast over
  the group's MPI sub-communicator. NCCL has no all-to-all collective: it is
  one ``send`` and one ``recv`` per member (itself included) inside one
  ``groupStart``/``groupEnd``. Calls are queued on one stream per rank;
  :meth:`Backend.synchronize` waits for it (done before every timer read).
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Protocol

import numpy as np
from mpi4py import MPI

from runtime.data import CHECK_DTYPE, DTYPE

NCCL_UNIQUE_ID_BYTES = 128


class BackendKind(str, Enum):
    """The available backends."""

    NUMPY = "numpy"
    CUPY = "cupy"

    def __str__(self) -> str:
        return self.value


class BackendUnavailable(RuntimeError):
    """The chosen backend cannot run here (no CuPy, no CUDA device, no NCCL...)."""


class GroupComm(Protocol):
    """The six collectives over one group of ranks; position 0 is the root."""

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

    def free(self) -> None:
        """Release the group's resources."""


class Backend(Protocol):
    """Buffers and group communicators of one kind."""

    kind: BackendKind

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


# -- numpy over MPI -------------------------------------------------------------


class MpiGroup:
    """A group over an MPI sub-communicator, with numpy buffers."""

    def __init__(self, comm: MPI.Intracomm):
        self.comm = comm
        self.is_root = comm.Get_rank() == 0

    def all_reduce(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Element-wise sum over the group, into every member's `dst`."""
        self.comm.Allreduce(MPI.IN_PLACE if src is dst else src, dst, op=MPI.SUM)

    def reduce_scatter(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Sum over the group; member j keeps block j of the sum in `dst`."""
        self.comm.Reduce_scatter_block(src, dst, op=MPI.SUM)

    def all_gather(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Every member's `src`, concatenated in member order, into every `dst`."""
        self.comm.Allgather(src, dst)

    def reduce(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Sum over the group into the root's `dst`."""
        if self.is_root:
            self.comm.Reduce(MPI.IN_PLACE if src is dst else src, dst, op=MPI.SUM, root=0)
        else:
            self.comm.Reduce(src, None, op=MPI.SUM, root=0)

    def broadcast(self, src: np.ndarray, dst: np.ndarray) -> None:
        """The root's `src` into every member's `dst` (MPI broadcasts in place, so the root copies first)."""
        if self.is_root and src is not dst:
            np.copyto(dst, src)
        self.comm.Bcast(dst, root=0)

    def all_to_all(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Block j of `src` to member j; block i of `dst` from member i (out of place)."""
        self.comm.Alltoall(src, dst)

    def free(self) -> None:
        """Nothing to release: the executor frees the MPI sub-communicator."""


class NumpyBackend:
    """Host buffers, MPI for communication."""

    kind = BackendKind.NUMPY

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

    def synchronize(self) -> None:
        """Host calls are synchronous: nothing to wait for."""

    def group(self, comm: MPI.Intracomm) -> MpiGroup:
        """The MPI group over `comm`."""
        return MpiGroup(comm)


# -- cupy over NCCL -------------------------------------------------------------


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
        self.comm = nccl.NcclCommunicator(comm.Get_size(), tuple(int(b) for b in uid), comm.Get_rank())
        self.types = {DTYPE: nccl.NCCL_FLOAT32, CHECK_DTYPE: nccl.NCCL_UINT64}
        self.sum = nccl.NCCL_SUM

    def all_reduce(self, src: Any, dst: Any) -> None:
        """Element-wise sum over the group, into every member's `dst`."""
        self.comm.allReduce(src.data.ptr, dst.data.ptr, src.size, self.types[src.dtype], self.sum, self.stream)

    def reduce_scatter(self, src: Any, dst: Any) -> None:
        """Sum over the group; member j keeps block j of the sum in `dst`."""
        self.comm.reduceScatter(src.data.ptr, dst.data.ptr, dst.size, self.types[src.dtype], self.sum, self.stream)

    def all_gather(self, src: Any, dst: Any) -> None:
        """Every member's `src`, concatenated in member order, into every `dst`."""
        self.comm.allGather(src.data.ptr, dst.data.ptr, src.size, self.types[src.dtype], self.stream)

    def reduce(self, src: Any, dst: Any) -> None:
        """Sum over the group into the root's `dst`."""
        self.comm.reduce(src.data.ptr, dst.data.ptr, src.size, self.types[src.dtype], self.sum, 0, self.stream)

    def broadcast(self, src: Any, dst: Any) -> None:
        """The root's `src` into every member's `dst` (ncclBroadcast is out of place)."""
        self.comm.broadcast(src.data.ptr, dst.data.ptr, dst.size, self.types[src.dtype], 0, self.stream)

    def all_to_all(self, src: Any, dst: Any) -> None:
        """Block j of `src` to member j; block i of `dst` from member i: grouped send/recv, one NCCL group call."""
        members = self.members
        block = src.size // members
        step = block * src.itemsize
        kind = self.types[src.dtype]
        self.nccl.groupStart()
        try:
            for peer in range(members):
                self.comm.send(src.data.ptr + peer * step, block, kind, peer, self.stream)
                self.comm.recv(dst.data.ptr + peer * step, block, kind, peer, self.stream)
        finally:
            self.nccl.groupEnd()

    def free(self) -> None:
        """Destroy the NCCL communicator."""
        self.comm.destroy()


class CupyBackend:
    """Device buffers on this rank's GPU, NCCL for communication."""

    kind = BackendKind.CUPY

    def __init__(self, world: MPI.Intracomm):
        node = world.Split_type(MPI.COMM_TYPE_SHARED)  # collective: before anything that may fail on one rank
        local_rank, local_size = node.Get_rank(), node.Get_size()
        node.Free()
        try:
            import cupy
            from cupy.cuda import nccl

            devices = cupy.cuda.runtime.getDeviceCount()
        except Exception as e:  # ImportError, CUDARuntimeError (no driver), ...
            raise BackendUnavailable(f"cupy backend unavailable: {type(e).__name__}: {e}") from None
        if not getattr(nccl, "available", False):
            raise BackendUnavailable("cupy backend unavailable: CuPy was built without NCCL")
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


def make_backend(kind: BackendKind, world: MPI.Intracomm) -> Backend:
    """The backend of `kind` for this rank; BackendUnavailable with the reason if it cannot run."""
    if kind is BackendKind.CUPY:
        return CupyBackend(world)
    return NumpyBackend()
