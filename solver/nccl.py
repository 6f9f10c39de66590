"""NCCL's own algorithm choice, priced: every call (the default's and each step's) as NCCL's tuning model runs it.

Under ``library: nccl`` NCCL picks, for every call, the (algorithm, protocol)
pair its tuning model prices cheapest (``src/graph/tuning.cc``,
``ncclTopoTuneModel``; ``enqueue.cc``'s ``topoGetAlgoInfo``): ring, tree,
NVLS, NVLSTree, CollNet (direct and chain) and PAT, with the LL, LL128 and
Simple protocols. Both cost models price a step here the same way: each
pair's time is its latency plus its bytes at its bandwidth, and the step
takes the cheapest (docs/model.md, "NCCL's algorithm choice").

The group of a step is read the way NCCL reads a communicator: its *nodes*
are the units of the levels whose fabric is the network (``Fabric.NET``),
``N`` the product of the slice's factors there, and ``G`` (NCCL's ``ppn``)
the product of the others; ``k = N G`` ranks.

* **Latency**: NCCL's formulas with its constants
  (``hierarchies/nccl_tuning.py``): ring ``base + (nsteps - nInter) intra +
  nInter inter`` (a broadcast or reduce ``base + k hop``, NCCL's figure for
  rings on different channels); tree ``base + 2 ((G - 1) intra + log2 N inter)``; NVLS the
  switch's latency (plus the network's across nodes); NVLSTree ``switch + 2
  log2 N inter``; CollNet direct ``2 (min(1, G - 1) intra + 0.4 (G - 1)) +
  switch``, chain ``2 (G - 1) intra + switch``; PAT ``8 + log2 N inter / 3.5 +
  2.8 k``. ``log2 N`` is the sum of ``log2`` of the factors, so it stays linear.
* **Bandwidth**: the level traffic of both cost models
  (``solver.cost.level_traffic``: per level the bytes each member sends over
  its link, the uplink shared by the unit's groups), over the rate each
  algorithm reaches by NCCL's refinements: ring Simple the link, LL128 0.92
  of it, LL half of it and at most ``llMaxBw``; tree 0.92 x 0.85 of the link
  for twice the message each way (once across the one edge between two nodes) (LL128 x 7/9 on one node, 120/128 across nodes; LL
  x 1/3.8, at most ``llMaxBw``); PAT 0.75 of the ring's rate.
* **Switch reduction** (a level's ``switch_reduce``): NVLS moves each
  member's buffer up into the switch once and the result down once, ``m (1 +
  1/G)`` each way (its own shard included) at the switch's rate; an
  NVLS reduce_scatter sends ``m`` up, an all_gather receives the ``k m``
  gathered; NVLSTree adds the network's tree among the nodes, each GPU
  sending its ``m / G`` shard (twice that above two nodes, as NCCL's
  ``interBw`` halves), and at most NCCL's ``perChMaxNVLSTreeBw`` per head
  GPU (its NVLS graph has one channel per GPU with a NIC: every GPU on the
  bundled systems); CollNet reduces across nodes in the network switch,
  ``m / G`` per GPU each way at the lesser of the link and the switch's rate
  (x 0.85 on Hopper and later, NCCL's CollNetDirect figure), after the node's
  reduce_scatter (direct) or chain (``2 m`` over the node's fabric).

NCCL's own per-channel caps (``perChMax*Bw``) and its size-dependent tree
correction are not applied: they scale with the channel count that NCCL's
topology search finds, which the model does not repeat.

Every pair's time is at least its own bytes at the fastest rate any of its
links has, so the lower bound (``hierarchies/bound.py``) stays below it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from p2synth.hierarchies.model import Fabric, GpuArch, SwitchReduction
from p2synth.hierarchies.nccl_tuning import (COLLNET_ARITY_US, COLLNET_SM90, LL128_BUS, LL_BUS, NET_OVERHEAD_US,
                                             NVLS_EFFICIENCY, NVLS_TREE_PER_CHANNEL, PAT_BUS, TREE_BUS, TREE_LL128_NODES,
                                             TREE_LL128_ONE_NODE, TREE_LL_BUS, TREE_PATTERN, Algo, Proto, base_us, profile_of,
                                             hw_us, ll_max_GBps, protocols)
from p2synth.hierarchies.placement import Placement
from p2synth.hierarchies.program import Collective
from p2synth.solver.algebra import Algebra, slowest
from p2synth.solver.cost import Split, StepShape, level_time, level_traffic, step_volume
from p2synth.solver.step_terms import slowest_spanned

US = 1e-6


@dataclass(frozen=True)
class Group:
    """A step's group as NCCL sees its communicator (each value a chain of boolean-chosen constants).

    ``nodes`` (N) and ``ppn`` (G): the products of the slice's factors at network levels and at the others;
    ``log2_nodes``: ``log2 N``; ``m_over_ppn`` and ``m_over_k_ppn``: the held bytes over ``G`` and over ``k G``;
    ``one_node``, ``many_nodes``, ``two_nodes_or_less``, ``one_per_node``, ``several_per_node``: comparisons of N and G.
    """

    nodes: Any
    ppn: Any
    log2_nodes: Any
    m_over_ppn: Any
    m_over_k_ppn: Any
    one_node: Any
    many_nodes: Any
    two_nodes_or_less: Any
    one_per_node: Any
    several_per_node: Any


def group_of(alg: Algebra, placement: Placement, shape: StepShape, S: Sequence[Any]) -> Group:
    """The :class:`Group` of a step with slice `S` and shape `shape`."""
    h = placement.hierarchy
    nodes, ppn, log2_nodes, m_over_ppn, m_over_k_ppn = 1.0, 1.0, 0.0, shape.m, shape.m_over_k
    for s, p, lv in zip(S, shape.factors, shape.levels):
        if h.fabric(lv) is Fabric.NET:
            nodes = alg.ite(s, nodes * p, nodes)
            log2_nodes = alg.ite(s, log2_nodes + math.log2(p), log2_nodes)
        else:
            ppn = alg.ite(s, ppn * p, ppn)
            m_over_ppn = alg.ite(s, m_over_ppn * (1.0 / p), m_over_ppn)
            m_over_k_ppn = alg.ite(s, m_over_k_ppn * (1.0 / p), m_over_k_ppn)
    return Group(nodes, ppn, log2_nodes, m_over_ppn, m_over_k_ppn, nodes < 1.5, nodes > 1.5, nodes < 2.5, ppn < 1.5,
                 ppn > 1.5)


@dataclass(frozen=True)
class Priced:
    """One (algorithm, protocol) pair's latency and bandwidth seconds for a step, and when NCCL may not run it."""

    name: str
    latency: Any
    busiest: Any
    blocked: Any = False


