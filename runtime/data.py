"""Input data and its exact expected results, in closed form: a tag in every element.

Each program runs twice per size. The *check run* (untimed) works on uint64
buffers filled with tagged integers and compares every output element with its
exact expected value; MPI and NCCL sum uint64 modulo 2**64, as numpy does, so
the expected values are exact whatever the order of the additions. The *timed
runs* move float32 buffers of exactly the stated bytes, all inputs 1.0, and
their output is checked too (every element must be the number of summed
inputs). Both runs use the same element count, so the same chunk boundaries.

The tag (docs/runtime.md, "Exact check", gives the argument in full). With
``G`` the reduction group size, ``N`` the world size and ``count`` the message's
elements, rank ``r`` is at position ``p(r)`` of reduction group ``g(r)``
(``0 .. N/G - 1``). Every input element has a *message index* ``j``: element
``e`` of the input, or ``p(r) * chunk + e`` for all_gather (a rank's input is its
chunk of the gathered message); its *global index* is ``J = g(r) * count + j``,
and its value is::

    x(r, e) = (J + 1) + 2**B * t(r)    (mod 2**64)

with ``B = bit_length(2**SPARE_BITS * N * count)`` and ``t(r)`` a fixed
pseudo-random 64-bit number per rank (splitmix64). The low ``B`` bits, the
*index field*, of a sum of ``n`` inputs hold the sum of their ``J + 1``, with no
carry while ``n <= 2**SPARE_BITS * G``; the high bits, the *rank field*, hold
the sum of their ``t`` (mod ``2**(64 - B)``). An expected element is the sum of
``n`` inputs at one global index (``n = G`` for all_reduce, reduce_scatter and
reduce, 1 for all_gather and broadcast), so:

* its index field ``n (J + 1)`` differs from that of every other expected
  element of the run, on any rank, unless both are the same element of the same
  group (the collective's intent); a misplaced element, chunk or block, or one
  from another group, lands with the wrong index field;
* a dropped or doubled contribution changes the index field by the sum of its
  ``J + 1`` (at least 1);
* what keeps the index field (another set of ranks of the same size at the same
  index) changes the rank field unless a sum of pseudo-random tags collides
  (about one chance in ``2**(64 - B)``, and ``64 - B >= MIN_RANK_BITS``).

For all_to_all nothing is summed (``n = 1``): the input is tagged as above, so
chunk ``k`` of rank ``r``'s input, addressed to member ``k``, carries message
indices ``k * chunk ..`` (its *destination*) in the index field and ``t(r)``
(its *source*) in the rank field. Member ``q`` must end with, at place ``i``,
the chunk of member ``i`` addressed to ``q``: a chunk with the wrong
destination (or from another group, or misplaced inside the chunk) has the
wrong index field, one from the wrong source the wrong rank field.

For send_recv (a shift along one axis) nothing is summed either: every rank's
input is tagged as above (the members of one group share the index field,
element by element, and differ in the rank field), and member ``i`` must end
with member ``i - 1``'s input (mod the group size), element for element: a
misplaced element has the wrong index field, a wrong neighbour's buffer the
wrong rank field.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from p2synth.hierarchies.placement import Placement
from p2synth.hierarchies.program import Collective, Request

DTYPE = np.dtype(np.float32)  # the timed runs' elements
ITEMSIZE = DTYPE.itemsize
CHECK_DTYPE = np.dtype(np.uint64)  # the check run's elements
SPARE_BITS = 4  # the index field stays exact for sums of up to 2**SPARE_BITS * G inputs
MIN_RANK_BITS = 16  # the rank field keeps at least this many bits
MASK = (1 << 64) - 1
SUMMING = frozenset({Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.REDUCE})


@dataclass(frozen=True)
class Group:
    """A rank's reduction group: members in chunk order, the rank's position, and which group it is."""

    members: tuple[int, ...]
    position: int
    index: int  # 0 .. number of reduction groups - 1

    @property
    def root(self) -> int:
        """The member with reduced coordinate 0."""
        return self.members[0]

    @property
    def rank(self) -> int:
        """The rank this group was made for."""
        return self.members[self.position]

    @property
    def size(self) -> int:
        """Number of members."""
        return len(self.members)


def reduction_group(placement: Placement, request: Request, rank: int) -> Group:
    """The reduction group of `rank`, members ordered by their reduced coordinate."""
    cells = request.reduced_cells(placement)
    return Group(placement.group(rank, cells), placement.position(rank, cells), placement.group_index(rank, cells))


def rank_tag(rank: int) -> int:
    """``t(rank)``: splitmix64 of the rank, a fixed pseudo-random 64-bit number."""
    z = (rank + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def index_bits(world_size: int, count: int) -> int:
    """``B``, the width of the index field; ValueError when too little is left for the rank field."""
    bits = ((1 << SPARE_BITS) * world_size * count).bit_length()
    if bits > 64 - MIN_RANK_BITS:
        most = ((1 << (64 - MIN_RANK_BITS)) - 1) // ((1 << SPARE_BITS) * world_size)
        raise ValueError(f"a message of {count} elements on {world_size} ranks is too large for the exact check; use at most {most} elements")
    return bits


class CheckData(Protocol):
    """One rank's data for a check run: its input and what its receive buffer must hold afterwards."""

    dtype: np.dtype
    poison: int | float  # what unwritten buffers hold; no expected element equals it

    def input(self) -> np.ndarray:
        """What this rank puts in its send buffer."""

    def expected(self) -> np.ndarray | None:
        """What this rank's receive buffer must hold afterwards; None where nothing is checked."""


