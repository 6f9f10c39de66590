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
  threshold by group size, with the rounds that fold a group that is not a
  power of two down to one (:func:`rabenseifner`).
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

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from p2synth.hierarchies.model import CollectiveLibrary, HanAllGather, HanBroadcast, ReduceScatterRun, TunedAllReduce
from p2synth.hierarchies.placement import Placement
from p2synth.hierarchies.program import Collective, Request
from p2synth.solver.cost import (Algebra, StepShape, all_to_all_time, host_level, level_time, piece_seconds,
                                 shift_time, shift_traffic, step_shape, step_traffic)
from p2synth.solver.nccl import nccl_split


def _min(alg: Algebra, a: Any, b: Any) -> Any:
    return alg.ite(a < b, a, b)


def _max(alg: Algebra, a: Any, b: Any) -> Any:
    return alg.ite(a > b, a, b)


def _slowest_spanned(alg: Algebra, shape: StepShape, n_levels: int, time_at) -> Any:
    """The largest ``time_at(l)`` over the levels the step's slice spans (0 when it spans none)."""
    worst = 0.0
    for l in range(n_levels):
        if l in shape.levels:
            worst = alg.ite(shape.spans[l], _max(alg, time_at(l), worst), worst)
    return worst


# Open MPI 5's fixed rules for MPI_Reduce_scatter_block with a commutative op (coll/tuned,
# ompi_coll_tuned_reduce_scatter_block_intra_dec_fixed): for groups of fewer than `below` members it runs
# "basic_linear" (a reduce to rank 0, then a linear scatter) when one member's block has `lo` <= bytes < `hi`,
# otherwise recursive halving or butterfly (both bandwidth-optimal). Each row applies to group sizes from the
# previous row's `below`; the last to every larger group.
OPEN_MPI_LINEAR_REDUCE_SCATTER = ((4, 131072, math.inf), (8, 1048576, math.inf), (16, 524288, 4194304),
                                  (32, 524288, 2097152), (math.inf, 65536, 262144))


def _fixed_rule(alg: Algebra, rows: Sequence[tuple[float, float, float]], k: Any, nbytes: Any) -> Any:
    """Whether one of Open MPI's fixed decision rules holds for a group of `k` members and `nbytes` bytes: `rows` of
    ``(below, lo, hi)``, each for group sizes from the previous row's `below` up to its own (the last for every
    larger group), the rule holding when ``lo <= nbytes < hi``."""
    def within(lo: float, hi: float) -> Any:
        return alg.ite(nbytes < lo, 0.0, 1.0 if hi == math.inf else alg.ite(nbytes < hi, 1.0, 0.0))

    flag = within(*rows[-1][1:])
    for below, lo, hi in reversed(rows[:-1]):
        flag = alg.ite(k < below, within(lo, hi), flag)
    return flag > 0.5


def open_mpi_linear_reduce_scatter(alg: Algebra, k: Any, block: Any) -> Any:
    """Whether Open MPI's fixed rules run a reduce_scatter over `k` members, `block` bytes each, as reduce + scatter."""
    return _fixed_rule(alg, OPEN_MPI_LINEAR_REDUCE_SCATTER, k, block)


# libnbc's MPI_Iallreduce (Open MPI 5, ompi/mca/coll/libnbc/nbc_iallreduce.c, coll_libnbc_iallreduce_algorithm=0):
# Rabenseifner (reduce-scatter + allgather, bandwidth-optimal) for groups of at least this many members whose buffer
# is at least this many bytes; a binomial tree up and a binomial broadcast down otherwise (and in place, which the
# runtime never asks for an all_reduce step: runtime/layout.py).
LIBNBC_RABENSEIFNER_MIN_MEMBERS = 4
LIBNBC_RABENSEIFNER_MIN_BYTES = 65536.0


def libnbc_binomial_all_reduce(alg: Algebra, k: Any, m: Any) -> Any:
    """Whether libnbc's non-blocking all_reduce over `k` members of an `m`-byte buffer runs binomial (not Rabenseifner)."""
    return alg.any([k < LIBNBC_RABENSEIFNER_MIN_MEMBERS - 0.5, m < LIBNBC_RABENSEIFNER_MIN_BYTES])


