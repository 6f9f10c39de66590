"""The cost model: predicted time of each step and program (docs/model.md section 6).

A cost model is written once, against a tiny :class:`Algebra` (``ite``, ``any``,
``is_op``, arithmetic with constants). Evaluated with :class:`PyAlgebra` on
concrete booleans it gives seconds as floats; evaluated with the Z3 algebra of
``encodings`` on symbolic booleans it gives the same expression as a Z3 term, so
the synthesizer minimises exactly the cost that the report prints.

Every term is a product of per-cell factors chosen by booleans, applied one at
a time to a running value, so the symbolic form stays in linear real arithmetic.

The algebras are ``solver/algebra.py``'s and the time of a program run on
pieces ``solver/pipeline_time.py``'s; the alpha-beta terms here are the one
definition of a step's cost that Z3, the vectorized search and the simulator
all evaluate alike.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Any, Callable, Protocol, Sequence

from p2synth.hierarchies.model import CollectiveLibrary
from p2synth.hierarchies.placement import Placement
from p2synth.hierarchies.program import Collective, Program, RawProgram, Request, to_raw
from p2synth.hierarchies.abstract import AbstractState, apply, start_state
from p2synth.solver.algebra import PY, Algebra, slowest
from p2synth.solver.pipeline_time import pipelined_seconds


class CostModel(Protocol):
    """What the search needs of a cost model: the time of one step in a given abstract state.

    `S`, `Y`, `Z` are per-reduced-cell booleans (the step's slice, the scattered
    and the rooted cells before the step); `op` is the step's collective.
    """

    def step_time(self, alg: Algebra, op: Any, S: Sequence[Any], Y: Sequence[Any], Z: Sequence[Any]) -> Any: ...

    def traffic(self, alg: Algebra, op: Any, S: Sequence[Any], Y: Sequence[Any], Z: Sequence[Any]) -> list[Any]: ...


def mask_bits(mask: int, n: int) -> list[bool]:
    """Bitmask -> list of booleans over `n` cells."""
    return [bool(mask >> i & 1) for i in range(n)]


def step_seconds(model: CostModel, state: AbstractState, op: Collective, S: int, n: int) -> float:
    """Predicted seconds of step ``(op, S)`` taken in abstract `state`."""
    return float(model.step_time(PY, op, mask_bits(S, n), mask_bits(state.Y, n), mask_bits(state.Z, n)))


def program_seconds(model: CostModel, placement: Placement, request: Request, program: Program) -> list[float]:
    """Predicted seconds of each step of `program` (which must be valid)."""
    cells = request.reduced_cells(placement)
    raw = to_raw(program, cells)
    try:
        return raw_program_seconds(model, request.collective, len(cells), raw)
    except ValueError:
        raise ValueError(f"program is not valid for this request: {program.text(placement)}") from None


def raw_program_seconds(model: CostModel, collective: Collective, n: int, raw: RawProgram) -> list[float]:
    """Predicted seconds of each step of a program given as (op, slice mask) pairs over `n` reduced cells."""
    return [t for t, _ in _walk(model, collective, n, raw, with_traffic=False)]


def raw_program_cost(models: Callable[[int], CostModel], collective: Collective, n: int, raw: RawProgram,
                     pieces: int = 1) -> tuple[float, list[float]]:
    """A program's predicted seconds on `pieces` pieces, and each step's seconds on one piece.

    ``models(P)`` is the cost model at 1/P of the message. One piece: the sum
    of the steps; more: :func:`pipelined_seconds` of the steps on one piece.
    """
    if pieces == 1:
        stages = raw_program_seconds(models(1), collective, n, raw)
        return math.fsum(stages), stages
    stages, traffic = program_stages(models(pieces), collective, n, raw)
    return float(pipelined_seconds(PY, stages, traffic, pieces)), stages


def program_stages(model: CostModel, collective: Collective, n: int, raw: RawProgram) -> tuple[list[float], list[list[float]]]:
    """Each step's seconds and per-level traffic along a program (`model` at the size of one piece)."""
    walked = _walk(model, collective, n, raw, with_traffic=True)
    return [t for t, _ in walked], [x for _, x in walked]


