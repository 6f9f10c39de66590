"""Input data and its exact expected results, in closed form.

Every rank fills its input with small integers that depend on its rank and on
the element index::

    f(rank, i) = 1 + (i mod 31) + 32 * (rank mod p)

with the rank period ``p`` chosen so that a sum over a whole reduction group
stays below 2**24 and is therefore exact in float32 (whatever the order of the
additions). The sum over a group is then, in closed form,
``G * (1 + i mod 31) + 32 * sum(rank mod p for rank in group)``.

Chunk order is the canonical one (DESIGN.md section 3): chunk ``k`` of the
buffer belongs to the group member whose reduced coordinate, read as a
mixed-radix number over the reduced cells in cell order, is ``k``.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import numpy as np

from hierarchies.placement import Placement
from hierarchies.program import Collective, Request

DTYPE = np.float32
ITEMSIZE = np.dtype(DTYPE).itemsize
EXACT_LIMIT = 2**24  # float32 represents every integer up to here
INDEX_PERIOD = 31
RANK_STRIDE = 32  # > INDEX_PERIOD, so rank and index terms never blur


@dataclass(frozen=True)
class Group:
    """A rank's reduction group: its members in chunk order, and the rank's own position."""

    members: tuple[int, ...]
    position: int

    @property
    def root(self) -> int:
        """The member with reduced coordinate 0."""
        return self.members[0]


def reduction_group(placement: Placement, request: Request, rank: int) -> Group:
    """The reduction group of `rank`, members ordered by their reduced coordinate."""
    cells = request.reduced_cells(placement)
    digits = placement.digits(rank)
    members = tuple(
        placement.rank_of_digits({**digits, **dict(zip(cells, chunk))})
        for chunk in product(*(range(placement.factor(c)) for c in cells))
    )
    return Group(members, members.index(rank))


def rank_period(group_size: int, world_size: int) -> int:
    """The rank period ``p`` that keeps every group sum exact in float32.

    Raises ValueError for groups so large that even ``p = 1`` overflows.
    """
    period = min(world_size, EXACT_LIMIT // (RANK_STRIDE * group_size))
    if period < 1:
        raise ValueError(f"a reduction group of {group_size} devices is too large for an exact float32 check")
    return period


def values(rank: int, count: int, period: int) -> np.ndarray:
    """``f(rank, i)`` for ``i`` in ``0..count-1``."""
    i = np.arange(count, dtype=np.int64)
    return (1 + i % INDEX_PERIOD + RANK_STRIDE * (rank % period)).astype(DTYPE)


def group_sum(group: Group, start: int, count: int, period: int) -> np.ndarray:
    """Elements ``start..start+count-1`` of the sum of the group's inputs, in closed form."""
    i = np.arange(start, start + count, dtype=np.int64)
    rank_term = RANK_STRIDE * sum(r % period for r in group.members)
    return (len(group.members) * (1 + i % INDEX_PERIOD) + rank_term).astype(DTYPE)


def send_count(collective: Collective, count: int, group_size: int) -> int:
    """Elements of a rank's input: one chunk for all_gather, else the whole message."""
    return count // group_size if collective is Collective.ALL_GATHER else count


def recv_count(collective: Collective, count: int, group_size: int) -> int:
    """Elements of a rank's output: one chunk for reduce_scatter, else the whole message."""
    return count // group_size if collective is Collective.REDUCE_SCATTER else count


def input_values(collective: Collective, group: Group, rank: int, count: int, period: int) -> np.ndarray:
    """What `rank` puts in its send buffer for a message of `count` elements."""
    return values(rank, send_count(collective, count, len(group.members)), period)


def expected_values(collective: Collective, group: Group, count: int, period: int) -> np.ndarray | None:
    """What this rank's receive buffer must hold afterwards; None where nothing is checked.

    Only the root is checked after a reduce (the others' buffers are undefined).
    """
    size = len(group.members)
    chunk = count // size
    if collective is Collective.ALL_REDUCE:
        return group_sum(group, 0, count, period)
    if collective is Collective.REDUCE:
        return group_sum(group, 0, count, period) if group.position == 0 else None
    if collective is Collective.REDUCE_SCATTER:
        return group_sum(group, group.position * chunk, chunk, period)
    if collective is Collective.ALL_GATHER:
        return np.concatenate([values(owner, chunk, period) for owner in group.members])
    return values(group.root, count, period)  # broadcast


def element_count(nbytes: int, group_size: int) -> int:
    """Elements of a message of about `nbytes`: rounded down to a whole number of chunks.

    Raises ValueError when the message holds less than one element per chunk.
    """
    count = nbytes // ITEMSIZE // group_size * group_size
    if count == 0:
        raise ValueError(f"{nbytes} bytes is less than one float32 per chunk for {group_size} chunks")
    return count
