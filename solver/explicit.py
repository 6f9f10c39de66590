"""Explicit searches over the abstract semantics: the fast top-N search and the independent oracles.

The top-N search works on the dense state space (``hierarchies/statespace.py``):

1. :func:`edge_costs`: the cost of every step from every state it applies to,
   evaluated with the cost model's own code, vectorized (``ArrayAlgebra``), once
   per distinct (step, scattered cells, rooted cells), since a step's cost
   depends on nothing else;
2. :func:`cost_to_go`: backward dynamic programming, ``h[r][s]`` = the cheapest
   completion from state ``s`` in at most ``r`` steps (``inf`` if none);
3. :func:`cheapest_programs`: best-first search over partial programs ordered
   by ``cost so far + h``. With an exact ``h`` every program leaves the queue
   in order of cost and the search touches little beyond the programs it
   returns.

Pipelined programs (``Program.pipeline``): :func:`cheapest_pipelined_all`, one
branch and bound over the partial programs of every piece count at once, with
the cost-to-go and traffic-to-go tables of each piece count
(:class:`PipelineTables`) as its bounds.

``h`` is also the certificate ``solver/certificate.py`` checks. Dijkstra over
(state, steps taken) (:func:`cheapest`) stays as the simple oracle the tests
hold both this search and Z3 to.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Callable

import numpy as np

from p2synth.hierarchies.abstract import AbstractState, is_goal, start_state, successors
from p2synth.hierarchies.program import Collective, RawProgram
from p2synth.hierarchies.statespace import StateSpace
from p2synth.encodings.deadline import Deadline
from p2synth.encodings.errors import SolverTimeout
from p2synth.solver.cost import ARRAYS, OP_CODES, CostModel, slowest

# Programs costing within this relative margin of the N-th cheapest are kept as candidates: the top N is then
# chosen among them by (cost, length, program), so ties at the cut are resolved the same way for every placement.
TIE_MARGIN = 1e-9
MAX_CANDIDATES = 200_000  # ties beyond this many programs at the cut are refused (never seen with real link figures)


@dataclass(frozen=True)
class StepCases:
    """The distinct (step, scattered cells, rooted cells) of a state space: a step's cost depends on nothing else.

    Flat arrays over the cases (``op`` codes, ``mask`` slices, ``key`` = Y | Z << C),
    the cases of step ``j`` at ``start[j]:start[j+1]``, ``inverse[j]`` mapping
    step ``j``'s sources to its cases, and ``row`` the case of every row of
    :func:`successors_by_state` (state order).
    """

    op: np.ndarray
    mask: np.ndarray
    key: np.ndarray
    start: np.ndarray
    inverse: tuple[np.ndarray, ...]
    row: np.ndarray

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
    values = np.broadcast_to(np.asarray(model.step_time(ARRAYS, cases.op, *_case_bits(space)), dtype=np.float64),
                             cases.op.shape)
    return EdgeCosts(space, values, edge_traffic(space, model) if with_traffic else None)


@dataclass(frozen=True)
class SplitCosts:
    """One evaluation of a cost model that splits a step into latency and traffic (``solver.cost.AlphaBeta.split``)
    on every distinct case of a state space: the step costs of every piece count, and the whole message's traffic.

    On one of ``P`` pieces such a model's step takes ``latency + slowest(traffic) / P``: :meth:`on_pieces` computes
    exactly that, case by case, with the model's own ``slowest``, so its values equal the model's evaluated at ``P``
    (``tests/test_pipeline.py`` holds them equal bit for bit).
    """

    space: StateSpace
    latency: np.ndarray  # per case
    traffic: np.ndarray  # (levels, cases), the whole message
    busiest: np.ndarray  # per case, the slowest level's traffic

    def on_pieces(self, pieces: int) -> EdgeCosts:
        """The step costs on one of `pieces` pieces."""
        return EdgeCosts(self.space, self.latency + self.busiest / pieces)


def split_costs(space: StateSpace, model: CostModel, deadline: Deadline | None = None) -> SplitCosts | None:
    """The :class:`SplitCosts` of `model` (on one piece) on `space`, or None when the model does not split."""
    split = getattr(model, "split", None)
    if split is None or getattr(model, "pieces", None) != 1:
        return None
    if (deadline or Deadline(None)).expired():
        raise SolverTimeout("step costs")
    cases = step_cases(space)
    latency, traffic = split(ARRAYS, cases.op, *_case_bits(space))
    shape = cases.op.shape
    loads = [np.broadcast_to(np.asarray(t, dtype=np.float64), shape) for t in traffic]
    return SplitCosts(space, np.broadcast_to(np.asarray(latency, dtype=np.float64), shape),
                      np.stack(loads), np.broadcast_to(np.asarray(slowest(ARRAYS, loads), dtype=np.float64), shape))


def edge_traffic(space: StateSpace, model: CostModel) -> np.ndarray:
    """Per level and distinct case of `space`, the seconds the step keeps that level's links busy under `model`."""
    cases = step_cases(space)
    return np.stack([np.broadcast_to(np.asarray(t, dtype=np.float64), cases.op.shape)
                     for t in model.traffic(ARRAYS, cases.op, *_case_bits(space))])


