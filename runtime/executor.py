"""Run a program on this rank: one sub-communicator per slice, the buffers, and the compiled calls.

World rank ``r`` is device ``r`` of the hierarchy (level 0 most significant,
so the ranks of one node are consecutive, as ``mpirun`` places them by
default); each rank derives its cell digits from its rank
(``Placement.digits``). For every distinct slice ``S`` of the programs to run,
:meth:`Executor.connect` splits the world once: colour = the group's id (the
rank of its root, the member with zero digits on ``S``), key = the member's
position (its digits on ``S`` as a mixed-radix number, slice order).

:meth:`Executor.compile` turns a program into this rank's list of calls
(collectives and the few local repacks of the layout engine, hierarchies/layout.py), bound to
buffers once, so that a run is only a loop over calls. Following the
concrete semantics, a rank skips a step when its group is inactive: the
group's members differ only on the slice, so the group is active iff the
rank's digits on the rooted cells outside the slice are all zero. A program
with no steps (a request whose axes have size 1, so its reduction group is the
rank alone) compiles to one call of the requested collective over the
one-member group of the empty slice. A send_recv request's one program is one
step over its axis's cells: the group's ``send_recv`` (a shift to the member
at the next position, i.e. the next index on the axis). With a :class:`~runtime.faults.Fault`,
compile makes the calls of that fault instead of the struck action's.

A pipelined program (``Program.pipeline = P > 1``; docs/runtime.md,
"Pipelined programs") cuts every chunk into P equal pieces: a local copy
(the *split*) puts the input piece-major, piece ``p`` being the ``p``-th
contiguous segment of each buffer, every piece runs the program's layout plan
on its own segments with chunks of ``chunk / P`` elements, and a last copy
(the *merge*) puts the output back in chunk order, so the buffers arrive and
leave as for the sequential program. The pieces' steps run as a wavefront of
non-blocking collectives (:class:`Pipeline`).

On a backend that runs reduce_scatter as an exchange (numpy:
``Backend.reduce_scatter_by_exchange``), a reduce_scatter step runs over the
backend's exchange group (``PairwiseExchange``: one peer at a time, summing as
blocks arrive), which receives into the ``EXCHANGE`` buffer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from mpi4py import MPI

from p2synth.hierarchies.layout import Exchange, Layout, LayoutPlan, held_chunks, plan_layout
from p2synth.hierarchies.placement import Cell, Placement
from p2synth.hierarchies.program import Collective, Program, Request
from p2synth.runtime.backends import Backend, GroupComm, Lane
from p2synth.runtime.data import DTYPE, recv_count, send_count
from p2synth.runtime.faults import BackwardShift, Call, Fault, FaultKind, faulty_exchange
from p2synth.runtime.layout import Role, assign_buffers


class Buffers:
    """The buffers of one message size on this rank: send, receive and (when needed) two scratch buffers.

    Pipelined programs also use ``PIECES_IN`` and ``PIECES_OUT`` (as large as
    the send and the receive buffer): the same data cut piece-major, piece
    ``p`` of `pieces` being the ``p``-th contiguous segment of every buffer.
    """

    def __init__(self, backend: Backend, collective: Collective, count: int, group_size: int, dtype: np.dtype = DTYPE):
        self.backend = backend
        self.count = count
        self.chunk = count // group_size
        self.dtype = dtype
        send, recv = send_count(collective, count, group_size), recv_count(collective, count, group_size)
        self._sizes = {Role.SEND: send, Role.RECV: recv, Role.PIECES_IN: send, Role.PIECES_OUT: recv}
        self._buffers = {Role.SEND: backend.empty(send, dtype), Role.RECV: backend.empty(recv, dtype)}

    def get(self, role: Role) -> Any:
        """The buffer of `role`; the others (a whole message each for scratch buffers) are made on first use."""
        if role not in self._buffers:
            self._buffers[role] = self.backend.empty(self._sizes.get(role, self.count), self.dtype)
        return self._buffers[role]

    def view(self, role: Role, chunks: int, piece: int = 0, pieces: int = 1) -> Any:
        """The first `chunks` chunks of the buffer of `role`; with `pieces` > 1, the first `chunks` piece-chunks
        (``chunk / pieces`` elements each) of piece `piece`'s segment."""
        buf = self.get(role)
        start = piece * (buf.size // pieces)
        return buf[start : start + chunks * (self.chunk // pieces)]

    def poison(self, value: int | float) -> None:
        """Fill every buffer but the input with `value` (one no result may hold), so that nothing stale can pass the check."""
        for role, buf in self._buffers.items():
            if role is not Role.SEND:
                self.backend.fill(buf, value)


@dataclass(frozen=True)
class StepCalls:
    """One step of one piece on this rank: local calls (repacks, a fault's), the step's collective from `src` into
    `dst` over `group` (None where this rank's group is inactive), and local calls once it is done."""

    before: tuple[Call, ...]
    group: GroupComm | None
    op: Collective
    src: Any
    dst: Any
    after: tuple[Call, ...] = ()

    def calls(self) -> tuple[Call, ...]:
        """The step run to completion: its local calls and one blocking collective."""
        exchange = () if self.group is None else (partial(getattr(self.group, self.op.value), self.src, self.dst),)
        return self.before + exchange + self.after


@dataclass(frozen=True)
class PieceCalls:
    """This rank's calls for one piece (the whole buffer when not pipelined): its steps, then the local calls after the last."""

    steps: tuple[StepCalls, ...]
    tail: tuple[Call, ...]

    def calls(self) -> tuple[Call, ...]:
        """The piece run step after step, each to completion."""
        return tuple(c for step in self.steps for c in step.calls()) + self.tail


def slots(pieces: int, steps: int) -> Iterator[tuple[tuple[int, int], ...]]:
    """The pipeline's schedule, slot by slot: each slot's ``(piece, stage)`` pairs, stage ``steps`` being a piece's tail.

    Slot ``t`` runs stage ``k`` of piece ``t - k`` for every valid ``k``,
    youngest piece first (``k = 0, 1, ..., steps``): piece ``t`` starts its
    first step before the older pieces wait for their previous one.
    """
    for slot in range(pieces + steps):
        yield tuple((slot - stage, stage) for stage in range(max(0, slot - pieces + 1), min(slot, steps) + 1))


def wavefront(pieces: int, steps: int) -> Iterator[tuple[int, int]]:
    """The pipeline's schedule as one sequence of ``(piece, stage)`` pairs: the :func:`slots` one after the other."""
    for slot in slots(pieces, steps):
        yield from slot


@dataclass(frozen=True)
class Pipeline:
    """A pipelined program's run on this rank: split the input into pieces, run the pieces' steps as a wavefront, merge.

    Stage ``k`` (step ``k``) of every piece goes to lane ``k`` (the host for
    numpy, CUDA stream ``k`` for cupy); the piece's tail goes to the last
    step's lane. Before stage ``k`` of a piece, its lane waits for the piece's
    step ``k - 1`` (an ``MPI_Wait`` on numpy, an event on cupy), then runs
    that step's after-calls and its own local calls, then starts step ``k``
    without waiting for it. The split and the merge run on the main lane,
    which waits for the last lane before the merge. Every rank starts the
    collectives one by one from this one thread, in the order of
    :func:`wavefront`, the same everywhere: on cupy, the order NCCL's rules for
    several communicators on one device rely on (``CupyBackend``,
    docs/runtime.md "GPU streams"). Each run passes the pendings of the
    previous one back to its lanes for reuse (`events`), so a CUDA lane makes
    its events once, not once a step and piece per run.
    """

    pieces: tuple[PieceCalls, ...]
    split: tuple[Call, ...]
    merge: tuple[Call, ...]
    main: Lane
    lanes: tuple[Lane, ...]
    events: dict[tuple, Any] = field(default_factory=dict, compare=False)  # the last run's pendings, by where taken

    def run(self) -> None:
        """Run the program once (on cupy: queued; the backend's synchronize waits for it)."""
        self.main.run(self.split)
        self.lanes[0].wait(self._keep(("split",), self.main.mark(self.events.get(("split",)))))
        pending: list[Any] = [None] * len(self.pieces)
        for piece, stage in wavefront(len(self.pieces), len(self.lanes)):
            self._stage(piece, stage, pending)
        self.main.wait(self._keep(("join",), self.lanes[-1].mark(self.events.get(("join",)))))
        self.main.run(self.merge)

    def _keep(self, where: tuple, pending: Any) -> Any:
        """Remember `pending`, taken at `where`, for the next run to reuse; `pending`."""
        self.events[where] = pending
        return pending

    def _stage(self, piece: int, stage: int, pending: list[Any]) -> None:
        """Run or queue stage `stage` of piece `piece`; pending[piece] becomes its step's pending (unchanged after
        the tail)."""
        steps = len(self.lanes)
        calls, lane = self.pieces[piece], self.lanes[min(stage, steps - 1)]
        after: tuple[Call, ...] = ()
        if stage > 0:
            lane.wait(pending[piece])
            after = calls.steps[stage - 1].after
        if stage == steps:
            lane.run(after + calls.tail)
            return
        step = calls.steps[stage]
        lane.run(after + step.before)
        reuse = self.events.get((piece, stage))
        if step.group is None:
            pending[piece] = self._keep((piece, stage), lane.mark(reuse))
        else:
            pending[piece] = self._keep((piece, stage), lane.start(step.group, step.op, step.src, step.dst, reuse))


def split_pieces(backend: Backend, src: Any, dst: Any, chunks: int, pieces: int) -> Call:
    """The local copy that cuts `src` (`chunks` chunks) into `pieces` piece-major segments in `dst`."""
    return partial(backend.transpose, src, dst, (chunks, pieces, src.size // (chunks * pieces)), (1, 0, 2))


def merge_pieces(backend: Backend, src: Any, dst: Any, chunks: int, pieces: int) -> Call:
    """The local copy that puts the `pieces` piece-major segments of `src` back in chunk order into `dst`."""
    return partial(backend.transpose, src, dst, (pieces, chunks, src.size // (chunks * pieces)), (1, 0, 2))


@dataclass(frozen=True)
class CompiledProgram:
    """This rank's calls for one program on one set of buffers."""

    calls: tuple[Callable[[], None], ...]
    transposes: int

    def run(self) -> None:
        """Run the program once (calls are queued; the backend's synchronize waits for them)."""
        for call in self.calls:
            call()


class Executor:
    """Runs programs of one request on one placement, on this rank."""

    def __init__(self, backend: Backend, placement: Placement, request: Request, world: MPI.Intracomm):
        if world.Get_size() != placement.num_devices:
            raise ValueError(f"{world.Get_size()} ranks for {placement.num_devices} devices")
        self.backend = backend
        self.placement = placement
        self.request = request
        self.world = world
        self.digits = placement.digits(world.Get_rank())
        self._comms: dict[tuple[Cell, ...], MPI.Intracomm] = {}
        self._groups: dict[tuple[Cell, ...], GroupComm] = {}

    def connect(self, programs: list[Program], extra: tuple[tuple[Cell, ...], ...] = ()) -> None:
        """Build the group communicator of every slice the programs use, and of the `extra` slices (collective over the world).

        An empty program needs the empty slice (its one-member group). Slices
        are connected in sorted order, so every rank makes the same calls.
        """
        used = {step.slice for p in programs for step in p.steps} | {() for p in programs if not p.steps} | set(extra)
        for cells in sorted(used - set(self._groups)):
            rank = self.world.Get_rank()
            key = self.placement.position(rank, cells)
            comm = self.world.Split(color=self.placement.root(rank, cells), key=key)
            if comm.Get_rank() != key:
                raise RuntimeError(f"sub-communicator rank {comm.Get_rank()} is not the group position {key}")
            self._comms[cells] = comm
            self._groups[cells] = self.backend.group(comm)

    def layout(self, program: Program) -> LayoutPlan:
        """The layout plan of `program` (the same on every rank)."""
        return plan_layout(self.placement, self.request, program)

    def compile(self, program: Program, buffers: Buffers, fault: Fault | None = None) -> CompiledProgram:
        """This rank's calls for `program` on `buffers`, with `fault` if given (its slices must be connected).

        A pipelined program (``pipeline = P > 1``) compiles its layout plan once
        per piece, on that piece's views, and runs as a :class:`Pipeline`; a
        program with no steps runs its one call whatever its pipeline.
        """
        if not program.steps:  # the reduction group is this rank alone: one call over the empty slice
            call = getattr(self._groups[()], self.request.collective.value)
            return CompiledProgram((partial(call, buffers.get(Role.SEND), buffers.get(Role.RECV)),), 0)
        plan = self.layout(program)
        pieces = program.pipeline
        if pieces == 1:
            return CompiledProgram(self._piece(plan, buffers, fault).calls(), plan.transposes)
        start, end = (held_chunks(self.placement, layout) for layout in (plan.start, plan.end))
        # a buffer of one chunk is already piece-major: its pieces are read or written in place
        roles = {Role.SEND: Role.PIECES_IN if start > 1 else Role.SEND, Role.RECV: Role.PIECES_OUT if end > 1 else Role.RECV}
        split = (split_pieces(self.backend, buffers.get(Role.SEND), buffers.get(Role.PIECES_IN), start, pieces),) if start > 1 else ()
        merge = (merge_pieces(self.backend, buffers.get(Role.PIECES_OUT), buffers.get(Role.RECV), end, pieces),) if end > 1 else ()
        pipeline = Pipeline(
            tuple(self._piece(plan, buffers, fault, piece, pieces, roles) for piece in range(pieces)), split, merge,
            self.backend.main_lane(), self.backend.stage_lanes(len(program.steps)),
        )
        return CompiledProgram((pipeline.run,), plan.transposes)

    def _piece(
        self, plan: LayoutPlan, buffers: Buffers, fault: Fault | None, piece: int = 0, pieces: int = 1, roles: dict[Role, Role] | None = None,
    ) -> PieceCalls:
        """This rank's calls for piece `piece` of `pieces` of the program laid out by `plan` (`roles` renames buffers)."""
        roles = roles or {}
        chunk = buffers.chunk // pieces
        collective = self.request.collective
        rooted = set(self.request.reduced_cells(self.placement)) if collective is Collective.BROADCAST else set()
        steps: list[StepCalls] = []
        local: list[Call] = []  # local calls before the next step
        for index, (action, (src_role, dst_role)) in enumerate(zip(plan.actions, assign_buffers(plan.actions))):
            src_role, dst_role = roles.get(src_role, src_role), roles.get(dst_role, dst_role)
            src = buffers.view(src_role, held_chunks(self.placement, action.before), piece, pieces)
            dst = src if dst_role is src_role else buffers.view(dst_role, held_chunks(self.placement, action.after), piece, pieces)
            hit = fault if fault is not None and fault.action == index and fault.piece == piece else None
            if not isinstance(action, Exchange):  # a local repack, done by active ranks only
                if self._all_zero(rooted):
                    shape, axes = self._permutation(action.before, action.after, chunk)
                    if hit is not None and hit.kind is FaultKind.SKIP_REPACK:
                        shape, axes = (src.size,), (0,)  # a plain copy: the chunks keep their order
                    local.append(partial(self.backend.transpose, src, dst, shape, axes))
                continue
            op = action.step.op
            cells = hit.slice if hit is not None and hit.kind is FaultKind.WRONG_SLICE else action.step.slice
            if not self._all_zero(rooted - set(cells)):
                steps.append(StepCalls(tuple(local), None, op, src, dst))
            elif hit is None:
                steps.append(self._step(tuple(local), self._groups[cells], op, src, dst, (), buffers, piece, pieces))
            else:
                struck = faulty_exchange(
                    hit, self.backend, src, dst, op=op, blocks=self.placement.group_size(cells),
                    chunk=chunk, reads_input=src_role in (Role.SEND, Role.PIECES_IN), rank=self.world.Get_rank(),
                )
                group = BackwardShift(self._groups[cells]) if hit.kind is FaultKind.WRONG_NEIGHBOUR else self._groups[cells]
                steps.append(self._step(tuple(local) + struck.before, group, op, struck.src, struck.dst, struck.after,
                                        buffers, piece, pieces))
            local = []
            if op is Collective.REDUCE:
                rooted |= set(cells)
            elif op is Collective.BROADCAST:
                rooted -= set(cells)
        return PieceCalls(tuple(steps), tuple(local))

    def _step(self, before: tuple[Call, ...], group: GroupComm, op: Collective, src: Any, dst: Any,
              after: tuple[Call, ...], buffers: Buffers, piece: int, pieces: int) -> StepCalls:
        """An active step's calls: the collective from `src` into `dst` over `group`, or, for a reduce_scatter on a
        backend that runs it as an exchange, over the backend's exchange group, receiving into this piece's
        ``EXCHANGE`` segment."""
        if op is not Collective.REDUCE_SCATTER or not self.backend.reduce_scatter_by_exchange:
            return StepCalls(before, group, op, src, dst, after)
        scratch = buffers.view(Role.EXCHANGE, dst.size // (buffers.chunk // pieces), piece, pieces)  # dst's chunks
        return StepCalls(before, self.backend.exchange_group(group, scratch), op, src, dst, after)

    def _all_zero(self, cells: set[Cell]) -> bool:
        """Whether this rank's digits on `cells` are all zero."""
        return all(self.digits[c] == 0 for c in cells)

    def _permutation(self, before: Layout, after: Layout, chunk: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Array shape of layout `before` and the axis order that gives layout `after`."""
        shape = tuple(self.placement.factor(c) for c in before) + (chunk,)
        return shape, tuple(before.index(c) for c in after) + (len(before),)

    def communicator(self, cells: tuple[Cell, ...]) -> MPI.Intracomm:
        """The MPI sub-communicator of slice `cells` (connected before)."""
        return self._comms[cells]

    def close(self) -> None:
        """Free every group and sub-communicator."""
        for cells, group in self._groups.items():
            group.free()
            self._comms[cells].Free()
        self._groups.clear()
        self._comms.clear()
