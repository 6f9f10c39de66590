"""Check the certificate of the pipelined search: that no program run on some number of pieces and not listed is cheaper.

A branch and bound over the programs of every piece count
(``solver.pipelined.cheapest_pipelined_all``) leaves, per piece count, the tree
of partial programs it expanded; with the final bound ``c`` (the N-th cheapest
cost over every piece count) that tree is the certificate. It is checked, never
trusted (:func:`check_pipelined_all`): the tables the bounds came from (the
Bellman, traffic and joint inequalities of ``solver/certificate.py``, or the chord
argument of a bracketed table), then every valid step out of the tree leading
to a lower bound of at least ``c``, and every program inside it either listed at
its exact cost or no cheaper than ``c``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from p2synth.hierarchies.program import RawProgram
from p2synth.solver.certificate import TOLERANCE, CertificateError, check_bellman, check_sum_table
from p2synth.solver.algebra import PY
from p2synth.solver.pipeline_time import pipelined_seconds
from p2synth.solver.costtogo import PieceTraffic, Successors, rows_layout, stages_and_traffic, successors_by_state
from p2synth.solver.pipelined import BRACKET_SLACK, PipelineTables, WholeTraffic, finished_cost, windows
from p2synth.solver.stepcosts import EdgeCosts
from p2synth.solver.symmetry import Pair, orbit, swap_mask


def joint_share(max_steps: int, pieces: int) -> float:
    """How many times a level's whole traffic on one piece a program of at most `max_steps` steps spends at least in
    the ``pieces - 1`` periods of a `pieces`-piece pipeline, written here apart from the search's
    (``solver.pipelined.period_share``): the windows of `pieces` steps starting at steps 0, `pieces`, ... cover the
    program with ``ceil(max_steps / pieces)`` windows, so one carries at least that share of the level's traffic, and
    the period is at least every window's traffic (``solver.pipeline_time.pipeline_period``)."""
    return (pieces - 1) / math.ceil(max_steps / pieces)


def check_pipelined_all(whole: WholeTraffic, one: PipelineTables, tables: Sequence[PipelineTables],
                        searched: Sequence[tuple[Sequence[tuple[int, ...]], dict[RawProgram, float]]], threshold: float,
                        checked: tuple[EdgeCosts, np.ndarray] | None = None, pairs: Sequence[Pair] = ()) -> None:
    """Check a branch and bound over several piece counts (``solver.pipelined.cheapest_pipelined_all``): per piece
    count in `tables` (ascending), its (expanded tree, programs found) in `searched`, as :func:`check_pipelined`
    does; CertificateError naming the piece count otherwise.

    * The traffic is checked once: `whole`'s traffic-to-go table against its
      rows; then every table's traffic and traffic-to-go table must be
      `whole`'s over its piece count (``WholeTraffic.on_pieces``; traffic is
      linear in the bytes moved). Dividing every term of an inequality by
      the same count keeps it, up to a few units in the last place, which the
      slack of the check covers many times over.
    * `one` (one piece) and the most pieces have exact tables: their Bellman
      inequalities are checked. A bracketed table (``PipelineTables.bracketed``)
      is checked by its argument: every step cost of its piece count is at
      least the chord ``lam w_1 + (1 - lam) w_A`` (less BRACKET_SLACK); then
      no completion costs less than the same chord of the two exact bounds (a
      minimum of sums is at least the sum of the minima); the table must lie
      at or below it, scaled by ``1 - BRACKET_SLACK``.
    * Every searched piece count's joint table (:func:`_check_joint`), then its
      tree (the three bounds of :func:`check_pipelined`).
    * With `pairs` (interchangeable cells, ``solver.symmetry``), the search
      expanded leaders only. Each pair must be a symmetry of every step cost
      and of the traffic (:func:`check_symmetry`), each piece count's programs
      found must be closed under the swaps at equal cost, and a step out of the
      tree below the threshold must lead to a prefix that is no leader (the
      least of its orbit is another, computed here from the orbit itself).
      Then an unlisted program's leader, of the same cost, is unlisted too (the
      lists are closed) and is covered by the tree.

    `checked`: step costs and a cost-to-go table whose Bellman inequalities were
    checked already (the sequential search's certificate, :func:`solver.certificate.check`); a table
    holding exactly these (the same objects) is not checked again.
    """
    if len(searched) != len(tables) or not tables:
        raise CertificateError(f"{len(searched)} searches for {len(tables)} piece counts")
    top = tables[-1]
    space, K = one.costs.space, one.h.shape[0] - 1
    check_sum_table(space, whole.t, whole.rows, one.rows, "traffic")
    if one.pieces != 1 or one.bracketed or top.bracketed or top.pieces != max(t.pieces for t in tables):
        raise CertificateError("the exact tables must be those of one piece and of the most pieces")
    for tab in (one, *tables):
        ours = tab.rows.traffic
        if not (isinstance(ours, PieceTraffic) and ours.whole is whole.rows and ours.pieces == tab.pieces
                and np.array_equal(tab.t, whole.on_pieces(tab.pieces)[1])):
            raise CertificateError(f"{tab.pieces} pieces: the traffic is not the whole buffer's over {tab.pieces}")
        try:
            if tab.bracketed:
                _check_bracketed(tab, one, top)
            else:
                if checked is None or tab.costs is not checked[0] or tab.h is not checked[1]:
                    check_bellman(tab.costs, tab.h, tab.rows)
        except CertificateError as e:
            raise CertificateError(f"{tab.pieces} pieces: {e}") from None
    for pair in pairs:
        check_symmetry(space, [tab.rows for tab in tables], whole.rows, pair)
    for tab, (expanded, found) in zip(tables, searched):
        try:
            if tab.j is not None:
                _check_joint(space, tab.j, tab.rows, tab.pieces, K)
            _check_closed(found, pairs)
            _check_tree(tab.costs, tab.h, tab.t, tab.j, tab.pieces, expanded, found, threshold, tab.rows, pairs)
        except CertificateError as e:
            raise CertificateError(f"{tab.pieces} pieces: {e}") from None


