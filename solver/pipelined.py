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
from p2synth.solver.costtogo import PieceTraffic, Successors, cost_to_go, successors_by_state, sum_to_go, traffic_to_go
from p2synth.solver.stepcosts import EdgeCosts, edge_traffic, step_cases
from p2synth.solver.topn import Candidates


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


def period_share(steps: int, pieces: int) -> float:
    """``(pieces - 1) / windows(steps, pieces)``: how many times a level's whole traffic (on one piece) a program of at
    most `steps` steps spends at least in its ``pieces - 1`` periods (one window of `pieces` steps carries at least
    ``1 / windows`` of it, and the period is at least every window's traffic)."""
    return (pieces - 1) / windows(steps, pieces)


def joint_values(rows: Successors, pieces: int, max_steps: int) -> np.ndarray:
    """Per level and row (levels x rows): the step's stage plus :func:`period_share` times its traffic on that level,
    whose sum over a program's steps bounds its pipelined cost from below, level by level."""
    share = period_share(max_steps, pieces)
    return rows.weight[None, :] + share * rows.traffic[:, :]


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


def joint_bound(g: np.ndarray, carried: np.ndarray, j: np.ndarray, pieces: int, max_steps: int) -> np.ndarray:
    """The joint floor of :func:`joint_to_go` for partial programs (columns): stages so far `g`, each level's traffic
    so far `carried` (levels x candidates) and the table's values `j` at their states (levels x candidates)."""
    return (g + (period_share(max_steps, pieces) * carried + j)).max(axis=0, initial=0.0)


def finished_cost(g: float, period: float, carried: np.ndarray, pieces: int) -> float:
    """A whole program's cost on `pieces` pieces from what the search carries: its sum of stages `g`, its period, and
    its traffic per level on one piece (`carried`); ``solver.cost.pipelined_seconds`` bit for bit (the level floor
    included, :func:`solver.cost.level_floor`)."""
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
    j: np.ndarray | None  # None on one piece, which the branch and bound never searches
    bracketed: bool = False


def pipeline_tables(costs: EdgeCosts, pieces: int, max_steps: int, deadline: Deadline | None = None,
                    whole: WholeTraffic | None = None, h: np.ndarray | None = None) -> PipelineTables:
    """The exact :class:`PipelineTables` of `costs` (the model at 1/`pieces` of the message), with `whole`'s traffic
    on `pieces` pieces if given, else the traffic `costs` carry; `h` when the caller has the cost-to-go already."""
    rows, t = _piece_traffic(costs, pieces, max_steps, deadline, whole)
    h = cost_to_go(costs, max_steps, deadline, rows) if h is None else h
    j = joint_to_go(rows, costs.space, pieces, max_steps, deadline) if pieces > 1 else None
    return PipelineTables(pieces, costs, rows, h, t, j)


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
    return PipelineTables(pieces, costs, rows, h, t, joint_to_go(rows, costs.space, pieces, K), bracketed=True)


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
    windows of `pieces` steps a program needs (:func:`windows`); and at least
    ``pieces`` times each level's traffic so far plus its least to come (the
    level floor of ``solver.cost.pipelined_seconds``). Returns, per table, the partial programs it
    expanded (step indices into the state space's steps): with the final bound,
    the certificate ``solver.pipelined_certificate.check_pipelined_all`` checks; and the
    programs it found with their costs on that many pieces.
    """
    deadline = deadline or Deadline(None)
    tie = itertools.count()
    heap, out = [], []
    for k, tab in enumerate(tables):
        K, space = tab.h.shape[0] - 1, tab.costs.space
        spread = 1.0 / windows(K, tab.pieces)
        start = float(max(tab.h[K][space.start] + (tab.pieces - 1) * (tab.t[K][:, space.start] * spread).max(initial=0.0),
                          tab.pieces * tab.t[K][:, space.start].max(initial=0.0),
                          tab.j[K][:, space.start].max(initial=0.0)))
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
            found[raw] = finished_cost(g, period, carried, pieces)
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
        lower = np.maximum(np.maximum(g + w + tab.h[r][target] + (pieces - 1) * np.maximum(child_period, period_floor),
                                      pieces * (child_carried + tab.t[r][:, target]).max(axis=0, initial=0.0)),
                           joint_bound(g + w, child_carried, tab.j[r][:, target], pieces, K))
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
