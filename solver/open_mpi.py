"""Open MPI's algorithm choices, priced for the simulator (``library: open-mpi``; docs/simulator.md): coll/tuned's fixed
rules, Rabenseifner with its fold for groups that are not a power of two, libnbc's non-blocking all_reduce, and the
hierarchical component coll/han."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from p2synth.hierarchies.model import HanBroadcast
from p2synth.hierarchies.placement import Placement
from p2synth.solver.algebra import Algebra
from p2synth.solver.cost import StepShape, level_time
from p2synth.solver.step_terms import chosen_product, chosen_sum, larger, root_time, slowest_spanned, smaller

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


class Tree(Enum):
    """The broadcast and reduce algorithms coll/tuned's fixed decision picks, as the simulator prices them (each
    unsegmented, as the decision runs them: it passes a segment size of 0)."""

    LINEAR = "linear"          # the root sends to (receives from) every other member, all at once
    CHAIN = "chain"            # one hop after another in rank order, each the whole buffer ("chain" and "pipeline")
    BINOMIAL = "binomial"      # log2 k rounds of the whole buffer (also the k-nomial and binary trees of larger groups)
    SCATTER_ALLGATHER = "scatter_allgather"
    FASTEST = "fastest"        # the faster of the binomial and scatter-based schedules: algorithms not priced one by one


_L, _C, _B, _S, _F = Tree.LINEAR, Tree.CHAIN, Tree.BINOMIAL, Tree.SCATTER_ALLGATHER, Tree.FASTEST
# Open MPI 5's fixed decisions (coll/tuned, coll_tuned_decision_fixed.c, v5.0.x) for MPI_Bcast and a commutative
# MPI_Reduce: per row the groups of fewer than `below` members (from the previous row's `below`), then from each
# byte size on, the algorithm. A binary tree over 2 or 3 members is the linear fan-out; over more, and the k-nomial
# tree, are priced as the binomial tree; groups of 32 or more keep the faster schedule.
TUNED_BROADCAST: tuple[tuple[float, tuple[tuple[int, Tree], ...]], ...] = (
    (4, ((0, _C), (32, _L), (256, _C), (512, _B), (1024, _L), (32768, _L), (131072, _C), (262144, _L),
         (524288, _B), (1048576, _L))),
    (8, ((0, _B), (8192, _L), (1048576, _C))),
    (16, ((0, _B), (32768, _L))),
    (32, ((0, _B), (1048576, _S))),
    (math.inf, ((0, _F),)),
)
TUNED_REDUCE: tuple[tuple[float, tuple[tuple[int, Tree], ...]], ...] = (
    (4, ((0, _F), (8, _L), (16, _C), (32, _L), (262144, _C))),
    (8, ((0, _B), (4096, _C), (65536, _B), (262144, _L), (524288, _B), (1048576, _L))),
    (32, ((0, _B),)),
    (math.inf, ((0, _F),)),
)


def _row(rows, k: int) -> tuple[tuple[int, Tree], ...]:
    """The byte thresholds of a fixed-decision table's row for a group of `k` members (the last row covers the rest)."""
    return next(sizes for below, sizes in rows if k < below)


def tuned_tree(rows, k: int, nbytes: float) -> Tree:
    """The algorithm a fixed-decision table (`TUNED_BROADCAST`, `TUNED_REDUCE`) picks for `k` members and `nbytes`."""
    return [tree for least, tree in _row(rows, k) if nbytes >= least][-1]


def _tree_of(alg: Algebra, rows, shape: StepShape, times: dict[Tree, Any]) -> Any:
    """The time of the algorithm the table picks for the step's group size and buffer: a chain over the group sizes
    its slice can have, and within each over the table's byte thresholds."""
    def at(k: int) -> Any:
        sizes = _row(rows, k)
        out = times[sizes[0][1]]
        for least, tree in sizes[1:]:
            out = alg.ite(shape.m < least, out, times[tree])
        return out
    return _of_size(alg, shape, at)


