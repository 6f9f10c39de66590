"""Per-step cost tables: a cost model evaluated on every step of a state space, from every state it applies to.

A step's cost depends on nothing but the step and which cells are scattered and
rooted when it is taken (:class:`StepCases`), so the cost model's own code is
evaluated once per such case, vectorized (``ArrayAlgebra``): :func:`edge_costs`
(the seconds, and on request each level's traffic) and :func:`split_costs`
(latency and traffic apart: one evaluation serves every piece count). The
steps grouped by state and the tables over them are ``solver/costtogo.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from p2synth.hierarchies.statespace import StateSpace, index_dtype
from p2synth.encodings.deadline import Deadline
from p2synth.encodings.errors import SolverTimeout
from p2synth.solver.algebra import ARRAYS, OP_CODES
from p2synth.solver.cost import CostModel, Split, piece_seconds


@dataclass(frozen=True)
class StepCases:
    """The distinct (step, slice, scattered cells, rooted cells) of a state space: a step's cost depends on nothing
    else (``case_keys`` of the state space; of an orbit space, one concrete step of the orbit's,
    ``hierarchies/orbitspace.py``).

    Flat arrays over the cases (``op`` codes, ``mask`` slices, ``key`` = Y | Z << C),
    the cases of step ``j`` at ``start[j]:start[j+1]``, ``inverse[j]`` mapping
    step ``j``'s sources to its cases.
    """

    op: np.ndarray
    mask: np.ndarray
    key: np.ndarray
    start: np.ndarray
    inverse: tuple[np.ndarray, ...]

    def of_step(self, values: np.ndarray, j: int) -> np.ndarray:
        """Per-case `values` (last axis over cases) -> step `j`'s, one per source state."""
        return np.take(values[..., self.start[j]:self.start[j + 1]], self.inverse[j], axis=-1)


@dataclass(frozen=True)
class EdgeCosts:
    """The predicted seconds of every step of a state space from every state it is valid in.

    Held per distinct case (:func:`step_cases`): ``values[c]`` seconds and,
    when asked for, ``loads[l][c]`` the seconds each level's links are busy.
    ``weights[j][i]`` is the cost of ``space.steps[j]`` taken in state ``space.steps[j].sources[i]``.
    """

    space: StateSpace
    values: np.ndarray
    loads: np.ndarray | None = None  # (levels, cases)

    @cached_property
    def weights(self) -> tuple[np.ndarray, ...]:
        """Per step, its cost in each of its source states."""
        cases = step_cases(self.space)
        return tuple(cases.of_step(self.values, j) for j in range(len(self.space.steps)))

    @cached_property
    def traffic(self) -> tuple[np.ndarray, ...] | None:
        """Per step, (levels, sources): seconds each level's links are busy (None without loads)."""
        if self.loads is None:
            return None
        cases = step_cases(self.space)
        return tuple(cases.of_step(self.loads, j) for j in range(len(self.space.steps)))

    def step_cost(self, state: int, j: int) -> float:
        """The cost of step `j` in state index `state` (which must be one of its sources)."""
        step = self.space.steps[j]
        i = int(np.searchsorted(step.sources, state))
        if i >= step.sources.size or step.sources[i] != state:
            raise ValueError(f"step {step.op.short}/{step.mask:b} is not valid in state {state}")
        cases = step_cases(self.space)
        return float(self.values[cases.start[j] + cases.inverse[j][i]])


def edge_costs(space: StateSpace, model: CostModel, deadline: Deadline | None = None, with_traffic: bool = False) -> EdgeCosts:
    """Evaluate `model` on every distinct case of `space` (:func:`step_cases`), vectorized.

    With `with_traffic`, also each case's per-level traffic (what a pipeline's overlapping steps share).
    """
    deadline = deadline or Deadline(None)
    cases = step_cases(space)
    if deadline.expired():
        raise SolverTimeout("step costs")
    values = np.broadcast_to(np.asarray(model.step_time(ARRAYS, cases.op, *case_bits(space)), dtype=np.float64),
                             cases.op.shape)
    return EdgeCosts(space, values, edge_traffic(space, model) if with_traffic else None)