def check_symmetry(space, rows: Sequence[Successors], traffic: np.ndarray, pair: Pair) -> None:
    """That swapping the two cells of `pair` maps every step valid in every state to a step valid in the swapped
    state, into the swapped target (:func:`_swapped_rows`), at the same cost under each of `rows` (within 1e-12, for
    floating-point sums in another order) and with the same traffic per level (`traffic`, levels x rows); else
    CertificateError."""
    a, b = pair
    layout = rows_layout(space)
    pos = _swapped_rows(space, pair)
    if pos is None:
        raise CertificateError(f"swapping cells {a} and {b} does not map the steps onto the steps")
    for r in rows:
        if not (np.array_equal(r.offsets, layout[0]) and np.array_equal(r.step, layout[1])):
            raise CertificateError("the rows are not the state space's")
        if not _near_equal(r.weight[pos], r.weight):
            raise CertificateError(f"swapping cells {a} and {b} changes a step's cost")
    if not _near_equal(traffic[:, pos], traffic):
        raise CertificateError(f"swapping cells {a} and {b} changes a step's traffic")


def _near_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal within 1e-12 relative (equal outright in the common case, checked first)."""
    return np.array_equal(a, b) or np.allclose(a, b, rtol=1e-12, atol=0.0)


@lru_cache(maxsize=64)
def _swapped_rows(space, pair: Pair) -> np.ndarray | None:
    """Per row of the state space (``solver.costtogo`` layout: by state, steps in order), the row of the same step
    with the cells of `pair` swapped, taken in the state with their statuses swapped; None where such a step is not
    valid there or leads elsewhere than the swapped target. It depends on the state space alone."""
    a, b = pair
    R = space.radix
    offsets, step, target, _ = rows_layout(space)
    src = np.repeat(np.arange(space.size, dtype=np.int64), np.diff(offsets))

    def swapped(states: np.ndarray) -> np.ndarray:
        da, db = states // R ** a % R, states // R ** b % R
        return states + (db - da) * R ** a + (da - db) * R ** b

    index = {(s.op, s.mask): j for j, s in enumerate(space.steps)}
    image = np.array([index.get((s.op, swap_mask(s.mask, pair)), -1) for s in space.steps], dtype=np.int64)
    n = len(space.steps)
    key = src * n + step
    want = swapped(src) * n + image[step]
    pos = np.minimum(np.searchsorted(key, want), key.size - 1)
    if np.any(image[step] < 0) or np.any(key[pos] != want) or np.any(target[pos] != swapped(target)):
        return None
    return pos


def _check_closed(found: dict[RawProgram, float], pairs: Sequence[Pair]) -> None:
    """Every program found has each swap of `pairs` found too, at the same cost."""
    for raw, cost in found.items():
        for pair in pairs:
            twin = tuple((op, swap_mask(m, pair)) for op, m in raw)
            if twin not in found or not math.isclose(found[twin], cost, rel_tol=1e-12):
                raise CertificateError(f"{raw} is listed but its swap of cells {pair} is not, at its cost")


def _leads(masks: tuple[int, ...], pairs: Sequence[Pair]) -> bool:
    """Whether the masks of a prefix are the least of their orbit under the swaps of `pairs` (its whole orbit)."""
    return min(tuple(m for _, m in p) for p in orbit(tuple((None, m) for m in masks), pairs)) == masks


def _check_bracketed(tab: PipelineTables, one: PipelineTables, top: PipelineTables) -> None:
    """A bracketed table's per-case conditions and its bounds (see :func:`check_pipelined_all`)."""
    P, A = tab.pieces, top.pieces
    if not 1 < P < A:
        raise CertificateError(f"a bracketed table needs 1 < pieces < {A}")
    lam = (1.0 / P - 1.0 / A) / (1.0 - 1.0 / A)
    keep = 1.0 - BRACKET_SLACK
    w, w1, wA = tab.costs.values, one.costs.values, top.costs.values
    if not np.all(w >= keep * (lam * w1 + (1 - lam) * wA)):
        raise CertificateError("a step cost lies below the chord of one piece's and the most pieces'")
    if np.isnan(tab.h).any() or np.any(tab.h > keep * (lam * one.h + (1 - lam) * top.h)):
        raise CertificateError("the bracketed cost-to-go lies above the chord of the exact ones")