def halving_crossing(alg: Algebra, shape: StepShape, S: Sequence[Any], l: int, outer_first: Callable[[int], Any]) -> Any:
    """Bytes one member sends across level `l` in the reduce-scatter half of Open MPI's Rabenseifner (recursive vector
    halving with distance doubling): the rounds run from the least significant digit of the rank order (the last
    chosen cell) to the most significant, each digit's rounds moving ``m / F - m / (F f)`` (``F`` the factors of the
    digits already done, ``f`` the digit's), and a round crosses level `l` when its digit's cell is at `l` or an outer
    level. In a group that is not a power of two the fold renumbers the members that stay (the first ``2r`` ranks
    keep every other one), so their order no longer follows the digits: there the outermost levels are priced
    first, ``outer_first(l)`` (the simulator's ``m (1 - 1/K)`` across `l`, ``K`` the factors at `l` and outside),
    the price before."""
    def leaf(chosen: tuple[int, ...]) -> Any:
        k = math.prod(shape.factors[i] for i in chosen)
        if k & (k - 1):
            return outer_first(l)
        out, done = 0.0, 1
        for i in reversed(chosen):
            moved = shape.m * (1.0 / done - 1.0 / (done * shape.factors[i]))
            out = out + moved if shape.levels[i] <= l else out
            done *= shape.factors[i]
        return out
    return _by_subset(alg, S, list(range(len(shape.factors))), leaf)


