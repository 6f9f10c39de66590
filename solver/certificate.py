"""Check the certificate that the listed programs are the cheapest: code apart from the search that produced it.

The claim: within ``K`` steps, every valid program not in the list ``L`` costs
at least ``c`` (the dearest listed cost; infinity when ``L`` holds fewer
programs than were asked for, i.e. claims to hold all of them), up to the
relative tolerance TOLERANCE. The certificate is a table ``h[r][s]``, claimed
lower bounds on the cost of completing a program from state ``s`` in at most
``r`` more steps. It is checked, never trusted:

1. **Bellman inequalities**, for every state ``s`` and ``r = 0..K``:
   ``h[r][s] <= 0`` where ``s`` is a goal (a program may stop there), and
   ``h[r][s] <= w(s, e) + h[r-1][s']`` for every step ``e`` valid in ``s``
   (``s'`` its target). By induction on ``r`` every completion from ``s`` in
   ``r`` steps then costs at least ``h[r][s]``.
2. **The trie of** ``L``: for every prefix ``q`` of a listed program (state
   ``s``, ``d`` steps, cost so far ``g``), every valid step ``e`` that no listed
   program takes after ``q`` satisfies ``g + w(s, e) + h[K-d-1][s'] >= c``; and
   where ``s`` is a goal but ``q`` itself is not listed, ``g >= c``.

A valid program ``P`` not in ``L`` leaves the trie somewhere: after its longest
prefix ``q`` in the trie it either stops (2, second part) or takes a step no
listed program takes there (2, with 1 bounding the rest). So ``cost(P) >= c``.
The steps "valid in s" are the state space's (``hierarchies/statespace.py``),
which a Z3 proof shows to be exactly the sketch's
(``p2synth.encodings.stepsemantics.prove_step_semantics``), and the step costs are the
cost model's, evaluated by ``solver.stepcosts.edge_costs``.

The pipelined search's certificate, built on these checks, is
``solver/pipelined_certificate.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from p2synth.hierarchies.program import RawProgram
from p2synth.hierarchies.statespace import StateSpace
from p2synth.solver.costtogo import Successors, by_level, successors_by_state, whole_array
from p2synth.solver.stepcosts import EdgeCosts

TOLERANCE = 1e-9  # relative: costs closer than this are ties (the same margin as Z3's proof)
_SLACK = 1e-12    # float rounding between the table and the sums it bounds


class CertificateError(Exception):
    """The certificate does not prove the claim; the message names the first failed inequality."""


def check(costs: EdgeCosts, h: np.ndarray, listed: Sequence[RawProgram], asked: int | None,
          rows: Successors | None = None) -> list[float]:
    """Check that `listed` holds the cheapest programs (all of them when fewer than `asked`); their costs.

    Raises CertificateError naming what fails. Returns each listed program's
    cost, recomputed from the step costs. `rows`: the state space's steps by
    state, if the caller has them.
    """
    rows = rows or successors_by_state(costs)
    check_bellman(costs, h, rows)
    costs_of = []
    for p in listed:
        state, cost = _walk(costs, p)
        if not p or not costs.space.goal[state]:
            raise CertificateError(f"listed program {p} does not reach the goal")
        costs_of.append(cost)
    threshold = max(costs_of) if listed and (asked is None or len(listed) >= asked) else math.inf
    _check_trie(costs, h, listed, threshold, rows)
    return costs_of


def check_bellman(costs: EdgeCosts, h: np.ndarray, rows: Successors | None = None) -> None:
    """The Bellman inequalities of the cost-to-go table `h` (1. above): each ``h[r][s]`` is at most 0 at a goal and at
    most every step's cost plus ``h[r-1]`` of its target; CertificateError naming the first that fails."""
    rows = rows or successors_by_state(costs)
    space = costs.space
    if h.ndim != 2 or h.shape[0] < 1 or h.shape[1] != space.size:
        raise CertificateError(f"the table has shape {h.shape}, not (steps + 1, {space.size})")
    if np.isnan(h).any():
        raise CertificateError("the table holds NaN")
    _check_table(space, h, rows.weight, np.add, rows, _SLACK, "Bellman")


def _check_table(space: StateSpace, table: np.ndarray, values: np.ndarray, combine, rows: Successors, slack: float,
                 name: str) -> None:
    """``table[r][..., s] <= 0`` at a goal, and ``table[r][..., s] <= combine(value, table[r-1][..., s'])`` (within
    `slack`) for every row (step s -> s') of every state: the inequalities the backward dynamic programming of
    ``solver.costtogo`` meets, checked on their own. CertificateError naming the first that fails."""
    at_a_time = table.ndim == 3 and by_level(values)
    values = values if at_a_time else whole_array(values)
    for r in range(table.shape[0]):
        if (table[r][..., space.goal] > 0).any():
            raise CertificateError(f"a goal state has a positive {name} bound with {r} steps left")
        if r == 0:
            continue
        if at_a_time:  # one level at a time: no (levels x rows) temporary
            bad = next(filter(None, (_first_violation(table[r][level], combine(values[level], table[r - 1][level][rows.target]),
                                                      rows, slack) for level in range(table.shape[1]))), None)
        else:
            bad = _first_violation(table[r], combine(values, np.take(table[r - 1], rows.target, axis=-1)), rows, slack)
        if bad is not None:
            step = space.steps[int(rows.step[bad[1]])]
            raise CertificateError(f"{name} inequality fails in state {bad[0]} with {r} steps left, "
                                   f"step {step.op.short}/{step.mask:b}")


