"""The abstract state space folded by interchangeable cells: one state per orbit, one step per orbit of steps.

Split the reduced cells into *classes* (``classes``: a partition of the cell
indices). Permuting the cells inside each class maps abstract states to states
and steps to steps (``hierarchies/statespace.py``: validity and moves depend on
each cell's own status only). An *orbit state* records, per class, how many of
its cells have each status (a composition of the class's size); an *orbit step*
``(op, m)`` takes ``m[c]`` cells of class ``c`` that are in the op's source
status and moves them to its target status. Then, for every concrete state
``s`` with orbit ``q(s)``:

* a concrete step ``(op, S)`` is valid in ``s`` exactly when the orbit step
  ``(op, m)``, ``m[c] = |S & class c|``, is valid in ``q(s)`` (every cell of
  ``S`` has the source status, so each class has at least ``m[c]`` of them),
  and it leads to a state whose orbit is the orbit step's target (the moved
  cells change status, the counts with them);
* conversely every orbit step valid in ``q(s)`` has a concrete step valid in
  ``s`` above it: any ``m[c]`` of the class's cells in the source status.

So the concrete programs map onto the orbit programs step by step
(:meth:`OrbitSpace.image`), and the concrete programs above one orbit program
are exactly its lifts (:meth:`OrbitSpace.lifts`): every way of choosing the
cells at each step. A cost that is the same on every step of an orbit
(checked, ``solver/folding.py``) is then the same on every lift, and a search
over orbit programs ranks the concrete ones (docs/model.md, "Folding
interchangeable cells"). ``tests/test_orbitspace.py`` checks both directions
against the unfolded space on random class structures.

An orbit state's index is mixed-radix over the classes (class 0 least
significant), each digit the index of the class's composition. An orbit
step's cost is read at one concrete step of its orbit
(:meth:`OrbitSpace.case_keys`). Steps are identified in programs by ``(op,
code)``, ``code`` the mixed-radix number of ``m`` (radix ``len(class) + 1``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from p2synth.hierarchies.program import Collective, RawProgram
from p2synth.hierarchies.statespace import Status, goal_statuses, index_dtype, moves, statuses

Classes = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class OrbitStep:
    """One orbit step ``(op, m)``: `counts[c]` cells of class ``c`` move from status `source` to `target`; the
    states it is valid in (`sources`, ascending) and where each goes (`targets`). `mask` is its code."""

    op: Collective
    mask: int
    counts: tuple[int, ...]
    source: Status
    target: Status
    sources: np.ndarray
    targets: np.ndarray


def compositions(total: int, parts: int) -> list[tuple[int, ...]]:
    """Every way to write `total` as an ordered sum of `parts` non-negative counts, in lexicographic order."""
    if parts == 1:
        return [(total,)]
    return [(first,) + rest for first in range(total + 1) for rest in compositions(total - first, parts - 1)]


class OrbitSpace:
    """The orbit states and orbit steps of a `collective` request whose reduced cells fall into `classes`.

    Has the face of :class:`~hierarchies.statespace.StateSpace` the explicit
    search uses (``size``, ``start``, ``goal``, ``steps``, :meth:`case_keys`).
    """

    def __init__(self, collective: Collective, classes: Classes):
        cells = sorted(c for cls in classes for c in cls)
        if not classes or cells != list(range(len(cells))) or any(not cls for cls in classes):
            raise ValueError(f"the classes {classes} do not partition the cells 0..n-1")
        self.collective = collective
        self.classes = tuple(tuple(sorted(cls)) for cls in classes)
        self.cells = len(cells)
        self.statuses = statuses(collective)
        R = len(self.statuses)
        self._comps = [tuple(compositions(len(cls), R)) for cls in self.classes]
        self._stride = np.cumprod([1] + [len(c) for c in self._comps[:-1]]).astype(np.int64)
        self.size = int(math.prod(len(c) for c in self._comps))
        index = np.arange(self.size, dtype=np.int64)
        self._digits = [(index // self._stride[c]) % len(comps) for c, comps in enumerate(self._comps)]
        # counts[c][s][i]: how many cells of class c have status s in orbit state i
        self._counts = [np.asarray(comps, dtype=np.int64)[d].T for comps, d in zip(self._comps, self._digits)]

    # -- states ------------------------------------------------------------
    def count(self, status: Status) -> list[np.ndarray]:
        """Per class, per orbit state, how many of its cells have `status` (zeros where the collective has none)."""
        if status not in self.statuses:
            return [np.zeros(self.size, dtype=np.int64) for _ in self.classes]
        s = self.statuses.index(status)
        return [counts[s] for counts in self._counts]

    @property
    def start(self) -> int:
        """The start state: every cell in the collective's first status (each class's first composition)."""
        return self.orbit_of([0] * self.cells)

    @cached_property
    def goal(self) -> np.ndarray:
        """Per orbit state, whether it meets the request's goal (every cell in a goal status)."""
        ok = goal_statuses(self.collective)
        bad = [s for s in self.statuses if s not in ok]
        return np.all([sum(self.count(s)[c] for s in bad) == 0 for c in range(len(self.classes))], axis=0)

    def orbit_of(self, digits: Sequence[int]) -> int:
        """The orbit state of a concrete state given by each cell's status index (``statuses[d]``)."""
        out = 0
        for c, cls in enumerate(self.classes):
            counts = tuple(sum(1 for i in cls if digits[i] == s) for s in range(len(self.statuses)))
            out += int(self._stride[c]) * self._comps[c].index(counts)
        return out

    # -- steps -------------------------------------------------------------
    @cached_property
    def steps(self) -> tuple[OrbitStep, ...]:
        """Every orbit step with the orbit states it is valid in, moves in MOVES order, then by code."""
        out = []
        radices = self._radices
        codes = [_digits_of(code, radices) for code in range(math.prod(radices))]
        for move in moves(self.collective):
            s, t = self.statuses.index(move.source), self.statuses.index(move.target)
            # the states by how many cells of each class are in the source status (a code: what a step can take)
            room = sum(counts[s] * math.prod(radices[:c]) for c, counts in enumerate(self._counts))
            order = np.argsort(room, kind="stable")
            bounds = np.searchsorted(room[order], np.arange(len(codes) + 1))
            for code in range(1, len(codes)):
                m = codes[code]
                fits = [r for r, n in enumerate(codes) if all(a >= b for a, b in zip(n, m)) and bounds[r] < bounds[r + 1]]
                if fits:
                    sources = np.sort(np.concatenate([order[bounds[r]:bounds[r + 1]] for r in fits]))
                    out.append(OrbitStep(move.op, code, m, move.source, move.target, sources,
                                         self._moved(sources, m, s, t)))
        narrow = index_dtype(sum(step.sources.size for step in out))  # the steps' sources and targets are the rows
        return tuple(dataclasses.replace(step, sources=step.sources.astype(narrow, copy=False),
                                         targets=step.targets.astype(narrow, copy=False)) for step in out)

    def _moved(self, sources: np.ndarray, m: tuple[int, ...], s: int, t: int) -> np.ndarray:
        """The orbit states `sources` reach when `m[c]` cells of each class go from status index `s` to `t`."""
        targets = sources.copy()
        for c, k in enumerate(m):
            if k:
                lookup = _shift_table(self._comps[c], s, t, k)
                digit = self._digits[c][sources]
                targets += (lookup[digit] - digit) * self._stride[c]
        return targets

    def case_keys(self, j: int) -> np.ndarray:
        """Per source state of step `j`, the concrete case its cost is read at (``solver.stepcosts.step_cases``):
        ``scattered | rooted << C | slice << 2C`` of one concrete step in its orbit. In each class, its first ``m[c]``
        cells are the slice, the next its other scattered cells, then its other rooted ones; so two orbit states
        that differ only in how many cells are untouched or summed (which no cost reads) share their cases."""
        step = self.steps[j]
        scattered, rooted = self.count(Status.SCATTERED), self.count(Status.ROOTED)
        S = Y = Z = np.zeros(step.sources.size, dtype=np.int64)
        for c, (cls, k) in enumerate(zip(self.classes, step.counts)):
            table = _prefix_masks(cls)
            y = scattered[c][step.sources] - (k if step.source is Status.SCATTERED else 0)
            z = rooted[c][step.sources] - (k if step.source is Status.ROOTED else 0)
            S = S | table[k]
            Y = Y | (table[k + y] & ~table[k]) | (table[k] if step.source is Status.SCATTERED else 0)
            Z = Z | (table[k + y + z] & ~table[k + y]) | (table[k] if step.source is Status.ROOTED else 0)
        return Y | Z << self.cells | S << 2 * self.cells

    @cached_property
    def _step_index(self) -> dict[tuple[Collective, int], OrbitStep]:
        return {(s.op, s.mask): s for s in self.steps}

    # -- programs ----------------------------------------------------------
    @cached_property
    def _radices(self) -> list[int]:
        """Per class, the radix of its digit in a step's code: how many of its cells a step may take, plus one."""
        return [len(cls) + 1 for cls in self.classes]

    def image(self, program: RawProgram) -> RawProgram:
        """The orbit program of a concrete program: each step ``(op, S)`` as ``(op, code of |S & class c|)``."""
        radices = self._radices
        out = []
        for op, mask in program:
            m = [sum(mask >> i & 1 for i in cls) for cls in self.classes]
            out.append((op, sum(k * math.prod(radices[:c]) for c, k in enumerate(m))))
        return tuple(out)

    def lifts(self, program: RawProgram) -> Iterator[RawProgram]:
        """Every concrete program above the orbit program `program`: at each step, every choice of ``m[c]`` cells of
        each class among those in the step's source status (ValueError for a step that is not an orbit step)."""
        yield from self._lift(program, [0] * self.cells, ())

    def _lift(self, program: RawProgram, digits: list[int], done: RawProgram) -> Iterator[RawProgram]:
        if not program:
            yield done
            return
        (op, code), rest = program[0], program[1:]
        step = self._step_index.get((op, code))
        if step is None:
            raise ValueError(f"({op.short}, {code}) is not an orbit step")
        s, t = self.statuses.index(step.source), self.statuses.index(step.target)
        choices = [itertools.combinations([i for i in cls if digits[i] == s], k)
                   for cls, k in zip(self.classes, step.counts)]
        for chosen in itertools.product(*(list(c) for c in choices)):
            cells = [i for group in chosen for i in group]
            moved = list(digits)
            for i in cells:
                moved[i] = t
            yield from self._lift(rest, moved, done + ((op, sum(1 << i for i in cells)),))


