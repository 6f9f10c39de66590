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

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from p2synth.hierarchies.statespace import StateSpace, index_dtype
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
    offsets, step, target, case = rows_layout(costs.space)
    traffic = None if costs.loads is None else np.take(costs.loads, case, axis=1)
    return Successors(offsets, step, target, np.take(costs.values, case), traffic)


@lru_cache(maxsize=32)
def rows_layout(space: StateSpace) -> tuple[np.ndarray, ...]:
    """How the state space's steps sort into rows by state: the offsets of each state's rows, and the step, target and
    case (:func:`solver.stepcosts.step_cases`) of each row (32-bit on the largest spaces,
    ``hierarchies.statespace.index_dtype``)."""
    src = np.concatenate([s.sources for s in space.steps])
    order = np.argsort(src, kind="stable")
    offsets = np.searchsorted(src[order], np.arange(space.size + 1))
    del src
    narrow = index_dtype(order.size)
    step = np.concatenate([np.full(s.sources.size, j, dtype=narrow) for j, s in enumerate(space.steps)])[order]
    target = np.concatenate([s.targets for s in space.steps]).astype(narrow, copy=False)[order]
    cases = step_cases(space)
    # step-major, as the concatenation `order` sorts
    case = np.concatenate([(s + inv).astype(narrow, copy=False) for s, inv in zip(cases.start[:-1], cases.inverse)])[order]
    return offsets, step, target, case


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


@dataclass(frozen=True)
class LevelValues:
    """Per level and row, values made one level at a time by `of(level)` (a row array), so that no (levels x rows)
    array is held at once: what the tables over a large space need to stay within memory."""

    levels: int
    rows: int
    of: Callable[[int], np.ndarray]
    every: Callable[[], np.ndarray]  # all levels at once, as one array (where that is affordable)

    @property
    def shape(self) -> tuple[int, int]:
        """(levels, rows)."""
        return (self.levels, self.rows)

    def __getitem__(self, level: int) -> np.ndarray:
        return self.of(level)


def stages_and_traffic(rows: Successors, share: float) -> LevelValues:
    """Per level and row: the row's weight (its stage) plus `share` times its traffic on that level."""
    levels, n = rows.traffic.shape
    return LevelValues(levels, n, lambda level: rows.weight + share * rows.traffic[level],
                       lambda: rows.weight[None, :] + share * rows.traffic[:, :])


# Per-level tables (traffic, joint) are computed and checked a level at a time above this many level x row entries
# (256 MiB of float64: 12 cells folded), where a whole (levels x rows) temporary would matter; at once below, where
# the per-level calls would cost more than they save.
LEVEL_AT_A_TIME = 1 << 25


def by_level(values) -> bool:
    """Whether tables over `values` (levels x rows) are best handled a level at a time (LEVEL_AT_A_TIME)."""
    shape = values.shape
    return len(shape) == 2 and shape[0] * shape[1] > LEVEL_AT_A_TIME


def whole_array(values) -> np.ndarray:
    """`values` (an array, a :class:`PieceTraffic` or a :class:`LevelValues`) as one array."""
    if isinstance(values, LevelValues):
        return values.every()
    return values[:, :] if isinstance(values, PieceTraffic) else values


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
    """``out[r][..., s]``: the least sum of `values` (one per row, or one per level and row: an array, a
    :class:`PieceTraffic` or :class:`LevelValues`) over the completions from
    `s` in at most `r` steps, each leading entry (level) minimised on its own: 0 at a goal, inf where no completion
    exists within `r` steps.

    Backward dynamic programming, one pass per step count:
    ``out[r][..., s] = min(0 at a goal, min over the rows of s of (value + out[r-1][..., target]))``.
    Bounds on the steps left matter: the last steps of a program must reach
    the goal, which a completion of any length could put off.
    """
    deadline = deadline or Deadline(None)
    lead = values.shape[:-1]
    at_a_time = by_level(values)
    values = values if at_a_time else whole_array(values)
    out = np.empty((max_steps + 1,) + lead + (space.size,))
    out[0] = _at_goal(space, lead)
    for r in range(1, max_steps + 1):
        if deadline.expired():
            raise SolverTimeout("explicit search")
        if lead and at_a_time:  # one level at a time (each its own minimum): no (levels x rows) temporary
            for level in range(lead[0]):
                out[r][level] = _relax(space, values[level], rows, out[r - 1][level])
        else:
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