def _scaled(alg: Algebra, cond: Any, then: Any, factor_then: float, factor_other: float) -> Any:
    """``then * factor_then`` where `cond`, else ``then * factor_other``: a constant factor chosen by a boolean."""
    return alg.ite(cond, then * factor_then, then * factor_other)


def _by_nodes(alg: Algebra, g: Group, one: Any, two: Any, more: Any) -> Any:
    """The value for one node, two nodes, or four or more (NCCL's N1, N2, N4 columns)."""
    return alg.ite(g.one_node, one, alg.ite(g.two_nodes_or_less, two, more))


class NcclPricer:
    """NCCL's price of one step (``(op, S)`` in a state ``Y``, ``Z``) on a placement: :meth:`options`."""

    def __init__(self, alg: Algebra, placement: Placement, shape: StepShape, op: Any, S: Sequence[Any],
                 Z: Sequence[Any]):
        self.alg, self.placement, self.shape, self.op, self.S, self.Z = alg, placement, shape, op, S, Z
        self.h = placement.hierarchy
        self.profile = profile_of(self.h)
        self.g = group_of(alg, placement, shape, S)
        self.levels = range(len(self.h.levels))
        self.spanned = [l for l in self.levels if any(lv == l for lv in shape.levels)]
        inner = [self.h.fabric(l) for l in self.levels if self.h.fabric(l) is not Fabric.NET]
        self.intra_hw = Fabric.PCI if Fabric.PCI in inner else Fabric.NVLINK
        self.is_op = {c: alg.is_op(op, c) for c in (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER,
                                                     Collective.ALL_GATHER, Collective.REDUCE, Collective.BROADCAST)}
        self.ring_traffic = level_traffic(alg, placement, op, shape, S, Z)  # what the links carry (the Split's)
        self.ring_busiest = slowest(alg, self.ring_traffic)

    # -- helpers -------------------------------------------------------------------------------------------
    def _not_op(self, *ops: Collective) -> Any:
        """True where the step's op is none of `ops`."""
        return self.alg.any([v for c, v in self.is_op.items() if c not in ops])

    def _spans_other_than(self, keep) -> Any:
        """True where the slice spans a level that `keep(l)` rejects."""
        return self.alg.any([self.shape.spans[l] for l in self.spanned if not keep(l)])

    def _over(self, keep, per_level) -> Any:
        """The slowest of ``per_level(l)`` over the spanned levels `keep` accepts (0 off the slice)."""
        return slowest_spanned(self.alg, self.shape, len(self.h.levels),
                               lambda l: per_level(l) if keep(l) else 0.0)

    def _is_switch(self, l: int, kind: SwitchReduction) -> bool:
        return self.h.levels[l].switch_reduce is kind

    def _inter(self, algo: Algo, proto: Proto) -> Any:
        """NCCL's inter-node latency (seconds): the network's, the tree's where one GPU per node."""
        return self.alg.ite(self.g.one_per_node, hw_us(Fabric.NET, Algo.TREE, proto) * US,
                            hw_us(Fabric.NET, algo, proto) * US)

    # -- the pairs -----------------------------------------------------------------------------------------
    def options(self) -> list[Priced]:
        """Every (algorithm, protocol) pair NCCL may consider for the step; the first, Ring/Simple, always runs."""
        ring = self._ring()
        out = [ring[Proto.SIMPLE]] + [p for proto, p in ring.items() if proto is not Proto.SIMPLE]
        return out + self._tree() + self._nvls() + self._collnet() + self._pat()

    def _ring(self) -> dict[Proto, Priced]:
        alg, g, shape, k = self.alg, self.g, self.shape, self.shape.k
        arch, cpu = self.profile.arch, self.profile.cpu
        is_ar = self.is_op[Collective.ALL_REDUCE]
        rooted = alg.any([self.is_op[Collective.REDUCE], self.is_op[Collective.BROADCAST]])
        volume, busiest = step_volume(alg, self.op, shape), self.ring_busiest
        nsteps = alg.ite(is_ar, (k - 1.0) * 2.0, k - 1.0)
        n_inter = alg.ite(is_ar, (g.nodes - 1.0) * 2.0, g.nodes - 1.0)
        out = {}
        for proto in protocols(arch):
            intra = hw_us(self.intra_hw, Algo.RING, proto)
            overhead = NET_OVERHEAD_US[cpu] * (3.0 if proto is Proto.SIMPLE else 1.0)
            intra_steps = _scaled(alg, g.one_node, nsteps - n_inter, intra * US, max(intra, overhead) * US)
            inter_steps = _scaled(alg, g.one_per_node, n_inter, hw_us(Fabric.NET, Algo.TREE, proto) * US,
                                  hw_us(Fabric.NET, Algo.RING, proto) * US)
            # a broadcast or reduce chain: NCCL's latency for rings on different channels, one hop per rank (the
            # Tree's hop for Simple); its one-hop figure for same-channel rings would price a chain of k ranks at
            # one hop, below the all_reduce's ring for every k
            hop = lambda hw: hw_us(hw, Algo.TREE if proto is Proto.SIMPLE else Algo.RING, proto) * US
            rooted_lat = _scaled(alg, g.one_node, k, hop(self.intra_hw), hop(Fabric.NET))
            latency = base_us(arch, Algo.RING, proto) * US + alg.ite(rooted, rooted_lat, intra_steps + inter_steps)
            if proto is Proto.SIMPLE:
                bw = busiest
            elif proto is Proto.LL128:
                bw = busiest * (1.0 / LL128_BUS)
            else:
                cap = _by_nodes(alg, g, *(volume * (1.0 / (ll_max_GBps(arch, cpu, i) * 1e9)) for i in range(3)))
                bw = alg.ite(busiest * (1.0 / LL_BUS) > cap, busiest * (1.0 / LL_BUS), cap)
            out[proto] = Priced(f"{Algo.RING}/{proto}", latency, bw)
        return out

    def _tree(self) -> list[Priced]:
        alg, g, shape = self.alg, self.g, self.shape
        arch, cpu = self.profile.arch, self.profile.cpu
        # 2m each way per rank on the node's chain and across nodes in the double binary tree; between two nodes the
        # tree's one edge carries m each way (NCCL prices a two-node tree at the intra-node rate)
        chain = level_traffic(alg, self.placement, self.op, shape, self.S, self.Z, volume=shape.m * 2.0)
        pair = level_traffic(alg, self.placement, self.op, shape, self.S, self.Z, volume=shape.m)
        traffic = slowest(alg, [alg.ite(g.two_nodes_or_less, p, c) if self.h.fabric(l) is Fabric.NET else c
                                for l, (c, p) in enumerate(zip(chain, pair))])
        blocked = self._not_op(Collective.ALL_REDUCE)
        out = []
        for proto in protocols(arch):
            intra, inter = hw_us(self.intra_hw, Algo.TREE, proto) * US, self._inter(Algo.TREE, proto)
            latency = (base_us(arch, Algo.TREE, proto) * US
                       + ((g.ppn - 1.0) * intra + g.log2_nodes * inter) * 2.0)
            rate = TREE_BUS * TREE_PATTERN
            if proto is Proto.SIMPLE:
                bw = traffic * (1.0 / rate)
            elif proto is Proto.LL128:
                bw = _scaled(alg, g.one_node, traffic, 1.0 / (rate * TREE_LL128_ONE_NODE), 1.0 / (rate * TREE_LL128_NODES))
            else:
                plain = traffic * (1.0 / (rate * TREE_LL_BUS))
                cap = _by_nodes(alg, g, *(shape.m * (2.0 / (TREE_PATTERN * ll_max_GBps(arch, cpu, i) * 1e9))
                                          for i in range(3)))
                bw = alg.ite(plain > cap, plain, cap)
            out.append(Priced(f"{Algo.TREE}/{proto}", latency, bw, blocked))
        return out

    def _switch_time(self, volume: Any) -> Any:
        """Seconds to move `volume` bytes per member through the NVLS switches of the spanned levels: at the switch's
        rate, and never faster than the member's own link (or its share of the unit's uplink) carries them."""
        alg, h, shape = self.alg, self.h, self.shape

        def at(l: int) -> Any:
            switch = volume * (1.0 / (h.levels[l].switch_reduce_GBps * 1e9))
            link = level_time(alg, self.placement, l, volume, self.S, self.Z, shape.factors, shape.levels,
                              spread_over_group=False)
            return alg.ite(switch > link, switch, link)

        return self._over(lambda l: self._is_switch(l, SwitchReduction.NVLS), at)

    def _nvls_latency(self) -> float:
        """The least switch latency of the hierarchy's NVLS levels (seconds); they are the NVLink domain's."""
        return min(lv.switch_latency_us for lv in self.h.levels if lv.switch_reduce is SwitchReduction.NVLS) * US

    def _nvls(self) -> list[Priced]:
        """NVLS inside one NVLink domain (all_reduce, reduce_scatter, all_gather) and NVLSTree across nodes."""
        if NVLS_EFFICIENCY[self.profile.arch] == 0.0 or not any(
                lv.switch_reduce is SwitchReduction.NVLS for lv in self.h.levels):
            return []
        alg, g, shape = self.alg, self.g, self.shape
        net = lambda l: self.h.fabric(l) is Fabric.NET
        off_switch = self._spans_other_than(lambda l: net(l) or self._is_switch(l, SwitchReduction.NVLS))
        intra = self._nvls_latency()
        up_down = self._switch_time(shape.m + g.m_over_ppn)
        by_op = alg.ite(self.is_op[Collective.ALL_REDUCE], up_down,
                        alg.ite(self.is_op[Collective.REDUCE_SCATTER], self._switch_time(shape.m),
                                self._switch_time(shape.m_times_k)))
        nvls = Priced(f"{Algo.NVLS}/{Proto.SIMPLE}", intra, by_op,
                      alg.any([off_switch, g.many_nodes, g.one_per_node,
                               self._not_op(Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER)]))
        shard = _scaled(alg, g.two_nodes_or_less, g.m_over_ppn, 1.0, 2.0)
        network = self._over(net, lambda l: level_time(alg, self.placement, l, shard, self.S, self.Z, shape.factors,
                                                       shape.levels, spread_over_group=False))
        two, more = NVLS_TREE_PER_CHANNEL[self.profile.arch]
        bus = (g.m_over_ppn - g.m_over_k_ppn) * 2.0  # the ring's bytes per rank, over the G heads
        capped = _scaled(alg, g.two_nodes_or_less, bus, 1.0 / (two * 1e9), 1.0 / (more * 1e9))
        tree_latency = intra + g.log2_nodes * self._inter(Algo.NVLS_TREE, Proto.SIMPLE) * 2.0
        nvls_tree = Priced(f"{Algo.NVLS_TREE}/{Proto.SIMPLE}", tree_latency, slowest(alg, [network, up_down, capped]),
                           alg.any([off_switch, g.one_node, g.one_per_node, self._not_op(Collective.ALL_REDUCE)]))
        return [nvls, nvls_tree]

    def _collnet(self) -> list[Priced]:
        """CollNet direct and chain (all_reduce across nodes whose network switch reduces: SHARP)."""
        sharp = [l for l in self.levels if self._is_switch(l, SwitchReduction.SHARP)]
        if not sharp:
            return []
        alg, g, shape, h = self.alg, self.g, self.shape, self.h
        net = lambda l: h.fabric(l) is Fabric.NET
        blocked = alg.any([self._spans_other_than(lambda l: not net(l) or l in sharp), g.one_node,
                           self._not_op(Collective.ALL_REDUCE)])
        efficiency = COLLNET_SM90 if self.profile.arch in (GpuArch.HOPPER, GpuArch.BLACKWELL) else 1.0

        def network(l: int) -> Any:
            link = level_time(alg, self.placement, l, g.m_over_ppn, self.S, self.Z, shape.factors, shape.levels,
                              spread_over_group=False)
            if l not in sharp:  # a network level whose switch does not reduce: CollNet is blocked where it is spanned
                return link
            switch = g.m_over_ppn * (1.0 / (h.levels[l].switch_reduce_GBps * 1e9))
            return alg.ite(switch > link, switch, link) * (1.0 / efficiency)

        across = self._over(net, network)
        switch_lat = min(h.levels[l].switch_latency_us for l in sharp) * US
        inside = lambda volume: self._over(lambda l: not net(l), lambda l: level_time(
            alg, self.placement, l, volume, self.S, self.Z, shape.factors, shape.levels, spread_over_group=False))
        direct_in = inside((shape.m - g.m_over_ppn) * 2.0)
        chain_in = inside(shape.m * 2.0)
        intra = lambda algo: hw_us(self.intra_hw, algo, Proto.SIMPLE) * US
        direct_lat = (alg.ite(g.one_per_node, 0.0, intra(Algo.COLLNET_DIRECT)) + (g.ppn - 1.0) * (COLLNET_ARITY_US * US)) * 2.0 + switch_lat
        chain_lat = (g.ppn - 1.0) * (intra(Algo.COLLNET_CHAIN) * 2.0) + switch_lat
        return [Priced(f"{Algo.COLLNET_DIRECT}/{Proto.SIMPLE}", direct_lat, alg.ite(across > direct_in, across, direct_in), blocked),
                Priced(f"{Algo.COLLNET_CHAIN}/{Proto.SIMPLE}", chain_lat, alg.ite(across > chain_in, across, chain_in), blocked)]

    def _pat(self) -> list[Priced]:
        """PAT: all_gather and reduce_scatter with one GPU per node (NCCL's default there since 2.23)."""
        if self.profile.arch in (GpuArch.CDNA3,):
            return []
        alg, g, shape = self.alg, self.g, self.shape
        latency = (base_us(self.profile.arch, Algo.PAT, Proto.SIMPLE) * US
                   + g.log2_nodes * (hw_us(Fabric.NET, Algo.TREE, Proto.SIMPLE) * US / 3.5) + shape.k * (2.8 * US))
        blocked = alg.any([g.several_per_node, g.one_node,
                           self._not_op(Collective.ALL_GATHER, Collective.REDUCE_SCATTER)])
        return [Priced(f"{Algo.PAT}/{Proto.SIMPLE}", latency, self.ring_busiest * (1.0 / PAT_BUS), blocked)]


def nccl_split(alg: Algebra, placement: Placement, shape: StepShape, op: Any, S: Sequence[Any], Y: Sequence[Any],
               Z: Sequence[Any]) -> Split:
    """The :class:`~solver.cost.Split` of a step under NCCL: Ring/Simple first (its traffic is what the links
    carry), then every other pair NCCL may run, each the ring's own where NCCL may not run it for this step."""
    pricer = NcclPricer(alg, placement, shape, op, S, Z)
    options = pricer.options()
    first = options[0]
    others = tuple((alg.ite(o.blocked, first.latency, o.latency), alg.ite(o.blocked, first.busiest, o.busiest))
                   for o in options[1:])
    return Split(first.latency, pricer.ring_traffic, first.busiest, others, tuple(o.name for o in options))