@dataclass(frozen=True)
class SplitCosts:
    """One evaluation of a cost model that splits a step into latency and traffic (``solver.cost.AlphaBeta.split``)
    on every distinct case of a state space: the step costs of every piece count, and the whole message's traffic.

    On one of ``P`` pieces such a model's step takes the cheapest of its schedules, each ``latency + busiest / P``
    (``solver.cost.piece_seconds``): :meth:`on_pieces` computes exactly
    that, case by case, with the model's own function, so its values equal the model's evaluated at ``P``
    (``tests/test_pipeline.py`` holds them equal bit for bit).
    """

    space: StateSpace
    latency: np.ndarray  # per case
    traffic: np.ndarray  # (levels, cases), the whole message
    busiest: np.ndarray  # per case, the slowest level's traffic
    others: np.ndarray  # (schedules, 2, cases): each other schedule's latency and busiest (the ring's where it can't run)

    def on_pieces(self, pieces: int) -> EdgeCosts:
        """The step costs on one of `pieces` pieces."""
        split = Split(self.latency, list(self.traffic), self.busiest, tuple((o[0], o[1]) for o in self.others))
        return EdgeCosts(self.space, np.asarray(piece_seconds(ARRAYS, split, pieces), dtype=np.float64))


def split_costs(space: StateSpace, model: CostModel, deadline: Deadline | None = None) -> SplitCosts | None:
    """The :class:`SplitCosts` of `model` (on one piece) on `space`, or None when the model does not split."""
    split = getattr(model, "split", None)
    if split is None or getattr(model, "pieces", None) != 1:
        return None
    if (deadline or Deadline(None)).expired():
        raise SolverTimeout("step costs")
    cases = step_cases(space)
    found = split(ARRAYS, cases.op, *case_bits(space))
    per_case = lambda v: np.broadcast_to(np.asarray(v, dtype=np.float64), cases.op.shape)
    others = np.asarray([[per_case(lat), per_case(b)] for lat, b in found.others], dtype=np.float64).reshape(
        len(found.others), 2, cases.op.size)
    return SplitCosts(space, per_case(found.latency), np.stack([per_case(t) for t in found.traffic]),
                      per_case(found.busiest), others)


def edge_traffic(space: StateSpace, model: CostModel) -> np.ndarray:
    """Per level and distinct case of `space`, the seconds the step keeps that level's links busy under `model`."""
    cases = step_cases(space)
    return np.stack([np.broadcast_to(np.asarray(t, dtype=np.float64), cases.op.shape)
                     for t in model.traffic(ARRAYS, cases.op, *case_bits(space))])


@lru_cache(maxsize=32)
def case_bits(space: StateSpace) -> tuple[list[np.ndarray], ...]:
    """Per cell, the slice, scattered and rooted bits of every case."""
    cases, C = step_cases(space), space.cells
    Y, Z = cases.key & ((1 << C) - 1), cases.key >> C
    bits = lambda a: [(a >> c & 1).astype(bool) for c in range(C)]
    return bits(cases.mask), bits(Y), bits(Z)


@lru_cache(maxsize=32)
def step_cases(space: StateSpace) -> StepCases:
    """The :class:`StepCases` of a state space (cached: it depends on the collective and the cell count alone)."""
    C, rows = space.cells, sum(step.sources.size for step in space.steps)
    ops, slices, keys, inverses, start = [], [], [], [], [0]
    for j, step in enumerate(space.steps):
        unique, inverse = np.unique(space.case_keys(j), return_inverse=True)
        ops.append(np.full(unique.size, OP_CODES[step.op]))
        slices.append(unique >> 2 * C)
        keys.append(unique & ((1 << 2 * C) - 1))
        inverses.append(inverse.astype(index_dtype(rows), copy=False))
        start.append(start[-1] + unique.size)
    return StepCases(np.concatenate(ops), np.concatenate(slices), np.concatenate(keys),
                     np.asarray(start, dtype=np.int64), tuple(inverses))
