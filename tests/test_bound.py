"""The lower bound (hierarchies/bound.py; docs/model.md, "Lower bound"): hand-computed figures, the classic
hierarchical all-reduce, and no program of any collective predicted below it in either cost model."""

from __future__ import annotations

import dataclasses
import math
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, find, given, settings
from hypothesis import strategies as st

from p2synth.hierarchies import Axis, Collective, Hierarchy, Level, Placement, Request
from p2synth.hierarchies import bound
from p2synth.hierarchies.abstract import enumerate_programs
from p2synth.hierarchies.bound import lower_bound, pipelined_factor
from p2synth.hierarchies.model import CollectiveLibrary
from p2synth.hierarchies.program import Program, Step, to_program
from p2synth.solver import pipeline_time
from p2synth.solver.models import CostModelKind, program_cost
from tests import strategies

MiB = 1 << 20


def _placement(*levels: Level, library: CollectiveLibrary | None = None) -> Placement:
    """One axis `data` over every device of the hierarchy `levels`."""
    h = Hierarchy(levels=levels, library=library)
    return Placement(h, (Axis(name="data", size=h.num_devices),), (tuple(lv.count for lv in levels),))


def _bound(p: Placement, collective: Collective, nbytes: float) -> bound.Bound:
    return lower_bound(p, Request(frozenset({0}), collective), nbytes)


CPU_2X4 = _placement(Level(name="node", count=2, bandwidth_GBps=1.0, uplink_GBps=1.0, latency_us=20),
                     Level(name="core", count=4, bandwidth_GBps=8.0, latency_us=1))  # examples/cpu-2x4.json


def test_cpu_2x4_all_reduce_by_hand():
    """examples/cpu-2x4.json, all_reduce of 16 MiB over 8 cores (docs/model.md's worked example).

    node: u = 2 units of G = 4 cores; a core's share of the 1 GB/s uplink is 0.25 GB/s (< its 1 GB/s link);
          need 2 (1 - 1/2) M = M per node, at 4 x 0.25 GB/s = 1 GB/s: 16777216 / 1e9 = 16.777216 ms.
    core: u = 8, G = 1; rate 0.25 + 8 = 8.25 GB/s (the core's own link plus its node share), need 2 (7/8) M:
          cut 1.75 x 16777216 / 8.25e9 = 3.5589 ms; two cells at or outside the level, each touched twice:
          pipelined factor 2/3 (P = 3, c = 2) on the latency floor's side.
    latency floor: 20 + 1 us. Bound: max(21 us + 16.777216 ms, 16.777216 ms) = 16.798216 ms.
    """
    b = _bound(CPU_2X4, Collective.ALL_REDUCE, 16 * MiB)
    node, core = b.levels
    assert (node.units, node.members, core.units, core.members) == (2, 4, 8, 1)
    assert node.seconds == pytest.approx(16777216 / 1e9, rel=1e-12)
    assert core.pipelined == pytest.approx(2 / 3)
    assert core.seconds == pytest.approx(1.75 * 16777216 / 8.25e9, rel=1e-12)
    assert b.latency_s == pytest.approx(21e-6)
    assert b.seconds == pytest.approx(16777216 / 1e9 + 21e-6, rel=1e-12)
    assert b.binding == 0


def test_all_to_all_2x4_by_hand():
    """examples/all-to-all-2x4.json's hierarchy, all_to_all of 64 KiB over 8 devices.

    node: every device sends the half of its buffer addressed to the other node, 32 KiB, at its 0.25 GB/s share
          of the node's 1 GB/s uplink: 32768 / 0.25e9 = 131.072 us (the flat step's bandwidth in docs/model.md).
    latency floor 20 + 1 us: 152.072 us.
    """
    b = _bound(CPU_2X4, Collective.ALL_TO_ALL, 64 * 1024)
    assert b.levels[0].need_bytes == 4 * 32768  # G (1 - 1/u) M: four devices' halves leave the node
    assert b.bandwidth_s == pytest.approx(131.072e-6, rel=1e-12)
    assert b.seconds == pytest.approx(152.072e-6, rel=1e-12)


