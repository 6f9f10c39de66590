"""A lower bound on any program's predicted time, from the hierarchy and the collective alone (docs/model.md, "Lower bound").

Nothing here looks at programs, the search or a cost model's step function: the
bound is the collective's cut argument over the link figures, with the link
semantics both cost models share (``solver/cost.py`` ``level_time``). The
solver prints it beside the best program and ``runtime.bench`` beside each
measured program, so it lives here, below both.

For a request over ``N`` devices and each level ``l`` it has a cell at, the
group splits into ``u`` level-``l`` units of ``G = N / u`` members. Each unit
must send out, by the collective's definition, ``need(l)`` bytes:

* all_reduce ``2 (1 - 1/u) M``; reduce_scatter and all_gather ``(1 - 1/u) M``
  (``M`` the whole buffer, all_gather's output); reduce and broadcast ``M``;
  all_to_all ``G (1 - 1/u) M`` (each member's chunks for the other units);
  send_recv ``M`` (a shift: one member of the group, the wrap-around of the
  axis's digits inside the unit, sends its whole buffer out).

A unit's members send over every level at or outside ``l`` the request spans
(an outer level joins them to units of other parents), each device at
``e(l') = min(bandwidth, uplink / devices below l')``: the uplink shared by
every device of the unit, the other groups' included, as both cost models
share it. So the cut of level ``l`` is
``need(l) / (G * sum of e(l') over those levels)``. Every program carries its
largest cut, pipelined ones included (``solver.pipeline_time.level_floor``); a
sequential program also pays the latency floor on top. A pipelined program's
fill, drain and periods pay the latency floor plus ``pipelined(l)`` times the
cut (at most 1: its periods count the traffic of ``P`` consecutive steps; see
:func:`pipelined_factor`), but its level floor has no latency in it. So the
bound is the larger of the latency floor plus the largest ``pipelined(l)`` x
cut, and the largest cut: at large messages the cut itself.

A send_recv runs as one step whose pairs cross their levels at once, each
paying its own level's latency: its latency floor is the least latency of the
levels it spans, and it is never pipelined (factor 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from p2synth.hierarchies.model import CollectiveLibrary, HanAllGather, Hierarchy
from p2synth.hierarchies.nccl_tuning import least_call_us
from p2synth.hierarchies.placement import Placement
from p2synth.hierarchies.program import Collective, Request

# Steps of a program that can touch one cell: a reducing request's cell is summed (all_reduce, reduce_scatter,
# reduce) and may be spread again (all_gather, broadcast); the other requests move each cell once.
TOUCHES = {Collective.ALL_REDUCE: 2, Collective.REDUCE: 2}


@dataclass(frozen=True)
class LevelBound:
    """The cut of one level the request spans."""

    level: int
    units: int            # u: level-l units one group spans
    members: int          # G: members of one group inside one unit
    need_bytes: float     # what one unit must send out
    rate: float           # bytes/s one unit's members send at, over the levels at or outside l the request spans
    pipelined: float      # the share of the cut a pipelined program's fill and periods pay besides the latency (<= 1)

    @property
    def seconds(self) -> float:
        """The cut: ``need / rate``."""
        return self.need_bytes / self.rate


@dataclass(frozen=True)
class Bound:
    """A lower bound on the predicted time of every program of a request on a placement, both cost models."""

    latency_s: float
    levels: tuple[LevelBound, ...]

    @property
    def bandwidth_s(self) -> float:
        """The largest cut (0 for a request with no cell)."""
        return max((lv.seconds for lv in self.levels), default=0.0)

    @property
    def seconds(self) -> float:
        """The bound: the latency floor plus the largest cut share a pipelined program's periods must pay, or the
        largest cut, whichever is more (the latency floor plus the largest cut for every sequential program)."""
        shared = max((lv.seconds * lv.pipelined for lv in self.levels), default=0.0)
        return max(self.latency_s + shared, self.bandwidth_s)

    @property
    def binding(self) -> int | None:
        """The level whose cut is the largest (None for a request with no cell)."""
        return max(self.levels, key=lambda lv: lv.seconds).level if self.levels else None


def effective_rate(h: Hierarchy, l: int) -> float:
    """Bytes/s one device of a busy level-`l` unit gets across level `l`: the fastest of its link, the fabric's peak
    (``Level.peak_GBps``) and its reducing switch's rate (``Level.switch_reduce_GBps``), or its share of the
    uplink."""
    link, lv = h.links[l], h.levels[l]
    rate = max([link.bandwidth] + [r * 1e9 for r in (lv.peak_GBps, lv.switch_reduce_GBps) if r is not None])
    return rate if link.uplink is None else min(rate, link.uplink / h.devices_below(l))


def switch_reduces(h: Hierarchy, levels: list[int]) -> bool:
    """Whether the switch of one of `levels` reduces in the network (``Level.switch_reduce``)."""
    return any(h.levels[l].switch_reduce is not None for l in levels)


def need_bytes(collective: Collective, units: int, members: int, message_bytes: float,
               in_network: bool = False) -> float:
    """Bytes one of `units` level-`l` units (of `members` group members each) must send out for `collective`;
    `in_network`: a switch the unit sends through reduces, so an all_reduce's unit sends its contribution to the
    other units' parts once, ``(1 - 1/u) M``, and the switch brings the sums back."""
    away = 1.0 - 1.0 / units
    return message_bytes * {
        Collective.ALL_REDUCE: away if in_network else 2.0 * away,
        Collective.REDUCE_SCATTER: away,
        Collective.ALL_GATHER: away,
        Collective.REDUCE: 1.0,
        Collective.BROADCAST: 1.0,
        Collective.ALL_TO_ALL: members * away,
        Collective.SEND_RECV: 1.0,
    }[collective]


