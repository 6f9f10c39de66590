"""The top N programs: best-first search by cost so far plus the exact cost-to-go, and the pool of candidates.

:func:`cheapest_programs` searches partial programs ordered by ``cost so far +
h`` (``h`` from ``solver/costtogo.py``). With an exact ``h`` every program
leaves the queue in order of cost and the search touches little beyond the
programs it returns. Programs within TIE_MARGIN of the N-th cheapest are all
returned, so the caller picks its top N by its own order (:func:`tie_order`).
:class:`Candidates` holds the cheapest way found to run each program over
piece counts and the bound the pipelined search prunes with
(``solver/pipelined.py``).
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Any

import numpy as np

from p2synth.hierarchies.program import RawProgram
from p2synth.encodings.deadline import Deadline
from p2synth.encodings.errors import SolverTimeout
from p2synth.solver.costtogo import Successors, successors_by_state
from p2synth.solver.stepcosts import EdgeCosts

# Programs costing within this relative margin of the N-th cheapest are kept as candidates: the top N is then
# chosen among them by (cost, length, program), so ties at the cut are resolved the same way for every placement.
TIE_MARGIN = 1e-9
MAX_CANDIDATES = 200_000  # ties beyond this many programs at the cut are refused (never seen with real link figures)


def cheapest_programs(costs: EdgeCosts, h: np.ndarray, n: int, deadline: Deadline | None = None,
                      rows: Successors | None = None) -> list[tuple[float, RawProgram]]:
    """Every program within ``len(h) - 1`` steps costing at most the `n`-th cheapest (ties within TIE_MARGIN), cheapest first.

    Best-first search over partial programs by ``cost so far + h``: with the
    exact cost-to-go `h`, programs leave the queue in order of cost. The
    caller picks the top `n` among the returned candidates by its own order.
    """
    deadline = deadline or Deadline(None)
    space = costs.space
    rows = rows or successors_by_state(costs)
    K = h.shape[0] - 1
    tie = itertools.count()
    heap = [(float(h[K][space.start]), next(tie), 0, space.start, 0.0, ())]
    out: list[tuple[float, tuple[int, ...]]] = []
    bound = math.inf
    while heap:
        priority, _, depth, state, g, prog = heapq.heappop(heap)
        if priority > bound or not math.isfinite(priority):
            break
        if deadline.expired():
            raise SolverTimeout("explicit search")
        if prog and space.goal[state]:
            out.append((g, prog))
            if len(out) == n:
                bound = g * (1 + TIE_MARGIN)
            if len(out) > MAX_CANDIDATES:
                raise ValueError(f"more than {MAX_CANDIDATES:,} programs tie with the {n}-th cheapest")
        if depth == K:
            continue
        lo, hi = rows.offsets[state], rows.offsets[state + 1]
        after = g + rows.weight[lo:hi]
        pri = after + h[K - depth - 1][rows.target[lo:hi]]
        for i in np.flatnonzero(pri <= bound).tolist():
            heapq.heappush(heap, (float(pri[i]), next(tie), depth + 1, int(rows.target[lo + i]), float(after[i]),
                                  prog + (int(rows.step[lo + i]),)))
    steps = space.steps
    return [(g, tuple((steps[j].op, steps[j].mask) for j in prog)) for g, prog in out]


def tie_order(programs: list[tuple[Any, float]]) -> list[tuple[Any, float]]:
    """`(program, cost)` pairs in the order the tool lists them: cheapest first, and among ties fewer steps first.

    A tie is a cost within a relative TIE_MARGIN of the cheapest program not
    yet listed (costs come from floating-point figures): those programs are
    listed by step count, then by program order, before the next costlier one.
    """
    by_cost = sorted(programs, key=lambda c: c[1])
    out: list[tuple[Any, float]] = []
    while len(out) < len(by_cost):
        first = len(out)
        limit = by_cost[first][1] * (1 + TIE_MARGIN)
        last = first
        while last < len(by_cost) and by_cost[last][1] <= limit:
            last += 1
        out += sorted(by_cost[first:last], key=lambda c: (len(c[0]), c[0]))
    return out


class Candidates:
    """The cheapest way found so far to run each program (over piece counts), and the bound searches prune with.

    The bound is the `n`-th cheapest distinct program's cost (ties within
    TIE_MARGIN kept), infinity until `n` programs are known; it only falls.
    """

    def __init__(self, n: int):
        self.n = n
        self.best: dict[RawProgram, tuple[float, int]] = {}  # program -> (cost, pieces)
        self._nth: float | None = math.inf

    def offer(self, program: RawProgram, pieces: int, cost: float) -> None:
        """Record `program` run on `pieces` pieces at `cost` (kept if cheaper, or as cheap with fewer pieces)."""
        old = self.best.get(program)
        if old is None or (cost, pieces) < old:
            self.best[program] = (cost, pieces)
            self._nth = None

    def nth(self) -> float:
        """The `n`-th cheapest cost (infinity with fewer programs)."""
        if self._nth is None:
            self._nth = math.inf if len(self.best) < self.n else sorted(c for c, _ in self.best.values())[self.n - 1]
        return self._nth

    def bound(self) -> float:
        """What a search may prune above: the n-th cheapest cost, with the tie margin."""
        return self.nth() * (1 + TIE_MARGIN)

    def kept(self) -> list[tuple[RawProgram, int, float]]:
        """The programs within the bound, as (program, pieces, cost), cheapest first."""
        bound = self.bound()
        return sorted(((p, k, c) for p, (c, k) in self.best.items() if c <= bound), key=lambda x: (x[2], len(x[0]), x[1]))