def test_one_level_collectives_by_hand():
    """Four devices on one 10 GB/s fabric, 2 us, 40 MB: reduce_scatter and all_gather (3/4) M, all_reduce 2 (3/4) M,
    reduce and broadcast M, all_to_all (3/4) M, each over 10 GB/s, plus one latency (nccl-tests' busbw factors)."""
    p = _placement(Level(name="node", count=4, bandwidth_GBps=10.0, latency_us=2.0))
    M = 40e6
    expect = {Collective.REDUCE_SCATTER: 0.75, Collective.ALL_GATHER: 0.75, Collective.ALL_REDUCE: 1.5,
              Collective.REDUCE: 1.0, Collective.BROADCAST: 1.0, Collective.ALL_TO_ALL: 0.75}
    for collective, factor in expect.items():
        assert _bound(p, collective, M).seconds == pytest.approx(factor * M / 10e9 + 2e-6, rel=1e-12), collective


def test_three_levels_and_open_mpi_latency():
    """cpu-cluster (hierarchies/systems/cpu-cluster.json): node 4 (12.5 GB/s, uplink 12.5, 2 us) x socket 2 (10 GB/s,
    uplink 20, 0.5 us) x core 8 (10 GB/s, 0.3 us), all_reduce of 64 MiB over the 64 cores.

    node:   u = 4, G = 16, a core's uplink share 12.5/16 GB/s: 2 (3/4) M / 12.5 GB/s = 8.053 ms.
    socket: u = 8, G = 8, share 20/8 = 2.5 GB/s, plus the node share 0.78125: rate 8 x 3.28125 = 26.25 GB/s;
            need 2 (7/8) M: cut 1.75 M / 26.25e9 = 4.474 ms; factor 3/5 (two cells out of three, each touched
            twice: n_l = 4, n = 6; P = 5 needs c = 2 windows: 1/5 + 4/(5 x 2)) beside the latency floor.
    core:   u = 64, G = 1: rate 10 + 2.5 + 0.78125 = 13.28125 GB/s (its own link and its socket and node shares),
            need 2 (63/64) M: cut 9.948 ms, the largest: each core's link carries its part of every inner step.
    latency: 2 + 0.5 + 0.3 us; under Open MPI (coll/han charges no latency inside a host) only the node's 2 us.
    Bound: max(2.8 us + 8.053 ms (the node; the inner cuts' factors are 3/5), 9.948 ms) = 9.948 ms.
    """
    levels = (Level(name="node", count=4, bandwidth_GBps=12.5, uplink_GBps=12.5, latency_us=2.0),
              Level(name="socket", count=2, bandwidth_GBps=10, uplink_GBps=20, latency_us=0.5),
              Level(name="core", count=8, bandwidth_GBps=10, latency_us=0.3))
    M = 64 * MiB
    b = _bound(_placement(*levels), Collective.ALL_REDUCE, M)
    node, socket, core = b.levels
    assert node.seconds == pytest.approx(1.5 * M / 12.5e9, rel=1e-12)
    assert socket.rate == pytest.approx(8 * (2.5e9 + 12.5e9 / 16), rel=1e-12)
    assert socket.pipelined == pytest.approx(3 / 5)
    assert socket.seconds == pytest.approx(1.75 * M / 26.25e9, rel=1e-12)
    assert b.latency_s == pytest.approx(2.8e-6)
    assert _bound(_placement(*levels, library=CollectiveLibrary.OPEN_MPI), Collective.ALL_REDUCE, M).latency_s == 2e-6
    assert _bound(_placement(*levels, library=CollectiveLibrary.OPEN_MPI), Collective.ALL_GATHER, M).latency_s == 2e-6
    assert core.pipelined == pytest.approx(3 / 5) and core.rate == pytest.approx(13.28125e9, rel=1e-12)
    assert b.seconds == pytest.approx(2 * 63 / 64 * M / 13.28125e9, rel=1e-12) and b.binding == 2


