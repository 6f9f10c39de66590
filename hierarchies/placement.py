"""Axes, placements (parallelism matrices), cells, and device digits.

A placement is a matrix ``P[a][l] >= 1`` with row products equal to the axis
sizes and column products equal to the level counts. At level ``l`` the
coordinate ``c_l`` splits mixed-radix into one digit per axis (axes in declared
order, first most significant, radix ``P[a][l]``); an axis coordinate is the
mixed-radix number of its digits over the levels (level 0 most significant).
A *cell* is a pair ``(axis, level)`` with ``P[a][l] > 1``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from itertools import product
from typing import Iterator

from pydantic import BaseModel, ConfigDict, Field

from p2synth.hierarchies.model import NAME_PATTERN, Hierarchy


class Axis(BaseModel):
    """A named parallelism axis (data, tensor, pipeline, expert...) of `size` devices."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN, description="axis name, e.g. data, model")
    size: int = Field(gt=0, description="number of devices along this axis")


@dataclass(frozen=True, order=True)
class Cell:
    """One factor of a placement: axis index `axis` placed at level index `level`."""

    axis: int
    level: int


Matrix = tuple[tuple[int, ...], ...]


class PlacementError(ValueError):
    """A matrix that is not a placement of the axes on the hierarchy."""


@dataclass(frozen=True)
class Placement:
    """Axes placed on a hierarchy by a parallelism matrix (rows: axes, columns: levels)."""

    hierarchy: Hierarchy
    axes: tuple[Axis, ...]
    matrix: Matrix
    _digits: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        rows, cols = len(self.axes), len(self.hierarchy.levels)
        if len(self.matrix) != rows or any(len(r) != cols for r in self.matrix):
            raise PlacementError(f"matrix must be {rows}x{cols} (axes x levels)")
        if any(v < 1 for r in self.matrix for v in r):
            raise PlacementError("matrix entries must be >= 1")
        for ax, row in zip(self.axes, self.matrix):
            if math.prod(row) != ax.size:
                raise PlacementError(f"row of axis {ax.name!r} multiplies to {math.prod(row)}, not its size {ax.size}")
        for li, lv in enumerate(self.hierarchy.levels):
            col = math.prod(r[li] for r in self.matrix)
            if col != lv.count:
                raise PlacementError(f"column of level {lv.name!r} multiplies to {col}, not its count {lv.count}")

    # -- cells -----------------------------------------------------------
    @cached_property
    def cells(self) -> tuple[Cell, ...]:
        """All cells (factors > 1), axis-major then level (row-major over the matrix)."""
        return tuple(
            Cell(a, l) for a in range(len(self.axes)) for l in range(len(self.hierarchy.levels)) if self.matrix[a][l] > 1
        )

    def factor(self, cell: Cell) -> int:
        """The matrix entry of `cell`."""
        return self.matrix[cell.axis][cell.level]

    def group_size(self, cells: tuple[Cell, ...] | list[Cell]) -> int:
        """Members of a group whose slice is `cells`: the product of their factors (1 for none)."""
        return math.prod(self.factor(c) for c in cells)

    def cells_of(self, axes: tuple[int, ...] | frozenset[int]) -> tuple[Cell, ...]:
        """The cells of the given axis indices, in cell order."""
        return tuple(c for c in self.cells if c.axis in axes)

    def cell_name(self, cell: Cell) -> tuple[str, str]:
        """``(axis name, level name)`` of `cell`, as it appears in JSON."""
        return (self.axes[cell.axis].name, self.hierarchy.levels[cell.level].name)

    def cell_from_names(self, axis: str, level: str) -> Cell:
        """The cell called ``[axis, level]``; KeyError if it is not a cell here."""
        names = [a.name for a in self.axes]
        if axis not in names:
            raise KeyError(f"unknown axis {axis!r}")
        cell = Cell(names.index(axis), self.hierarchy.level_index(level))
        if self.factor(cell) == 1:
            raise KeyError(f"[{axis}, {level}] is not a cell of this placement (its factor is 1)")
        return cell

    # -- devices and digits ---------------------------------------------
    @property
    def num_devices(self) -> int:
        """Number of devices of the hierarchy."""
        return self.hierarchy.num_devices

    def digits(self, rank: int) -> dict[Cell, int]:
        """Digit of device `rank` on every cell."""
        cached = self._digits.get(rank)
        if cached is not None:
            return cached
        out: dict[Cell, int] = {}
        for l, c in enumerate(self.hierarchy.coords(rank)):
            for a in reversed(range(len(self.axes))):
                radix = self.matrix[a][l]
                c, d = divmod(c, radix)
                if radix > 1:
                    out[Cell(a, l)] = d
        self._digits[rank] = out
        return out

    def rank_of_digits(self, digits: dict[Cell, int]) -> int:
        """Device rank whose cell digits are `digits` (missing cells count as 0)."""
        coords = []
        for l in range(len(self.hierarchy.levels)):
            c = 0
            for a in range(len(self.axes)):
                radix = self.matrix[a][l]
                c = c * radix + (digits.get(Cell(a, l), 0) if radix > 1 else 0)
            coords.append(c)
        return self.hierarchy.rank(tuple(coords))

    # -- groups under a set of cells ----------------------------------------
    # Under a set of cells, a device's group is every device that agrees with it
    # on all digits except those of the cells. Members are ordered by their
    # digits on the cells, read as a mixed-radix number with the first cell of
    # `cells` most significant: a member's *position*. The *root* is position 0.

    def position(self, rank: int, cells: tuple[Cell, ...]) -> int:
        """Position of device `rank` in its group under `cells`: its digits on `cells`, mixed-radix, first most significant."""
        digits = self.digits(rank)
        out = 0
        for c in cells:
            out = out * self.factor(c) + digits.get(c, 0)
        return out

    def group(self, rank: int, cells: tuple[Cell, ...]) -> tuple[int, ...]:
        """The group of device `rank` under `cells`, members in position order (``group(r, cells)[position(r, cells)] == r``)."""
        digits = self.digits(rank)
        return tuple(
            self.rank_of_digits({**digits, **dict(zip(cells, ks))})
            for ks in product(*(range(self.factor(c)) for c in cells))
        )

    def root(self, rank: int, cells: tuple[Cell, ...]) -> int:
        """The root of the group of device `rank` under `cells`: the member with zero digits on `cells`."""
        return self.rank_of_digits({**self.digits(rank), **{c: 0 for c in cells}})

    def group_index(self, rank: int, cells: tuple[Cell, ...]) -> int:
        """Which group under `cells` device `rank` is in: its digits on the other cells, mixed-radix in cell order.

        Equal for the members of one group, and the groups are numbered
        ``0 .. num_devices / group size - 1`` without gaps.
        """
        return self.position(rank, tuple(c for c in self.cells if c not in cells))

    def axis_coords(self, rank: int) -> tuple[int, ...]:
        """Coordinate of device `rank` along every axis (the bijection of docs/semantics.md section 1)."""
        d = self.digits(rank)
        out = []
        for a in range(len(self.axes)):
            x = 0
            for l in range(len(self.hierarchy.levels)):
                radix = self.matrix[a][l]
                x = x * radix + d.get(Cell(a, l), 0)
            out.append(x)
        return tuple(out)

    def describe(self) -> str:
        """Compact text such as ``data=[node 2, gpu 4] model=[gpu 2]``."""
        parts = []
        for a, ax in enumerate(self.axes):
            cells = [f"{self.hierarchy.levels[l].name} {v}" for l, v in enumerate(self.matrix[a]) if v > 1]
            parts.append(f"{ax.name}=[{', '.join(cells) or '-'}]")
        return " ".join(parts)