def step_bits(collective: Collective, n: int, raw: RawProgram) -> list[tuple[Collective, tuple[list[bool], ...]]]:
    """Each step of a program over `n` reduced cells with the booleans a cost model reads for it: its op, and its
    slice, scattered and rooted cells in the state it is taken in; ValueError if a step is not valid."""
    state = start_state(collective, n)
    out = []
    for op, S in raw:
        out.append((op, (mask_bits(S, n), mask_bits(state.Y, n), mask_bits(state.Z, n))))
        nxt = apply(state, op, S)
        if nxt is None:
            raise ValueError(f"program {raw} is not valid")
        state = nxt
    return out


def _walk(model: CostModel, collective: Collective, n: int, raw: RawProgram, with_traffic: bool) -> list[tuple[float, list]]:
    """Each step's seconds (and per-level traffic) along a program; ValueError if a step is not valid."""
    out = []
    both = getattr(model, "on_piece", None)  # a model that gives both from one evaluation (AlphaBeta)
    for op, bits in step_bits(collective, n, raw):
        if not with_traffic:
            seconds, traffic = model.step_time(PY, op, *bits), []
        elif both is not None:
            seconds, traffic = both(PY, op, *bits)
        else:
            seconds, traffic = model.step_time(PY, op, *bits), model.traffic(PY, op, *bits)
        out.append((float(seconds), [float(x) for x in traffic]))
    return out


@dataclass(frozen=True)
class StepShape:
    """What both cost models derive from a step's slice and the scattered cells.

    ``factors`` and ``levels``: of each reduced cell; ``spans[l]``: the slice
    has a cell at level ``l``; ``m``: bytes a device holds before the step;
    ``k``: the group size; ``m_over_k`` and ``m_times_k``: ``m / k`` and
    ``m * k``. Each value is a chain of boolean-chosen constant factors, so it
    stays linear for Z3.
    """

    factors: list[int]
    levels: list[int]
    spans: list[Any]
    m: Any
    m_over_k: Any
    m_times_k: Any
    k: Any


def step_shape(alg: Algebra, placement: Placement, request: Request, S: Sequence[Any], Y: Sequence[Any],
               message_bytes: float) -> StepShape:
    """The :class:`StepShape` of a step with slice `S` taken when the cells `Y` are scattered."""
    cells = request.reduced_cells(placement)
    factors = [placement.factor(c) for c in cells]
    levels = [c.level for c in cells]
    spans = [alg.any([s for s, lv in zip(S, levels) if lv == l]) for l in range(len(placement.hierarchy.levels))]
    m = message_bytes
    for y, p in zip(Y, factors):
        m = alg.ite(y, m * (1.0 / p), m)
    m_over_k, m_times_k, k = m, m, 1.0
    for s, p in zip(S, factors):
        m_over_k = alg.ite(s, m_over_k * (1.0 / p), m_over_k)
        m_times_k = alg.ite(s, m_times_k * p, m_times_k)
        k = alg.ite(s, k * p, k)
    return StepShape(factors, levels, spans, m, m_over_k, m_times_k, k)


def level_time(alg: Algebra, placement: Placement, l: int, volume: Any, S: Sequence[Any], Z: Sequence[Any],
               factors: Sequence[int], levels: Sequence[int], spread_over_group: bool = True,
               one_sender: bool = False) -> Any:
    """Seconds to push `volume` bytes per group member across level `l`'s fabric.

    Per device: ``volume / bandwidth``, divided among the ``g`` members of a
    group inside one level-``l`` unit when the traffic spreads over them
    (`spread_over_group`, as multi-ring schedules do). With a shared uplink:
    the ``A/g`` groups crossing one unit at once (``A`` its active devices)
    share ``uplink``. The slower of the two. `one_sender`: `volume` is what
    one member of each group sends out of the unit (a shift's wrap-around,
    :func:`shift_traffic`): that member alone carries it at its bandwidth, and
    the unit's ``A/g`` groups share the uplink as for spread traffic.
    """
    link = placement.hierarchy.links[l]
    inner = [i for i, lv in enumerate(levels) if lv > l]
    per_device = volume * (1.0 / link.bandwidth)
    if spread_over_group and not one_sender:
        for i in inner:
            per_device = alg.ite(S[i], per_device * (1.0 / factors[i]), per_device)
    if link.uplink is None:
        return per_device
    shared = volume * (placement.hierarchy.devices_below(l) / link.uplink)
    for i in inner:
        # a slice cell spreads the traffic over the members (multi-ring); a rooted cell outside the
        # slice idles all but 1/f of the unit's devices. A rooted cell inside the slice (a broadcast's
        # own cells) is neither: its groups are active and every member receives.
        spread = shared * (1.0 / factors[i]) if spread_over_group or one_sender else shared
        shared = alg.ite(S[i], spread, alg.ite(Z[i], shared * (1.0 / factors[i]), shared))
    return alg.ite(shared > per_device, shared, per_device)


