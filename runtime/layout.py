"""Chunk order in a device's buffer, where a program must repack it, and which buffer each action uses.

A device's buffer holds chunks of equal size. A *layout* is the tuple of the
reduced cells the device currently holds every chunk of, outermost first: the
held chunks are those whose digits on the other (scattered) reduced cells equal
the device's own, and they sit in the buffer as the array of shape
``(factor(c) for c in layout) + (chunk elements,)``, i.e. chunk ``k`` at the
mixed-radix index of its digits over the layout.

The MPI/NCCL buffer calls fix two orders:

* ``reduce_scatter`` over slice ``S`` gives member ``j`` (its position in the
  group: the mixed-radix number of its digits on ``S``, in slice order) the
  ``j``-th contiguous block, so ``S`` must lead the layout, in slice order;
  afterwards the layout is the rest.
* ``all_gather`` over ``S`` concatenates the members' blocks in member order,
  so afterwards ``S`` leads, followed by the previous layout.

* ``all_to_all`` over ``S`` sends member ``j`` the ``j``-th contiguous block
  and puts the block received from member ``i`` at place ``i``, so ``S`` must
  lead the layout, in slice order, as for reduce_scatter; the layout stays
  (its ``S`` digits now name the source instead of the destination: an
  all_to_all request holds every chunk throughout, each cell's digit being the
  destination's before the cell is exchanged and the source's after).

``all_reduce``, ``reduce`` and ``broadcast`` work on the buffer as it is. Where
a reduce_scatter finds its slice not leading, or the program ends in another
order than the result needs (an all_to_all finds its slice not leading
likewise), the plan inserts a :class:`Transpose` (a local
copy); nowhere else. ``all_reduce``, ``reduce`` and ``broadcast`` requests
are element-wise, so their input order is ours to choose (it must only equal
the output order); reduce_scatter requests take the canonical order as input
and all_gather requests give it as output (chunk ``k`` = the owner whose
reduced coordinate is ``k``, cells in cell order, first most significant);
all_to_all requests do both (input chunk ``k`` is addressed to the member
whose coordinate is ``k``, output chunk ``k`` came from it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from p2synth.hierarchies.placement import Cell, Placement
from p2synth.hierarchies.program import Collective, Program, Request, Step

Layout = tuple[Cell, ...]


class LayoutError(ValueError):
    """A program whose chunk sets cannot be laid out (it is not a valid program for the request)."""


@dataclass(frozen=True)
class Transpose:
    """Reorder the held chunks from layout `before` to layout `after` (a local copy)."""

    before: Layout
    after: Layout


@dataclass(frozen=True)
class Exchange:
    """Run `step` on a buffer laid out as `before`; the result is laid out as `after`."""

    step: Step
    before: Layout
    after: Layout


Action = Transpose | Exchange


@dataclass(frozen=True)
class LayoutPlan:
    """The input layout and the actions (collectives and needed transposes) of one program."""

    start: Layout
    actions: tuple[Action, ...]

    @property
    def end(self) -> Layout:
        """The layout of the output: after the last action (the start when there is none)."""
        return self.actions[-1].after if self.actions else self.start

    @property
    def transposes(self) -> int:
        """How many local repacks the program needs."""
        return sum(isinstance(a, Transpose) for a in self.actions)


def held_chunks(placement: Placement, layout: Layout) -> int:
    """Number of chunks a device holds under `layout`."""
    return math.prod(placement.factor(c) for c in layout)


def plan_layout(placement: Placement, request: Request, program: Program) -> LayoutPlan:
    """The cheapest layout plan found for `program` (fewest chunks repacked).

    For element-wise requests two input orders are tried: the canonical cell
    order, and the order in which the program's reduce_scatter steps peel cells
    off (then the remaining cells in cell order), which makes the usual
    ``RS -> ... -> AG`` programs need no repack at all. Raises LayoutError for
    a program that reduce-scatters a cell it does not hold or gathers one it
    holds.
    """
    cells = request.reduced_cells(placement)
    collective = request.collective
    if collective is Collective.ALL_GATHER:
        return _walk(program, (), cells)
    if collective is Collective.REDUCE_SCATTER:
        return _walk(program, cells, ())
    if collective is Collective.ALL_TO_ALL:
        return _walk(program, cells, cells)
    starts = dict.fromkeys([cells, _scatter_order(program, cells)])
    plans = [_walk(program, s, s) for s in starts]
    return min(plans, key=lambda p: _repacked(placement, p))


def _scatter_order(program: Program, cells: Layout) -> Layout:
    """Cells in the order reduce_scatter steps take them, then the rest in cell order."""
    order = [c for s in program.steps if s.op is Collective.REDUCE_SCATTER for c in s.slice]
    return tuple(dict.fromkeys(order + list(cells)))


def _walk(program: Program, start: Layout, end: Layout) -> LayoutPlan:
    """Follow the layout through the steps, transposing only where a call needs it."""
    layout = start
    actions: list[Action] = []
    for step in program.steps:
        if step.op in (Collective.REDUCE_SCATTER, Collective.ALL_TO_ALL):
            if not set(step.slice) <= set(layout):
                raise LayoutError(f"{step.op.value} over cells that are already scattered: {step}")
            if layout[: len(step.slice)] != step.slice:
                target = step.slice + tuple(c for c in layout if c not in step.slice)
                actions.append(Transpose(layout, target))
                layout = target
            after = layout[len(step.slice) :] if step.op is Collective.REDUCE_SCATTER else layout
        elif step.op is Collective.ALL_GATHER:
            if set(step.slice) & set(layout):
                raise LayoutError(f"all_gather over cells that are not scattered: {step}")
            after = step.slice + layout
        else:
            after = layout
        actions.append(Exchange(step, layout, after))
        layout = after
    if set(layout) != set(end):
        raise LayoutError("the program does not end holding the chunks its request needs")
    if layout != end:
        actions.append(Transpose(layout, end))
    return LayoutPlan(start, tuple(actions))


def _repacked(placement: Placement, plan: LayoutPlan) -> int:
    """Chunks copied by the plan's transposes."""
    return sum(held_chunks(placement, a.before) for a in plan.actions if isinstance(a, Transpose))


