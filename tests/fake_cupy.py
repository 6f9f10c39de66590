"""A stand-in for CuPy built on numpy, so that CI can run scripts/gpu_check's code paths without a GPU.

``install()`` puts modules ``cupy``, ``cupy.cuda`` and ``cupy.cuda.nccl`` into
``sys.modules``, with the NCCL signatures of CuPy ``install(version=14)``
(the default, what the gpu extra installs) or ``13`` (:data:`SIGNATURES`,
which tests/test_cupy_signatures.py compares with the real CuPy where one is
installed): from 14 ``get_unique_id()`` returns 128 ``bytes`` and
``NcclCommunicator`` takes them; before, a tuple of 128 ints (C chars,
-128..127). Each refuses the other's id as Cython does (TypeError). Arrays are numpy arrays in host memory whose ``data.ptr`` is
their real address; the NCCL communicator supports one rank only, where every
collective is a copy of ``count`` elements from the send to the receive
address (ctypes.memmove), as real NCCL does on one rank; ``send``/``recv`` to
oneself must sit inside ``groupStart``/``groupEnd`` (as NCCL requires for a
send and its matching receive on one rank), and ``groupEnd`` pairs them in
order and copies. As in NCCL, calls inside a group are enqueued on their
streams only at the outermost ``groupEnd``, so an event recorded inside the
group would not follow them; ``LAUNCHES`` logs every call with its
communicator and group call. ``install(broken=OP)``
makes the communicator's OP copy one element short, to show the check fails.

Streams are deferred, as on a GPU: ``copyto``, ``ndarray.fill``,
``ndarray.set`` and the NCCL calls are queued on a stream (the current one,
the one given, or the one whose ``ptr`` a NCCL call names) and run only when
the host waits (``Stream.synchronize``, ``ndarray.get``). ``Stream.record``
returns an :class:`Event` that is done once the stream reaches it, and
``Stream.wait_event`` holds a stream until the event is done. Queued work runs
one item at a time, from the stream ``install(schedule=...)`` favours among
those that may run: ``"last"`` (default) the most recently made stream,
``"first"`` the oldest, so a missing event between two streams lets the
favoured one run too early and shows in the result. ``LOG`` lists what ran:
``(stream ptr, what)``, NCCL calls named as NCCL names them.

What this does NOT exercise: device memory and its copies, NCCL itself,
device selection, the real CuPy/NCCL constants, and concurrency beyond the
order of queued work. Plain numpy operations on these arrays (indexing,
``copy()``, the faults' helpers) run at once, not on a stream.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import struct
import sys
import types
from collections import deque

import numpy as np

NCCL_FLOAT32, NCCL_UINT64, NCCL_SUM = 7, 5, 0
ITEMSIZE = {NCCL_FLOAT32: 4, NCCL_UINT64: 8}
LOG: list[tuple[int, str]] = []  # (stream ptr, what) of every queued item that ran, in order


class Event:
    """cupy.cuda.Event, recorded again and again: as in CUDA, a wait is for the record made last before the wait was
    queued (``recorded``, a count), done once its stream reaches it (``reached``); ``Event.made`` counts events."""

    made = 0

    def __init__(self):
        Event.made += 1
        self.recorded = self.reached = 0

    @property
    def done(self) -> bool:
        """Whether the stream reached the event's last record."""
        return self.reached >= self.recorded


class Stream:
    """cupy.cuda.Stream: a queue of deferred work (see the module docstring); ``ptr`` tells streams apart."""

    made = 0
    schedule = "last"

    def __init__(self, non_blocking=False, ptr=None):
        self.non_blocking = non_blocking
        if ptr is None:
            Stream.made += 1
            ptr = Stream.made
        self.ptr = ptr
        self.queue: deque = deque()
        _STREAMS[ptr] = self

    def use(self):
        """Make it current."""
        _CURRENT[-1] = self

    def __enter__(self):
        _CURRENT.append(self)
        return self

    def __exit__(self, *exc):
        _CURRENT.pop()

    def enqueue(self, what, work):
        """Queue `work` (a callable) on this stream, named `what` in LOG."""
        self.queue.append((what, work))

    def record(self, event=None):
        """`event` (a new one if None) recorded here: done when this stream gets here."""
        event = event or Event()
        event.recorded += 1
        number = event.recorded
        self.enqueue("record", lambda: setattr(event, "reached", max(event.reached, number)))
        return event

    def wait_event(self, event):
        """Later work on this stream waits for `event`'s last record so far (not for any made later)."""
        self.queue.append(("wait", (event, event.recorded)))

    def synchronize(self):
        """Run every queued item, on every stream (see drain)."""
        drain()


