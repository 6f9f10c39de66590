"""The alpha-beta cost model on hand-computed steps."""

import math

from p2synth.hierarchies import Axis, Collective, Hierarchy, Level, Placement, Request
from p2synth.hierarchies.abstract import AbstractState
from p2synth.solver.cost import AlphaBeta, step_seconds

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