@dataclass(frozen=True)
class TaggedData:
    """The tagged uint64 data of one rank for one collective and message (see the module docstring)."""

    collective: Collective
    group: Group
    count: int
    world_size: int
    dtype = CHECK_DTYPE
    poison = 0  # index field 0: every expected element has an index field of at least 1

    @property
    def chunk(self) -> int:
        """Elements per chunk."""
        return self.count // self.group.size

    def _values(self, start: int, stop: int, tags: int, n: int) -> np.ndarray:
        """``n (J + 1) + 2**B tags`` (mod 2**64) for message indices ``start .. stop-1`` of this group."""
        low = self.group.index * self.count + 1 + start
        j = np.arange(stop - start, dtype=CHECK_DTYPE)
        base = (n * low + (tags << index_bits(self.world_size, self.count))) & MASK
        return j * np.uint64(n) + np.uint64(base)

    def input(self) -> np.ndarray:
        """``x(rank, e)`` for every element of this rank's send buffer."""
        tag = rank_tag(self.group.rank)
        if self.collective is Collective.ALL_GATHER:
            start = self.group.position * self.chunk
            return self._values(start, start + self.chunk, tag, 1)
        return self._values(0, self.count, tag, 1)

    def expected(self) -> np.ndarray | None:
        """The exact output of this rank: the group sum, its chunk of it, the owners' chunks, the chunks addressed to it,
        the predecessor's input (send_recv), or the root's input.

        Only the root is checked after a reduce (the others' buffers are undefined).
        """
        group, col = self.group, self.collective
        if col in SUMMING:
            tags = sum(rank_tag(m) for m in group.members)
            if col is Collective.REDUCE_SCATTER:
                start = group.position * self.chunk
                return self._values(start, start + self.chunk, tags, group.size)
            if col is Collective.REDUCE and group.position != 0:
                return None
            return self._values(0, self.count, tags, group.size)
        if col is Collective.ALL_GATHER:
            return np.concatenate([self._values(k * self.chunk, (k + 1) * self.chunk, rank_tag(m), 1) for k, m in enumerate(group.members)])
        if col is Collective.ALL_TO_ALL:  # place k: member k's chunk addressed to this rank
            start = group.position * self.chunk
            return np.concatenate([self._values(start, start + self.chunk, rank_tag(m), 1) for m in group.members])
        if col is Collective.SEND_RECV:  # the predecessor's input
            return self._values(0, self.count, rank_tag(group.members[group.position - 1]), 1)
        return self._values(0, self.count, rank_tag(group.root), 1)  # broadcast


DataFactory = Callable[[Collective, Group, int, int], CheckData]
"""Makes a rank's CheckData from (collective, its group, element count, world size)."""

tagged_data: DataFactory = TaggedData


def timed_input(collective: Collective, group: Group, count: int) -> np.ndarray:
    """The timed runs' float32 input: all ones (the data's values do not change the bytes moved)."""
    return np.ones(send_count(collective, count, group.size), dtype=DTYPE)


def timed_expected(collective: Collective, group: Group) -> float | None:
    """Every element of the timed runs' output: the number of summed inputs; None where nothing is checked."""
    if collective is Collective.REDUCE and group.position != 0:
        return None
    return float(group.size) if collective in SUMMING else 1.0


def send_count(collective: Collective, count: int, group_size: int) -> int:
    """Elements of a rank's input: one chunk for all_gather, else the whole message."""
    return count // group_size if collective is Collective.ALL_GATHER else count


def recv_count(collective: Collective, count: int, group_size: int) -> int:
    """Elements of a rank's output: one chunk for reduce_scatter, else the whole message."""
    return count // group_size if collective is Collective.REDUCE_SCATTER else count


def element_count(nbytes: int, group_size: int, pieces: int = 1) -> int:
    """Elements of a message of about `nbytes`: rounded down to a whole number of chunks, each of `pieces` equal pieces.

    `pieces` is what a pipelined program cuts every chunk into (1: not
    pipelined). Raises ValueError when the message holds less than one element
    per chunk (per piece of a chunk).
    """
    unit = group_size * pieces
    count = nbytes // ITEMSIZE // unit * unit
    if count == 0:
        if pieces == 1:
            raise ValueError(f"{nbytes} bytes is less than one float32 per chunk for {group_size} chunks")
        raise ValueError(f"{nbytes} bytes is less than one float32 per piece for {group_size} chunks in {pieces} pieces")
    return count
