"""Explicit cost searches over the abstract semantics: the independent oracles of the Z3 encoding.

Dijkstra finds the cheapest program within a bound; a uniform-cost search
lists the N cheapest. The search (``solver/search.py``) uses the latter to
propose programs that Z3 then checks and proves optimal.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable

from hierarchies.abstract import AbstractState, is_goal, start_state, successors
from hierarchies.program import Collective


def cheapest(
    collective: Collective,
    num_cells: int,
    max_steps: int,
    step_cost: Callable[[AbstractState, Collective, int], float],
) -> tuple[float, tuple[tuple[Collective, int], ...]] | None:
    """Dijkstra over (state, steps taken): the cheapest program within `max_steps`, or None."""
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


def cheapest_programs(
    collective: Collective,
    num_cells: int,
    max_steps: int,
    step_cost: Callable[[AbstractState, Collective, int], float],
    n: int,
    max_pushes: int = 300_000,
) -> list[tuple[float, tuple[tuple[Collective, int], ...]]] | None:
    """The `n` cheapest programs within `max_steps`, cheapest (then shortest) first.

    Uniform-cost search over partial programs: with non-negative step costs,
    complete programs leave the queue in order of cost. Returns None when the
    search would push more than `max_pushes` partial programs (the caller then
    lets Z3 search instead).
    """
    start = start_state(collective, num_cells)
    tie = itertools.count()
    heap = [(0.0, 0, next(tie), start, ())]
    out: list[tuple[float, tuple]] = []
    pushes = 0
    while heap and len(out) < n:
        cost, depth, _, state, prog = heapq.heappop(heap)
        if prog and is_goal(collective, state, num_cells):
            out.append((cost, prog))
        if depth == max_steps:
            continue
        for op, S, nxt in successors(state, num_cells):
            pushes += 1
            if pushes > max_pushes:
                return None
            c = cost + step_cost(state, op, S)
            heapq.heappush(heap, (tie_key(c), depth + 1, next(tie), nxt, prog + ((op, S),)))
    return [(c, p) for c, p in out]


def tie_key(cost: float) -> float:
    """Cost rounded to 12 significant digits, so float noise does not break ties by length."""
    return float(f"{cost:.12g}")