# Open MPI 5's fixed rules for MPI_Allreduce with a commutative op (coll/tuned, ompi_coll_tuned_allreduce_intra_dec_fixed):
# Rabenseifner ("rabenseifner": ompi_coll_base_allreduce_intra_redscat_allgather) for groups of fewer than `below`
# members whose buffer has at least `least` bytes (each row from the previous row's `below`); recursive doubling, a
# ring or a segmented ring below, priced as the faster of recursive doubling and a ring.
OPEN_MPI_RABENSEIFNER_ALL_REDUCE = tuple((below, least, math.inf) for below, least in (
    (4, 262144), (16, 8192), (32, 4096), (64, 128), (256, 262144), (512, 4096), (4096, 16384), (math.inf, 32768)))


def open_mpi_rabenseifner_all_reduce(alg: Algebra, k: Any, m: Any) -> Any:
    """Whether Open MPI's fixed rules run a blocking all_reduce over `k` members of an `m`-byte buffer as Rabenseifner."""
    return _fixed_rule(alg, OPEN_MPI_RABENSEIFNER_ALL_REDUCE, k, m)


def _group_sizes(factors: Sequence[int]) -> list[int]:
    """Every size a step's group can have: the products of the subsets of the reduced cells' factors, ascending."""
    return sorted({math.prod(c) for r in range(len(factors) + 1) for c in itertools.combinations(factors, r)})


def _of_size(alg: Algebra, shape: StepShape, value) -> Any:
    """``value(k)`` for the step's group size ``k`` (a chain over the sizes its slice can have)."""
    sizes = _group_sizes(shape.factors)
    out = value(sizes[-1])
    for size in reversed(sizes[:-1]):
        out = alg.ite(shape.k < size + 0.5, value(size), out)
    return out


def rabenseifner(alg: Algebra, placement: Placement, shape: StepShape, S: Sequence[Any], Z: Sequence[Any],
                 gamma: float, two_way: Sequence[float], ring: Any) -> Any:
    """Seconds of Open MPI's Rabenseifner all_reduce (``ompi_coll_base_allreduce_intra_redscat_allgather``) over the
    step's ``k`` members, given `ring`, the bandwidth-optimal price over all ``k``.

    With ``k`` a power of two it is that price. Otherwise it runs among the
    largest power of two ``p' < k``, so its reduce-scatter and allgather move
    ``2 (p'-1)/p' m`` (`ring` scaled by ``((p'-1)/p') / ((k-1)/k)``), and
    the ``r = k - p'`` surplus members fold in and out around it: the first
    ``2r`` ranks pair up, exchange halves (``m/2`` each way, two-way), sum
    them (``gamma m/2``) and the odd one sends its half to the even one
    (``m/2``, one way); at the end the even one sends the odd one the whole
    result (``m``, one way). Adjacent ranks differ at the innermost level the
    slice spans, so the fold's three rounds cross that level's fabric, its
    uplink shared by the unit's active devices as every flat round's is.
    """
    h = placement.hierarchy

    def core(k: int) -> float:
        p = 1 << (k.bit_length() - 1)
        return 1.0 if k == p else ((p - 1) / p) / ((k - 1) / k)

    def fold_at(l: int) -> Any:
        at = lambda v: level_time(alg, placement, l, v, S, Z, shape.factors, shape.levels, spread_over_group=False)
        return 3.0 * h.links[l].latency + at(shape.m * 0.5) * two_way[l] + at(shape.m * 1.5) + shape.m * 0.5 * gamma

    fold = 0.0
    for l in range(len(h.levels)):  # the innermost spanned level, the last to apply
        if l in shape.levels:
            fold = alg.ite(shape.spans[l], fold_at(l), fold)
    folds = _of_size(alg, shape, lambda k: 0.0 if k & (k - 1) == 0 else 1.0)
    return ring * _of_size(alg, shape, core) + alg.ite(folds > 0.5, fold, 0.0)