_STREAMS: dict[int, Stream] = {}
_CURRENT: list[Stream] = []


def current() -> Stream:
    """The current stream (the null stream, ptr 0, until one is used)."""
    return _CURRENT[-1]


def _reached(event: Event, record: int) -> bool:
    """Whether `event`'s stream has reached its record number `record` (0: never recorded, nothing to wait for)."""
    return event.reached >= record


def drain():
    """Run the queued work of every stream, one item at a time from the favoured stream that may run."""
    while True:
        ready = [s for s in _STREAMS.values() if s.queue and (s.queue[0][0] != "wait" or _reached(*s.queue[0][1]))]
        if not ready:
            if any(s.queue for s in _STREAMS.values()):
                raise RuntimeError("fake streams: every stream with work waits for an event that is never done")
            return
        stream = (max if Stream.schedule == "last" else min)(ready, key=lambda s: s.ptr)
        what, work = stream.queue.popleft()
        if what != "wait":
            work()
            LOG.append((stream.ptr, what))


class ndarray(np.ndarray):
    """A host array with the bits of the CuPy array API the runtime uses."""

    @property
    def data(self):  # CuPy's MemoryPointer: only .ptr is used
        return types.SimpleNamespace(ptr=self.ctypes.data)

    def set(self, host, stream=None):
        """Copy `host` in (cupy.ndarray.set), queued on `stream`."""
        host = np.array(host, copy=True)
        (stream or current()).enqueue("set", lambda: np.copyto(self.view(np.ndarray), host))

    def get(self, stream=None):
        """A plain numpy copy (cupy.ndarray.get), once every queued item has run."""
        drain()
        return np.array(self, copy=True).view(np.ndarray)

    def fill(self, value):
        """Set every element to `value`, queued on the current stream."""
        current().enqueue("fill", lambda: self.view(np.ndarray).fill(value))


def empty(count, dtype=np.float32):
    """cupy.empty."""
    return np.empty(count, dtype=dtype).view(ndarray)


def copyto(dst, src):
    """cupy.copyto, queued on the current stream."""
    current().enqueue("copyto", lambda: np.copyto(dst, src))


class Device:
    """cupy.cuda.Device: one fake device, 0."""

    def __init__(self, index=0):
        self.id = index

    def use(self):
        """Make it current (nothing to do)."""


