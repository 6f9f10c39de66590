"""The steps of a state space as rows by state, and the dynamic programming tables over them.

:func:`successors_by_state` groups every step of a state space
(``hierarchies/statespace.py``) by the state it is taken in, with its cost
(``solver/stepcosts.py``). Over those rows, :func:`cost_to_go` is backward
dynamic programming: ``h[r][s]`` = the cheapest completion from state ``s`` in
at most ``r`` steps (``inf`` if none); :func:`traffic_to_go` is its per-level
analogue for the traffic still to come. ``h`` orders the best-first search
(``solver/topn.py``) and is the certificate ``solver/certificate.py`` checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from p2synth.hierarchies.statespace import StateSpace
from p2synth.encodings.deadline import Deadline
from p2synth.encodings.errors import SolverTimeout
from p2synth.solver.stepcosts import EdgeCosts, step_cases


@dataclass(frozen=True)
class Successors:
    """Every step of a state space grouped by the state it is taken in (compressed rows)."""

    offsets: np.ndarray   # steps of state s: rows offsets[s] .. offsets[s+1]
    step: np.ndarray      # index into space.steps
    target: np.ndarray
    weight: np.ndarray
    traffic: np.ndarray | PieceTraffic | None  # (levels, rows), when the costs have it


def successors_by_state(costs: EdgeCosts) -> Successors:
    """The (step, target, weight) rows of every state, in state order (steps in StateSpace order within a state)."""
    _, offsets, step, target = _rows_layout(costs.space)
    case = _row_cases(costs.space)
    traffic = None if costs.loads is None else np.take(costs.loads, case, axis=1)
    return Successors(offsets, step, target, np.take(costs.values, case), traffic)


@lru_cache(maxsize=32)
def _rows_layout(space: StateSpace) -> tuple[np.ndarray, ...]:
    """How the state space's steps sort into rows by state: the permutation, offsets, step and target of each row."""
    src = np.concatenate([s.sources for s in space.steps])
    step = np.concatenate([np.full(s.sources.size, j) for j, s in enumerate(space.steps)])
    target = np.concatenate([s.targets for s in space.steps])
    order = np.argsort(src, kind="stable")
    offsets = np.searchsorted(src[order], np.arange(space.size + 1))
    return order, offsets, step[order], target[order]


@lru_cache(maxsize=32)
def _row_cases(space: StateSpace) -> np.ndarray:
    """The case (:func:`solver.stepcosts.step_cases`) of every row, in row order."""
    cases = step_cases(space)
    # step-major, as _rows_layout's src
    flat = np.concatenate([s + inv for s, inv in zip(cases.start[:-1], cases.inverse)])
    return np.take(flat, _rows_layout(space)[0])


@dataclass(frozen=True)
class PieceTraffic:
    """Per level and row, the traffic on one of `pieces` pieces: `whole` (the whole buffer's, levels x rows) over
    `pieces`, divided where it is read (``[:, rows]`` indexing, as an array), so no piece count copies every row
    (``solver.pipelined.WholeTraffic.on_pieces``)."""

    whole: np.ndarray
    pieces: int

    @property
    def shape(self) -> tuple[int, ...]:
        """(levels, rows)."""
        return self.whole.shape

    def __getitem__(self, key) -> np.ndarray:
        return self.whole[key] / self.pieces


def cost_to_go(costs: EdgeCosts, max_steps: int, deadline: Deadline | None = None,
               rows: Successors | None = None) -> np.ndarray:
    """``h[r][s]``: the cheapest way from state `s` to a goal in at most `r` steps (0 at a goal, inf if none).

    Shape ``(max_steps + 1, states)``. Backward dynamic programming over the
    steps: ``h[r][s] = min(0 if s is a goal, min over steps (w + h[r-1][s']))``.
    """
    rows = rows or successors_by_state(costs)
    return _backward(costs.space, rows.weight, rows, np.add, max_steps, deadline)


def traffic_to_go(costs: EdgeCosts, max_steps: int, deadline: Deadline | None = None,
                  rows: Successors | None = None) -> np.ndarray:
    """``t[r][l][s]``: a floor on the traffic level `l` still carries in a completion from `s` in at most `r` steps.

    Shape ``(max_steps + 1, levels, states)``; each level minimised on its own, so
    a lower bound for every level at once. It is the least traffic of a
    completion of any length, the same table for every ``r`` (a read-only view
    with stride 0 along ``r``, which ``solver.certificate`` checks once): the
    fixed point of the dynamic programming of :func:`cost_to_go` with ``+``
    (:func:`_least_to_go`); a completion within ``r`` steps is a completion, so
    it bounds every ``r``. Where the steps could cycle, the table per step
    count. The traffic of a whole program on a level spreads over at most
    ``ceil(steps / P)`` windows of ``P`` consecutive steps, so it bounds a
    pipeline's period from below too.
    """
    rows = rows or successors_by_state(costs)
    fixed = _least_to_go(costs.space, rows.traffic, rows, np.add, deadline)
    if fixed is None:
        return _backward(costs.space, rows.traffic, rows, np.add, max_steps, deadline)
    return np.broadcast_to(fixed, (max_steps + 1,) + fixed.shape)