@pytest.mark.parametrize("uplink", [None, 100.0])
def test_two_levels_large_all_reduce_is_the_hierarchical_all_reduce(uplink):
    """node 4 x gpu 8, 25 GB/s per GPU across nodes (with or without a 100 GB/s node uplink), 600 GB/s inside: the
    bandwidth-optimal hierarchical all-reduce (reduce_scatter inside, all_reduce of each GPU's 1/8 share across, all_gather
    inside) keeps the node fabric busy for 2 (1 - 1/4) (M / 8) / 25 GB/s, or 2 (1 - 1/4) M / 100 GB/s through the
    uplink; pipelined, the fast inner steps hide under it. That is the bound. The program itself on 16 pieces comes
    within 5% of it at 4 GiB in both cost models (what is left: the fill and drain, 1/16 of the inner steps, and each
    piece's latencies); run sequentially it pays the inner steps in full (1.39x and 1.20x)."""
    p = _placement(Level(name="node", count=4, bandwidth_GBps=25.0, uplink_GBps=uplink, latency_us=5.0),
                   Level(name="gpu", count=8, bandwidth_GBps=600.0, latency_us=1.0))
    M = 4 << 30
    b = _bound(p, Collective.ALL_REDUCE, M)
    across = 2 * 0.75 * (M / 8) / 25e9 if uplink is None else 2 * 0.75 * M / 100e9
    assert b.bandwidth_s == pytest.approx(across, rel=1e-12) and b.binding == 0
    gpu, node = p.cells[1], p.cells[0]
    hierarchical = Program((Step(Collective.REDUCE_SCATTER, (gpu,)), Step(Collective.ALL_REDUCE, (node,)),
                            Step(Collective.ALL_GATHER, (gpu,))), pipeline=16)
    for kind in CostModelKind:
        cost = program_cost(p, Request(frozenset({0})), hierarchical, M, kind)
        assert b.seconds <= cost <= 1.05 * b.seconds, kind


def test_pipelined_factor():
    """One cell at or outside the level: 1. Two cells touched twice in a program of four steps: P = 3 gives
    1/3 + 2/(3 x 2) = 2/3 (P = 2: 1/2 + 1/4; P >= 4: one window holds all). Two cells touched once: 1."""
    assert pipelined_factor(Collective.ALL_REDUCE, 1, 3) == 1.0
    assert pipelined_factor(Collective.ALL_REDUCE, 2, 2) == pytest.approx(2 / 3)
    assert pipelined_factor(Collective.REDUCE_SCATTER, 2, 2) == 1.0
    # three cells, one step each: P = 2 needs c = 2 windows, 1/2 + 1/(2 x 2) = 3/4; P >= 3 holds them in one
    assert pipelined_factor(Collective.ALL_TO_ALL, 3, 3) == pytest.approx(3 / 4)


# -- no program below the bound ------------------------------------------------------------------------------------

PIECES = (1, 2, 3, 4, 16)


