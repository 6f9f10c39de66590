"""A stand-in for CuPy built on numpy, so that CI can run scripts/gpu_check's code paths without a GPU.

``install()`` puts modules ``cupy``, ``cupy.cuda`` and ``cupy.cuda.nccl`` into
``sys.modules``. Arrays are numpy arrays in host memory whose ``data.ptr`` is
their real address; the NCCL communicator supports one rank only, where every
collective is a copy of ``count`` elements from the send to the receive
address (ctypes.memmove), as real NCCL does on one rank; ``send``/``recv`` to
oneself must sit inside ``groupStart``/``groupEnd`` (as NCCL requires for a
send and its matching receive on one rank), and ``groupEnd`` pairs them in
order and copies. ``install(broken=OP)``
makes the communicator's OP copy one element short, to show the check fails.

What this does NOT exercise: device memory and its copies, stream ordering,
NCCL itself, device selection, and the real CuPy/NCCL constants.
"""

from __future__ import annotations

import ctypes
import sys
import types

import numpy as np

NCCL_FLOAT32, NCCL_UINT64, NCCL_SUM = 7, 5, 0
ITEMSIZE = {NCCL_FLOAT32: 4, NCCL_UINT64: 8}


class ndarray(np.ndarray):
    """A host array with the bits of the CuPy array API the runtime uses."""

    @property
    def data(self):  # CuPy's MemoryPointer: only .ptr is used
        return types.SimpleNamespace(ptr=self.ctypes.data)

    def set(self, host, stream=None):
        """Copy `host` in (cupy.ndarray.set)."""
        np.copyto(self, host)

    def get(self, stream=None):
        """A plain numpy copy (cupy.ndarray.get)."""
        return np.array(self, copy=True).view(np.ndarray)


def empty(count, dtype=np.float32):
    """cupy.empty."""
    return np.empty(count, dtype=dtype).view(ndarray)


def copyto(dst, src):
    """cupy.copyto."""
    np.copyto(dst, src)


class Device:
    """cupy.cuda.Device: one fake device, 0."""

    def __init__(self, index=0):
        self.id = index

    def use(self):
        """Make it current (nothing to do)."""


class Stream:
    """cupy.cuda.Stream: host work is synchronous."""

    ptr = 0

    def __init__(self, non_blocking=False):
        self.non_blocking = non_blocking

    def use(self):
        """Make it current (nothing to do)."""

    def synchronize(self):
        """Nothing is queued."""


class NcclCommunicator:
    """A one-rank NCCL communicator: every collective copies `count` elements (one short for the broken op)."""

    broken: str | None = None

    def __init__(self, ranks, uid, rank):
        if ranks != 1 or rank != 0 or len(uid) != 128:
            raise ValueError("the fake NCCL supports one rank only")

    def _copy(self, op, send, recv, count, dtype):
        count -= op == self.broken
        if send != recv:
            ctypes.memmove(recv, send, count * ITEMSIZE[dtype])

    def allReduce(self, send, recv, count, dtype, op, stream):  # noqa: N802 (NCCL's names)
        self._copy("allReduce", send, recv, count, dtype)

    def reduceScatter(self, send, recv, count, dtype, op, stream):  # noqa: N802
        self._copy("reduceScatter", send, recv, count, dtype)

    def allGather(self, send, recv, count, dtype, stream):  # noqa: N802
        self._copy("allGather", send, recv, count, dtype)

    def reduce(self, send, recv, count, dtype, op, root, stream):
        self._copy("reduce", send, recv, count, dtype)

    def broadcast(self, send, recv, count, dtype, root, stream):
        self._copy("broadcast", send, recv, count, dtype)

    def send(self, send, count, dtype, peer, stream):
        """Queue a send to `peer` (0, oneself) until groupEnd."""
        _queue("send", peer, send, count - (self.broken == "send"), dtype)

    def recv(self, recv, count, dtype, peer, stream):
        """Queue a receive from `peer` (0, oneself) until groupEnd."""
        _queue("recv", peer, recv, count, dtype)

    def destroy(self):
        """Nothing to release."""


_GROUP = {"depth": 0, "send": [], "recv": []}


def _queue(kind, peer, ptr, count, dtype):
    if _GROUP["depth"] == 0 or peer != 0:
        raise RuntimeError("the fake NCCL's send/recv go to oneself (peer 0) inside groupStart/groupEnd")
    _GROUP[kind].append((ptr, count, dtype))


def group_start():
    """ncclGroupStart."""
    _GROUP["depth"] += 1


def group_end():
    """ncclGroupEnd: at the outermost end, every queued send lands in the matching queued receive, in order."""
    _GROUP["depth"] -= 1
    if _GROUP["depth"]:
        return
    sends, recvs = _GROUP["send"], _GROUP["recv"]
    if len(sends) != len(recvs):
        raise RuntimeError(f"{len(sends)} sends but {len(recvs)} receives in one NCCL group")
    for (src, count, dtype), (dst, room, _) in zip(sends, recvs):
        ctypes.memmove(dst, src, min(count, room) * ITEMSIZE[dtype])
    sends.clear()
    recvs.clear()


def install(broken: str | None = None) -> None:
    """Register the fake modules as cupy, cupy.cuda and cupy.cuda.nccl."""
    nccl = types.ModuleType("cupy.cuda.nccl")
    nccl.available = True
    nccl.NCCL_FLOAT32, nccl.NCCL_UINT64, nccl.NCCL_SUM = NCCL_FLOAT32, NCCL_UINT64, NCCL_SUM
    nccl.NcclCommunicator = type("NcclCommunicator", (NcclCommunicator,), {"broken": broken})
    nccl.get_unique_id = lambda: (0,) * 128
    nccl.groupStart, nccl.groupEnd = group_start, group_end
    nccl.get_version = lambda: 0
    runtime = types.SimpleNamespace(getDeviceCount=lambda: 1, getDeviceProperties=lambda i: {"name": b"fake GPU (numpy)"})
    cuda = types.ModuleType("cupy.cuda")
    cuda.Device, cuda.Stream, cuda.runtime, cuda.nccl = Device, Stream, runtime, nccl
    cupy = types.ModuleType("cupy")
    cupy.__version__ = "fake"
    cupy.cuda, cupy.ndarray, cupy.empty, cupy.copyto = cuda, ndarray, empty, copyto
    sys.modules.update({"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.nccl": nccl})