def all_to_all_time(alg: Algebra, placement: Placement, shape: StepShape, S: Sequence[Any], Z: Sequence[Any],
                    two_way: Sequence[float] | None = None) -> Any:
    """Seconds of one all_to_all step, in both cost models: a message per peer, ``(k-1)/k`` of the data out.

    Latency: one ``alpha`` per peer, of the outermost level at which the peer
    differs (``K(>=l) - K(>l)`` peers at level ``l``, ``K(>=l)`` the product of
    the slice's factors at levels ``>= l``). Bandwidth: the slowest spanned
    level of :func:`level_traffic`. A flat step over ``K`` outer units of ``g``
    devices thus pays ``g (K-1)`` slow-level latencies where the hierarchical
    program pays ``K-1``, for the same bytes across the slow level
    (docs/model.md, "All-to-all"). `two_way`: per level, the factor by which
    data both ways at once slows each direction (the simulator's reduce_scatter
    exchange); none for an all_to_all request's steps.
    """
    traffic = level_traffic(alg, placement, Collective.ALL_TO_ALL, shape, S, Z, exchange=True)
    if two_way is not None:
        traffic = [t * f for t, f in zip(traffic, two_way)]
    return all_to_all_latency(alg, placement, shape, S) + slowest(alg, traffic)


def all_to_all_latency(alg: Algebra, placement: Placement, shape: StepShape, S: Sequence[Any]) -> Any:
    """The latency part of :func:`all_to_all_time`: one ``alpha`` per peer, of the outermost level it differs at."""
    h = placement.hierarchy
    latency = 0.0
    for l in range(len(h.levels)):
        if any(lv == l for lv in shape.levels):
            latency = latency + (_slice_product(alg, shape, S, lambda lv: lv >= l) - _slice_product(alg, shape, S, lambda lv: lv > l)) * h.links[l].latency
    return latency


def _slice_product(alg: Algebra, shape: StepShape, S: Sequence[Any], keep) -> Any:
    """The product of the slice's factors at the levels `keep` accepts."""
    k = 1.0
    for s, p, lv in zip(S, shape.factors, shape.levels):
        if keep(lv):
            k = alg.ite(s, k * p, k)
    return k


def shift_traffic(alg: Algebra, placement: Placement, shape: StepShape, S: Sequence[Any], Z: Sequence[Any]) -> list[Any]:
    """Per level, the seconds a send_recv (a shift along one axis, member ``i`` to ``i + 1``) keeps it busy (0 off
    the levels the axis spans).

    The pairs whose outermost differing level is ``l`` are the wrap-arounds of
    the axis's digits inside ``l``: one sender per group leaves each level-``l``
    unit, with the whole buffer ``m``. So the unit's uplink is shared by its
    ``A / g`` senders (``g`` the product of the axis's factors inside ``l``)
    and each sender has its own link: :func:`level_time` with `one_sender`
    (docs/model.md, "Point-to-point").
    """
    return [alg.ite(shape.spans[l], level_time(alg, placement, l, shape.m, S, Z, shape.factors, shape.levels,
                                               one_sender=True), 0.0)
            if any(lv == l for lv in shape.levels) else 0.0
            for l in range(len(placement.hierarchy.levels))]