class Role(str, Enum):
    """The buffers an action reads or writes: input, output, and two scratch buffers.

    A pipelined program (``Program.pipeline > 1``) reads its pieces'
    input from ``PIECES_IN`` and writes their output to ``PIECES_OUT``, the
    send and receive buffers re-cut piece by piece (see runtime/executor.py).
    """

    SEND = "send"
    RECV = "recv"
    SCRATCH_A = "scratch_a"
    SCRATCH_B = "scratch_b"
    PIECES_IN = "pieces_in"
    PIECES_OUT = "pieces_out"


# Calls that can run with the same buffer as input and output.
IN_PLACE_OPS = frozenset({Collective.ALL_REDUCE, Collective.REDUCE, Collective.BROADCAST})


def assign_buffers(actions: tuple[Action, ...]) -> tuple[tuple[Role, Role], ...]:
    """(source, destination) buffer of every action, out of place like nccl-tests.

    Walks backwards from the last action, which writes the receive buffer:
    in-place calls keep their buffer, the others (reduce_scatter, all_gather,
    transposes) read from the other scratch buffer. The first action reads the
    send buffer, which is never written.
    """
    out = Role.RECV
    pairs: list[tuple[Role, Role]] = []
    for action in reversed(actions):
        if isinstance(action, Exchange) and action.step.op in IN_PLACE_OPS:
            src = out
        else:
            src = Role.SCRATCH_B if out is Role.SCRATCH_A else Role.SCRATCH_A
        pairs.append((src, out))
        out = src
    pairs.reverse()
    if pairs:
        pairs[0] = (Role.SEND, pairs[0][1])
    return tuple(pairs)