def tuned_trees(alg: Algebra, placement: Placement, shape: StepShape, S: Sequence[Any], Z: Sequence[Any],
                gamma: float, binomial: Any, binomial_reduce: Any, scatter_based: Any, fastest_b: Any,
                fastest_r: Any) -> tuple[Any, Any]:
    """Seconds of the broadcast and the reduce coll/tuned's fixed decision runs over the step's group (``tuned_trees:
    rules``): the tables' algorithm for its size and buffer. `binomial`, `binomial_reduce`, `scatter_based` and the
    faster ones (`fastest_b`, `fastest_r`) are the simulator's own prices of those schedules.

    The chain (k - 1 hops one after another, the whole buffer each, in rank
    order) charges each hop the outermost level it crosses, its link shared
    with the other groups' hops as a step's are (``root_time``), plus that
    level's latency; the linear fan-out pushes the copies for members outside
    the root's level-``l`` unit through the root's link across level ``l``,
    all at once, plus the outermost level's latency. The reduce's versions
    sum ``(k - 1)`` buffers (``gamma``) at the root or along the chain.
    """
    h = placement.hierarchy
    idx = list(range(len(shape.factors)))

    def chain(chosen: tuple[int, ...]) -> Any:
        total, before = 0.0, 1
        for j, i in enumerate(chosen):  # hops whose most significant changed digit is cell i
            level = min(shape.levels[c] for c in chosen[j:])  # the outermost level among the digits they change
            hops = before * (shape.factors[i] - 1)
            total = total + (root_time(alg, placement, shape, level, shape.m, S, Z) + h.links[level].latency) * float(hops)
            before *= shape.factors[i]
        return total

    def linear(chosen: tuple[int, ...]) -> Any:
        k = math.prod(shape.factors[i] for i in chosen)
        worst = 0.0
        for l in sorted({shape.levels[i] for i in chosen}):
            inside = math.prod(shape.factors[i] for i in chosen if shape.levels[i] > l)
            worst = larger(alg, worst, root_time(alg, placement, shape, l, shape.m * float(k - inside), S, Z))
        return worst + h.links[min(shape.levels[i] for i in chosen)].latency if chosen else 0.0

    sums = shape.m_times_k - shape.m  # (k - 1) buffers summed
    chained, fanned = _by_subset(alg, S, idx, chain), _by_subset(alg, S, idx, linear)
    b = {_L: fanned, _C: chained, _B: binomial, _S: scatter_based, _F: fastest_b}
    r = {_L: fanned + sums * gamma, _C: chained + sums * gamma, _B: binomial_reduce, _F: fastest_r}  # no reduce row picks _S
    return _tree_of(alg, TUNED_BROADCAST, shape, b), _tree_of(alg, TUNED_REDUCE, shape, r)


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
    """Open MPI's coll/han on one step whose group spans hosts (`across`; see ``Hierarchy.host_level``) with several members
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
    host = h.host_level
    up = [i for i, lv in enumerate(shape.levels) if lv <= host]
    if not up or len(up) == len(shape.levels):
        return None
    across = alg.any([S[i] for i in up])
    inside = alg.any([S[i] for i, lv in enumerate(shape.levels) if lv > host])
    leaders = chosen_product(alg, [(S[i], shape.factors[i]) for i in up], 1.0)

    def sent(l: int, v: Any) -> Any:
        """The linear broadcast's copies out of the root's level-`l` unit (one copy above 4 leaders, the
        ``one-copy`` price)."""
        outer = [(S[i], shape.factors[i]) for i in up if shape.levels[i] <= l]
        inner = [(S[i], shape.factors[i]) for i in up if shape.levels[i] > l]
        copies = chosen_product(alg, outer + inner, v) - chosen_product(alg, inner, v)
        return root_time(alg, placement, shape, l, alg.ite(leaders < LIBNBC_LINEAR_BCAST_MAX + 0.5, copies, v), S, Z)

    def received(l: int, v: Any) -> Any:
        """The reduce's data into the root's level-`l` unit."""
        outer = [(S[i], shape.factors[i]) for i in up if shape.levels[i] <= l]
        return root_time(alg, placement, shape, l, (v - chosen_product(alg, outer, v, divide=True)) * 2.0, S, Z)

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
                    t = larger(alg, level_time(alg, placement, l, v * float(c), S, Z, shape.factors, shape.levels),
                             v * (1.0 / h.links[l].bandwidth))
                    slowest = larger(alg, slowest, t * two_way[l] if both else t)
                total = total + slowest
            return total
        return _by_subset(alg, S, up, leaf)

    def inter(v: Any, out: bool, into: bool) -> Any:
        """The inter-host stage on `v` bytes: the broadcast's copies out of the root (`out`), the reduce's data
        into it (`into`), or both at once."""
        def at(l: int) -> Any:
            if out and into:
                return larger(alg, sent(l, v), received(l, v)) * two_way[l]
            return sent(l, v) if out else received(l, v)
        linear = slowest_spanned(alg, shape, host + 1, at)
        if not out or h.han_broadcast is HanBroadcast.ONE_COPY:
            return linear
        binomial = tree(v, into)
        if into:
            binomial = larger(alg, binomial, slowest_spanned(alg, shape, host + 1, lambda l: received(l, v) * two_way[l]))
        return alg.ite(leaders < LIBNBC_LINEAR_BCAST_MAX + 0.5, linear, binomial)

    def intra(v: Any, transfers: float, reduces: bool) -> Any:
        """The intra-host stage on `v` bytes: `transfers` shared-memory copies over the slowest level inside a host,
        and the reduction compute when the op reduces."""
        copy = slowest_spanned(alg, shape, len(h.levels), lambda l: v * (transfers / h.links[l].bandwidth) if l > host else 0.0)
        return copy + (v * (2.0 * gamma) if reduces else 0.0)

    seg = alg.ite(shape.m < HAN_SEGMENT_BYTES, shape.m, HAN_SEGMENT_BYTES)

    def pipelined(stages) -> Any:
        a, b = stages(shape.m)
        sa, sb = stages(seg)
        return larger(alg, a, b) + smaller(alg, sa, sb)

    # every segment waits for its inter-host stage: the leaders' latency once per segment
    segments = alg.ite(shape.m < HAN_SEGMENT_BYTES, 1.0, shape.m * (1.0 / HAN_SEGMENT_BYTES))
    alphas = [(S[i], math.log2(shape.factors[i]) * h.links[shape.levels[i]].latency) for i in up]
    lat = chosen_sum(alg, alphas)
    waits = chosen_sum(alg, [(flag, segments * a) for flag, a in alphas])  # stays linear: constants times `segments`
    # all_gather, not segmented: a gather of the host's blocks into its leader, the leaders' allgather of those, the
    # whole result broadcast inside the host, one after the other
    inner_cells = [(S[i], shape.factors[i]) for i, lv in enumerate(shape.levels) if lv > host]
    block = chosen_product(alg, inner_cells, shape.m)

    def gathered_in(l: int) -> Any:
        """The leaders' allgather: coll/tuned's recursive doubling (Bruck where the leaders are not a power of two) in
        their order, so each leader receives its own copy of the blocks of the leaders outside its level-`l` unit,
        at its bandwidth, through the unit's uplink shared with every leader in the unit, both directions at once."""
        within = [(S[i], shape.factors[i]) for i in up if shape.levels[i] > l]
        v = chosen_product(alg, [(S[i], shape.factors[i]) for i in up], block) - chosen_product(alg, within, block)
        link = h.links[l]
        t = v * (1.0 / link.bandwidth)
        if link.uplink is not None:  # the unit's devices over the group's members per host: its leaders, all groups
            t = larger(alg, t, chosen_product(alg, inner_cells, v * (h.devices_below(l) / link.uplink), divide=True))
        return t * two_way[l]

    all_gather = (intra(block - shape.m, 1.0, False) + slowest_spanned(alg, shape, host + 1, gathered_in) + lat
                  + intra(shape.m_times_k, 1.0, False))
    return HanTimes(across, inside,
                    pipelined(lambda v: (inter(v, True, True), intra(v, 2.0, True))) + waits + lat,
                    pipelined(lambda v: (inter(v, False, True), intra(v, 1.0, True))) + waits,
                    pipelined(lambda v: (inter(v, True, False), intra(v, 1.0, False))) + waits,
                    all_gather)