def shift_time(alg: Algebra, placement: Placement, shape: StepShape, traffic: Sequence[Any],
               two_way: Sequence[float] | None = None) -> Any:
    """Seconds of a send_recv, in both cost models: the slowest spanned level's latency plus its
    :func:`shift_traffic` (times `two_way[l]` where each device sends and receives at once: the simulator)."""
    h = placement.hierarchy
    worst = 0.0
    for l in range(len(h.levels)):
        if any(lv == l for lv in shape.levels):
            t = h.links[l].latency + traffic[l] * (1.0 if two_way is None else two_way[l])
            worst = alg.ite(shape.spans[l], alg.ite(t > worst, t, worst), worst)
    return worst


def step_volume(alg: Algebra, op: Any, shape: StepShape) -> Any:
    """Bytes each member sends in a (non all_to_all) step: all_reduce ``2(k-1)/k m``, reduce_scatter
    ``(k-1)/k m``, all_gather ``(k-1) m``, reduce and broadcast ``m``."""
    m, m_over_k, m_times_k = shape.m, shape.m_over_k, shape.m_times_k
    is_ar = alg.is_op(op, Collective.ALL_REDUCE)
    is_rs = alg.is_op(op, Collective.REDUCE_SCATTER)
    is_ag = alg.is_op(op, Collective.ALL_GATHER)
    return alg.ite(is_ar, (m - m_over_k) * 2.0, alg.ite(is_rs, m - m_over_k, alg.ite(is_ag, m_times_k - m, m)))


def level_traffic(alg: Algebra, placement: Placement, op: Any, shape: StepShape, S: Sequence[Any], Z: Sequence[Any],
                  exchange: bool = False, volume: Any = None) -> list[Any]:
    """Per level, the seconds a step's traffic keeps that level's links busy (bandwidth only; 0 off the step's levels).

    Every spanned level carries the step's volume per group (:func:`level_time`,
    with the shared-uplink rule). An all_to_all spreads nothing over a unit's
    members: across level ``l`` go the chunks addressed outside the member's
    level-``l`` unit, ``m (1 - 1/K(<=l))``. A step takes its slowest level; a
    pipeline's overlapping steps share each level (:func:`pipelined_seconds`).
    `exchange`: the step is an all_to_all (the only steps of an all_to_all request). `volume`: the bytes
    each member sends, if not the ring's :func:`step_volume` (AlphaBeta's tree all_reduce).
    """
    volume = step_volume(alg, op, shape) if volume is None and not exchange else volume
    out = []
    for l in range(len(placement.hierarchy.levels)):
        if not any(lv == l for lv in shape.levels):
            out.append(0.0)
            continue
        if exchange:
            kept = shape.m
            for s, p, lv in zip(S, shape.factors, shape.levels):
                if lv <= l:
                    kept = alg.ite(s, kept * (1.0 / p), kept)
            away = shape.m - kept
            t = level_time(alg, placement, l, away, S, Z, shape.factors, shape.levels, spread_over_group=False)
        else:
            t = level_time(alg, placement, l, volume, S, Z, shape.factors, shape.levels)
        out.append(alg.ite(shape.spans[l], t, 0.0))
    return out


def step_traffic(alg: Algebra, placement: Placement, request: Request, message_bytes: float, op: Any,
                 S: Sequence[Any], Y: Sequence[Any], Z: Sequence[Any]) -> list[Any]:
    """Per level, the seconds a step ``(op, S)`` taken with the cells `Y` scattered keeps its links busy.

    Both cost models account contention between a pipeline's overlapping steps
    with this (the alpha-beta traffic of :func:`level_traffic`).
    """
    shape = step_shape(alg, placement, request, S, Y, message_bytes)
    if request.collective is Collective.SEND_RECV:
        return shift_traffic(alg, placement, shape, S, Z)
    return level_traffic(alg, placement, op, shape, S, Z, request.collective is Collective.ALL_TO_ALL)


# NCCL's tree all_reduce runs at 0.92 of the bus bandwidth, times 0.85 for the tree pattern
# (NVIDIA/nccl:src/graph/tuning.cc): 0.782.
TREE_BUS_EFFICIENCY = 0.92 * 0.85


