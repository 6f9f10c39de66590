"""The alpha-beta cost model on hand-computed steps."""

import math

import pytest

from p2synth.hierarchies import Axis, Collective, Hierarchy, Level, Placement, Request
from p2synth.hierarchies.abstract import AbstractState
from p2synth.hierarchies.program import default_program
from p2synth.solver.cost import AlphaBeta, step_seconds
from p2synth.solver.models import program_cost

AR, RS, AG, R, B, A2A, SR = Collective
M = float(1 << 28)
NODE_BW, UPLINK, GPU_BW, NODE_LAT, GPU_LAT = 12.5e9, 50e9, 100e9, 14e-6, 3.4e-6


def _dgx1_like() -> Placement:
    """4 nodes x 8 GPUs, one reduced axis over both levels: cells (data, node) = 0 and (data, gpu) = 1."""
    h = Hierarchy(levels=(Level(name="node", count=4, bandwidth_GBps=12.5, uplink_GBps=50, latency_us=14),
                          Level(name="gpu", count=8, bandwidth_GBps=100, latency_us=3.4)))
    return Placement(h, (Axis(name="data", size=32),), ((4, 8),))


def _t(op: Collective, S: int, state: AbstractState, collective: Collective = AR) -> float:
    model = AlphaBeta(_dgx1_like(), Request(frozenset({0}), collective), M)
    return step_seconds(model, state, op, S, 2)


def test_broadcast_over_the_whole_group_pays_the_node_uplink_once():
    # Every node receives the whole buffer once: m crosses each node's 50 GB/s uplink (spread over the
    # node's 8 GPUs, each of which receives). The broadcast's own rooted cells do not idle anyone.
    node = max(M / UPLINK, M / (8 * NODE_BW))
    gpu = M / GPU_BW
    want = 31 * NODE_LAT + max(node, gpu)
    assert math.isclose(_t(B, 0b11, AbstractState(0b11, 0, 0b11), B), want, rel_tol=1e-12)


def test_all_reduce_across_nodes_after_a_reduce_has_one_active_gpu_per_node():
    # R(data@gpu) leaves one active GPU per node; AR(data@node) then has that GPU alone on the uplink.
    volume = 2 * 3 / 4 * M
    want = 2 * 3 * NODE_LAT + max(volume / UPLINK, volume / NODE_BW)
    assert math.isclose(_t(AR, 0b01, AbstractState(0b10, 0, 0b10)), want, rel_tol=1e-12)


def test_flat_all_reduce_spreads_over_the_node_and_shares_the_uplink():
    volume = 2 * 31 / 32 * M
    node = max(volume * 8 / UPLINK / 8, volume / NODE_BW / 8)
    gpu = volume / GPU_BW
    want = 2 * 31 * NODE_LAT + max(node, gpu)
    assert math.isclose(_t(AR, 0b11, AbstractState(0, 0, 0)), want, rel_tol=1e-12)


def test_flat_all_to_all_pays_a_latency_per_peer_and_every_device_on_the_uplink():
    # 32 members: 24 peers in other nodes (node latency), 7 in the same node (GPU latency). 3/4 of each
    # device's data leaves its node, all 8 devices of a node at once through the 50 GB/s uplink.
    node = max(3 / 4 * M * 8 / UPLINK, 3 / 4 * M / NODE_BW)
    gpu = 31 / 32 * M / GPU_BW
    want = 24 * NODE_LAT + 7 * GPU_LAT + max(node, gpu)
    assert math.isclose(_t(A2A, 0b11, AbstractState(0b11, 0, 0, 0b11), A2A), want, rel_tol=1e-12)


def test_hierarchical_all_to_all_sends_fewer_larger_messages_across_nodes():
    across = _t(A2A, 0b01, AbstractState(0b11, 0, 0, 0b11), A2A)
    inside = _t(A2A, 0b10, AbstractState(0b11, 0, 0, 0b01), A2A)
    assert math.isclose(across, 3 * NODE_LAT + 3 / 4 * M * 8 / UPLINK, rel_tol=1e-12)
    assert math.isclose(inside, 7 * GPU_LAT + 7 / 8 * M / GPU_BW, rel_tol=1e-12)


def test_hierarchical_all_to_all_wins_small_and_loses_large_messages():
    def times(m: float) -> tuple[float, float]:
        model = AlphaBeta(_dgx1_like(), Request(frozenset({0}), A2A), m)
        flat = step_seconds(model, AbstractState(0b11, 0, 0, 0b11), A2A, 0b11, 2)
        hier = (step_seconds(model, AbstractState(0b11, 0, 0, 0b11), A2A, 0b01, 2)
                + step_seconds(model, AbstractState(0b11, 0, 0, 0b01), A2A, 0b10, 2))
        return flat, hier
    flat, hier = times(64 * 1024)  # latency-bound: 31 messages vs 3 + 7
    assert hier < flat
    flat, hier = times(M)  # bandwidth-bound: the same bytes cross the uplink, plus an extra pass inside
    assert flat < hier