def divisors(n: int) -> list[int]:
    """All positive divisors of `n`, ascending."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def enumerate_matrices(sizes: tuple[int, ...], counts: tuple[int, ...]) -> Iterator[Matrix]:
    """Every matrix with row products `sizes` and column products `counts`.

    Plain recursion over divisors, filling row by row; the independent
    enumerator that the Z3 placement encoding is checked against.
    """
    rows, cols = len(sizes), len(counts)
    if math.prod(sizes) != math.prod(counts):
        return

    def fill(a: int, remaining: tuple[int, ...], acc: list[tuple[int, ...]]) -> Iterator[Matrix]:
        if a == rows - 1:
            if math.prod(remaining) == sizes[a]:
                yield tuple(acc) + (remaining,)
            return
        for row in _rows(sizes[a], remaining, 0):
            yield from fill(a + 1, tuple(r // v for r, v in zip(remaining, row)), acc + [row])

    def _rows(size: int, remaining: tuple[int, ...], l: int) -> Iterator[tuple[int, ...]]:
        if l == cols:
            if size == 1:
                yield ()
            return
        for v in divisors(math.gcd(size, remaining[l])):
            for rest in _rows(size // v, remaining, l + 1):
                yield (v,) + rest

    yield from fill(0, tuple(counts), [])