def pipelined_factor(collective: Collective, cells_out: int, cells: int) -> float:
    """The least fraction of the cut a pipelined program's fill, drain and periods must pay on top of its latencies,
    given the request's cells at or outside the level (`cells_out`) and in all (`cells`).

    ``T(P) = sum of stages + (P - 1) period``, the period at least the traffic
    of any ``P`` consecutive steps. The steps carrying the cut's traffic are at
    most ``n_l = touches * cells_out`` of a program of at most ``n = touches *
    cells`` steps; ``c = min(n_l, ceil(n / P))`` windows of ``P`` steps cover
    them, so one window carries ``1/c`` of the cut and ``T(P) >= cut (1/P + (P
    - 1) / (c P))``. The least over ``P >= 2`` (``P >= n`` gives 1). With one
    cell at or outside the level the factor is 1: the cell's two steps are
    adjacent, or a step between them moves another cell and multiplies the
    bytes of one of them by its factor (docs/model.md, "Lower bound").
    """
    if cells_out <= 1 or collective is Collective.SEND_RECV:  # a shift is one step, never pipelined
        return 1.0
    touches = TOUCHES.get(collective, 1)
    n_l, n = touches * cells_out, touches * cells
    worst = 1.0
    for P in range(2, n):
        c = min(n_l, math.ceil(n / P))
        worst = min(worst, 1.0 / P + (P - 1) / (c * P))
    return worst


def latency_floor(h: Hierarchy, collective: Collective, levels: list[int]) -> float:
    """One latency of every level the request spans: each is spanned by some step, and both cost models charge a
    step at least one latency per level it spans (a send_recv: the least of them, see the module docstring). Under
    NCCL, whose own latencies price every step but an all_to_all's and a shift's, the least latency any one NCCL call
    has (``hierarchies.nccl_tuning.least_call_us``). Under Open MPI the simulator's coll/han steps (all_reduce,
    reduce, broadcast across hosts, and all_gather unless ``han_all_gather: flat``) charge none inside a host, so only
    the outermost level counts there."""
    if not levels:
        return 0.0
    if h.library is CollectiveLibrary.NCCL and collective not in (Collective.SEND_RECV, Collective.ALL_TO_ALL):
        # NCCL's own latencies price every step (solver/nccl.py); an all_to_all and a shift keep the levels'.
        return least_call_us(h) * 1e-6
    if collective is Collective.SEND_RECV:  # one step, each pair paying its own level's latency
        return min(h.links[l].latency for l in levels)
    han = {Collective.ALL_REDUCE, Collective.REDUCE, Collective.BROADCAST}
    if h.han_all_gather is not HanAllGather.FLAT:
        han.add(Collective.ALL_GATHER)
    if h.library is CollectiveLibrary.OPEN_MPI and collective in han:
        return h.links[min(levels)].latency
    return math.fsum(h.links[l].latency for l in levels)


def lower_bound(placement: Placement, request: Request, message_bytes: float) -> Bound:
    """The :class:`Bound` of `request` on `placement` at `message_bytes` (the whole buffer, as the cost models take it)."""
    h = placement.hierarchy
    cells = request.reduced_cells(placement)
    spanned = sorted({c.level for c in cells})
    total = placement.group_size(cells)
    out = []
    for l in spanned:
        units = placement.group_size([c for c in cells if c.level <= l])
        members = total // units
        rate = members * math.fsum(effective_rate(h, k) for k in spanned if k <= l)
        factor = pipelined_factor(request.collective, sum(c.level <= l for c in cells), len(cells))
        in_network = switch_reduces(h, [k for k in spanned if k <= l])
        out.append(LevelBound(l, units, members,
                              need_bytes(request.collective, units, members, message_bytes, in_network), rate, factor))
    return Bound(latency_floor(h, request.collective, spanned), tuple(out))


def of_bound_text(ratio: float | None) -> str:
    """A time over its bound as the tables print it: ``1.07x`` (``-`` without a bound)."""
    return "-" if ratio is None else f"{ratio:.2f}x"