def one_table(table: np.ndarray) -> bool:
    """Whether `table` holds one table for every step count (stride 0 along its first axis, as
    :func:`traffic_to_go` returns a fixed point)."""
    return table.shape[0] > 1 and table.strides[0] == 0


def _backward(space: StateSpace, values: np.ndarray, rows: Successors, combine, max_steps: int,
              deadline: Deadline | None) -> np.ndarray:
    """``out[r][..., s] = min(0 at a goal, min over the rows of s of combine(value, out[r-1][..., target]))``.

    `values` holds one value per row (or one per level and row); inf where no
    completion exists within r steps.
    """
    deadline = deadline or Deadline(None)
    lead = values.shape[:-1]
    out = np.empty((max_steps + 1,) + lead + (space.size,))
    out[0] = _at_goal(space, lead)
    for r in range(1, max_steps + 1):
        if deadline.expired():
            raise SolverTimeout("explicit search")
        out[r] = _relax(space, values, rows, combine, out[r - 1])
    return out


def _least_to_go(space: StateSpace, values, rows: Successors, combine, deadline: Deadline | None) -> np.ndarray | None:
    """The table :func:`_backward` reaches once more steps change nothing (its fixed point), or None where the steps
    could cycle.

    The steps of a state space form a DAG (each moves a cell on to a later
    status), so the fixed point is computed height by height
    (:func:`_heights`): each state once, from its successors' final values,
    with the same arithmetic as :func:`_relax`: every row read once instead of
    once per pass.
    """
    deadline = deadline or Deadline(None)
    layers = _layers(space)
    if layers is None:
        return None
    table = np.array(_at_goal(space, values.shape[:-1]))
    for states, index, target, starts in layers:
        if deadline.expired():
            raise SolverTimeout("explicit search")
        best = np.minimum.reduceat(combine(values[..., index], table[..., target]), starts, axis=-1)
        table[..., states] = np.minimum(table[..., states], best)
    return table


@lru_cache(maxsize=32)
def _layers(space: StateSpace) -> tuple[tuple[np.ndarray, ...], ...] | None:
    """The states of each height 1, 2, ... (:func:`_heights`) with their rows: (states, row indices, row targets,
    where each state's rows start); None where the steps cycle."""
    heights = _heights(space)
    if heights is None:
        return None
    _, offsets, _, target = _rows_layout(space)
    out = []
    for height in range(1, int(heights.max(initial=0)) + 1):
        states = np.flatnonzero(heights == height)
        counts = offsets[states + 1] - offsets[states]
        starts = np.cumsum(counts) - counts
        index = np.repeat(offsets[states] - starts, counts) + np.arange(int(counts.sum()))
        out.append((states, index, target[index], starts))
    return tuple(out)


def _heights(space: StateSpace) -> np.ndarray | None:
    """Per state, the most steps a program can still take from it (0: none valid), or None where the steps cycle:
    every step leads to a state of lower height."""
    _, offsets, _, target = _rows_layout(space)
    occupied = offsets[:-1] < offsets[1:]
    starts = offsets[:-1][occupied]
    heights = np.zeros(space.size, dtype=np.int64)
    for _ in range(space.size + 1):
        nxt = np.zeros_like(heights)
        if starts.size:
            nxt[occupied] = np.maximum.reduceat(heights[target] + 1, starts)
        if np.array_equal(nxt, heights):
            return heights
        heights = nxt
    return None


def _at_goal(space: StateSpace, lead: tuple[int, ...]) -> np.ndarray:
    """0 at a goal state, inf elsewhere, for every entry of the leading axes `lead`."""
    return np.broadcast_to(np.where(space.goal, 0.0, np.inf), lead + (space.size,))


def _relax(space: StateSpace, values, rows: Successors, combine, prev: np.ndarray) -> np.ndarray:
    """One pass of the dynamic programming: ``min(0 at a goal, min over the rows of s of combine(value,
    prev[..., target]))``."""
    occupied = rows.offsets[:-1] < rows.offsets[1:]
    starts = rows.offsets[:-1][occupied]
    at_goal = _at_goal(space, prev.shape[:-1])
    out = np.array(at_goal)
    if starts.size:
        best = np.minimum.reduceat(combine(values, np.take(prev, rows.target, axis=-1)), starts, axis=-1)
        out[..., occupied] = np.minimum(at_goal[..., occupied], best)
    return out
