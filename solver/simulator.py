"""The simulator: a cost model that follows what MPI, NCCL and gloo actually do (docs/simulator.md).

It refines :class:`solver.cost.AlphaBeta` with the terms the measurements on
the emulated cluster call for (see ``docs/simulator.md``):

* per-level alpha and beta, and the sharing of uplinks by concurrent groups
  (the same traffic accounting as AlphaBeta);
* the *algorithm* a library runs for one collective, by size: MPI libraries
  switch from latency-optimal trees / recursive doubling (``log2 k`` rounds,
  whole buffer each round) to bandwidth-optimal ring / Rabenseifner schedules
  (``(k-1)/k`` of the buffer) as messages grow; each step takes the faster;
* reduction compute: summing received data costs ``bytes / reduce_GBps`` on a
  CPU (``Hierarchy.reduce_GBps``; none on GPUs, where it hides under transfer);
* a fixed per-step overhead (``Hierarchy.step_overhead_us``): launching one
  collective on a sub-communicator, measured on the runtime;
* all_to_all: pairwise exchange, one message per peer (``solver.cost.all_to_all_time``,
  shared with AlphaBeta), plus the per-step overhead;
* send_recv (a shift along one axis): ``solver.cost.shift_time``, shared
  with AlphaBeta (per spanned level its latency plus the whole buffer at the
  rate of the one sender per group that crosses it), each level's transfer
  times its two-way factor (every device sends and receives at once), plus
  the per-step overhead;
* flat groups: one collective over a group spanning several levels runs
  rank-order recursive halving / doubling (Open MPI's Rabenseifner), so every
  member's outer rounds cross the outer links, shared by the unit's devices
  (``hierarchy_aware=True`` restores the older "each unit's share once" view).
* two-way traffic: the bandwidth-optimal schedules exchange data, so both
  directions of a link carry data at once; each direction then gets
  ``Level.duplex_efficiency`` of the one-way rates calibration measures
  (on the tbf-shaped testbed about 0.5-0.75; none on a level without it).
* reduce_scatter under Open MPI (``Hierarchy.library``) is the runtime's
  exchange, not ``MPI_Reduce_scatter_block`` (a reduce to one member and a
  linear scatter for large blocks in small groups, always in libnbc): the numpy
  backend runs every reduce_scatter step as a pairwise exchange of the
  group's blocks, summing each as it arrives (runtime/backends.py), priced as
  an all_to_all of the blocks (:func:`solver.cost.all_to_all_time`: the same
  bytes, one message per peer), each link's two directions busy at once as in
  the bandwidth-optimal schedules (the two-way factor below), plus summing
  ``(k-1)/k`` of the data, blocking or not (``reduce_scatter: library`` keeps
  Open MPI's own, for measurements made before). libnbc's all_reduce (pipelined programs' steps,
  ``nonblocking``) is a binomial reduce to the first rank and a binomial
  broadcast back for fewer than 4 members or under 64 KiB, Rabenseifner
  otherwise.
* Open MPI's fixed rules for a blocking all_reduce that coll/han leaves
  alone (inside one host, or one member per host): Rabenseifner above a size
  threshold by group size, its halving rounds from the least significant
  digit of the rank order (:func:`halving_crossing`), with the rounds that
  fold a group that is not a power of two down to one (:func:`rabenseifner`);
  and for a blocking broadcast or reduce there, the algorithm its fixed
  decision picks by group size and buffer, unsegmented: a chain, the linear
  fan-out or fan-in, a binomial tree or scatter-allgather (:func:`tuned_trees`).
* Open MPI's hierarchical component: under Open MPI a blocking all_reduce,
  reduce or broadcast whose group spans several hosts runs ``coll/han``
  (:func:`open_mpi_han`): 64 KiB segments pipelined through an intra-host
  stage and an inter-host stage among one leader per host; an all_gather
  there is a gather to the leader, the leaders' allgather and a broadcast
  inside the host, one after the other.
* NCCL (``Hierarchy.library`` ``nccl``): NCCL's own choice among its
  algorithms and protocols for every step, as AlphaBeta prices it
  (``solver/nccl.py``), plus the per-step overhead.
* gloo (``Hierarchy.library`` ``gloo``: PyTorch's CPU backend,
  ProcessGroupGloo): one algorithm per collective whatever the size
  (:func:`gloo_times`): rings in rank order for all_reduce, all_gather and
  reduce (one flow across each unit boundary per direction), broadcast as a
  binomial tree. A reduce_scatter step is the exported module's exchange
  (``all_to_all_single`` and a sum), priced as Open MPI's above;
  ``reduce_scatter: library`` keeps gloo's own (an all_reduce of the whole
  input), for the measurements made before the exports ran the exchange.

Written against the same tiny algebra as AlphaBeta, so Z3 minimises exactly
what the report prints. ``log2 k`` is the sum of ``log2`` of the slice's
factors, which keeps the symbolic form linear.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from p2synth.hierarchies.model import CollectiveLibrary, HanAllGather, ReduceScatterRun, TunedAllReduce, TunedTrees
from p2synth.hierarchies.placement import Placement
from p2synth.hierarchies.program import Collective, Request
from p2synth.solver.algebra import Algebra
from p2synth.solver.cost import (all_to_all_time, level_time, piece_seconds,
                                 shift_time, shift_traffic, step_shape, step_traffic)
from p2synth.solver.gloo import gloo_times
from p2synth.solver.nccl import nccl_split
from p2synth.solver.open_mpi import (halving_crossing, libnbc_binomial_all_reduce, open_mpi_han,
                                     open_mpi_linear_reduce_scatter, open_mpi_rabenseifner_all_reduce, rabenseifner,
                                     tuned_trees)
from p2synth.solver.step_terms import chosen_sum, root_time, slowest_spanned, smaller


@dataclass(frozen=True)
class Simulator:
    """Cost model v2: algorithm choice by size, reduction compute, per-step overhead."""

    placement: Placement
    request: Request
    message_bytes: float
    # Whether one collective over a group that spans several levels moves data hierarchy-aware (each unit's
    # share crosses the outer fabric once, as a ring in rank order does) or flat (each member's outer
    # rounds cross, as recursive halving/doubling and Rabenseifner over ranks in order do, which Open MPI
    # picks for 4-15 ranks above 8 KiB; see docs/simulator.md, "Flat groups").
    hierarchy_aware: bool = False
    # Whether the step runs as a non-blocking collective (a pipelined program's pieces do): under Open MPI that is
    # libnbc, whose all_reduce is binomial for fewer than 4 members or under 64 KiB (libnbc_binomial_all_reduce).
    nonblocking: bool = False

    def step_time(self, alg: Algebra, op: Any, S: Sequence[Any], Y: Sequence[Any], Z: Sequence[Any]) -> Any:
        """Predicted seconds of one step ``(op, S)`` given the scattered `Y` and rooted `Z` cells."""
        cells = self.request.reduced_cells(self.placement)
        h = self.placement.hierarchy
        shape = step_shape(alg, self.placement, self.request, S, Y, self.message_bytes)
        if self.request.collective is Collective.ALL_TO_ALL:  # its only steps; no other request has any
            return all_to_all_time(alg, self.placement, shape, S, Z) + (h.step_overhead_us or 0.0) * 1e-6
        # Bandwidth-optimal schedules exchange: both directions of each link carry data at once.
        two_way = [1.0 / (lv.duplex_efficiency or 1.0) for lv in h.levels]
        if self.request.collective is Collective.SEND_RECV:  # its one step: every device sends and receives at once
            traffic = shift_traffic(alg, self.placement, shape, S, Z)
            return shift_time(alg, self.placement, shape, traffic, two_way) + (h.step_overhead_us or 0.0) * 1e-6
        if h.library is CollectiveLibrary.NCCL:  # NCCL's own choice of algorithm and protocol (solver/nccl.py)
            split = nccl_split(alg, self.placement, shape, op, S, Y, Z)
            return piece_seconds(alg, split, 1) + (h.step_overhead_us or 0.0) * 1e-6
        factors, levels = shape.factors, shape.levels
        m, m_over_k, m_times_k = shape.m, shape.m_over_k, shape.m_times_k

        # What one member sends across level l's boundary. Hierarchy-aware: the step's whole volume
        # (divided among the unit's members in level_time). Flat (rank-order recursive halving /
        # doubling): only the rounds whose partner lies outside the member's level-l unit cross it,
        # the outer rounds first for reduce-type phases: (1 - 1/K) m with K the slice's factors at
        # levels <= l; for all_gather (inner rounds first) the held data times (k - K'), K' the
        # factors at levels > l.
        m_outer = [m] * len(h.levels)   # m / (slice factors at levels <= l)
        m_inner = [m] * len(h.levels)   # m * (slice factors at levels > l)
        for l in range(len(h.levels)):
            for s, p, lv in zip(S, factors, levels):
                if lv <= l:
                    m_outer[l] = alg.ite(s, m_outer[l] * (1.0 / p), m_outer[l])
                else:
                    m_inner[l] = alg.ite(s, m_inner[l] * p, m_inner[l])

        def transfer(volume: Any, crossing=None) -> Any:
            """Seconds to move `volume` bytes per member across the slowest spanned level
            (`crossing(l)`: what crosses level l when the group is flat)."""
            def at(l: int) -> Any:
                v = volume if self.hierarchy_aware or crossing is None else crossing(l)
                return level_time(alg, self.placement, l, v, S, Z, factors, levels, self.hierarchy_aware) * two_way[l]
            return slowest_spanned(alg, shape, len(h.levels), at)

        gamma = 0.0 if h.reduce_GBps is None else 1.0 / (h.reduce_GBps * 1e9)
        part = m - m_over_k  # (k-1)/k of the held data
        lat = self._per_cell(alg, S, cells, lambda c, p: math.log2(p) * h.links[c.level].latency)
        # Bandwidth-optimal schedules (ring, Rabenseifner, recursive halving, Bruck): latency
        # log2 k rounds (twice for two-phase ones), the volume spread over the group's members.
        reduce_phase = lambda l: m - m_outer[l]
        # a reduce-scatter and an allgather, each crossing level l with `crossing(l)`: nothing summed
        two_phases = lambda crossing: lat * 2.0 + transfer(part * 2.0, lambda l: crossing(l) * 2.0)
        scatter_based = two_phases(reduce_phase)
        ring_ar = scatter_based + part * gamma
        rs = lat + transfer(part, reduce_phase) + part * gamma
        ag = lat + transfer(m_times_k - m, lambda l: m_times_k - m_inner[l])
        # Latency-optimal schedules (recursive doubling, binomial trees): log2 k rounds, each moving
        # the whole buffer across the level of the cell that round spans.
        rounds = self._per_cell(alg, S, cells, lambda c, p: math.log2(p) * (h.links[c.level].latency + level_time(alg, self.placement, c.level, m, S, Z, factors, levels, spread_over_group=False)))
        # recursive doubling (all_reduce) exchanges too; the binomial trees (reduce, broadcast) send one way
        exchange_rounds = self._per_cell(alg, S, cells, lambda c, p: math.log2(p) * (h.links[c.level].latency + level_time(alg, self.placement, c.level, m, S, Z, factors, levels, spread_over_group=False) * two_way[c.level]))
        round_gamma = self._per_cell(alg, S, cells, lambda c, p: math.log2(p) * m * gamma)
        if h.library is CollectiveLibrary.GLOO:  # one algorithm per op, blocking or not (gloo runs both alike)
            g = gloo_times(alg, self.placement, shape, S, Z, gamma, two_way, reduce_phase, rounds)
            ar, rs, ag, r, b = g.all_reduce, g.reduce_scatter, g.all_gather, g.reduce, g.broadcast
        else:
            ar = smaller(alg, exchange_rounds + round_gamma, ring_ar)
            r = smaller(alg, rounds + round_gamma, scatter_based + part * gamma)
            b = smaller(alg, rounds, scatter_based)
        if h.library is CollectiveLibrary.OPEN_MPI and not self.nonblocking:
            if h.tuned_all_reduce is not TunedAllReduce.FASTEST:  # coll/tuned's, where coll/han leaves the group
                ring = ring_ar
                if h.tuned_all_reduce in (None, TunedAllReduce.DISTANCE_DOUBLING):  # its rounds in its source's order
                    ring = two_phases(lambda l: halving_crossing(alg, shape, S, l, reduce_phase)) + part * gamma
                ar = alg.ite(open_mpi_rabenseifner_all_reduce(alg, shape.k, m),
                             rabenseifner(alg, self.placement, shape, S, Z, gamma, two_way, ring), ar)
            if h.tuned_trees is not TunedTrees.FASTEST:  # coll/tuned's broadcast and reduce, where coll/han leaves the group
                b, r = tuned_trees(alg, self.placement, shape, S, Z, gamma, rounds, rounds + round_gamma, scatter_based, b, r)
            han = open_mpi_han(alg, self.placement, shape, S, Z, gamma, two_way)
            if han is not None:
                ar, r, b = han.where(alg, han.all_reduce, ar), han.where(alg, han.reduce, r), han.where(alg, han.broadcast, b)
                if h.han_all_gather is not HanAllGather.FLAT:
                    ag = han.where(alg, han.all_gather, ag)
        if h.library in (CollectiveLibrary.OPEN_MPI, CollectiveLibrary.GLOO):
            if h.reduce_scatter is not ReduceScatterRun.LIBRARY:  # the blocks exchanged: an all_to_all plus the sum
                rs = all_to_all_time(alg, self.placement, shape, S, Z, two_way) + part * gamma
            elif h.library is CollectiveLibrary.OPEN_MPI:  # gloo's own is gloo_times' all_reduce
                rs = self._open_mpi_reduce_scatter(alg, shape, S, Z, lat, part, rs, r, rounds + round_gamma)
        if h.library is CollectiveLibrary.OPEN_MPI:
            if self.nonblocking:  # libnbc: the binomial reduce to rank 0 and binomial broadcast back, or Rabenseifner
                ar = alg.ite(libnbc_binomial_all_reduce(alg, shape.k, m), rounds + round_gamma + rounds, ring_ar)

        time = alg.ite(alg.is_op(op, Collective.ALL_REDUCE), ar,
               alg.ite(alg.is_op(op, Collective.REDUCE_SCATTER), rs,
               alg.ite(alg.is_op(op, Collective.ALL_GATHER), ag,
               alg.ite(alg.is_op(op, Collective.REDUCE), r, b))))
        return time + (h.step_overhead_us or 0.0) * 1e-6

    def _open_mpi_reduce_scatter(self, alg: Algebra, shape, S, Z, lat: Any, part: Any, bandwidth_optimal: Any,
                                 reduce: Any, binomial_reduce: Any) -> Any:
        """Open MPI's own reduce_scatter (``MPI_Reduce_scatter_block``; ``reduce_scatter: library``): where it runs
        reduce + linear scatter (see ``open_mpi_linear_reduce_scatter``),
        the reduce (libnbc: a binomial tree) and then the first rank sending the other members their blocks,
        ``(k-1)/k`` of its buffer, one way over the slowest spanned level (its uplink shared by the roots of the
        groups crossing it); elsewhere the bandwidth-optimal schedule."""
        h = self.placement.hierarchy
        scatter = slowest_spanned(alg, shape, len(h.levels), lambda l: root_time(alg, self.placement, shape, l, part, S, Z))
        if self.nonblocking:
            return binomial_reduce + lat + scatter
        linear = open_mpi_linear_reduce_scatter(alg, shape.k, shape.m_over_k)
        return alg.ite(linear, reduce + lat + scatter, bandwidth_optimal)

    def traffic(self, alg: Algebra, op: Any, S: Sequence[Any], Y: Sequence[Any], Z: Sequence[Any]) -> list[Any]:
        """Per level, the seconds the step keeps its links busy: the alpha-beta accounting (``solver.cost.step_traffic``)."""
        return step_traffic(alg, self.placement, self.request, self.message_bytes, op, S, Y, Z)

    def _per_cell(self, alg: Algebra, S: Sequence[Any], cells, term) -> Any:
        """Sum of ``term(cell, factor)`` over the slice's cells; each term is linear in the state."""
        return chosen_sum(alg, [(s, term(c, self.placement.factor(c))) for s, c in zip(S, cells)])