@dataclass(frozen=True)
class Split:
    """A step on the whole message, latency and traffic apart, for each schedule the library may run it with.

    ``latency``, ``traffic`` (per level) and ``busiest`` (its slowest level):
    the ring (chain) schedule, whose traffic is also what the step keeps each
    level's links busy with. ``others``: the ``(latency, busiest)`` of every
    other schedule the library may choose (AlphaBeta's tree; under NCCL every
    other algorithm and protocol, ``solver/nccl.py``), each the ring's own
    where it cannot run this step, so :func:`piece_seconds` takes the ring
    there. ``names``: the ring's, then each other's, as reports show them.
    """

    latency: Any
    traffic: list[Any]
    busiest: Any
    others: tuple[tuple[Any, Any], ...] = ()
    names: tuple[str, ...] = ("ring",)


def piece_seconds(alg: Algebra, split: Split, pieces: int) -> Any:
    """Seconds of a step on one of `pieces` pieces: the cheapest of its schedules, each ``latency + busiest /
    pieces`` (the earlier on a tie). ``AlphaBeta.on_piece`` and ``solver.stepcosts.SplitCosts`` both evaluate
    this, so the search's step costs are the model's bit for bit."""
    best = split.latency + split.busiest / pieces
    for latency, busiest in split.others:
        t = latency + busiest / pieces
        best = alg.ite(t < best, t, best)
    return best


def chosen_schedule(split: Split, pieces: int = 1) -> str:
    """The name of the schedule :func:`piece_seconds` takes for a concretely evaluated `split` (``PY``)."""
    times = [split.latency + split.busiest / pieces] + [lat + b / pieces for lat, b in split.others]
    return split.names[min(range(len(times)), key=lambda i: (times[i], i))]


def tree_latency(alg: Algebra, placement: Placement, shape: StepShape, S: Sequence[Any]) -> Any:
    """The latency of NCCL's double binary tree all_reduce over the step's group (NVIDIA/nccl:src/graph/tuning.cc,
    ``2 ((ppn - 1) intraLat + log2(nNodes) interLat)``): ``2 sum_l hops_l alpha_l`` over the levels, with ``g_l`` the
    product of the slice's factors at level ``l`` (1 off the slice), ``hops_l = g_l - 1`` at a level inside a host
    (NCCL chains the ranks of a node) and ``log2 g_l`` at a level between hosts (``Hierarchy.host_level``). ``log2 g_l`` is
    the sum of ``log2`` of the factors (real, where NCCL takes the integer part; equal for powers of two), so the
    term stays linear."""
    h = placement.hierarchy
    host = h.host_level
    latency = 0.0
    for l in range(len(h.levels)):
        if l > host:
            latency = latency + (_slice_product(alg, shape, S, lambda lv: lv == l) - 1.0) * h.links[l].latency
        else:
            for s, p, lv in zip(S, shape.factors, shape.levels):
                if lv == l:
                    latency = alg.ite(s, latency + math.log2(p) * h.links[l].latency, latency)
    return latency * 2.0


