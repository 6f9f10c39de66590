"""Deliberate faults, to show that the exact check sees them (``runtime.bench --inject KIND``).

A fault strikes one action of a program's layout plan (hierarchies/layout.py): the
first action it applies to, the same on every rank, so that every rank still
makes the same collective calls (a fault never deadlocks the job). The kinds:

* ``swap-chunks``: before the first step at which a rank holds two chunks or
  more, rank 0 exchanges its first and last held chunk (in the buffer that step
  reads; the input buffer is restored after the step).
* ``skip-repack``: the first local repack (a transpose) copies the chunks in
  the order they are in instead of reordering them, on every rank.
* ``reverse-blocks``: at the first reduce_scatter, all_gather or all_to_all
  step, every rank reverses the block order: a reduce_scatter hands member
  ``j`` the block of member ``k - 1 - j`` (``k`` members), an all_gather or an
  all_to_all stores the blocks last member first.
* ``drop-contribution``: at the first summing step (all_reduce, reduce_scatter,
  reduce), rank 0 contributes zeros instead of its data. Not applicable to an
  all_to_all, which sums nothing (nor to all_gather or broadcast).
* ``double-contribution``: at the first summing step, rank 0 contributes twice
  its data.
* ``wrong-slice``: the first step that has another slice to run over runs over
  the groups of that slice instead: the first other set of reduced cells whose
  groups have as many members (required for reduce_scatter and all_gather,
  whose buffer sizes depend on it), else, for the other collectives, the first
  other set. Ranks skip or run it by the same rule as a correct step, applied
  to the slice actually run.
* ``wrong-neighbour``: at the first send_recv step (a shift, member ``i`` to
  member ``i + 1``) over groups of three members or more, every rank sends to
  its predecessor instead and receives from its successor (with two members
  the two are the same rank, so the fault would change nothing).

On a send_recv request (its one step over the axis's cells) the kinds that
apply are ``swap-chunks`` (rank 0 holds every chunk: its successor receives
them swapped), ``wrong-slice`` where the axis spans two levels or more (the
shift runs inside a smaller or another group: wrong neighbours) and
``wrong-neighbour`` where the axis has three members or more; nothing is
summed, repacked or split into blocks, so the other kinds do not apply.

Rank 0 is active at every step and the root of every group, so a fault on it
always reaches a checked output. A kind that has nowhere to strike in a
program (no repack, no summing step, a single reduced cell...) is *not
applicable* to it: the program then runs without a fault, as a control.

A pipelined program (``Program.pipeline = P > 1``) runs the same layout plan
on each of its P pieces; the fault strikes the same action of the *last*
piece (``P - 1``) only, so the check must find a fault confined to 1/P of
the data while the other pieces run right.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from itertools import combinations
from typing import Any

from p2synth.hierarchies.layout import Exchange, LayoutPlan, Transpose, held_chunks
from p2synth.hierarchies.placement import Cell, Placement
from p2synth.hierarchies.program import Collective, Request
from p2synth.runtime.backends import Backend

VICTIM = 0  # the rank that swaps, drops or doubles
SUMMING_OPS = (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.REDUCE)
BLOCK_OPS = (Collective.REDUCE_SCATTER, Collective.ALL_GATHER)  # whose buffer sizes depend on the group size
BLOCK_ORDER_OPS = BLOCK_OPS + (Collective.ALL_TO_ALL,)  # whose blocks are in member order


class FaultKind(str, Enum):
    """The faults ``--inject`` can make."""

    SWAP_CHUNKS = "swap-chunks"
    SKIP_REPACK = "skip-repack"
    REVERSE_BLOCKS = "reverse-blocks"
    DROP_CONTRIBUTION = "drop-contribution"
    DOUBLE_CONTRIBUTION = "double-contribution"
    WRONG_SLICE = "wrong-slice"
    WRONG_NEIGHBOUR = "wrong-neighbour"

    def __str__(self) -> str:
        return self.value

    @property
    def needs(self) -> str:
        """What a program must have for this kind to apply, in words."""
        return _NEEDS[self]


_NEEDS = {
    FaultKind.SWAP_CHUNKS: "a step at which a rank holds two chunks or more",
    FaultKind.SKIP_REPACK: "a local repack",
    FaultKind.REVERSE_BLOCKS: "a reduce_scatter, all_gather or all_to_all step",
    FaultKind.DROP_CONTRIBUTION: "a summing step (all_reduce, reduce_scatter, reduce)",
    FaultKind.DOUBLE_CONTRIBUTION: "a summing step (all_reduce, reduce_scatter, reduce)",
    FaultKind.WRONG_SLICE: "a step with another slice to run over (two reduced cells or more)",
    FaultKind.WRONG_NEIGHBOUR: "a send_recv step over groups of three members or more",
}


@dataclass(frozen=True)
class Fault:
    """One fault: its kind, the index of the plan action it strikes, (wrong-slice) the slice run instead, and the piece it strikes."""

    kind: FaultKind
    action: int
    slice: tuple[Cell, ...] = ()
    piece: int = 0  # of a pipelined program: the last of its `pieces` (numbered from 0)
    pieces: int = 1

    def describe(self, placement: Placement, plan: LayoutPlan) -> str:
        """Where the fault strikes, in words, e.g. ``at RS(data@core): rank 0 drops its contribution``."""
        action = plan.actions[self.action]
        where = action.step.text(placement) if isinstance(action, Exchange) else f"repack {self.action + 1}"
        what = {
            FaultKind.SWAP_CHUNKS: f"rank {VICTIM} swaps its first and last chunk before it",
            FaultKind.SKIP_REPACK: "the repack keeps the chunk order",
            FaultKind.REVERSE_BLOCKS: "block order reversed",
            FaultKind.DROP_CONTRIBUTION: f"rank {VICTIM} contributes zeros",
            FaultKind.DOUBLE_CONTRIBUTION: f"rank {VICTIM} contributes twice",
            FaultKind.WRONG_SLICE: "run over " + ",".join("@".join(placement.cell_name(c)) for c in self.slice),
            FaultKind.WRONG_NEIGHBOUR: "every rank sends to its predecessor",
        }[self.kind]
        piece = f" in piece {self.piece} of {self.pieces}" if self.pieces > 1 else ""
        return f"at {where}{piece}: {what}"


def place_fault(kind: FaultKind, placement: Placement, request: Request, plan: LayoutPlan, pieces: int = 1) -> Fault | None:
    """The fault of `kind` for the program laid out by `plan` and run on `pieces` pieces: at the first action it
    applies to, in the last piece; None if none."""
    where = _first_site(kind, placement, request, plan)
    if where is None:
        return None
    index, other = where
    return Fault(kind, index, other, pieces - 1, pieces)


def _first_site(kind: FaultKind, placement: Placement, request: Request, plan: LayoutPlan) -> tuple[int, tuple[Cell, ...]] | None:
    """The index of the first action of `plan` that `kind` applies to, with the slice a wrong-slice runs instead."""
    for index, action in enumerate(plan.actions):
        if kind is FaultKind.SKIP_REPACK:
            if isinstance(action, Transpose):
                return index, ()
            continue
        if not isinstance(action, Exchange):
            continue
        op = action.step.op
        if kind is FaultKind.SWAP_CHUNKS and held_chunks(placement, action.before) >= 2:
            return index, ()
        if kind is FaultKind.REVERSE_BLOCKS and op in BLOCK_ORDER_OPS:
            return index, ()
        if kind in (FaultKind.DROP_CONTRIBUTION, FaultKind.DOUBLE_CONTRIBUTION) and op in SUMMING_OPS:
            return index, ()
        if kind is FaultKind.WRONG_NEIGHBOUR and op is Collective.SEND_RECV and placement.group_size(action.step.slice) >= 3:
            return index, ()
        if kind is FaultKind.WRONG_SLICE:
            other = other_slice(placement, request, action.step.slice, op)
            if other is not None:
                return index, other
    return None


def other_slice(placement: Placement, request: Request, slice_: tuple[Cell, ...], op: Collective) -> tuple[Cell, ...] | None:
    """The slice a wrong-slice fault runs instead of `slice_`: same group size first; None if there is none."""
    cells = request.reduced_cells(placement)
    size = placement.group_size(slice_)
    others = [s for n in range(1, len(cells) + 1) for s in combinations(cells, n) if s != slice_]
    same = [s for s in others if placement.group_size(s) == size]
    if same:
        return same[0]
    if op in BLOCK_OPS or not others:
        return None
    return others[0]




Call = Callable[[], None]


@dataclass(frozen=True)
class Struck:
    """One step hit by a fault on this rank: local calls before the collective, its buffers, local calls once it is done."""

    before: tuple[Call, ...]
    src: Any
    dst: Any
    after: tuple[Call, ...]


def faulty_exchange(
    fault: Fault, backend: Backend, src: Any, dst: Any, *,
    op: Collective, blocks: int, chunk: int, reads_input: bool, rank: int,
) -> Struck:
    """What one step hit by `fault` runs on this rank, the step's collective going from `src` into `dst` unless the fault says otherwise.

    `blocks` is the step's group size, `chunk` the chunk length in elements,
    `reads_input` whether `src` is the input buffer (which must survive the run).
    """
    kind = fault.kind
    if kind is FaultKind.REVERSE_BLOCKS:
        if op is Collective.REDUCE_SCATTER:
            return Struck((lambda: reverse_blocks(src, blocks),), src, dst, (lambda: reverse_blocks(src, blocks),))
        return Struck((), src, dst, (lambda: reverse_blocks(dst, blocks),))
    if rank != VICTIM or kind in (FaultKind.WRONG_SLICE, FaultKind.WRONG_NEIGHBOUR):  # the executor runs these
        return Struck((), src, dst, ())
    if kind is FaultKind.SWAP_CHUNKS:
        swap = lambda: swap_ends(src, chunk)  # noqa: E731
        return Struck((swap,), src, dst, (swap,) if reads_input else ())
    contribution = backend.empty(src.size, src.dtype)
    if kind is FaultKind.DROP_CONTRIBUTION:
        backend.fill(contribution, 0)
        return Struck((), contribution, dst, ())
    return Struck((lambda: double_into(contribution, src),), contribution, dst, ())  # double-contribution


class BackwardShift:
    """A group whose send_recv shifts the wrong way (the wrong-neighbour fault): member ``i`` sends to ``i - 1``.
    Every other call goes to the group as it is."""

    def __init__(self, group: Any):
        self.group = group

    def send_recv(self, src: Any, dst: Any, **kwargs: Any) -> Any:
        """The shift with ``step = -1`` (blocking, non-blocking or on a stream, as asked)."""
        return self.group.send_recv(src, dst, step=-1, **kwargs)

    def start(self, op: Collective, src: Any, dst: Any) -> Any:
        """The non-blocking shift (numpy's HostLane starts a pipelined step through this)."""
        return self.send_recv(src, dst, nonblocking=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.group, name)


def swap_ends(buf: Any, chunk: int) -> None:
    """Exchange the first and the last `chunk` elements of `buf`, in place."""
    first = buf[:chunk].copy()
    buf[:chunk] = buf[-chunk:]
    buf[-chunk:] = first


def reverse_blocks(buf: Any, blocks: int) -> None:
    """Reverse the order of the `blocks` equal blocks of `buf`, in place."""
    view = buf.reshape(blocks, -1)
    view[...] = view[::-1].copy()


def double_into(out: Any, src: Any) -> None:
    """``out = src + src`` (wrapping for integers)."""
    out[...] = src
    out += src