@st.composite
def cases(draw):
    """A random placement with random link figures (uplinks, duplex, libraries, compute, overheads), a request of at
    most two cells (three for the collectives that touch a cell once) and a size."""
    p = draw(strategies.placements(max_devices=24, max_axes=2, max_levels=3))
    levels = tuple(lv.model_copy(update={
        "bandwidth_GBps": draw(st.sampled_from([0.5, 1.0, 4.0, 25.0, 100.0])),
        "latency_us": draw(st.sampled_from([0.5, 2.0, 10.0, 40.0])),
        "uplink_GBps": draw(st.sampled_from([None, 1.0, 3.0, 50.0])),
        "duplex_efficiency": draw(st.sampled_from([None, 0.5, 0.8])),
        **draw(strategies.nccl_level_figures())}) for lv in p.hierarchy.levels)
    h = Hierarchy(levels=levels, library=draw(st.sampled_from([None, *CollectiveLibrary])),
                  nccl=draw(strategies.nccl_profiles()),
                  reduce_GBps=draw(st.sampled_from([None, 5.0])), step_overhead_us=draw(st.sampled_from([None, 20.0])))
    p = Placement(h, p.axes, p.matrix)
    request = draw(strategies.requests(p))
    most = 2 if request.collective in bound.TOUCHES else 3
    cells = len(request.reduced_cells(p))
    if not 1 <= cells <= most:
        request = dataclasses.replace(request, axes=frozenset({min(request.axes)}))
    cells = len(request.reduced_cells(p))
    nbytes = draw(st.sampled_from([4096.0, 65536.0, 1e6, 64.0 * MiB, 1e9]))
    return p, request, nbytes, cells <= most


def cheapest_over_bound(case, bound_of=lambda p, r, n: lower_bound(p, r, n).seconds, stop: float = 0.0) -> float:
    """The least predicted time of any program (1..16 pieces, both cost models) over the bound `bound_of` gives (the
    first ratio below `stop` once one is found)."""
    p, request, nbytes, small = case
    cells = len(request.reduced_cells(p))
    if not cells or not small:
        return math.inf
    b = bound_of(p, request, nbytes)
    most = bound.TOUCHES.get(request.collective, 1) * cells
    worst = math.inf
    for raw in enumerate_programs(request.collective, cells, most):
        program = to_program(raw, p, request)
        for pieces in PIECES if len(program.steps) >= 2 else (1,):
            piece = dataclasses.replace(program, pipeline=pieces)
            for kind in CostModelKind:
                worst = min(worst, program_cost(p, request, piece, nbytes, kind) / b)
                if worst < stop:
                    return worst
    return worst


def _two_cells_on_one_level() -> tuple:
    """All_reduce over two axes of 2 placed on one level of 4 devices (1 GB/s, 1 us), 1 GB: ``RS(a) -> RS(b) ->
    AG(b) -> AG(a)`` on 2 pieces moves the cut's 1.5 GB per device. Its first and last steps, which carry two thirds
    of it, never share a window of two steps: its fill and periods come to 1.125 s, and the level floor (1.5 s, no
    latency) sets its time. So the bound cannot add the 1 us latency floor to the whole cut (the pipelined factor,
    here 2/3, on that side); without the level floor the program would be predicted below the cut."""
    h = Hierarchy(levels=(Level(name="node", count=4, bandwidth_GBps=1.0, latency_us=1.0),))
    p = Placement(h, (Axis(name="a", size=2), Axis(name="b", size=2)), ((2,), (2,)))
    return p, Request(frozenset({0, 1})), 1e9, True


TWO_CELLS_ON_ONE_LEVEL = _two_cells_on_one_level()


def _han_all_gather_on_slow_cores() -> tuple:
    """An all_gather of 4 KiB over node 2 x core 2 under Open MPI, the cores' latency (40 us) above the nodes' (10 us):
    one flat step is coll/han's, which pays the leaders' round and no latency inside a host, so the latency floor is
    the node's 10 us alone (the sum, 50 us, would put that program below the bound)."""
    h = Hierarchy(levels=(Level(name="node", count=2, bandwidth_GBps=1.0, uplink_GBps=1.0, latency_us=10.0),
                          Level(name="core", count=2, bandwidth_GBps=10.0, latency_us=40.0)), library=CollectiveLibrary.OPEN_MPI)
    p = Placement(h, (Axis(name="data", size=4),), ((2, 2),))
    return p, Request(frozenset({0}), Collective.ALL_GATHER), 4096.0, True


HAN_ALL_GATHER_ON_SLOW_CORES = _han_all_gather_on_slow_cores()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
@example(TWO_CELLS_ON_ONE_LEVEL)
@example(HAN_ALL_GATHER_ON_SLOW_CORES)
def test_no_program_is_predicted_below_the_bound(case):
    assert cheapest_over_bound(case) >= 1 - 1e-9


