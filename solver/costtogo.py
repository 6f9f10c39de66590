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
    _, offsets, step, target = rows_layout(costs.space)
    case = _row_cases(costs.space)
    traffic = None if costs.loads is None else np.take(costs.loads, case, axis=1)
    return Successors(offsets, step, target, np.take(costs.values, case), traffic)


@lru_cache(maxsize=32)
def rows_layout(space: StateSpace) -> tuple[np.ndarray, ...]:
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
    # step-major, as rows_layout's src
    flat = np.concatenate([s + inv for s, inv in zip(cases.start[:-1], cases.inverse)])
    return np.take(flat, rows_layout(space)[0])


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
    return sum_to_go(costs.space, rows.weight, rows, max_steps, deadline)


def traffic_to_go(costs: EdgeCosts, max_steps: int, deadline: Deadline | None = None,
                  rows: Successors | None = None) -> np.ndarray:
    """``t[r][l][s]``: a floor on the traffic level `l` still carries in a completion from `s` in at most `r` steps.

    Shape ``(max_steps + 1, levels, states)``; each level minimised on its own,
    so a lower bound for every level at once. The traffic of a whole program
    on a level spreads over at most ``ceil(steps / P)`` windows of ``P``
    consecutive steps, so it bounds a pipeline's period from below too.
    """
    rows = rows or successors_by_state(costs)
    return sum_to_go(costs.space, rows.traffic, rows, max_steps, deadline)


def sum_to_go(space: StateSpace, values, rows: Successors, max_steps: int, deadline: Deadline | None = None) -> np.ndarray:
    """``out[r][..., s]``: the least sum of `values` (one per row, or one per level and row) over the completions from
    `s` in at most `r` steps, each leading entry (level) minimised on its own: 0 at a goal, inf where no completion
    exists within `r` steps.

    Backward dynamic programming, one pass per step count:
    ``out[r][..., s] = min(0 at a goal, min over the rows of s of (value + out[r-1][..., target]))``.
    Bounds on the steps left matter: the last steps of a program must reach
    the goal, which a completion of any length could put off.
    """
    deadline = deadline or Deadline(None)
    lead = values.shape[:-1]
    out = np.empty((max_steps + 1,) + lead + (space.size,))
    out[0] = _at_goal(space, lead)
    for r in range(1, max_steps + 1):
        if deadline.expired():
            raise SolverTimeout("explicit search")
        out[r] = _relax(space, values, rows, out[r - 1])
    return out


def _at_goal(space: StateSpace, lead: tuple[int, ...]) -> np.ndarray:
    """0 at a goal state, inf elsewhere, for every entry of the leading axes `lead`."""
    return np.broadcast_to(np.where(space.goal, 0.0, np.inf), lead + (space.size,))


def _relax(space: StateSpace, values, rows: Successors, prev: np.ndarray) -> np.ndarray:
    """One pass of the dynamic programming: ``min(0 at a goal, min over the rows of s of (value + prev[..., target]))``."""
    occupied = rows.offsets[:-1] < rows.offsets[1:]
    starts = rows.offsets[:-1][occupied]
    at_goal = _at_goal(space, prev.shape[:-1])
    out = np.array(at_goal)
    if starts.size:
        best = np.minimum.reduceat(values[..., :] + np.take(prev, rows.target, axis=-1), starts, axis=-1)
        out[..., occupied] = np.minimum(at_goal[..., occupied], best)
    return out