def _first_violation(table: np.ndarray, bound: np.ndarray, rows: Successors, slack: float) -> tuple[int, int] | None:
    """The first (state, row) where ``table[..., s] > bound[..., row] + slack |bound[..., row]|`` for a row of
    state `s`, or None when the inequality holds for every row of every state.

    ``b + slack |b|`` grows with ``b``, so the inequality holds for every row of
    a state exactly when it holds for the smallest bound among them: one
    ``minimum.reduceat`` over the state-sorted rows, and a row-by-row look
    only at the first state that fails.
    """
    occupied = rows.offsets[:-1] < rows.offsets[1:]
    starts = rows.offsets[:-1][occupied]
    if not starts.size:
        return None
    least = np.minimum.reduceat(bound, starts, axis=-1)
    bad = _any_leading(table[..., occupied] > (least + slack * np.abs(least) if slack else least))
    if not bad.any():
        return None
    state = int(np.flatnonzero(occupied)[int(np.flatnonzero(bad)[0])])
    lo, hi = int(rows.offsets[state]), int(rows.offsets[state + 1])
    near = bound[..., lo:hi]
    over = _any_leading(table[..., state, None] > (near + slack * np.abs(near) if slack else near))
    return state, lo + int(np.flatnonzero(over)[0])


def _any_leading(flags: np.ndarray) -> np.ndarray:
    """`flags` reduced with ``any`` over every axis but the last (per level, for the traffic table)."""
    return flags.any(axis=tuple(range(flags.ndim - 1))) if flags.ndim > 1 else flags


def _walk(costs: EdgeCosts, program: RawProgram) -> tuple[int, float]:
    """The state a program (or prefix) ends in and its cost; CertificateError if a step is not valid where taken."""
    space = costs.space
    state, total = space.start, 0.0
    for op, mask in program:
        j = step_index(space).get((op, mask))
        step = None if j is None else space.steps[j]
        i = -1 if step is None else int(np.searchsorted(step.sources, state))
        if step is None or i >= step.sources.size or step.sources[i] != state:
            raise CertificateError(f"listed program {program} takes a step that is not valid")
        total += costs.step_cost(state, j)
        state = int(step.targets[i])
    return state, total


@lru_cache(maxsize=64)
def step_index(space: StateSpace) -> dict[tuple, int]:
    """Step (op, mask) -> its index in space.steps."""
    return {(s.op, s.mask): j for j, s in enumerate(space.steps)}


def _check_trie(costs: EdgeCosts, h: np.ndarray, listed: Sequence[RawProgram], threshold: float, rows: Successors) -> None:
    space = costs.space
    K = h.shape[0] - 1
    floor = threshold * (1 - TOLERANCE)
    children: dict[RawProgram, set[tuple]] = {}
    for p in listed:
        if len(p) > K:
            raise CertificateError(f"listed program {p} has more than {K} steps")
        for d in range(len(p)):
            children.setdefault(p[:d], set()).add(p[d])
        children.setdefault(p, set())
    listed_set = set(map(tuple, listed))
    for prefix, taken in children.items():
        state, g = _walk(costs, prefix)
        if prefix and space.goal[state] and prefix not in listed_set and not g >= floor:
            raise CertificateError(f"prefix {prefix} is a program cheaper than the list's last but is not listed")
        if len(prefix) == K:
            continue
        lo, hi = rows.offsets[state], rows.offsets[state + 1]
        bound = g + rows.weight[lo:hi] + h[K - len(prefix) - 1][rows.target[lo:hi]]
        for i in np.flatnonzero(~(bound >= floor)).tolist():
            step = space.steps[int(rows.step[lo + i])]
            if (step.op, step.mask) not in taken:
                raise CertificateError(f"after {prefix}, step {step.op.short}/{step.mask:b} may lead to a program "
                                       f"cheaper than the list's last ({bound[i]:.6g} < {threshold:.6g})")


def check_sum_table(space: StateSpace, table: np.ndarray, values, rows: Successors, name: str) -> None:
    """``table[r][l][s]`` bounds from below the sum of ``values[l]`` over every completion from `s` in at most `r`
    steps: ``table <= 0`` at a goal and ``table[r][l][s] <= values_l(e) + table[r-1][l][s']`` for every step ``e``
    (by induction on `r`); CertificateError naming the first that fails. `values`: levels x rows (or anything
    indexed so by level, as ``solver.costtogo.PieceTraffic`` and ``LevelValues``)."""
    if table.ndim != 3 or table.shape[2] != space.size or table.shape[1] != values.shape[0]:
        raise CertificateError(f"the {name} table has the wrong shape")
    if np.isnan(table).any():
        raise CertificateError(f"the {name} table holds NaN")
    _check_table(space, table, values, np.add, rows, _SLACK, name)
