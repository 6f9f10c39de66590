"""Buffer layouts: the order of the chunks in a device's buffer through a program, and where it must be repacked.

The one layout engine: the MPI/NCCL runtime (runtime/executor.py) and the
PyTorch/JAX exports (solver/exports/) both run the plans made here.

A device's buffer holds chunks of equal size. A *layout* is the tuple of the
reduced cells the device currently holds every chunk of, outermost first: the
held chunks are those whose digits on the other (scattered) reduced cells equal
the device's own, and they sit in the buffer as the array of shape
``(factor(c) for c in layout) + (chunk elements,)``, i.e. chunk ``k`` at the
mixed-radix index of its digits over the layout.

A group's members are numbered by their digits on the slice's cells read as a
mixed-radix number, first cell most significant; the cells' order is the
group's :class:`MemberOrder` (cell order for the runtime's sub-communicators,
mesh order for the frameworks' groups). The collectives fix two orders:

* ``reduce_scatter`` over slice ``S`` gives member ``j`` the ``j``-th
  contiguous block, so ``S`` must lead the layout, in member order;
  afterwards the layout is the rest.
* ``all_gather`` over ``S`` concatenates the members' blocks in member order,
  so afterwards ``S`` leads, in member order, followed by the previous layout.
* ``all_to_all`` over ``S`` sends member ``j`` the ``j``-th contiguous block
  and puts the block received from member ``i`` at place ``i``, so ``S`` must
  lead the layout, in member order, as for reduce_scatter; the layout stays
  (its ``S`` digits now name the source instead of the destination: an
  all_to_all request holds every chunk throughout, each cell's digit being the
  destination's before the cell is exchanged and the source's after).

``all_reduce``, ``reduce`` and ``broadcast`` work on the buffer as it is. Where
a reduce_scatter or an all_to_all finds its slice not leading, or the program
ends in another order than the result needs, the plan inserts a
:class:`Transpose` (a local copy); nowhere else. ``all_reduce``, ``reduce`` and
``broadcast`` requests are element-wise, so their input order is ours to
choose (it must only equal the output order); reduce_scatter requests take the
canonical order as input and all_gather requests give it as output (chunk
``k`` = the owner whose reduced coordinate is ``k``, cells in cell order, first
most significant); all_to_all requests do both (input chunk ``k`` is addressed
to the member whose coordinate is ``k``, output chunk ``k`` came from it).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from enum import Enum

from p2synth.hierarchies.placement import Cell, Placement
from p2synth.hierarchies.program import Collective, Program, Request, Step

Layout = tuple[Cell, ...]

# The steps that split the buffer by their slice's digits (the others work on it as it is).
SPLITTING_OPS = frozenset({Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.ALL_TO_ALL})


class LayoutError(ValueError):
    """A program whose chunk sets cannot be laid out (it is not a valid program for the request)."""


def mesh_order(cells: Collection[Cell]) -> tuple[Cell, ...]:
    """`cells` in device-digit (mesh) order: levels outermost first, then axes in declared order."""
    return tuple(sorted(cells, key=lambda c: (c.level, c.axis)))


class MemberOrder(str, Enum):
    """The order of a slice's cells in which a group numbers its members (first cell most significant).

    ``CELL`` is the slice as written (cell order: axis-major), the position of
    ``Placement.position`` that the runtime's sub-communicators use; ``MESH``
    is device-digit order (level-major), i.e. rank order, which
    torch.distributed groups and JAX tuples of mesh axes use.
    """

    CELL = "cell"
    MESH = "mesh"

    def of(self, slice_: tuple[Cell, ...]) -> tuple[Cell, ...]:
        """The cells of `slice_` in this order."""
        return mesh_order(slice_) if self is MemberOrder.MESH else slice_


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

    def restricted(self, cells: Collection[Cell]) -> LayoutPlan:
        """The plan seen on `cells` only: the other cells fold into the chunk, and repacks that then move nothing go.

        The exports chunk the buffer by the cells some step splits
        (:func:`split_cells`); a cell that no step splits only ever sits
        in the buffer whole, so leaving it in the chunk changes no result.
        """
        keep = set(cells)

        def on(layout: Layout) -> Layout:
            return tuple(c for c in layout if c in keep)

        actions: list[Action] = []
        for a in self.actions:
            if isinstance(a, Exchange):
                actions.append(Exchange(a.step, on(a.before), on(a.after)))
            elif on(a.before) != on(a.after):
                actions.append(Transpose(on(a.before), on(a.after)))
        return LayoutPlan(on(self.start), tuple(actions))


def held_chunks(placement: Placement, layout: Layout) -> int:
    """Number of chunks a device holds under `layout`."""
    return placement.group_size(layout)


def split_cells(placement: Placement, request: Request, program: Program) -> Layout:
    """The request's reduced cells (in cell order) that a reduce_scatter, all_gather or all_to_all of `program` splits."""
    split = {c for s in program.steps if s.op in SPLITTING_OPS for c in s.slice}
    return tuple(c for c in request.reduced_cells(placement) if c in split)


def plan_layout(
    placement: Placement, request: Request, program: Program, members: MemberOrder = MemberOrder.CELL
) -> LayoutPlan:
    """The cheapest layout plan found for `program` (fewest chunks repacked), groups numbering members by `members`.

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
        return _walk(program, (), cells, members)
    if collective is Collective.REDUCE_SCATTER:
        return _walk(program, cells, (), members)
    if collective is Collective.ALL_TO_ALL:
        return _walk(program, cells, cells, members)
    starts = dict.fromkeys([cells, _scatter_order(program, cells, members)])
    plans = [_walk(program, s, s, members) for s in starts]
    return min(plans, key=lambda p: _repacked(placement, p))


def _scatter_order(program: Program, cells: Layout, members: MemberOrder) -> Layout:
    """Cells in the order reduce_scatter steps take them, then the rest in cell order."""
    order = [c for s in program.steps if s.op is Collective.REDUCE_SCATTER for c in members.of(s.slice)]
    return tuple(dict.fromkeys(order + list(cells)))


def _walk(program: Program, start: Layout, end: Layout, members: MemberOrder) -> LayoutPlan:
    """Follow the layout through the steps, transposing only where a call needs it."""
    layout = start
    actions: list[Action] = []
    for step in program.steps:
        lead = members.of(step.slice)
        if step.op in (Collective.REDUCE_SCATTER, Collective.ALL_TO_ALL):
            if not set(lead) <= set(layout):
                raise LayoutError(f"{step.op.value} over cells that are already scattered: {step}")
            if layout[: len(lead)] != lead:
                target = lead + tuple(c for c in layout if c not in lead)
                actions.append(Transpose(layout, target))
                layout = target
            after = layout[len(lead) :] if step.op is Collective.REDUCE_SCATTER else layout
        elif step.op is Collective.ALL_GATHER:
            if set(lead) & set(layout):
                raise LayoutError(f"all_gather over cells that are not scattered: {step}")
            after = lead + layout
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