@lru_cache(maxsize=32)
def _case_bits(space: StateSpace) -> tuple[list[np.ndarray], ...]:
    """Per cell, the slice, scattered and rooted bits of every case."""
    cases, C = step_cases(space), space.cells
    Y, Z = cases.key & ((1 << C) - 1), cases.key >> C
    bits = lambda a: [(a >> c & 1).astype(bool) for c in range(C)]
    return bits(cases.mask), bits(Y), bits(Z)


@lru_cache(maxsize=32)
def step_cases(space: StateSpace) -> StepCases:
    """The :class:`StepCases` of a state space (cached: it depends on the collective and the cell count alone)."""
    C = space.cells
    yz = space.scattered | (space.rooted << C)
    ops, slices, keys, inverses, start = [], [], [], [], [0]
    for step in space.steps:
        unique, inverse = np.unique(yz[step.sources], return_inverse=True)
        ops.append(np.full(unique.size, OP_CODES[step.op]))
        slices.append(np.full(unique.size, step.mask))
        keys.append(unique)
        inverses.append(inverse)
        start.append(start[-1] + unique.size)
    start_ = np.asarray(start, dtype=np.int64)
    flat = np.concatenate([s + inv for s, inv in zip(start_[:-1], inverses)])  # step-major, as _rows_layout's src
    order = _rows_layout(space)[0]
    return StepCases(np.concatenate(ops), np.concatenate(slices), np.concatenate(keys), start_, tuple(inverses),
                     np.take(flat, order))


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