class NcclCommunicator:
    """A one-rank NCCL communicator: every collective copies `count` elements (one short for the broken op).

    As in NCCL, a call made inside ``groupStart``/``groupEnd`` is only
    enqueued on its stream at the outermost ``groupEnd``; every call is
    logged in LAUNCHES as ``(communicator id, NCCL name, group)``, the group
    being the number of the group call it was made in (None outside one).
    """

    broken: str | None = None
    ranks = 1  # the most members a communicator may have (install's `ranks`)
    version = 14  # the CuPy whose signature it has (install's `version`)

    def __init__(self, ranks, uid, rank):
        wanted = bytes if self.version >= 14 else tuple
        if not isinstance(uid, wanted):  # what Cython says of a typed argument
            raise TypeError(f"Argument 'commId' has incorrect type (expected {wanted.__name__}, got {type(uid).__name__})")
        if len(uid) != 128:
            raise ValueError(f"a NCCL unique id has 128 bytes, not {len(uid)}")
        if not 0 <= rank < ranks <= self.ranks:
            raise ValueError(f"the fake NCCL supports {self.ranks} rank(s) at most")
        raw = uid if isinstance(uid, bytes) else bytes(b & 0xFF for b in uid)
        self.id = struct.unpack_from("<qq", raw)  # get_unique_id's (process, serial) of the root: the same on every member
        self.sends: list = []  # (ptr, count, dtype, stream) queued until groupEnd
        self.recvs: list = []

    def _launch(self, op, stream, work):
        LAUNCHES.append((self.id, op, _GROUP["count"] if _GROUP["depth"] else None))
        if _GROUP["depth"]:
            _GROUP["deferred"].append((stream, op, work))
        else:
            _STREAMS[stream].enqueue(op, work)

    def _copy(self, op, send, recv, count, dtype, stream):
        count -= op == self.broken
        self._launch(op, stream, (lambda: ctypes.memmove(recv, send, count * ITEMSIZE[dtype])) if send != recv else (lambda: None))

    def allReduce(self, send, recv, count, dtype, op, stream):  # noqa: N802 (NCCL's names)
        self._copy("allReduce", send, recv, count, dtype, stream)

    def reduceScatter(self, send, recv, count, dtype, op, stream):  # noqa: N802
        self._copy("reduceScatter", send, recv, count, dtype, stream)

    def allGather(self, send, recv, count, dtype, stream):  # noqa: N802
        self._copy("allGather", send, recv, count, dtype, stream)

    def reduce(self, send, recv, count, dtype, op, root, stream):
        self._copy("reduce", send, recv, count, dtype, stream)

    def broadcast(self, send, recv, count, dtype, root, stream):
        self._copy("broadcast", send, recv, count, dtype, stream)

    def send(self, send, count, dtype, peer, stream):
        """Queue a send to `peer` (0, oneself) until groupEnd."""
        self._p2p(self.sends, "send", peer, (send, count - (self.broken == "send"), dtype, stream))

    def recv(self, recv, count, dtype, peer, stream):
        """Queue a receive from `peer` (0, oneself) until groupEnd."""
        self._p2p(self.recvs, "recv", peer, (recv, count, dtype, stream))

    def _p2p(self, queue, kind, peer, item):
        if _GROUP["depth"] == 0 or not 0 <= peer < self.ranks:
            raise RuntimeError("the fake NCCL's send/recv go to a member (oneself, on one rank) inside groupStart/groupEnd")
        LAUNCHES.append((self.id, kind, _GROUP["count"]))
        queue.append(item)
        _GROUP["p2p"][self.id] = self

    def pair(self):
        """At groupEnd: every queued send lands in the matching queued receive, in order (queued on their stream)."""
        sends, recvs = list(self.sends), list(self.recvs)
        self.sends.clear()
        self.recvs.clear()
        if len(sends) != len(recvs):
            raise RuntimeError(f"{len(sends)} sends but {len(recvs)} receives in one NCCL group")
        if len({s[3] for s in sends + recvs}) != 1:
            raise RuntimeError("the fake NCCL's grouped send/recv of one communicator must use one stream")

        def deliver():
            for (src, count, dtype, _), (dst, room, _, _) in zip(sends, recvs):
                ctypes.memmove(dst, src, min(count, room) * ITEMSIZE[dtype])

        _STREAMS[sends[0][3]].enqueue("sendrecv", deliver)

    def destroy(self):
        """Nothing to release."""


_IDS = itertools.count()
LAUNCHES: list[tuple[tuple[int, int], str, int | None]] = []  # (communicator id, NCCL name, group call number or None)


SIGNATURES = {  # the first line of each docstring of cupy.cuda.nccl's names the runtime uses, by CuPy major version
    14: {"NcclCommunicator": "NcclCommunicator(int ndev, bytes commId, int rank, NcclConfig config=None)"},
    13: {"NcclCommunicator": "NcclCommunicator(int ndev, tuple commId, int rank)"},
}
for _signatures in SIGNATURES.values():  # the methods are the same in both
    _signatures.update({f"NcclCommunicator.{name}": f"NcclCommunicator.{name}(self, {args})" for name, args in {
        "allReduce": "intptr_t sendbuf, intptr_t recvbuf, size_t count, int datatype, int op, intptr_t stream",
        "reduceScatter": "intptr_t sendbuf, intptr_t recvbuf, size_t recvcount, int datatype, int op, intptr_t stream",
        "allGather": "intptr_t sendbuf, intptr_t recvbuf, size_t count, int datatype, intptr_t stream",
        "reduce": "intptr_t sendbuf, intptr_t recvbuf, size_t count, int datatype, int op, int root, intptr_t stream",
        "broadcast": "intptr_t sendbuff, intptr_t recvbuff, size_t count, int datatype, int root, intptr_t stream",
        "send": "intptr_t sendbuf, size_t count, int datatype, int peer, intptr_t stream",
        "recv": "intptr_t recvbuf, size_t count, int datatype, int peer, intptr_t stream",
    }.items()})
    _signatures["NcclCommunicator.destroy"] = "NcclCommunicator.destroy(self)"
