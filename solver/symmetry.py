"""Interchangeable reduced cells: one program per orbit in the pipelined search, and the orbits back.

Two reduced cells at the same level with the same factor (say ``dp`` and ``tp``
both 2-way across pods) look alike to the cost model: swapping them in every
step of a program gives a program of the same predicted time. The group ``G``
of such swaps (all permutations within each class of equal cells) splits the
programs into orbits of equal cost, so a search needs one program per orbit:
its *leader*, the least of the orbit when programs are compared step by step
by their slice masks (bit ``i`` for cell ``i``).

A program leads exactly when, within each class, every cell appears in the
steps at least as early as the next cell of the class: comparing the two
cells' membership vectors (1 where a step's slice holds the cell) with 1
before 0, the lower-numbered cell's comes first or ties. Sorting the cells of
a class by that vector is what minimises the masks, first step first, and the
classes occupy different bits. So it is enough to look at the *pairs* of
consecutive cells of each class (:func:`class_pairs`), and a prefix that
breaks a pair can never be extended into a leader: the search prunes it
(``solver.pipelined.cheapest_pipelined_all``) and lists each leader's whole
orbit (:func:`orbit`). Which pairs really are symmetries of the step costs is
not assumed: ``solver.pipelined_certificate.check_symmetry`` checks it on every
step in every state, and only the pairs that pass are used.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from p2synth.hierarchies.program import RawProgram

Pair = tuple[int, int]


def class_pairs(cells: Sequence[tuple[int, int]]) -> tuple[Pair, ...]:
    """The consecutive cells ``(a, b)``, ``a < b``, of each class of reduced cells with equal (level, factor) `cells`."""
    last: dict[tuple[int, int], int] = {}
    pairs = []
    for i, cell in enumerate(cells):
        if cell in last:
            pairs.append((last[cell], i))
        last[cell] = i
    return tuple(pairs)


def swap_mask(mask: int, pair: Pair) -> int:
    """`mask` with the bits of the two cells of `pair` exchanged."""
    a, b = pair
    bit_a, bit_b = mask >> a & 1, mask >> b & 1
    return mask if bit_a == bit_b else mask ^ (1 << a) ^ (1 << b)


def orbit(program: RawProgram, pairs: Sequence[Pair]) -> list[RawProgram]:
    """Every program obtained from `program` by swapping cells of `pairs` (the swaps generate the whole group),
    `program` first, each once."""
    seen = {program: None}
    todo = [program]
    while todo:
        p = todo.pop()
        for pair in pairs:
            q = tuple((op, swap_mask(m, pair)) for op, m in p)
            if q not in seen:
                seen[q] = None
                todo.append(q)
    return list(seen)


def pair_bits(masks: np.ndarray, pairs: Sequence[Pair]) -> tuple[np.ndarray, np.ndarray]:
    """Per mask of `masks`, as bits over `pairs` (bit ``k`` for ``pairs[k]``): where the slice holds the pair's second
    cell and not its first (`breaks`: a step that breaks the pair while its cells are still tied), and where it holds
    one of the two (`splits`: after it the pair is no longer tied)."""
    breaks = np.zeros(masks.shape, dtype=np.int64)
    splits = np.zeros(masks.shape, dtype=np.int64)
    for k, (a, b) in enumerate(pairs):
        in_a, in_b = masks >> a & 1, masks >> b & 1
        breaks |= (in_b & (1 - in_a)) << k
        splits |= (in_a ^ in_b) << k
    return breaks, splits


def all_tied(pairs: Sequence[Pair]) -> int:
    """Every pair tied: the empty program's."""
    return (1 << len(pairs)) - 1