# -- send_recv (a shift along one axis; docs/model.md, "Point-to-point") ------------------------------------------

def _shift_seconds(levels, axes, matrix, axis: int, nbytes: float, kind) -> float:
    p = Placement(Hierarchy(levels=levels), axes, matrix)
    request = Request(frozenset({axis}), SR)
    return program_cost(p, request, default_program(p, request), nbytes, kind)


NODE_UPLINK = Level(name="node", count=2, bandwidth_GBps=1.0, uplink_GBps=1.0, latency_us=20)
CORE = Level(name="core", count=4, bandwidth_GBps=8.0, latency_us=1)


def test_send_recv_over_both_levels_takes_the_slower_level_with_one_sender_per_node():
    """data 8 over node 2 x core 4, 1 MB. core: 1 us + 1 MB / 8 GB/s = 126 us. node: the wrap-around of the core
    digit sends one buffer out of each node (4 cores, 4 data members inside: one sender), at min(1 GB/s link,
    1 GB/s uplink / 1) = 1 GB/s: 20 us + 1 ms. The slower: 1.02 ms, in both cost models (no duplex efficiency or
    overhead set)."""
    for kind in ("alpha-beta", "simulator"):
        assert _shift_seconds((NODE_UPLINK, CORE), (Axis(name="data", size=8),), ((2, 4),), 0, 1e6, kind) == \
            pytest.approx(20e-6 + 1e-3, rel=1e-12)


def test_send_recv_across_nodes_shares_the_uplink_among_the_groups_crossing_it():
    """pipe 2 on the nodes, data 4 on the cores, 1 MB: each of a node's 4 cores is the one sender of its pipe group,
    so the 1 GB/s uplink gives each 0.25 GB/s: 20 us + 4 ms. The data axis's shift stays inside a node: 126 us."""
    axes, matrix = (Axis(name="pipe", size=2), Axis(name="data", size=4)), ((2, 1), (1, 4))
    assert _shift_seconds((NODE_UPLINK, CORE), axes, matrix, 0, 1e6, "alpha-beta") == pytest.approx(4.02e-3, rel=1e-12)
    assert _shift_seconds((NODE_UPLINK, CORE), axes, matrix, 1, 1e6, "alpha-beta") == pytest.approx(126e-6, rel=1e-12)


def test_send_recv_on_three_levels_and_the_simulators_duplex_and_overhead():
    """rack 2 (0.5 GB/s, uplink 2 GB/s, 50 us) x node 2 (2 GB/s, uplink 4 GB/s, 10 us) x gpu 2 (20 GB/s, 2 us),
    pipe 4 = rack 2 x gpu 2, data 2 on the nodes; 4 MB.
    gpu:  2 us + 4 MB / 20 GB/s = 202 us.
    node: not spanned by pipe (its pairs differ in rack or gpu only).
    rack: 4 devices below a rack, pipe members inside one rack 2 (gpu): 2 senders share the 2 GB/s uplink, 1 GB/s
          each, but the link gives 0.5 GB/s: 50 us + 8 ms = 8.05 ms.
    Simulator, with duplex efficiency 0.5 on the rack and a 30 us step overhead: 50 us + 8 ms / 0.5 + 30 us."""
    rack = Level(name="rack", count=2, bandwidth_GBps=0.5, uplink_GBps=2.0, latency_us=50)
    node = Level(name="node", count=2, bandwidth_GBps=2.0, uplink_GBps=4.0, latency_us=10)
    gpu = Level(name="gpu", count=2, bandwidth_GBps=20.0, latency_us=2)
    axes, matrix = (Axis(name="pipe", size=4), Axis(name="data", size=2)), ((2, 1, 2), (1, 2, 1))
    assert _shift_seconds((rack, node, gpu), axes, matrix, 0, 4e6, "alpha-beta") == pytest.approx(8.05e-3, rel=1e-12)
    h = Hierarchy(levels=(rack.model_copy(update={"duplex_efficiency": 0.5}), node, gpu), step_overhead_us=30)
    p = Placement(h, axes, matrix)
    request = Request(frozenset({0}), SR)
    assert program_cost(p, request, default_program(p, request), 4e6, "simulator") == pytest.approx(
        50e-6 + 16e-3 + 30e-6, rel=1e-12)
    assert program_cost(p, request, default_program(p, request), 4e6, "alpha-beta") == pytest.approx(8.05e-3, rel=1e-12)
    # the rack's uplink binds once it is slower than the link: 0.8 GB/s shared by 2 senders, 0.4 GB/s each
    slow = Placement(Hierarchy(levels=(rack.model_copy(update={"uplink_GBps": 0.8}), node, gpu)), axes, matrix)
    assert program_cost(slow, request, default_program(slow, request), 4e6, "alpha-beta") == pytest.approx(
        50e-6 + 10e-3, rel=1e-12)