# Open MPI 5's coll/han (priority 35, above coll/tuned's 30) runs MPI_Allreduce, MPI_Reduce, MPI_Bcast and MPI_Allgather
# on every communicator with members on several hosts ("intra" algorithms, segment size 64 KiB by default): see open_mpi_han.
HAN_SEGMENT_BYTES = 65536.0
# libnbc's ibcast, which HAN's inter-host stage calls, is linear up to this many members (binomial above: Open MPI 5
# skips the size-based chain by default, coll_libnbc_ibcast_skip_dt_decision).
LIBNBC_LINEAR_BCAST_MAX = 4


@dataclass(frozen=True)
class HanTimes:
    """What Open MPI's coll/han charges one step (:func:`open_mpi_han`): whether the group spans hosts (`across`) and
    has several members on one host (`inside`), and the all_reduce, reduce, broadcast and all_gather times."""

    across: Any
    inside: Any
    all_reduce: Any
    reduce: Any
    broadcast: Any
    all_gather: Any

    def where(self, alg: Algebra, han: Any, other: Any) -> Any:
        """`han` where coll/han runs the step (across hosts, several members on one host), else `other`."""
        return alg.ite(self.across, alg.ite(self.inside, han, other), other)


def _root_time(alg: Algebra, placement: Placement, shape: StepShape, l: int, volume: Any, S: Sequence[Any],
               Z: Sequence[Any]) -> Any:
    """Seconds for each group's root alone to push `volume` bytes across level `l`: at its own bandwidth, and through
    its unit's uplink shared with the roots of the other groups crossing that unit at once."""
    alone = volume * (1.0 / placement.hierarchy.links[l].bandwidth)
    return _max(alg, level_time(alg, placement, l, volume, S, Z, shape.factors, shape.levels), alone)


@functools.lru_cache(maxsize=4096)
def binomial_rounds(leaders: tuple[tuple[int, int], ...]) -> tuple[tuple[tuple[int, int], ...], ...]:
    """libnbc's binomial broadcast among host leaders, round by round: per level, the most transfers that leave or
    enter one unit of that level in the round, as ``(level, transfers)`` pairs.

    `leaders`: the ``(level, factor)`` of each cell the leaders differ on, the
    first most significant in their order (a group's members are ordered by
    their digits on its slice, :meth:`ConcreteChecker.grid`); the root is leader
    0. In round ``r`` each leader ``v < 2**r`` sends the whole segment to
    ``v + 2**r``. A transfer leaves a level-``l`` unit when the two leaders'
    digits differ on a cell at level ``l`` or an outer one.
    """
    digits = list(itertools.product(*(range(f) for _, f in leaders)))  # leader j's digits, the first most significant
    rounds = []
    r = 1
    while r < len(digits):
        pairs = [(v, v + r) for v in range(min(r, len(digits) - r))]
        crossing: dict[int, int] = {}
        for l in sorted({lv for lv, _ in leaders}):
            mine = [i for i, (lv, _) in enumerate(leaders) if lv <= l]
            units = [tuple(d[i] for i in mine) for d in digits]  # each leader's level-l unit
            moves = [(units[a], units[b]) for a, b in pairs if units[a] != units[b]]
            if moves:
                out = max(sum(1 for a, _ in moves if a == u) for u, _ in moves)
                into = max(sum(1 for _, b in moves if b == u) for _, u in moves)
                crossing[l] = max(out, into)
        rounds.append(tuple(sorted(crossing.items())))
        r *= 2
    return tuple(rounds)


def _by_subset(alg: Algebra, S: Sequence[Any], indices: Sequence[int], leaf) -> Any:
    """``leaf(chosen)`` for the `indices` whose flag in `S` holds: an ite tree over the flags that are not constants."""
    def rec(j: int, chosen: tuple[int, ...]) -> Any:
        if j == len(indices):
            return leaf(chosen)
        flag = S[indices[j]]
        if isinstance(flag, bool):
            return rec(j + 1, chosen + (indices[j],) if flag else chosen)
        return alg.ite(flag, rec(j + 1, chosen + (indices[j],)), rec(j + 1, chosen))
    return rec(0, ())


