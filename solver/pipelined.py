"""Pipelined programs (``Program.pipeline``): the tables of each piece count, and one branch and bound over all.

:func:`cheapest_pipelined_all` is one branch and bound over the partial
programs of every piece count at once, with the cost-to-go and traffic-to-go
tables of each piece count (:class:`PipelineTables`) as its bounds; the
partial programs it expands are the certificate
``solver.pipelined_certificate.check_pipelined_all`` checks. Traffic is linear in the bytes
a step moves, so one evaluation on the whole buffer (:class:`WholeTraffic`)
serves every piece count; under alpha-beta the cost-to-go of a piece count
can be bounded from the exact tables at one piece and at the most pieces
(:func:`bracketed_tables`).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
from dataclasses import dataclass

import numpy as np

from p2synth.hierarchies.program import RawProgram
from p2synth.hierarchies.statespace import StateSpace
from p2synth.encodings.deadline import Deadline
from p2synth.encodings.errors import SolverTimeout
from p2synth.solver.cost import CostModel
from p2synth.solver.costtogo import (LevelValues, PieceTraffic, Successors, cost_to_go, stages_and_traffic, successors_by_state,
                                     sum_to_go, traffic_to_go)
from p2synth.solver.stepcosts import EdgeCosts, edge_traffic, step_cases
from p2synth.solver.symmetry import Pair, all_tied, orbit, pair_bits
from p2synth.solver.topn import Candidates


def windows(steps: int, pieces: int) -> int:
    """How many windows of `pieces` consecutive steps a program of at most `steps` steps needs to cover its steps."""
    return -(-steps // pieces)


def period_share(steps: int, pieces: int) -> float:
    """``(pieces - 1) / windows(steps, pieces)``: how many times a level's whole traffic (on one piece) a program of at
    most `steps` steps spends at least in its ``pieces - 1`` periods (one window of `pieces` steps carries at least
    ``1 / windows`` of it, and the period is at least every window's traffic)."""
    return (pieces - 1) / windows(steps, pieces)


def joint_values(rows: Successors, pieces: int, max_steps: int) -> LevelValues:
    """Per level and row (levels x rows, made a level at a time): the step's stage plus :func:`period_share` times its
    traffic on that level, whose sum over a program's steps bounds its pipelined cost from below, level by level."""
    return stages_and_traffic(rows, period_share(max_steps, pieces))


def joint_to_go(rows: Successors, space: StateSpace, pieces: int, max_steps: int,
                deadline: Deadline | None = None) -> np.ndarray:
    """``j[r][l][s]``: the least sum of :func:`joint_values` on level `l` over the completions from `s` in at most `r`
    steps (levels minimised
    one at a time; :func:`solver.costtogo.sum_to_go`).

    A program's cost on `pieces` pieces is at least its sum of stages plus
    ``pieces - 1`` periods, each at least any window's traffic, so at least
    ``stages + period_share * traffic_l`` for every level ``l``: a sum over its
    steps. Minimising that sum per level bounds the stages and the periods
    together, where ``h`` and ``t`` bound them each on their own (and with
    their minima taken over different completions).
    """
    return sum_to_go(space, joint_values(rows, pieces, max_steps), rows, max_steps, deadline)


def _traffic_and_scale(rows: Successors) -> tuple[np.ndarray, float]:
    """The rows' traffic as an array (levels x rows) and the factor that puts it on one piece: a
    :class:`~solver.costtogo.PieceTraffic`'s whole buffer and one over its piece count (read without dividing every
    row), else the rows' own and 1."""
    traffic = rows.traffic
    return (traffic.whole, 1.0 / traffic.pieces) if isinstance(traffic, PieceTraffic) else (traffic, 1.0)


def finished_cost(g: float, period: float, carried: np.ndarray, pieces: int) -> float:
    """A whole program's cost on `pieces` pieces from what the search carries: its sum of stages `g`, its period, and
    its traffic per level on one piece (`carried`); ``solver.pipeline_time.pipelined_seconds`` bit for bit (the level floor
    included, :func:`solver.pipeline_time.level_floor`)."""
    seconds = g + (pieces - 1) * period
    floor = float(carried.max(initial=0.0)) * pieces
    return float(floor if floor > seconds else seconds)


@dataclass(frozen=True)
class WholeTraffic:
    """Each step's per-level traffic on the whole buffer, per row of :func:`solver.costtogo.successors_by_state`
    (the seconds it keeps each level's links busy), and its traffic-to-go table
    (:func:`solver.costtogo.traffic_to_go`).

    Traffic is linear in the bytes a step moves, so on one of ``P`` pieces
    both are these over ``P`` (``tests/test_pipeline.py`` holds both cost
    models to it): one evaluation and one table serve every piece count.
    """

    rows: np.ndarray  # (levels, rows)
    t: np.ndarray     # (steps + 1, levels, states)

    def on_pieces(self, pieces: int) -> tuple[PieceTraffic, np.ndarray]:
        """(rows, t) on one of `pieces` pieces: each over `pieces` (the rows divided where they are read)."""
        return PieceTraffic(self.rows, pieces), self.t / pieces


def whole_traffic(space: StateSpace, model: CostModel | None, max_steps: int, deadline: Deadline | None = None,
                  loads: np.ndarray | None = None) -> WholeTraffic:
    """The :class:`WholeTraffic` of `space` under `model` (the cost model at the whole message), or from its per-case
    traffic `loads` (levels x cases) when the caller has it (``solver.stepcosts.SplitCosts.traffic``)."""
    loads = edge_traffic(space, model) if loads is None else loads
    costs = EdgeCosts(space, np.zeros(step_cases(space).op.shape), loads)
    rows = successors_by_state(costs)
    return WholeTraffic(rows.traffic, traffic_to_go(costs, max_steps, deadline, rows))


@dataclass(frozen=True)
class PipelineTables:
    """What the branch and bound needs for one piece count: step costs on one piece and their rows (with traffic),
    and the cost-to-go (`h`), traffic-to-go (`t`) and joint (`j`, :func:`joint_to_go`) tables.

    `bracketed`: `h` is not computed for this piece count but bounded
    from the exact tables at one piece and at the most pieces
    (:func:`bracketed_tables`); otherwise they are its own.
    """

    pieces: int
    costs: EdgeCosts
    rows: Successors
    h: np.ndarray
    t: np.ndarray
    j: np.ndarray | None = None  # None: no joint bound (one piece, or not built: with_joint)
    bracketed: bool = False

    def with_joint(self, deadline: Deadline | None = None) -> PipelineTables:
        """These tables with the joint table `j` built (:func:`joint_to_go`)."""
        K = self.h.shape[0] - 1
        return dataclasses.replace(self, j=joint_to_go(self.rows, self.costs.space, self.pieces, K, deadline))


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
    affine under the alpha-beta model (latency plus bytes over bandwidth), or
    the cheaper of two affine ones (an all_reduce's ring and tree), so a
    completion's sum of stages is a minimum of concave functions of ``u``:
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
    K = h.shape[0] - 1
    rows, t = _piece_traffic(costs, pieces, K, None, whole)
    return PipelineTables(pieces, costs, rows, h, t, bracketed=True)


class OverBudget(Exception):
    """The branch and bound expanded more partial programs than it was allowed (``budget``)."""


def cheapest_pipelined_all(tables: list[PipelineTables], candidates: Candidates, deadline: Deadline | None = None,
                           pairs: tuple[Pair, ...] = (), budget: int | None = None
                           ) -> list[tuple[list[tuple[int, ...]], dict[RawProgram, float]]]:
    """Branch and bound over programs of two or more steps, on every piece count of `tables` at once; what it finds
    goes to `candidates`.

    One best-first queue holds the partial programs of every piece count, so a
    node is expanded only while its bound is below what the cheapest programs
    found so far over all piece counts allow. A partial program's bound: the
    stages so far, the cheapest completion (`h`), and ``pieces - 1`` periods of
    at least the period so far and each
    level's traffic so far plus its least traffic to come (`t`) spread over the
    windows of `pieces` steps a program needs (:func:`windows`); and at least
    ``pieces`` times each level's traffic so far plus its least to come (the
    level floor of ``solver.pipeline_time.pipelined_seconds``); and the joint bound: the stages so far plus :func:`period_share` times each level's
    traffic so far, plus `j` (:func:`joint_to_go`).

    `pairs`: interchangeable cells (``solver.symmetry``; the caller has
    checked that swapping them keeps every step cost). Only leaders are
    expanded, a node carrying which pairs are still tied, and each program
    found is offered with its whole orbit. Returns, per table, the partial
    programs it expanded (step indices into the state space's steps): with the
    final bound, the certificate
    ``solver.pipelined_certificate.check_pipelined_all`` checks; and the
    programs it found (whole orbits) with their costs on that many pieces.
    Raises OverBudget once it has expanded more than `budget` partial programs
    (what it offered `candidates` stays valid).
    """
    deadline = deadline or Deadline(None)
    tie = itertools.count()
    heap, out = [], []
    for k, tab in enumerate(tables):
        K, space = tab.h.shape[0] - 1, tab.costs.space
        spread = 1.0 / windows(K, tab.pieces)
        start = float(max(tab.h[K][space.start] + (tab.pieces - 1) * (tab.t[K][:, space.start] * spread).max(initial=0.0),
                          tab.pieces * tab.t[K][:, space.start].max(initial=0.0),
                          0.0 if tab.j is None else tab.j[K][:, space.start].max(initial=0.0)))
        # a node: depth, state, sum of stages, period so far, traffic so far per level, last P-1 rows, steps, tied pairs
        root = (0, space.start, 0.0, 0.0, np.zeros(tab.rows.traffic.shape[0]), (), (), all_tied(pairs))
        heap.append((start, next(tie), k, root, None, 0))
        out.append(([], {}))
    heapq.heapify(heap)
    traffic = [_traffic_and_scale(tab.rows) for tab in tables]
    near: dict[tuple[int, int, int], _Near] = {}  # (table, state, steps left after the step) -> what its rows need
    while heap:
        # an entry is a node, or (kids) the `pos`-th cheapest of a node's children: the queue holds one child per
        # expanded node at a time, its next sibling entering when it leaves
        bound_now, _, k, node, kids, pos = heapq.heappop(heap)
        limit = candidates.bound()
        if bound_now > limit or not math.isfinite(bound_now):
            break
        if deadline.expired():
            raise SolverTimeout("explicit search")
        tab, (expanded, found) = tables[k], out[k]
        space, rows, pieces, K = tab.costs.space, tab.rows, tab.pieces, tab.h.shape[0] - 1
        if kids is not None:
            if pos + 1 < len(kids.order):
                heapq.heappush(heap, (kids.bounds[pos + 1], next(tie), k, node, kids, pos + 1))
            node = kids.child(node, kids.order[pos], rows, pieces)
        depth, state, g, period, carried, recent, prog, tied = node
        expanded.append(prog)
        if budget is not None:
            budget -= 1
            if budget < 0:
                raise OverBudget(f"more than the allowed partial programs on {pieces} pieces")
        if depth >= 2 and space.goal[state]:
            cost = finished_cost(g, period, carried, pieces)
            for raw in orbit(tuple((space.steps[j].op, space.steps[j].mask) for j in prog), pairs):
                found[raw] = cost
                candidates.offer(raw, pieces, cost)
            limit = candidates.bound()
        if depth == K:
            continue
        r = K - depth - 1
        rows_of = near.get((k, state, r))
        if rows_of is None:
            rows_of = near[k, state, r] = _Near.of(tab, state, r, pairs)
        lo, w, target, load = rows_of.lo, rows_of.w, rows_of.target, rows_of.load
        # (levels x rows arrays, never empty: np.maximum.reduce is ndarray.max without its Python wrapper)
        window = traffic[k][0][:, list(recent)].sum(axis=1) * traffic[k][1] if recent else np.zeros(load.shape[0])
        child_period = np.maximum(np.maximum(period, w), _top(window[:, None] + load))
        child_carried = carried[:, None] + load
        total = carried[:, None] + rows_of.total  # each level's traffic so far, the step's, and the least to come
        # the bounds of the docstring, with what depends on the state and steps left alone kept in rows_of
        period_floor = _top(np.maximum(np.maximum(total * (1.0 / windows(K, pieces)),
                                                  child_carried * (1.0 / windows(depth + 1, pieces))), rows_of.ahead))
        lower = np.maximum(g + rows_of.wh + (pieces - 1) * np.maximum(child_period, period_floor), pieces * _top(total))
        if rows_of.joint is not None:
            lower = np.maximum(lower, g + _top(period_share(K, pieces) * carried[:, None] + rows_of.joint))
        within = ((lower <= limit) & ((rows_of.breaks & tied) == 0)).nonzero()[0]
        if within.size:
            order = within[np.argsort(lower[within], kind="stable")]
            children = _SortedChildren(order.tolist(), lower[order].tolist(), lo, w, target, child_period, child_carried,
                                       rows_of.splits)
            heapq.heappush(heap, (children.bounds[0], next(tie), k, node, children, 0))
    return out


def _top(levels_by_rows: np.ndarray) -> np.ndarray:
    """Per row (column), the largest over the levels."""
    return np.maximum.reduce(levels_by_rows, axis=0)


@dataclass(frozen=True)
class _Near:
    """The steps out of one state with `r` steps left after them, as :func:`cheapest_pipelined_all` bounds them: their
    rows (from `lo`), costs, targets and traffic (`load`); the parts of the bounds that depend on nothing else: the
    cost plus `h` (`wh`), the traffic plus `t` (`total`), `t` over the windows of the steps to come (`ahead`), the
    cost plus the period share of the traffic plus `j` (`joint`); and the pairs each breaks or splits
    (``solver.symmetry.pair_bits``)."""

    lo: int
    w: np.ndarray
    target: np.ndarray
    load: np.ndarray
    wh: np.ndarray
    total: np.ndarray
    ahead: np.ndarray
    joint: np.ndarray | None
    breaks: np.ndarray
    splits: np.ndarray

    @staticmethod
    def of(tab: PipelineTables, state: int, r: int, pairs: tuple[Pair, ...]) -> _Near:
        """The steps out of `state` in `tab` with `r` steps left after them."""
        rows, space, K = tab.rows, tab.costs.space, tab.h.shape[0] - 1
        lo, hi = int(rows.offsets[state]), int(rows.offsets[state + 1])
        w, target, load = rows.weight[lo:hi], rows.target[lo:hi], rows.traffic[:, lo:hi]
        t = tab.t[r][:, target]
        masks = np.fromiter((space.steps[j].mask for j in rows.step[lo:hi]), dtype=np.int64, count=hi - lo)
        return _Near(lo, w, target, load, w + tab.h[r][target], load + t, t * (1.0 / windows(max(r, 1), tab.pieces)),
                     None if tab.j is None else w + period_share(K, tab.pieces) * load + tab.j[r][:, target],
                     *pair_bits(masks, pairs))


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
    splits: np.ndarray  # per row, the pairs (bits) its slice splits (solver.symmetry.pair_bits)

    def child(self, node: tuple, i: int, rows: Successors, pieces: int) -> tuple:
        """Child `i` of `node` as a node (depth, state, sum of stages, period, traffic so far, last P-1 rows, steps,
        pairs still tied)."""
        depth, _, g, _, _, recent, prog, tied = node
        row = self.lo + i
        return (depth + 1, int(self.target[i]), float(g + self.w[i]), float(self.period[i]), self.carried[:, i],
                (recent + (row,))[-(pieces - 1):], prog + (int(rows.step[row]),), tied & ~int(self.splits[i]))
