"""Run a program on this rank: one sub-communicator per slice, the buffers, and the compiled calls.

World rank ``r`` is device ``r`` of the hierarchy (level 0 most significant,
so the ranks of one node are consecutive, as ``mpirun`` places them by
default); each rank derives its cell digits from its rank
(``Placement.digits``). For every distinct slice ``S`` of the programs to run,
:meth:`Executor.connect` splits the world once: colour = the group's id (the
rank of its root, the member with zero digits on ``S``), key = the member's
position (its digits on ``S`` as a mixed-radix number, slice order).

:meth:`Executor.compile` turns a program into this rank's list of calls
(collectives and the few local repacks of runtime/layout.py), bound to
buffers once, so that a run is only a loop over calls. Following the
concrete semantics, a rank skips a step when its group is inactive: the
group's members differ only on the slice, so the group is active iff the
rank's digits on the rooted cells outside the slice are all zero. A program
with no steps (a request whose axes have size 1, so its reduction group is the
rank alone) compiles to one call of the requested collective over the
one-member group of the empty slice. With a :class:`~runtime.faults.Fault`,
compile makes the calls of that fault instead of the struck action's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from mpi4py import MPI

from hierarchies.placement import Cell, Placement
from hierarchies.program import Collective, Program, Request
from runtime.backends import Backend, GroupComm
from runtime.data import DTYPE, recv_count, send_count
from runtime.faults import Fault, FaultKind, faulty_exchange, group_size
from runtime.layout import (
    Exchange,
    Layout,
    LayoutPlan,
    Role,
    assign_buffers,
    held_chunks,
    plan_layout,
)


class Buffers:
    """The buffers of one message size on this rank: send, receive and (when needed) two scratch buffers."""

    def __init__(self, backend: Backend, collective: Collective, count: int, group_size: int, dtype: np.dtype = DTYPE):
        self.backend = backend
        self.count = count
        self.chunk = count // group_size
        self.dtype = dtype
        self._buffers = {
            Role.SEND: backend.empty(send_count(collective, count, group_size), dtype),
            Role.RECV: backend.empty(recv_count(collective, count, group_size), dtype),
        }

    def get(self, role: Role) -> Any:
        """The buffer of `role`; scratch buffers (a whole message each) are made on first use."""
        if role not in self._buffers:
            self._buffers[role] = self.backend.empty(self.count, self.dtype)
        return self._buffers[role]

    def view(self, role: Role, chunks: int) -> Any:
        """The first `chunks` chunks of the buffer of `role`."""
        return self.get(role)[: chunks * self.chunk]

    def poison(self, value: int | float) -> None:
        """Fill every buffer but the input with `value` (one no result may hold), so that nothing stale can pass the check."""
        for role, buf in self._buffers.items():
            if role is not Role.SEND:
                self.backend.fill(buf, value)


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
        """This rank's calls for `program` on `buffers`, with `fault` if given (its slices must be connected)."""
        collective = self.request.collective
        if not program.steps:  # the reduction group is this rank alone: one call over the empty slice
            call = getattr(self._groups[()], collective.value)
            return CompiledProgram((partial(call, buffers.get(Role.SEND), buffers.get(Role.RECV)),), 0)
        plan = self.layout(program)
        rooted = set(self.request.reduced_cells(self.placement)) if collective is Collective.BROADCAST else set()
        calls: list[Callable[[], None]] = []
        for index, (action, (src_role, dst_role)) in enumerate(zip(plan.actions, assign_buffers(plan.actions))):
            src = buffers.view(src_role, held_chunks(self.placement, action.before))
            dst = src if dst_role is src_role else buffers.view(dst_role, held_chunks(self.placement, action.after))
            hit = fault if fault is not None and fault.action == index else None
            if not isinstance(action, Exchange):  # a local repack, done by active ranks only
                if self._all_zero(rooted):
                    shape, axes = self._permutation(action.before, action.after, buffers.chunk)
                    if hit is not None and hit.kind is FaultKind.SKIP_REPACK:
                        shape, axes = (src.size,), (0,)  # a plain copy: the chunks keep their order
                    calls.append(partial(self.backend.transpose, src, dst, shape, axes))
                continue
            op = action.step.op
            cells = hit.slice if hit is not None and hit.kind is FaultKind.WRONG_SLICE else action.step.slice
            if self._all_zero(rooted - set(cells)):
                # the GroupComm methods are named after the collectives
                call = getattr(self._groups[cells], op.value)
                if hit is None:
                    calls.append(partial(call, src, dst))
                else:
                    calls.extend(faulty_exchange(
                        hit, self.backend, call, src, dst, op=op, blocks=group_size(self.placement, cells),
                        chunk=buffers.chunk, reads_input=src_role is Role.SEND, rank=self.world.Get_rank(),
                    ))
            if op is Collective.REDUCE:
                rooted |= set(cells)
            elif op is Collective.BROADCAST:
                rooted -= set(cells)
        return CompiledProgram(tuple(calls), plan.transposes)

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
