"""gloo's algorithms, priced for the simulator (``library: gloo``: PyTorch's CPU backend; docs/simulator.md, "gloo"): one
algorithm per collective whatever the size."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from p2synth.hierarchies.placement import Placement
from p2synth.solver.algebra import Algebra
from p2synth.solver.cost import StepShape, level_time
from p2synth.solver.step_terms import root_time, slowest_spanned


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
        return slowest_spanned(alg, shape, n, lambda l: level_time(alg, placement, l, volume, S, Z, shape.factors,
                                                                     shape.levels, one_sender=True) * two_way[l])

    ring_rounds = slowest_spanned(alg, shape, n, lambda l: (shape.k - 1.0) * h.links[l].latency)  # k-1 rounds
    all_reduce = ring_rounds * 2.0 + ring(part * 2.0) + part * gamma
    gather = slowest_spanned(alg, shape, n, lambda l: h.links[l].latency
                              + root_time(alg, placement, shape, l, reduce_phase(l), S, Z))
    return GlooTimes(all_reduce=all_reduce,
                     reduce_scatter=all_reduce,
                     all_gather=ring_rounds + ring(shape.m_times_k - m),
                     reduce=ring_rounds + ring(part) + part * gamma + gather,
                     broadcast=rounds)