def test_a_wrong_bound_fails_the_property():
    """Mutations the property test must catch: the bound doubled; an uplink shared by every device of the machine
    instead of the unit's (the sharing miscounted); no pipelined factor, or the cost models without their level floor
    (both on the property's explicit example). Leaving the sharing out (each device its own link) only lowers the
    bound, which stays valid."""
    wrong = settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    doubled = lambda p, r, n: 2 * lower_bound(p, r, n).seconds
    find(cases(), lambda c: cheapest_over_bound(c, doubled, stop=1) < 1, settings=wrong)
    def machine_wide(h, l):
        link = h.links[l]
        return link.bandwidth if link.uplink is None else min(link.bandwidth, link.uplink / h.num_devices)
    with mock.patch.object(bound, "effective_rate", machine_wide):
        find(cases(), lambda c: cheapest_over_bound(c, stop=1) < 1, settings=wrong)
    assert cheapest_over_bound(TWO_CELLS_ON_ONE_LEVEL) == pytest.approx(1.0, rel=1e-12)  # the level floor: the cut
    with mock.patch.object(bound, "pipelined_factor", lambda *a: 1.0):  # latency floor + the whole cut: 1 us over
        assert cheapest_over_bound(TWO_CELLS_ON_ONE_LEVEL) == pytest.approx(1.5 / (1.5 + 1e-6), rel=1e-12)
    with mock.patch.object(pipeline_time, "level_floor", lambda *a: 0.0):  # the pipeline formula alone: 0.75 of the cut
        assert cheapest_over_bound(TWO_CELLS_ON_ONE_LEVEL) == pytest.approx(0.75, rel=1e-4)


def test_send_recv_by_hand():
    """pipe 4 over node 2 x socket 2 (node: 1 GB/s, uplink 1 GB/s, 20 us; socket: 4 GB/s, 5 us), data 2 on the cores,
    send_recv of 1 MB. node: u = 2 units of G = 2 pipe members; one group's wrap-around sends M out of each node, at
    G x e(node) = 2 x min(1, 1/4) GB/s = 0.5 GB/s: 2 ms. socket: u = 4, G = 1, e(node) + e(socket) = 4.25 GB/s:
    235.3 us. Latency floor: the least of 20 and 5 us (the pairs of each level pay their own, at once).
    Bound 2.005 ms; both cost models predict 2.02 ms (20 us + 1 MB at 0.5 GB/s: two senders on the node uplink)."""
    h = Hierarchy(levels=(Level(name="node", count=2, bandwidth_GBps=1.0, uplink_GBps=1.0, latency_us=20),
                          Level(name="socket", count=2, bandwidth_GBps=4.0, latency_us=5),
                          Level(name="core", count=2, bandwidth_GBps=8.0, latency_us=1)))
    p = Placement(h, (Axis(name="pipe", size=4), Axis(name="data", size=2)), ((2, 2, 1), (1, 1, 2)))
    request = Request(frozenset({0}), Collective.SEND_RECV)
    b = lower_bound(p, request, 1e6)
    node, socket = b.levels
    assert (node.units, node.members, node.need_bytes, node.pipelined) == (2, 2, 1e6, 1.0)
    assert node.seconds == pytest.approx(2e-3, rel=1e-12)
    assert socket.seconds == pytest.approx(1e6 / 4.25e9, rel=1e-12)
    assert b.latency_s == pytest.approx(5e-6) and b.seconds == pytest.approx(2.005e-3, rel=1e-12)
    [raw] = enumerate_programs(Collective.SEND_RECV, 2, 4)
    for kind in CostModelKind:
        assert program_cost(p, request, to_program(raw, p, request), 1e6, kind) == pytest.approx(2.02e-3, rel=1e-12)
