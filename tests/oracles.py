"""Oracles the tests hold the searches to: simple code apart from what it checks.

:func:`cheapest` is Dijkstra over (abstract state, steps taken), on the
abstract semantics itself (``hierarchies/abstract.py``) and any step cost: the
optimum that both the explicit search (``solver/topn.py``) and Z3 must find.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable

from p2synth.hierarchies.abstract import AbstractState, is_goal, start_state, successors
from p2synth.hierarchies.program import Collective


def cheapest(
    collective: Collective,
    num_cells: int,
    max_steps: int,
    step_cost: Callable[[AbstractState, Collective, int], float],
) -> tuple[float, tuple[tuple[Collective, int], ...]] | None:
    """Dijkstra over (state, steps taken): the cheapest program within `max_steps`, or None (the tests' oracle)."""
    start = start_state(collective, num_cells)
    tie = itertools.count()
    heap = [(0.0, next(tie), start, 0, ())]
    done: set[tuple[AbstractState, int]] = set()
    while heap:
        cost, _, state, depth, prog = heapq.heappop(heap)
        if prog and is_goal(collective, state, num_cells):
            return cost, prog
        if (state, depth) in done:
            continue
        done.add((state, depth))
        if depth == max_steps:
            continue
        for op, S, nxt in successors(state, num_cells):
            heapq.heappush(heap, (cost + step_cost(state, op, S), next(tie), nxt, depth + 1, prog + ((op, S),)))
    return None