def open_mpi_han(alg: Algebra, placement: Placement, shape: StepShape, S: Sequence[Any], Z: Sequence[Any], gamma: float,
                 two_way: Sequence[float]) -> HanTimes | None:
    """Open MPI's coll/han on one step whose group spans hosts (`across`; see :func:`host_level`) with several members
    on one host (`inside`): with one member per host HAN passes the call to coll/tuned. None when the request's reduced
    cells lie all on one side of the host level, so that no step can be HAN's.

    HAN cuts the buffer into 64 KiB segments and pipelines them through two
    stages: inside each host, coll/tuned over shared memory (a reduce to the
    host's leader, a broadcast from it); between the ``L`` leaders, libnbc
    (an ireduce to the first leader: Rabenseifner, or a chain for two, both
    bringing ``2 (1 - 1/K) m`` into the root's level-``l`` unit, ``K`` the
    leaders' factors at levels <= ``l``; and an ibcast from it: linear up to 4
    leaders, sending ``L - L_in`` copies across level ``l`` (``L_in`` the
    leaders inside the root's unit), a binomial tree above
    (:func:`binomial_rounds`; under ``han_broadcast: one-copy``, one copy).
    HAN waits for each segment's inter-host stage before it starts the next,
    so the tree's rounds add up, each as slow as its busiest level, whose
    uplink its transfers leaving one unit share. An all_reduce
    runs both at once, the two directions of the root's link sharing it
    (``duplex_efficiency``). The time is the slower stage over the whole
    buffer, plus the faster one over one segment (fill and drain); the
    reduction compute (``gamma``, at the leaders and inside the hosts) joins
    the intra-host stage. An all_gather is not segmented: the gather of the
    host's blocks into its leader, the leaders' allgather (``gathered_in``) and
    the broadcast of the whole result inside the host add up (under
    ``han_all_gather: flat`` the caller keeps the flat price). docs/simulator.md
    has the measurements.
    """
    h = placement.hierarchy
    host = host_level(h)
    up = [i for i, lv in enumerate(shape.levels) if lv <= host]
    if not up or len(up) == len(shape.levels):
        return None
    across = alg.any([S[i] for i in up])
    inside = alg.any([S[i] for i, lv in enumerate(shape.levels) if lv > host])
    leaders = _product(alg, [(S[i], shape.factors[i]) for i in up], 1.0)

    def sent(l: int, v: Any) -> Any:
        """The linear broadcast's copies out of the root's level-`l` unit (one copy above 4 leaders, the
        ``one-copy`` price)."""
        outer = [(S[i], shape.factors[i]) for i in up if shape.levels[i] <= l]
        inner = [(S[i], shape.factors[i]) for i in up if shape.levels[i] > l]
        copies = _product(alg, outer + inner, v) - _product(alg, inner, v)
        return _root_time(alg, placement, shape, l, alg.ite(leaders < LIBNBC_LINEAR_BCAST_MAX + 0.5, copies, v), S, Z)

    def received(l: int, v: Any) -> Any:
        """The reduce's data into the root's level-`l` unit."""
        outer = [(S[i], shape.factors[i]) for i in up if shape.levels[i] <= l]
        return _root_time(alg, placement, shape, l, (v - _product(alg, outer, v, divide=True)) * 2.0, S, Z)

    def tree(v: Any, both: bool) -> Any:
        """The binomial broadcast of `v` bytes among the chosen leaders (:func:`binomial_rounds`), its links shared
        with a reduce running the other way when `both`; 0 up to 4 leaders, where it does not run."""
        def leaf(chosen: tuple[int, ...]) -> Any:
            cells = tuple((shape.levels[i], shape.factors[i]) for i in chosen)
            if math.prod(f for _, f in cells) <= LIBNBC_LINEAR_BCAST_MAX:
                return 0.0
            total = 0.0
            for crossing in binomial_rounds(cells):
                slowest = 0.0
                for l, c in crossing:
                    t = _max(alg, level_time(alg, placement, l, v * float(c), S, Z, shape.factors, shape.levels),
                             v * (1.0 / h.links[l].bandwidth))
                    slowest = _max(alg, slowest, t * two_way[l] if both else t)
                total = total + slowest
            return total
        return _by_subset(alg, S, up, leaf)

    def inter(v: Any, out: bool, into: bool) -> Any:
        """The inter-host stage on `v` bytes: the broadcast's copies out of the root (`out`), the reduce's data
        into it (`into`), or both at once."""
        def at(l: int) -> Any:
            if out and into:
                return _max(alg, sent(l, v), received(l, v)) * two_way[l]
            return sent(l, v) if out else received(l, v)
        linear = _slowest_spanned(alg, shape, host + 1, at)
        if not out or h.han_broadcast is HanBroadcast.ONE_COPY:
            return linear
        binomial = tree(v, into)
        if into:
            binomial = _max(alg, binomial, _slowest_spanned(alg, shape, host + 1, lambda l: received(l, v) * two_way[l]))
        return alg.ite(leaders < LIBNBC_LINEAR_BCAST_MAX + 0.5, linear, binomial)

    def intra(v: Any, transfers: float, reduces: bool) -> Any:
        """The intra-host stage on `v` bytes: `transfers` shared-memory copies over the slowest level inside a host,
        and the reduction compute when the op reduces."""
        copy = _slowest_spanned(alg, shape, len(h.levels), lambda l: v * (transfers / h.links[l].bandwidth) if l > host else 0.0)
        return copy + (v * (2.0 * gamma) if reduces else 0.0)

    seg = alg.ite(shape.m < HAN_SEGMENT_BYTES, shape.m, HAN_SEGMENT_BYTES)

    def pipelined(stages) -> Any:
        a, b = stages(shape.m)
        sa, sb = stages(seg)
        return _max(alg, a, b) + _min(alg, sa, sb)

    # every segment waits for its inter-host stage: the leaders' latency once per segment
    segments = alg.ite(shape.m < HAN_SEGMENT_BYTES, 1.0, shape.m * (1.0 / HAN_SEGMENT_BYTES))
    alphas = [(S[i], math.log2(shape.factors[i]) * h.links[shape.levels[i]].latency) for i in up]
    lat = _chosen_sum(alg, alphas)
    waits = _chosen_sum(alg, [(flag, segments * a) for flag, a in alphas])  # stays linear: constants times `segments`
    # all_gather, not segmented: a gather of the host's blocks into its leader, the leaders' allgather of those, the
    # whole result broadcast inside the host, one after the other
    inner_cells = [(S[i], shape.factors[i]) for i, lv in enumerate(shape.levels) if lv > host]
    block = _product(alg, inner_cells, shape.m)

    def gathered_in(l: int) -> Any:
        """The leaders' allgather: coll/tuned's recursive doubling (Bruck where the leaders are not a power of two) in
        their order, so each leader receives its own copy of the blocks of the leaders outside its level-`l` unit,
        at its bandwidth, through the unit's uplink shared with every leader in the unit, both directions at once."""
        within = [(S[i], shape.factors[i]) for i in up if shape.levels[i] > l]
        v = _product(alg, [(S[i], shape.factors[i]) for i in up], block) - _product(alg, within, block)
        link = h.links[l]
        t = v * (1.0 / link.bandwidth)
        if link.uplink is not None:  # the unit's devices over the group's members per host: its leaders, all groups
            t = _max(alg, t, _product(alg, inner_cells, v * (h.devices_below(l) / link.uplink), divide=True))
        return t * two_way[l]

    all_gather = (intra(block - shape.m, 1.0, False) + _slowest_spanned(alg, shape, host + 1, gathered_in) + lat
                  + intra(shape.m_times_k, 1.0, False))
    return HanTimes(across, inside,
                    pipelined(lambda v: (inter(v, True, True), intra(v, 2.0, True))) + waits + lat,
                    pipelined(lambda v: (inter(v, False, True), intra(v, 1.0, True))) + waits,
                    pipelined(lambda v: (inter(v, True, False), intra(v, 1.0, False))) + waits,
                    all_gather)