def windows(steps: int, pieces: int) -> int:
    """How many windows of `pieces` consecutive steps a program of at most `steps` steps needs to cover its steps."""
    return -(-steps // pieces)


def traffic_floor(done: np.ndarray, ahead: np.ndarray, steps_done: int, steps_left: int, max_steps: int,
                  pieces: int) -> np.ndarray:
    """A floor on a pipeline's period from traffic alone, per candidate (columns): the busiest level's traffic
    `done` over the steps taken so far, plus at least `ahead` in at most `steps_left` more steps (levels x
    candidates), on `pieces` pieces.

    The windows starting at every `pieces`-th step cover a program, so one of
    them carries at least its share: the whole program's traffic over the
    ``ceil(max_steps / pieces)`` windows a program of up to `max_steps` steps
    needs, the steps taken over the ``ceil(steps_done / pieces)`` windows that
    cover them, the steps to come over ``ceil(steps_left / pieces)``.
    """
    whole = (done + ahead) / windows(max_steps, pieces)
    floor = np.maximum(np.maximum(whole, done / windows(max(steps_done, 1), pieces)), ahead / windows(max(steps_left, 1), pieces))
    return floor.max(axis=0, initial=0.0)


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
    case = step_cases(costs.space).row
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


def tie_key(cost: float) -> float:
    """Cost rounded to 12 significant digits, so float noise does not break ties by length."""
    return float(f"{cost:.12g}")


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


@dataclass(frozen=True)
class WholeTraffic:
    """Each step's per-level traffic on the whole buffer, per row of :func:`successors_by_state` (the seconds it
    keeps each level's links busy), and its traffic-to-go table (:func:`traffic_to_go`).

    Traffic is linear in the bytes a step moves, so on one of ``P`` pieces
    both are these over ``P`` (``tests/test_pipeline.py`` holds both cost
    models to it): one evaluation and one table serve every piece count.
    """

    rows: np.ndarray  # (levels, rows)
    t: np.ndarray     # (steps + 1, levels, states)

    def on_pieces(self, pieces: int) -> tuple[PieceTraffic, np.ndarray]:
        """(rows, t) on one of `pieces` pieces: each over `pieces` (the rows divided where they are read; a fixed-point
        table stays one table, :func:`one_table`)."""
        t = np.broadcast_to(self.t[0] / pieces, self.t.shape) if one_table(self.t) else self.t / pieces
        return PieceTraffic(self.rows, pieces), t


@dataclass(frozen=True)
class PieceTraffic:
    """Per level and row, the traffic on one of `pieces` pieces: `whole` (the whole buffer's, levels x rows) over
    `pieces`, divided where it is read (``[:, rows]`` indexing, as an array), so no piece count copies every row."""

    whole: np.ndarray
    pieces: int

    @property
    def shape(self) -> tuple[int, ...]:
        """(levels, rows)."""
        return self.whole.shape

    def __getitem__(self, key) -> np.ndarray:
        return self.whole[key] / self.pieces


def whole_traffic(space: StateSpace, model: CostModel | None, max_steps: int, deadline: Deadline | None = None,
                  loads: np.ndarray | None = None) -> WholeTraffic:
    """The :class:`WholeTraffic` of `space` under `model` (the cost model at the whole message), or from its per-case
    traffic `loads` (levels x cases) when the caller has it (``SplitCosts.traffic``)."""
    loads = edge_traffic(space, model) if loads is None else loads
    costs = EdgeCosts(space, np.zeros(step_cases(space).op.shape), loads)
    rows = successors_by_state(costs)
    return WholeTraffic(rows.traffic, traffic_to_go(costs, max_steps, deadline, rows))


@dataclass(frozen=True)
class PipelineTables:
    """What the branch and bound needs for one piece count: step costs on one piece and their rows (with traffic),
    and the cost-to-go (`h`) and traffic-to-go (`t`) tables.

    `bracketed`: `h` is not computed for this piece count but bounded
    from the exact tables at one piece and at the most pieces
    (:func:`bracketed_tables`); otherwise they are its own.
    """

    pieces: int
    costs: EdgeCosts
    rows: Successors
    h: np.ndarray
    t: np.ndarray
    bracketed: bool = False


def pipeline_tables(costs: EdgeCosts, pieces: int, max_steps: int, deadline: Deadline | None = None,
                    whole: WholeTraffic | None = None, h: np.ndarray | None = None) -> PipelineTables:
    """The exact :class:`PipelineTables` of `costs` (the model at 1/`pieces` of the message), with `whole`'s traffic
    on `pieces` pieces if given, else the traffic `costs` carry; `h` when the caller has the cost-to-go already."""
    rows, t = _piece_traffic(costs, pieces, max_steps, deadline, whole)
    h = cost_to_go(costs, max_steps, deadline, rows) if h is None else h
    return PipelineTables(pieces, costs, rows, h, t)


def _piece_traffic(costs: EdgeCosts, pieces: int, max_steps: int, deadline: Deadline | None,
                   whole: WholeTraffic | None) -> tuple[Successors, np.ndarray]:
    """The rows of `costs` with their traffic, and the traffic-to-go table: `whole`'s on `pieces` pieces if given."""
    if whole is None:
        rows = successors_by_state(costs)
        return rows, traffic_to_go(costs, max_steps, deadline, rows)
    traffic, t = whole.on_pieces(pieces)
    return dataclasses.replace(successors_by_state(dataclasses.replace(costs, loads=None)), traffic=traffic), t


# Bracketed tables are scaled down by this much, so float rounding in the step costs never breaks their bound.
BRACKET_SLACK = 1e-12


def bracketed_tables(costs: EdgeCosts, pieces: int, one: PipelineTables, top: PipelineTables,
                     whole: WholeTraffic) -> PipelineTables | None:
    """Tables for `pieces` (1 < pieces < top.pieces) bounded from the exact ones at one piece and at ``top.pieces``,
    without a dynamic programming pass of their own; None when the step costs do not allow it.

    A step's time at 1/P of the message, as a function of ``u = 1/P``, is
    affine under the alpha-beta model (latency plus bytes over bandwidth),
    so a completion's sum of stages is a minimum of affine functions of ``u``:
    concave, above its chord. With ``1/P = lam + (1 - lam)/A``, and every
    step cost at least ``lam w_1 + (1 - lam) w_A`` (checked per case: the
    cost model decides), ``lam h_1 + (1 - lam) h_A`` bounds the cost to go,
    scaled down by BRACKET_SLACK against rounding. ``solver.certificate``
    checks the per-case condition and the table against this bound on its own.
    """
    A = top.pieces
    lam, keep = (1.0 / pieces - 1.0 / A) / (1.0 - 1.0 / A), 1.0 - BRACKET_SLACK
    w, w1, wA = costs.values, one.costs.values, top.costs.values
    if not np.all(w >= keep * (lam * w1 + (1 - lam) * wA)):
        return None
    h = keep * (lam * one.h + (1 - lam) * top.h)
    rows, t = _piece_traffic(costs, pieces, 0, None, whole)
    return PipelineTables(pieces, costs, rows, h, t, bracketed=True)


def cheapest_pipelined(costs: EdgeCosts, h: np.ndarray, t: np.ndarray, pieces: int, candidates: Candidates,
                       deadline: Deadline | None = None, rows: Successors | None = None
                       ) -> tuple[list[tuple[int, ...]], dict[RawProgram, float]]:
    """:func:`cheapest_pipelined_all` on one piece count."""
    tables = PipelineTables(pieces, costs, rows or successors_by_state(costs), h, t)
    return cheapest_pipelined_all([tables], candidates, deadline)[0]


def cheapest_pipelined_all(tables: list[PipelineTables], candidates: Candidates, deadline: Deadline | None = None
                           ) -> list[tuple[list[tuple[int, ...]], dict[RawProgram, float]]]:
    """Branch and bound over programs of two or more steps, on every piece count of `tables` at once; what it finds
    goes to `candidates`.

    One best-first queue holds the partial programs of every piece count, so a
    node is expanded only while its bound is below what the cheapest programs
    found so far over all piece counts allow. A partial program's bound: the
    stages so far, the cheapest completion (`h`), and ``pieces - 1`` periods of
    at least the period so far and each
    level's traffic so far plus its least traffic to come (`t`) spread over the
    windows of `pieces` steps a program needs (:func:`windows`). Returns, per table, the partial programs it
    expanded (step indices into the state space's steps): with the final bound,
    the certificate ``solver.certificate.check_pipelined`` checks; and the
    programs it found with their costs on that many pieces.
    """
    deadline = deadline or Deadline(None)
    tie = itertools.count()
    heap, out = [], []
    for k, tab in enumerate(tables):
        K, space = tab.h.shape[0] - 1, tab.costs.space
        spread = 1.0 / windows(K, tab.pieces)
        start = float(tab.h[K][space.start] + (tab.pieces - 1) * (tab.t[K][:, space.start] * spread).max(initial=0.0))
        # a node: depth, state, sum of stages, period so far, traffic so far per level, last P-1 rows, steps
        heap.append((start, next(tie), k, (0, space.start, 0.0, 0.0, np.zeros(tab.rows.traffic.shape[0]), (), ()), None, 0))
        out.append(([], {}))
    heapq.heapify(heap)
    near: dict[tuple[int, int], tuple] = {}  # (table, state) -> its rows' first index, costs, targets and traffic
    while heap:
        # an entry is a node, or (kids) the `pos`-th cheapest of a node's children: the queue holds one child per
        # expanded node at a time, its next sibling entering when it leaves
        bound_now, _, k, node, kids, pos = heapq.heappop(heap)
        if bound_now > candidates.bound() or not math.isfinite(bound_now):
            break
        if deadline.expired():
            raise SolverTimeout("explicit search")
        tab, (expanded, found) = tables[k], out[k]
        space, rows, pieces, K = tab.costs.space, tab.rows, tab.pieces, tab.h.shape[0] - 1
        if kids is not None:
            if pos + 1 < len(kids.order):
                heapq.heappush(heap, (kids.bounds[pos + 1], next(tie), k, node, kids, pos + 1))
            node = kids.child(node, kids.order[pos], rows, pieces)
        depth, state, g, period, carried, recent, prog = node
        expanded.append(prog)
        if depth >= 2 and space.goal[state]:
            raw = tuple((space.steps[j].op, space.steps[j].mask) for j in prog)
            found[raw] = g + (pieces - 1) * period
            candidates.offer(raw, pieces, found[raw])
        if depth == K:
            continue
        if (k, state) not in near:
            lo, hi = rows.offsets[state], rows.offsets[state + 1]
            near[k, state] = (lo, rows.weight[lo:hi], rows.target[lo:hi], rows.traffic[:, lo:hi])
        lo, w, target, load = near[k, state]
        window = rows.traffic[:, list(recent)].sum(axis=1) if recent else np.zeros(load.shape[0])
        child_period = np.maximum(np.maximum(period, w), (window[:, None] + load).max(axis=0, initial=0.0))
        child_carried = carried[:, None] + load
        r = K - depth - 1
        period_floor = traffic_floor(child_carried, tab.t[r][:, target], depth + 1, r, K, pieces)
        lower = g + w + tab.h[r][target] + (pieces - 1) * np.maximum(child_period, period_floor)
        within = np.flatnonzero(lower <= candidates.bound())
        if within.size:
            order = within[np.argsort(lower[within], kind="stable")]
            children = _SortedChildren(order.tolist(), lower[order].tolist(), lo, w, target, child_period, child_carried)
            heapq.heappush(heap, (children.bounds[0], next(tie), k, node, children, 0))
    return out


@dataclass(frozen=True)
class _SortedChildren:
    """The children of one node of :func:`cheapest_pipelined_all` within the bound when it was expanded, cheapest
    bound first (`order`: their rows' offsets from `lo`; `bounds`: their lower bounds), with what the node needs to
    build each."""

    order: list[int]
    bounds: list[float]
    lo: int
    w: np.ndarray
    target: np.ndarray
    period: np.ndarray
    carried: np.ndarray

    def child(self, node: tuple, i: int, rows: Successors, pieces: int) -> tuple:
        """Child `i` of `node` as a node (depth, state, sum of stages, period, traffic so far, last P-1 rows, steps)."""
        depth, _, g, _, _, recent, prog = node
        row = self.lo + i
        return (depth + 1, int(self.target[i]), float(g + self.w[i]), float(self.period[i]), self.carried[:, i],
                (recent + (row,))[-(pieces - 1):], prog + (int(rows.step[row]),))