@dataclass(frozen=True)
class AlphaBeta:
    """First cost model: per-level alpha-beta with collective volume factors, each all_reduce the cheaper of NCCL's
    ring and tree.

    For a step ``(op, S)`` with group size ``k`` in a state where a device holds
    ``m`` bytes (``message / prod of scattered factors``):

    * bytes each member sends ``V``: all_reduce ``2(k-1)/k m``, reduce_scatter
      ``(k-1)/k m``, all_gather ``(k-1) m``, reduce and broadcast ``m``;
    * latency: ``rounds * alpha`` of the slowest level the group spans, with
      ``2(k-1)`` rounds for all_reduce and ``k-1`` otherwise (ring/chain);
    * bandwidth: for each level ``l`` the group spans, the traffic leaving one
      level-``l`` unit is ``V`` per group crossing it; with ``A`` active devices
      in a unit and ``g`` group members in it, ``A/g`` groups cross at once, on
      ``min(uplink, A * bandwidth)`` bytes/s. The step takes the slowest level.
    * all_reduce: the cheaper of that ring and NCCL's double binary tree, as
      NCCL's tuning picks the cheapest algorithm per call
      (NVIDIA/nccl:src/graph/tuning.cc): latency :func:`tree_latency`, and
      the whole message up and down the tree, ``V = 2m / TREE_BUS_EFFICIENCY``
      (the ring's traffic times ``k / ((k-1) 0.782)``), per level as above.
      The other ops run the ring alone, as NCCL models them. The links stay
      busy for the ring's traffic (the pipeline's contention and period): the
      tree is chosen only where its latency saves more than its traffic costs,
      and its time is at least its own traffic, above the ring's, so a
      pipelined program's period bound stays valid.
    * all_to_all: :func:`all_to_all_time` (latency per peer, no spreading).
    * send_recv (a request's one step, never pipelined): :func:`shift_time` of
      :func:`shift_traffic`, the slowest spanned level's latency plus the
      whole buffer at the rate its one sender per group gets there.

    On one of ``pieces`` pieces (a pipelined program's steps) a step keeps its
    latencies and carries ``1/pieces`` of each level's traffic: its time is
    :func:`piece_seconds` of the whole message's :meth:`split`, so the search
    evaluates the model once for every piece count (``solver.stepcosts.SplitCosts``).
    """

    placement: Placement
    request: Request
    message_bytes: float  # the whole message
    pieces: int = 1

    def split(self, alg: Algebra, op: Any, S: Sequence[Any], Y: Sequence[Any], Z: Sequence[Any]) -> Split:
        """The :class:`Split` of one step on the whole message: on one of ``pieces`` pieces the step takes
        :func:`piece_seconds` and keeps level ``l`` busy for ``traffic[l] / pieces``."""
        h = self.placement.hierarchy
        shape = step_shape(alg, self.placement, self.request, S, Y, self.message_bytes)
        if self.request.collective is Collective.ALL_TO_ALL:  # its only steps; no other request has any
            latency = all_to_all_latency(alg, self.placement, shape, S)
            traffic = level_traffic(alg, self.placement, op, shape, S, Z, exchange=True)
            return Split(latency, traffic, slowest(alg, traffic))
        if h.library is CollectiveLibrary.NCCL:
            from p2synth.solver.nccl import nccl_split  # it builds on this module
            return nccl_split(alg, self.placement, shape, op, S, Y, Z)
        spans, k = shape.spans, shape.k
        is_ar = alg.is_op(op, Collective.ALL_REDUCE)
        rounds = alg.ite(is_ar, (k - 1.0) * 2.0, k - 1.0)
        latency = 0.0
        for l in sorted(range(len(h.levels)), key=lambda l: h.links[l].latency):  # slowest wins: applied last
            latency = alg.ite(spans[l], rounds * h.links[l].latency, latency)
        traffic = level_traffic(alg, self.placement, op, shape, S, Z)
        busiest = slowest(alg, traffic)
        tree = slowest(alg, level_traffic(alg, self.placement, op, shape, S, Z,
                                          volume=shape.m * (2.0 / TREE_BUS_EFFICIENCY)))
        return Split(latency, traffic, busiest, ((alg.ite(is_ar, tree_latency(alg, self.placement, shape, S), latency),
                                                   alg.ite(is_ar, tree, busiest)),), ("ring", "tree"))

    def on_piece(self, alg: Algebra, op: Any, S: Sequence[Any], Y: Sequence[Any], Z: Sequence[Any]) -> tuple[Any, list[Any]]:
        """(seconds, per-level traffic) of one step on one piece: :meth:`step_time` and :meth:`traffic` at once."""
        if self.request.collective is Collective.SEND_RECV:  # its one step; not split: the search never sees it
            shape = step_shape(alg, self.placement, self.request, S, Y, self.message_bytes / self.pieces)
            traffic = shift_traffic(alg, self.placement, shape, S, Z)
            return shift_time(alg, self.placement, shape, traffic), traffic
        split = self.split(alg, op, S, Y, Z)
        return piece_seconds(alg, split, self.pieces), [t / self.pieces for t in split.traffic]

    def step_time(self, alg: Algebra, op: Any, S: Sequence[Any], Y: Sequence[Any], Z: Sequence[Any]) -> Any:
        """Predicted seconds of one step on one piece (see the class docstring)."""
        return self.on_piece(alg, op, S, Y, Z)[0]

    def traffic(self, alg: Algebra, op: Any, S: Sequence[Any], Y: Sequence[Any], Z: Sequence[Any]) -> list[Any]:
        """Per level, the seconds the step keeps its links busy on one piece (:meth:`on_piece`)."""
        return self.on_piece(alg, op, S, Y, Z)[1]