@dataclass(frozen=True)
class GlooTimes:
    """What gloo charges one step of each op (:func:`gloo_times`), before the per-step overhead."""

    all_reduce: Any
    reduce_scatter: Any
    all_gather: Any
    reduce: Any
    broadcast: Any


def gloo_times(alg: Algebra, placement: Placement, shape: StepShape, S: Sequence[Any], Z: Sequence[Any], gamma: float,
               two_way: Sequence[float], reduce_phase, rounds: Any) -> GlooTimes:
    """gloo's algorithms (PyTorch's ProcessGroupGloo on CPU tensors) on one step; no choice by size.

    What the sources say (pytorch/gloo and pytorch/pytorch, read for issue 31):

    * all_reduce: ``ProcessGroupGloo``'s ``AsyncAllreduceWork::allreduce``
      (torch/csrc/distributed/c10d/ProcessGroupGlooDetail.hpp) calls
      ``gloo::allreduce`` without an algorithm, and gloo/allreduce.cc runs
      ``ring`` for ``UNSPECIFIED``: a ring reduce-scatter then a ring
      all-gather over the group's ranks in order (each rank sends to one
      neighbour, receives from the other), the buffer in ``k`` chunks of at
      least 2 segments, two segments in flight. Each member sends
      ``2 (k-1)/k m``; ``2 (k-1)`` rounds; ``(k-1)/k m`` summed per member.
      (gloo/allreduce.cc also has a shared-memory path, ``shm``, taken only
      when the group's size equals ``LOCAL_WORLD_SIZE``, set by torchrun;
      not modelled.)
    * reduce_scatter (``reduce_scatter: library``; the exports run the
      exchange instead, priced in :class:`Simulator`):
      ``ProcessGroupGloo::reduce_scatter_tensor_coalesced``
      (torch/csrc/distributed/c10d/ProcessGroupGloo.cpp; ``_reduce_scatter_base``
      calls it) clones the input, all-reduces the whole clone and copies the
      member's chunk out: the all_reduce's cost (the clone and the copy are
      memory copies the hierarchy has no rate for; on the testbed they are
      the 924 vs 855 ms of docs/measurements/ddp/gloo-rs/gloo-steps-4x2-1gbit.txt).
    * all_gather: gloo/allgather.cc, a ring in rank order (send to rank+1,
      receive from rank-1), each block in two halves, ``2 (k-1)`` half-block
      sends with two in flight: ``(k-1) m`` sent per member, ``k-1`` rounds.
    * reduce: gloo/reduce.cc, the same segmented ring reduce-scatter as the
      all_reduce, then every member sends its reduced chunk straight to the
      root (all receives posted at once): ``(k-1)/k m`` sent per member
      around the ring and summed, then ``m (1 - 1/K(<=l))`` into the root's
      level-``l`` unit, at the root's own rate (its uplink shared with the
      other groups' roots), one latency.
    * broadcast: gloo/broadcast.cc, a binomial tree from the root (``log2 k``
      rounds of the whole buffer, one way): the ideal model's ``rounds``.

    Rings in rank order keep each unit's members together (a unit's ranks are
    consecutive), so one flow crosses each unit boundary per direction: what
    one member sends, at that member's bandwidth and through the unit's uplink
    shared by its groups' flows (``level_time`` with ``one_sender``), times
    the two-way factor (every boundary carries a flow each way at once); the
    slowest spanned level. A ring round waits for the slowest spanned level's
    latency. ``reduce_phase(l)``: ``m (1 - 1/K(<=l))``; `rounds`: the binomial
    tree's term of :class:`Simulator`.
    """
    h = placement.hierarchy
    n = len(h.levels)
    m = shape.m
    part = m - shape.m_over_k  # (k-1)/k of the held data

    def ring(volume: Any) -> Any:
        return _slowest_spanned(alg, shape, n, lambda l: level_time(alg, placement, l, volume, S, Z, shape.factors,
                                                                     shape.levels, one_sender=True) * two_way[l])

    ring_rounds = _slowest_spanned(alg, shape, n, lambda l: (shape.k - 1.0) * h.links[l].latency)  # k-1 rounds
    all_reduce = ring_rounds * 2.0 + ring(part * 2.0) + part * gamma
    gather = _slowest_spanned(alg, shape, n, lambda l: h.links[l].latency
                              + _root_time(alg, placement, shape, l, reduce_phase(l), S, Z))
    return GlooTimes(all_reduce=all_reduce,
                     reduce_scatter=all_reduce,
                     all_gather=ring_rounds + ring(shape.m_times_k - m),
                     reduce=ring_rounds + ring(part) + part * gamma + gather,
                     broadcast=rounds)