def check_pipelined(tab: PipelineTables, expanded: Sequence[tuple[int, ...]], found: dict[RawProgram, float],
                    threshold: float) -> None:
    """Check that every program of two or more steps run on ``tab.pieces`` pieces and not in `found` costs at least
    `threshold`, from the exact tables `tab` (not bracketed) and the tree a branch and bound expanded.

    `tab` holds the step costs on one piece, with traffic, and the tables the
    bounds come from, each checked here: `h` (Bellman), `t` and `j`
    (:func:`_check_joint`). `expanded` is the tree (prefixes as step indices,
    the empty one included); every valid step out of it must lead to a lower
    bound of at least `threshold`, the largest of three:

    * the stages so far, `h` for the rest of the sum, and ``pieces - 1``
      periods of at least the period so far and each level's traffic so far
      plus `t`, over the windows of `pieces` steps a program needs (a
      program's traffic on a level spreads over at most ``ceil(K / pieces)``
      windows, so some window carries that fraction of it);
    * ``pieces`` times each level's traffic so far plus `t` (the level floor of
      ``solver.pipeline_time.pipelined_seconds``: a level carries every piece of every
      step);
    * where the tables have `j`: per level, the stages so far plus
      :func:`joint_share` times its traffic so far, plus `j` (the stages and
      the periods bounded together).

    Every program inside the tree is either in `found` at its exact cost
    (recomputed here with ``solver.pipeline_time.pipelined_seconds``) or costs at least
    `threshold`. CertificateError otherwise.
    """
    if tab.bracketed:
        raise CertificateError("a bracketed table is checked against the exact ones (check_pipelined_all)")
    K = tab.h.shape[0] - 1
    check_sum_table(tab.costs.space, tab.t, tab.rows.traffic, tab.rows, "traffic")
    check_bellman(tab.costs, tab.h, tab.rows)
    if tab.j is not None:
        _check_joint(tab.costs.space, tab.j, tab.rows, tab.pieces, K)
    _check_tree(tab.costs, tab.h, tab.t, tab.j, tab.pieces, expanded, found, threshold, tab.rows)


