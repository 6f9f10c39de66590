"""Folding interchangeable cells: when a search may run over orbits (``hierarchies/orbitspace.py``), and its check.

Cells with the same level and factor look alike to both cost models, so
permuting them inside their class should keep every step's cost. The search
over orbit states relies on exactly that, so it is checked, never assumed
(:func:`check_invariance`): every concrete step case the cost model can be
asked for (an op, its slice, the scattered and rooted cells; nothing else
enters a step's cost) is evaluated and compared with the same case with each
class's cells sorted, which lies in the same orbit. The values compared are
everything the search reads: the model's :class:`~solver.cost.Split` (latency,
per-level traffic, the busiest level, every other schedule's latency and traffic), from
which every piece count's step cost is computed. Equal within 1e-12 relative,
as the unfolded search's own symmetry check (``solver.pipelined_certificate``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from p2synth.hierarchies.orbitspace import Classes
from p2synth.hierarchies.program import Collective, RawProgram
from p2synth.hierarchies.statespace import STATUS_BITS, moves, statuses
from p2synth.encodings.deadline import Deadline
from p2synth.encodings.errors import SolverTimeout
from p2synth.solver.certificate import CertificateError
from p2synth.solver.algebra import ARRAYS, OP_CODES
from p2synth.solver.topn import Candidates

CHUNK = 1 << 19  # concrete cases evaluated at once by check_invariance


def cell_classes(cells: Sequence[tuple[int, int]]) -> Classes:
    """The reduced cells (``(level, factor)`` each, in order) grouped by equal level and factor, each class ascending,
    the classes by their first cell."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, cell in enumerate(cells):
        groups.setdefault(cell, []).append(i)
    return tuple(sorted((tuple(g) for g in groups.values()), key=lambda g: g[0]))


def folds(classes: Classes) -> bool:
    """Whether some class holds two or more cells (otherwise the orbit space is the state space)."""
    return any(len(cls) > 1 for cls in classes)


def _options(collective: Collective) -> list[tuple[bool, bool]]:
    """The (scattered, rooted) bits a cell outside a step's slice can have in a `collective` request."""
    return sorted({STATUS_BITS[s][1:3] for s in statuses(collective)})


def check_invariance(split, collective: Collective, classes: Classes, deadline: Deadline | None = None) -> int:
    """Check that the cost model's `split` (``AlphaBeta.split``, in the search's cell order) gives every concrete step
    case the same values as the case with each class's cells sorted; CertificateError naming the first that differs.
    Returns how many cases were compared.

    A case gives each cell a digit: 0, in the slice (so in the op's source
    status); ``1 + k``, outside it with the ``k``-th of the (scattered,
    rooted) bits the collective's statuses have. Every case with a non-empty
    slice, for every op, is compared; within a class, sorting the digits is a
    permutation of its cells, and the sorted cases are evaluated once.
    """
    deadline = deadline or Deadline(None)
    C = sum(len(cls) for cls in classes)
    options = _options(collective)
    B = 1 + len(options)
    powers = B ** np.arange(C, dtype=np.int64)
    canonical = _canonical_codes(classes, B)
    ops = [(move, STATUS_BITS[move.source][1:3]) for move in moves(collective)]
    reference = [_values(split, OP_CODES[m.op], _digits(canonical, powers, B), inside, options) for m, inside in ops]
    compared = 0
    for lo in range(0, B ** C, CHUNK):
        if deadline.expired():
            raise SolverTimeout("the check of interchangeable cells")
        digits = _digits(np.arange(lo, min(lo + CHUNK, B ** C), dtype=np.int64), powers, B)
        digits = digits[:, (digits == 0).any(axis=0)]
        if not digits.shape[1]:
            continue
        position = np.searchsorted(canonical, _sorted_in_classes(digits, classes, powers))
        for (move, inside), values in zip(ops, reference):
            got, want = _values(split, OP_CODES[move.op], digits, inside, options), values[:, position]
            differ = np.flatnonzero((got != want).any(axis=0))
            close = np.isclose(got[:, differ], want[:, differ], rtol=1e-12, atol=0.0).all(axis=0)
            if not close.all():
                bad = differ[~close][0]
                raise CertificateError(f"permuting interchangeable cells {classes} changes the cost of a "
                                       f"{move.op.short} step (case {digits[:, bad].tolist()})")
            compared += digits.shape[1]
    return compared


def _digits(codes: np.ndarray, powers: np.ndarray, B: int) -> np.ndarray:
    """(cells, cases): each cell's digit of every case."""
    return (codes[None, :] // powers[:, None] % B).astype(np.int8)


def _sorted_in_classes(digits: np.ndarray, classes: Classes, powers: np.ndarray) -> np.ndarray:
    """The code of each case (columns of `digits`) with the digits of every class sorted ascending over its cells."""
    out = np.zeros(digits.shape[1], dtype=np.int64)
    for cls in classes:
        out += powers[list(cls)] @ np.sort(digits[list(cls)], axis=0)
    return out


def _canonical_codes(classes: Classes, B: int) -> np.ndarray:
    """Every case whose digits are sorted within each class, ascending (empty slices included: never looked up)."""
    per_class = []
    for cls in classes:
        per_class.append([sum(d * B ** i for d, i in zip(ds, cls))
                          for ds in itertools.combinations_with_replacement(range(B), len(cls))])
    return np.sort(np.array([sum(parts) for parts in itertools.product(*per_class)], dtype=np.int64))


def _values(split, op_code: int, digits: np.ndarray, inside: tuple[bool, bool],
            options: list[tuple[bool, bool]]) -> np.ndarray:
    """The model's split of each case (columns of `digits`; rows out: latency, each level's traffic, busiest, then
    each other schedule's latency and busiest)."""
    S = digits == 0
    out = np.maximum(digits - 1, 0)
    Y = np.where(S, inside[0], np.array([o[0] for o in options])[out])
    Z = np.where(S, inside[1], np.array([o[1] for o in options])[out])
    n = digits.shape[1]
    found = split(ARRAYS, np.full(n, op_code), list(S), list(Y), list(Z))
    rows = [found.latency, *found.traffic, found.busiest, *(v for other in found.others for v in other)]
    return np.stack([np.broadcast_to(np.asarray(r, dtype=np.float64), (n,)) for r in rows])


def lifted(kept: Sequence[tuple[RawProgram, int, float]], space, top: int) -> list[tuple[RawProgram, int, float]]:
    """The concrete programs above the orbit programs `kept` (``OrbitSpace.lifts``), each at its orbit program's piece
    count and cost, cut to those within the `top`-th cheapest concrete program's bound (ties kept): exactly what the
    unfolded search keeps, since each orbit program's lifts cost what it costs."""
    candidates = Candidates(top)
    for raw, pieces, cost in kept:
        for program in space.lifts(raw):
            candidates.offer(program, pieces, cost)
    return candidates.kept()


def case_count(collective: Collective, cells: int) -> int:
    """How many concrete step cases :func:`check_invariance` compares for `cells` reduced cells."""
    B = 1 + len(_options(collective))
    return len(moves(collective)) * (B ** cells - (B - 1) ** cells)