def _digits_of(code: int, radices: Sequence[int]) -> tuple[int, ...]:
    """`code` as mixed-radix digits, least significant first."""
    out = []
    for r in radices:
        out.append(code % r)
        code //= r
    return tuple(out)


@lru_cache(maxsize=256)
def _prefix_masks(cls: tuple[int, ...]) -> np.ndarray:
    """``table[n]``: the mask of the first `n` cells of the class (ascending)."""
    return np.array([sum(1 << i for i in cls[:n]) for n in range(len(cls) + 1)], dtype=np.int64)


@lru_cache(maxsize=1024)
def _shift_table(comps: tuple, s: int, t: int, k: int) -> np.ndarray:
    """Per composition index, the index after `k` counts move from part `s` to part `t` (-1 where part `s` < k)."""
    index = {c: i for i, c in enumerate(comps)}
    out = np.full(len(comps), -1, dtype=np.int64)
    for i, c in enumerate(comps):
        if c[s] >= k:
            moved = list(c)
            moved[s] -= k
            moved[t] += k
            out[i] = index[tuple(moved)]
    return out


@lru_cache(maxsize=64)
def orbit_space(collective: Collective, classes: Classes) -> OrbitSpace:
    """The (cached) orbit space of a `collective` request with reduced cells in `classes`."""
    return OrbitSpace(collective, classes)