def _check_joint(space, j: np.ndarray, rows: Successors, pieces: int, max_steps: int) -> None:
    """The joint table's inequalities: ``j[r][l]`` bounds the sum over a completion of each step's stage plus
    :func:`joint_share` times its traffic on level ``l`` (``solver.pipelined.joint_to_go``); those sums over a whole
    program are each at most its cost on `pieces` pieces (the stages are the fill, the share a floor on the periods)."""
    check_sum_table(space, j, stages_and_traffic(rows, joint_share(max_steps, pieces)), rows, "joint")


def _traffic_floor(done: np.ndarray, ahead: np.ndarray, steps_done: int, steps_left: int, max_steps: int,
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


def _check_tree(costs: EdgeCosts, h: np.ndarray, t: np.ndarray, j: np.ndarray | None, pieces: int,
                expanded: Sequence[tuple[int, ...]], found: dict[RawProgram, float], threshold: float,
                rows: Successors, pairs: Sequence[Pair] = ()) -> None:
    """The expanded tree of :func:`check_pipelined`, its tables already checked: depth by depth, every node's
    children at once (:class:`_Frontier`)."""
    space, K = costs.space, h.shape[0] - 1
    spread, share = 1.0 / windows(K, pieces), joint_share(K, pieces)
    floor = threshold * (1 - TOLERANCE)
    tree = set(expanded)
    if any(q[:-1] not in tree for q in tree if q) or (tree and () not in tree):
        raise CertificateError("the expanded tree does not hold every prefix of its nodes")
    if not tree:  # nothing expanded: the bound of the empty program must already exceed the threshold
        root = max(h[K][space.start] + (pieces - 1) * float((t[K][:, space.start] * spread).max(initial=0.0)),
                   pieces * float(t[K][:, space.start].max(initial=0.0)),
                   0.0 if j is None else float(j[K][:, space.start].max(initial=0.0)))
        if not root >= floor:
            raise CertificateError(f"nothing was expanded, yet the empty program's bound {root:.6g} is below {threshold:.6g}")
        return
    by_depth: dict[int, list[tuple[int, ...]]] = {}
    for q in sorted(tree):
        by_depth.setdefault(len(q), []).append(q)
    node = _Frontier.root(space.start, rows.traffic.shape[0], pieces)
    for d in range(K + 1):
        if not node.nodes:
            break
        if d >= 2:
            for i in np.flatnonzero(space.goal[node.state]).tolist():
                _program_in_tree(costs, rows, node.nodes[i], node.stages[i],
                                 finished_cost(node.g[i], node.period[i], node.carried[:, i], pieces),
                                 pieces, found, floor, threshold)
        if d == K:
            break
        kids = by_depth.get(d + 1, [])
        child = node.children(rows, len(space.steps))
        r = K - d - 1
        carried = node.carried[:, child.parent] + child.load
        floor_period = _traffic_floor(carried, t[r][:, child.target], d + 1, r, K, pieces)
        g = node.g[child.parent] + child.w
        lower = np.maximum(g + h[r][child.target] + (pieces - 1) * np.maximum(child.period, floor_period),
                           pieces * (carried + t[r][:, child.target]).max(axis=0, initial=0.0))
        if j is not None:
            lower = np.maximum(lower, (g + share * carried + j[r][:, child.target]).max(axis=0, initial=0.0))
        index = {q: i for i, q in enumerate(node.nodes)}
        keys = np.array([index[q[:-1]] * len(space.steps) + q[-1] for q in kids], dtype=np.int64)
        pos = np.searchsorted(child.key, keys)
        if keys.size and (pos.max() >= child.key.size or np.any(child.key[np.minimum(pos, child.key.size - 1)] != keys)):
            bad = next(q for q, p, k in zip(kids, pos, keys) if p >= child.key.size or child.key[p] != k)
            raise CertificateError(f"expanded prefix {bad} takes a step that is not valid")
        inside = np.zeros(child.key.size, dtype=bool)
        inside[pos] = True
        for e in np.flatnonzero(~(lower >= floor) & ~inside).tolist():
            q = node.nodes[int(child.parent[e])]
            masks = tuple(space.steps[i].mask for i in q) + (space.steps[int(rows.step[child.row[e]])].mask,)
            if not pairs or _leads(masks, pairs):
                raise CertificateError(f"after {q}, a step leaves the expanded tree with a bound below {threshold:.6g}")
        node = node.advance(kids, pos, child, rows)


@dataclass(frozen=True)
class _Children:
    """Every valid step out of the nodes of one depth: its node, row, cost, target, traffic and period so far."""

    parent: np.ndarray
    row: np.ndarray
    key: np.ndarray     # parent * steps + step: ascending (rows of a state are in step order)
    w: np.ndarray
    target: np.ndarray
    load: np.ndarray    # (levels, children)
    period: np.ndarray


@dataclass(frozen=True)
class _Frontier:
    """The expanded nodes of one depth, as arrays: state, sum of stages, period so far, traffic carried per level,
    the last ``pieces - 1`` rows (-1: none yet), and each node's prefix and rows."""

    nodes: list[tuple[int, ...]]
    stages: list[list[int]]
    state: np.ndarray
    g: np.ndarray
    period: np.ndarray
    carried: np.ndarray  # (levels, nodes)
    recent: np.ndarray   # (nodes, pieces - 1)

    @staticmethod
    def root(start: int, levels: int, pieces: int) -> _Frontier:
        """The empty program."""
        return _Frontier([()], [[]], np.array([start]), np.zeros(1), np.zeros(1), np.zeros((levels, 1)),
                         np.full((1, pieces - 1), -1, dtype=np.int64))

    def children(self, rows: Successors, steps: int) -> _Children:
        """Every valid step out of every node (`steps`: how many steps the state space has)."""
        lo, hi = rows.offsets[self.state], rows.offsets[self.state + 1]
        counts = hi - lo
        parent = np.repeat(np.arange(len(self.nodes)), counts)
        row = np.repeat(lo - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))
        load = rows.traffic[:, row]
        window = np.zeros_like(self.carried)
        for j in range(self.recent.shape[1]):
            window += np.where(self.recent[:, j] >= 0, rows.traffic[:, self.recent[:, j]], 0.0)
        w = rows.weight[row]
        period = np.maximum(np.maximum(self.period[parent], w), (window[:, parent] + load).max(axis=0, initial=0.0))
        return _Children(parent, row, parent * steps + rows.step[row], w, rows.target[row], load, period)

    def advance(self, kids: list[tuple[int, ...]], pos: np.ndarray, child: _Children, rows: Successors) -> _Frontier:
        """The nodes of the next depth: `kids`, the children at `pos`."""
        p = child.parent[pos]
        recent = np.concatenate([self.recent[p], child.row[pos][:, None]], axis=1)[:, 1:]
        return _Frontier(kids, [self.stages[i] + [r] for i, r in zip(p.tolist(), child.row[pos].tolist())],
                         child.target[pos], self.g[p] + child.w[pos], child.period[pos],
                         self.carried[:, p] + child.load[:, pos], recent)


def _program_in_tree(costs: EdgeCosts, rows: Successors, q: tuple[int, ...], stages: list[int], cost: float, pieces: int,
                     found: dict[RawProgram, float], floor: float, threshold: float) -> None:
    """A program inside the expanded tree: listed at its exact cost, or no cheaper than the threshold."""
    space = costs.space
    raw = tuple((space.steps[j].op, space.steps[j].mask) for j in q)
    if raw in found:
        exact = float(pipelined_seconds(PY, [float(rows.weight[i]) for i in stages], [rows.traffic[:, i] for i in stages], pieces))
        if not (math.isclose(found[raw], exact, rel_tol=1e-9) and math.isclose(cost, exact, rel_tol=1e-9)):
            raise CertificateError(f"{raw} on {pieces} pieces costs {exact}, not {found[raw]}")
    elif not cost >= floor:
        raise CertificateError(f"{raw} on {pieces} pieces costs {cost:.6g}, less than {threshold:.6g}, but is not listed")
