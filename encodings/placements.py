"""Placement enumeration in Z3 (docs/model.md section 2).

A placement is a matrix ``P[a][l]`` with row products the axis sizes and
column products the level counts. Per prime ``p`` the exponents
``e_p[a][l] = v_p(P[a][l])`` satisfy *linear* row and column sums, so the
whole space is a small integer program whose models we enumerate.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache
from typing import Iterator

import z3

from p2synth.encodings.deadline import Deadline

Matrix = tuple[tuple[int, ...], ...]


def prime_factors(n: int) -> dict[int, int]:
    """Prime factorisation of `n` as {prime: exponent}."""
    out: dict[int, int] = {}
    d = 2
    while d * d <= n:
        while n % d == 0:
            out[d] = out.get(d, 0) + 1
            n //= d
        d += 1
    if n > 1:
        out[n] = out.get(n, 0) + 1
    return out


def count_placements(sizes: tuple[int, ...], counts: tuple[int, ...]) -> int:
    """How many placements :func:`enumerate_placements` yields, counted without Z3 (fast at any size).

    Per prime the exponent matrices are independent, so the count is the
    product over primes of the number of non-negative integer matrices whose
    row sums are the exponents of the axis sizes and whose column sums are
    those of the level counts.
    """
    if math.prod(sizes) != math.prod(counts):
        return 0
    size_factors, count_factors = [prime_factors(n) for n in sizes], [prime_factors(n) for n in counts]
    return math.prod(
        _tables(tuple(f[p] for f in size_factors if p in f), tuple(sorted(f[p] for f in count_factors if p in f)))
        for p in set().union(*size_factors, *count_factors)
    )


@lru_cache(maxsize=None)
def _tables(rows: tuple[int, ...], columns: tuple[int, ...]) -> int:
    """Non-negative integer matrices with row sums `rows` and column sums `columns` (sorted, no zeros)."""
    if not rows:
        return int(not columns)
    return sum(ways * _tables(rows[1:], left) for left, ways in _row_fills(rows[0], columns).items())


def _row_fills(total: int, columns: tuple[int, ...]) -> dict[tuple[int, ...], int]:
    """The ways one row takes `total` from `columns` (each at most its value), keyed by the columns left.

    Columns of equal value are interchangeable: a group of them is split by
    how many give 0, 1, 2, ... (a multinomial number of ways), not column by
    column, so the work stays small even with dozens of levels.
    """
    fills: dict[tuple[tuple[int, ...], int], int] = {((), 0): 1}  # (columns left, taken so far) -> ways
    for value, many in Counter(columns).items():
        grown: dict[tuple[tuple[int, ...], int], int] = {}
        for (left, taken), ways in fills.items():
            for split, split_ways in _splits(many, min(value, total - taken)):
                more = sum(k * n for k, n in enumerate(split))
                if taken + more > total:
                    continue
                key = (left + tuple(value - k for k, n in enumerate(split) for _ in range(n) if k < value), taken + more)
                grown[key] = grown.get(key, 0) + ways * split_ways
        fills = grown
    out: dict[tuple[int, ...], int] = {}
    for (left, taken), ways in fills.items():
        if taken == total:
            out[tuple(sorted(left))] = out.get(tuple(sorted(left)), 0) + ways
    return out


def _splits(many: int, most: int) -> Iterator[tuple[tuple[int, ...], int]]:
    """Every way to say how many of `many` equal columns give 0, 1, ..., `most`, with its multinomial count."""
    if most == 0:
        yield (many,), 1
        return
    for last in range(many + 1):
        for head, ways in _splits(many - last, most - 1):
            yield head + (last,), ways * math.comb(many, last)


def enumerate_placements(sizes: tuple[int, ...], counts: tuple[int, ...], deadline: Deadline | None = None) -> Iterator[Matrix]:
    """Every parallelism matrix for axis `sizes` on level `counts`, found by Z3.

    Yields nothing when the products differ. Raises SolverTimeout when the
    deadline runs out before the enumeration is complete (the matrices
    yielded so far stand).
    """
    if math.prod(sizes) != math.prod(counts):
        return
    rows, cols = len(sizes), len(counts)
    primes = sorted(set().union(*(prime_factors(n) for n in (*sizes, *counts))))
    solver = z3.Solver()
    exps = {}
    for p in primes:
        for a in range(rows):
            for l in range(cols):
                e = z3.Int(f"e_{p}_{a}_{l}")
                exps[p, a, l] = e
                solver.add(e >= 0)
        for a in range(rows):  # row sums: exponent of p in the axis size
            solver.add(z3.Sum([exps[p, a, l] for l in range(cols)]) == prime_factors(sizes[a]).get(p, 0))
        for l in range(cols):  # column sums: exponent of p in the level count
            solver.add(z3.Sum([exps[p, a, l] for a in range(rows)]) == prime_factors(counts[l]).get(p, 0))
    deadline = deadline or Deadline(None)
    while True:
        if deadline.check(solver, "placement enumeration") == z3.unsat:
            return
        model = solver.model()
        values = {key: model.eval(e, model_completion=True).as_long() for key, e in exps.items()}
        yield tuple(
            tuple(math.prod(p ** values[p, a, l] for p in primes) for l in range(cols)) for a in range(rows)
        )
        solver.add(z3.Or([e != values[key] for key, e in exps.items()]) if exps else z3.BoolVal(False))