def _product(alg: Algebra, chosen: Sequence[tuple[Any, float]], start: Any, divide: bool = False) -> Any:
    """`start` times (or over, with `divide`) each factor whose boolean holds."""
    out = start
    for flag, p in chosen:
        out = alg.ite(flag, out * (1.0 / p if divide else p), out)
    return out


def _chosen_sum(alg: Algebra, chosen: Sequence[tuple[Any, Any]]) -> Any:
    """The sum of the values whose boolean holds (each value a constant or a term linear in the state)."""
    out = 0.0
    for flag, v in chosen:
        out = alg.ite(flag, out + v, out)
    return out


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
            return _slowest_spanned(alg, shape, len(h.levels), at)

        gamma = 0.0 if h.reduce_GBps is None else 1.0 / (h.reduce_GBps * 1e9)
        part = m - m_over_k  # (k-1)/k of the held data
        lat = self._per_cell(alg, S, cells, lambda c, p: math.log2(p) * h.links[c.level].latency)
        # Bandwidth-optimal schedules (ring, Rabenseifner, recursive halving, Bruck): latency
        # log2 k rounds (twice for two-phase ones), the volume spread over the group's members.
        reduce_phase = lambda l: m - m_outer[l]
        ring_ar = lat * 2.0 + transfer(part * 2.0, lambda l: reduce_phase(l) * 2.0) + part * gamma
        rs = lat + transfer(part, reduce_phase) + part * gamma
        ag = lat + transfer(m_times_k - m, lambda l: m_times_k - m_inner[l])
        scatter_based = lat * 2.0 + transfer(part * 2.0, lambda l: reduce_phase(l) * 2.0)
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
            ar = _min(alg, exchange_rounds + round_gamma, ring_ar)
            r = _min(alg, rounds + round_gamma, scatter_based + part * gamma)
            b = _min(alg, rounds, scatter_based)
        if h.library is CollectiveLibrary.OPEN_MPI and not self.nonblocking:
            if h.tuned_all_reduce is not TunedAllReduce.FASTEST:  # coll/tuned's, where coll/han leaves the group
                ar = alg.ite(open_mpi_rabenseifner_all_reduce(alg, shape.k, m),
                             rabenseifner(alg, self.placement, shape, S, Z, gamma, two_way, ring_ar), ar)
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
        scatter = _slowest_spanned(alg, shape, len(h.levels), lambda l: _root_time(alg, self.placement, shape, l, part, S, Z))
        if self.nonblocking:
            return binomial_reduce + lat + scatter
        linear = open_mpi_linear_reduce_scatter(alg, shape.k, shape.m_over_k)
        return alg.ite(linear, reduce + lat + scatter, bandwidth_optimal)

    def traffic(self, alg: Algebra, op: Any, S: Sequence[Any], Y: Sequence[Any], Z: Sequence[Any]) -> list[Any]:
        """Per level, the seconds the step keeps its links busy: the alpha-beta accounting (``solver.cost.step_traffic``)."""
        return step_traffic(alg, self.placement, self.request, self.message_bytes, op, S, Y, Z)

    def _per_cell(self, alg: Algebra, S: Sequence[Any], cells, term) -> Any:
        """Sum of ``term(cell, factor)`` over the slice's cells; each term is linear in the state."""
        return _chosen_sum(alg, [(s, term(c, self.placement.factor(c))) for s, c in zip(S, cells)])
