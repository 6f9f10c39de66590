"""Placement enumeration in Z3 (DESIGN.md section 5).

A placement is a matrix ``P[a][l]`` with row products the axis sizes and
column products the level counts. Per prime ``p`` the exponents
``e_p[a][l] = v_p(P[a][l])`` satisfy *linear* row and column sums, so the
whole space is a small integer program whose models we enumerate.
"""

from __future__ import annotations

import math
from typing import Iterator

import z3

from p2synth_encodings.deadline import Deadline

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


def enumerate_placements(sizes: tuple[int, ...], counts: tuple[int, ...], timeout_s: float | None = None) -> Iterator[Matrix]:
    """Every parallelism matrix for axis `sizes` on level `counts`, found by Z3.

    Yields nothing when the products differ. Raises SolverTimeout if the
    budget runs out before the enumeration is complete.
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
    deadline = Deadline(timeout_s)
    while True:
        if deadline.check(solver, "placement enumeration") == z3.unsat:
            return
        model = solver.model()
        values = {key: model.eval(e, model_completion=True).as_long() for key, e in exps.items()}
        yield tuple(
            tuple(math.prod(p ** values[p, a, l] for p in primes) for l in range(cols)) for a in range(rows)
        )
        solver.add(z3.Or([e != values[key] for key, e in exps.items()]) if exps else z3.BoolVal(False))