UNIQUE_ID_TYPES = {14: bytes, 13: tuple}  # what get_unique_id() returns


def unique_id(version: int) -> bytes | tuple[int, ...]:
    """A unique id that names its communicator, (this process's id, a serial), in 128 bytes as CuPy `version` gives
    it: bytes (14), or a tuple of C chars (13)."""
    raw = struct.pack("<qq", os.getpid(), next(_IDS)) + bytes(112)
    return raw if version >= 14 else tuple(b - 256 if b > 127 else b for b in raw)
_GROUP = {"depth": 0, "count": 0, "deferred": [], "p2p": {}}


def group_start():
    """ncclGroupStart (group calls nest; the outermost one is numbered, from 1)."""
    _GROUP["count"] += _GROUP["depth"] == 0
    _GROUP["depth"] += 1


def group_end():
    """ncclGroupEnd: at the outermost end, enqueue the group's calls on their streams, in call order, then pair its
    sends and receives, communicator by communicator."""
    if _GROUP["depth"] == 0:
        raise RuntimeError("ncclGroupEnd without ncclGroupStart")
    _GROUP["depth"] -= 1
    if _GROUP["depth"]:
        return
    deferred, p2p = list(_GROUP["deferred"]), list(_GROUP["p2p"].values())
    _GROUP["deferred"].clear()
    _GROUP["p2p"].clear()
    for stream, op, work in deferred:
        _STREAMS[stream].enqueue(op, work)
    for comm in p2p:
        comm.pair()


def install(broken: str | None = None, schedule: str = "last", ranks: int = 1, version: int = 14,
            nccl_version: int = 23203) -> None:
    """Register the fake modules as cupy, cupy.cuda and cupy.cuda.nccl; `schedule` is "last" or "first" (see Stream);
    `version` the CuPy major version whose NCCL signatures they have (13 or 14); `nccl_version` what
    ``nccl.get_version()`` says (23203: NCCL 2.32.3).

    `ranks` > 1 lets an MPI job of that many ranks (one fake GPU each) make
    communicators of several members, to log the order of its NCCL calls
    (LAUNCHES): their data still only moves within the rank, so results are
    meaningless there.
    """
    if schedule not in ("last", "first"):
        raise ValueError(f"schedule must be 'last' or 'first', not {schedule!r}")
    if version not in SIGNATURES:
        raise ValueError(f"version must be one of {sorted(SIGNATURES)}, not {version!r}")
    Stream.schedule = schedule
    Stream.made = Event.made = 0
    _STREAMS.clear()
    _CURRENT[:] = [Stream(ptr=0)]  # the null stream
    LOG.clear()
    LAUNCHES.clear()
    _GROUP.update(depth=0, count=0, deferred=[], p2p={})
    nccl = types.ModuleType("cupy.cuda.nccl")
    nccl.available = True
    nccl.NCCL_FLOAT32, nccl.NCCL_UINT64, nccl.NCCL_SUM = NCCL_FLOAT32, NCCL_UINT64, NCCL_SUM
    nccl.NcclCommunicator = type("NcclCommunicator", (NcclCommunicator,),
                                 {"broken": broken, "ranks": ranks, "version": version})
    nccl.get_unique_id = lambda: unique_id(version)
    nccl.groupStart, nccl.groupEnd = group_start, group_end
    nccl.get_version = lambda: nccl_version
    runtime = types.SimpleNamespace(getDeviceCount=lambda: ranks, getDeviceProperties=lambda i: {"name": b"fake GPU (numpy)"})
    cuda = types.ModuleType("cupy.cuda")
    cuda.Device, cuda.Stream, cuda.Event, cuda.runtime, cuda.nccl = Device, Stream, Event, runtime, nccl
    cuda.nvrtc = types.SimpleNamespace(getVersion=lambda: (12, 9))
    cupy = types.ModuleType("cupy")
    cupy.__version__ = f"{version} (fake)"
    cupy.cuda, cupy.ndarray, cupy.empty, cupy.copyto = cuda, ndarray, empty, copyto
    sys.modules.update({"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.nccl": nccl})
