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
  (``CupyBackend`` and ``NcclGroup`` in runtime/nccl.py, imported only when
  asked for); calls are queued on a
  stream, and :meth:`Backend.synchronize` waits for it (done before every
  timer read).

A *lane* (:class:`Lane`) is where a pipelined program's work goes: the host
for numpy (steps are MPI requests), a CUDA stream for cupy (``StreamLane``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
from mpi4py import MPI

from p2synth.hierarchies.program import Collective
from p2synth.runtime.backend_kind import BackendKind, BackendUnavailable, CupyMissing  # noqa: F401 (their old home)
from p2synth.runtime.data import DTYPE


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

    A *pending* is what :meth:`start` and :meth:`mark` return: something a
    lane can :meth:`wait` for (an MPI request or None; a CUDA event). Both take
    `reuse`, a pending the same call returned in an earlier run that every
    wait has been issued for: a CUDA lane records into it rather than making a
    new event (the host ignores it).
    """

    def run(self, calls: Sequence[Callable[[], None]]) -> None:
        """Run (numpy) or queue (cupy) the local calls `calls`, in order."""

    def start(self, group: GroupComm, op: Collective, src: Any, dst: Any, reuse: Any = None) -> Any:
        """Start `op` over `group` from `src` into `dst` without waiting for it; its pending."""

    def mark(self, reuse: Any = None) -> Any:
        """A pending that is done when the work run or started on this lane so far is."""

    def wait(self, pending: Any) -> None:
        """Make this lane's later work wait until `pending` is done."""


class Backend(Protocol):
    """Buffers and group communicators of one kind.

    `reduce_scatter_by_exchange`: the executor runs every reduce_scatter step
    over the group :meth:`exchange_group` gives (a pairwise exchange, on a
    scratch buffer it provides), not over the plain group; only such backends
    need that method.
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

    def exchange_group(self, group: GroupComm, scratch: Any) -> GroupComm:
        """`group` with its reduce_scatter run as an exchange receiving into `scratch` (one output block); only
        backends with ``reduce_scatter_by_exchange``."""

    def main_lane(self) -> Lane:
        """The lane of sequential work: synchronize waits for it."""

    def stage_lanes(self, count: int) -> tuple[Lane, ...]:
        """One lane per stage (step) of a pipelined program of `count` steps."""


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
EXCHANGE_TAG = 26  # the MPI tag of a pairwise exchange's messages (PairwiseExchange)


class PairwiseExchange:
    """An MPI group whose reduce_scatter is a pairwise exchange; every other call goes to the group as it is.

    Over ``k`` members, round ``i = 1 .. k-1`` sends block ``me + i`` of the
    input to member ``me + i`` and receives member ``me - i``'s block ``me``
    into `scratch`, then adds it to the output, which starts as the member's
    own block (mod ``k``; integers wrap). Each member sends ``(k-1)/k`` of its
    input, to one peer at a time: on the emulated cluster that runs at 1.27x of
    the line where ``MPI_Alltoall`` of the same blocks and a sum run at 1.41x
    and Open MPI's ``MPI_Reduce_scatter_block`` at 4.98x (docs/runtime.md). The
    non-blocking form (:meth:`start`) posts the first round and returns a
    pending whose ``Wait`` runs the others; meanwhile MPI progresses every
    other request in flight. Messages go point to point on the group's
    communicator with :data:`EXCHANGE_TAG`; every rank posts them in the same
    order, so MPI's non-overtaking rule matches concurrent pieces' rounds.
    """

    def __init__(self, group: MpiGroup, scratch: np.ndarray):
        self.group = group
        self.scratch = scratch

    def reduce_scatter(self, src: np.ndarray, dst: np.ndarray, nonblocking: bool = False) -> PairwiseRounds | None:
        """Sum over the group; member j keeps block j of the sum in `dst`: run to completion, or started (its pending)."""
        rounds = PairwiseRounds(self.group.comm, src, dst, self.scratch[: dst.size])
        if nonblocking:
            return rounds
        rounds.Wait()
        return None

    def start(self, op: Collective, src: np.ndarray, dst: np.ndarray) -> Any:
        """Start `op` without waiting: the exchange for a reduce_scatter, the group's own call otherwise."""
        return getattr(self, op.value)(src, dst, nonblocking=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.group, name)


class PairwiseRounds:
    """A pairwise exchange in flight (:class:`PairwiseExchange`): the current round's receive and send.

    In round ``i`` member ``me`` sends to member ``me + i`` and receives from
    member ``me - i``. A reduce_scatter (the default) sends block ``me + i`` of
    `src`, receives into `received` and adds it to `dst`, which starts as the
    member's own block. An all_gather (`op`; no `received`) sends the member's
    whole `src`, its block; an all_to_all sends block ``me + i`` of `src`; both
    receive the sender's block straight into its place in `dst`, nothing added.
    The executor runs only reduce_scatter steps this way; the other forms are
    what scripts/bench_reduce_scatter times beside MPI's own calls.
    """

    def __init__(self, comm: MPI.Intracomm, src: np.ndarray, dst: np.ndarray, received: np.ndarray | None,
                 op: Collective = Collective.REDUCE_SCATTER):
        self.comm, self.k, self.me = comm, comm.Get_size(), comm.Get_rank()
        self.src, self.dst, self.received = src, dst, received
        self.sends = None if op is Collective.ALL_GATHER else src.reshape(self.k, -1)  # per peer; None: all of src
        self.places = None if op is Collective.REDUCE_SCATTER else dst.reshape(self.k, -1)  # None: summed into dst
        own = src if self.sends is None else self.sends[self.me]
        np.copyto(dst if self.places is None else self.places[self.me], own)
        self.round = 0
        self.pending: list[MPI.Request] = []
        self._post_next()

    def _post_next(self) -> None:
        self.round += 1
        if self.round == self.k:
            self.pending = []
            return
        to, frm = (self.me + self.round) % self.k, (self.me - self.round) % self.k
        into = self.received if self.places is None else self.places[frm]
        out = self.src if self.sends is None else self.sends[to]
        self.pending = [self.comm.Irecv(into, source=frm, tag=EXCHANGE_TAG),
                        self.comm.Isend(out, dest=to, tag=EXCHANGE_TAG)]

    def Wait(self) -> None:  # noqa: N802 (an MPI.Request's name, as HostLane.wait calls it)
        """Finish every round: wait for the round's messages, add the received block (reduce_scatter), post the next
        round."""
        while self.pending:
            MPI.Request.Waitall(self.pending)
            if self.places is None:
                np.add(self.dst, self.received, out=self.dst)
            self._post_next()


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

    def start(self, group: MpiGroup, op: Collective, src: np.ndarray, dst: np.ndarray, reuse: Any = None) -> MPI.Request:
        """Start `op` over `group` (non-blocking); its request is the pending (`reuse` is not needed)."""
        return group.start(op, src, dst)

    def mark(self, reuse: Any = None) -> None:
        """Host work is done when it returns: nothing to wait for."""

    def wait(self, pending: MPI.Request | None) -> None:
        """Complete `pending` (``MPI_Wait``, which also progresses every other outstanding request)."""
        if pending is not None:
            pending.Wait()


class NumpyBackend:
    """Host buffers, MPI for communication.

    A reduce_scatter step runs as a pairwise exchange (:class:`PairwiseExchange`),
    not as ``MPI_Reduce_scatter_block``: Open MPI's is a reduce to one member
    plus a linear scatter for large blocks in groups of fewer than 8, and its
    non-blocking form always is; the exchange sends every member ``(k-1)/k``
    of its data, one peer at a time (docs/runtime.md, "Reduce-scatter steps").
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

    def exchange_group(self, group: MpiGroup, scratch: np.ndarray) -> PairwiseExchange:
        """`group` with its reduce_scatter run as a pairwise exchange receiving into `scratch` (one output block)."""
        return PairwiseExchange(group, scratch)

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


_HOST = HostLane()


def make_backend(kind: BackendKind, world: MPI.Intracomm) -> Backend:
    """The backend of `kind` for this rank; BackendUnavailable with the reason if it cannot run."""
    if kind is BackendKind.CUPY:
        from p2synth.runtime.nccl import CupyBackend  # CuPy is optional: loaded only when asked for

        return CupyBackend(world)
    return NumpyBackend()
