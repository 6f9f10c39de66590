"""AlphaBeta costs each all_reduce as NCCL runs it: the cheaper of its ring and its double binary tree
(NVIDIA/nccl:src/graph/tuning.cc), the default program included; hand-computed on a small hierarchy."""

import math

import numpy as np
import pytest

from p2synth.encodings.programs import ProgramSketch
from p2synth.hierarchies import Axis, Collective, Hierarchy, Level, Placement, Request
from p2synth.hierarchies.abstract import AbstractState, start_state
from p2synth.hierarchies.program import Program, Step, default_program, to_raw
from p2synth.hierarchies.statespace import state_space
from p2synth.solver.algebra import PY
from p2synth.solver.cost import (TREE_BUS_EFFICIENCY, AlphaBeta, mask_bits, program_stages, raw_program_cost, step_seconds)
from p2synth.solver.search import Proof, solve
from p2synth.solver.stepcosts import edge_costs, split_costs

AR, RS, AG, R, B, A2A, SR = Collective
NODE_LAT, GPU_LAT = 1e-5, 1e-6  # between hosts, inside a host
NODE_BW, GPU_BW = 12.5e9, 100e9
TINY, LARGE = 1024.0, float(1 << 30)


def _placement(nodes: int = 8, gpus: int = 8) -> Placement:
    """`nodes` hosts x `gpus` GPUs, one reduced axis over both levels: cells (data, node) = 0 and (data, gpu) = 1."""
    h = Hierarchy(levels=(Level(name="node", count=nodes, bandwidth_GBps=NODE_BW / 1e9, latency_us=NODE_LAT * 1e6),
                          Level(name="gpu", count=gpus, bandwidth_GBps=GPU_BW / 1e9, latency_us=GPU_LAT * 1e6)))
    return Placement(h, (Axis(name="data", size=nodes * gpus),), ((nodes, gpus),))


def _flat(op: Collective, m: float, nodes: int = 8, gpus: int = 8) -> float:
    """AlphaBeta's seconds of one `op` over the whole group at `m` bytes."""
    model = AlphaBeta(_placement(nodes, gpus), Request(frozenset({0}), op), m)
    return step_seconds(model, start_state(op, 2), op, 0b11, 2)


def _ring_all_reduce(m: float, nodes: int = 8, gpus: int = 8) -> float:
    """2(k-1) node latencies, and 2(k-1)/k m per member: over the node level spread over the node's GPUs."""
    k = nodes * gpus
    volume = 2 * (k - 1) / k * m
    return 2 * (k - 1) * NODE_LAT + max(volume / NODE_BW / gpus, volume / GPU_BW)


def _tree_all_reduce(m: float, nodes: int = 8, gpus: int = 8) -> float:
    """NCCL's tree: 2 (log2(nodes) node latencies + (gpus - 1) GPU latencies), and 2m / 0.782 per member."""
    volume = 2 * m / 0.782
    return 2 * (math.log2(nodes) * NODE_LAT + (gpus - 1) * GPU_LAT) + max(volume / NODE_BW / gpus, volume / GPU_BW)


def test_the_tree_efficiency_is_nccls_tree_all_reduce_factors():
    assert TREE_BUS_EFFICIENCY == 0.92 * 0.85
    assert round(TREE_BUS_EFFICIENCY, 3) == 0.782


def test_a_tiny_all_reduce_over_a_large_group_runs_the_tree():
    tree, ring = _tree_all_reduce(TINY), _ring_all_reduce(TINY)
    assert tree < ring / 10  # 2 (3 x 10 + 7 x 1) us against 2 x 63 x 10 us
    assert math.isclose(_flat(AR, TINY), tree, rel_tol=1e-12)


def test_a_large_all_reduce_runs_the_ring():
    tree, ring = _tree_all_reduce(LARGE), _ring_all_reduce(LARGE)
    assert ring < tree  # the tree moves 2m / 0.782 per member, the ring 2(k-1)/k m
    assert math.isclose(_flat(AR, LARGE), ring, rel_tol=1e-12)


def test_a_single_host_chains_its_gpus_in_the_tree():
    # one node: the tree is a chain inside the host, 2 (g - 1) GPU latencies; the ring pays 2 (g - 1) node latencies
    # (the slowest level the group spans is the GPU level here, so the ring's latency is the GPU's too)
    model = AlphaBeta(_placement(), Request(frozenset({0})), TINY)
    volume = 2 * TINY / 0.782
    assert math.isclose(step_seconds(model, start_state(AR, 2), AR, 0b10, 2), min(
        2 * 7 * GPU_LAT + volume / GPU_BW, 2 * 7 * GPU_LAT + 2 * 7 / 8 * TINY / GPU_BW), rel_tol=1e-12)


@pytest.mark.parametrize("op", [RS, AG, R, B])
def test_only_all_reduce_has_a_tree(op):
    # tiny steps over 64 members: a tree would be far cheaper, but NCCL models these as rings alone
    k, m = 64, TINY
    volume = {RS: (k - 1) / k * m, AG: (k - 1) * (m / k), R: m, B: m}[op]  # AG: each holds its m / k
    state = {RS: start_state(RS, 2), AG: AbstractState(0b11, 0b11, 0), R: start_state(R, 2),
             B: AbstractState(0b11, 0, 0b11)}[op]
    model = AlphaBeta(_placement(), Request(frozenset({0}), op), m)
    ring = (k - 1) * NODE_LAT + max(volume / NODE_BW / 8, volume / GPU_BW)
    assert math.isclose(step_seconds(model, state, op, 0b11, 2), ring, rel_tol=1e-12)
    found = model.split(PY, op, mask_bits(0b11, 2), mask_bits(state.Y, 2), mask_bits(state.Z, 2))
    assert found.others == ((found.latency, found.busiest),) and found.names == ("ring", "tree")


def test_the_default_is_costed_as_the_tree_where_the_tree_is_cheaper():
    p, req = _placement(), Request(frozenset({0}))
    sol = solve(p, req, int(TINY), 3, top=3)
    assert math.isclose(sol.default.cost_s, _tree_all_reduce(TINY), rel_tol=1e-12)
    assert sol.optimal and sol.best.cost_s <= sol.default.cost_s


def test_z3_the_search_and_the_python_evaluation_agree_where_the_tree_is_chosen():
    p, req = _placement(), Request(frozenset({0}))
    n = len(req.reduced_cells(p))
    space = state_space(AR, n)
    for pieces in (1, 2, 4):
        model = AlphaBeta(p, req, TINY, pieces)
        # the search's one evaluation, the model evaluated vectorized, and the scalar model: the same floats
        searched = split_costs(space, AlphaBeta(p, req, TINY)).on_pieces(pieces)
        assert np.array_equal(searched.values, edge_costs(space, model).values)
        for j, step in enumerate(space.steps):
            for i, source in enumerate(step.sources):
                assert searched.weights[j][i] == step_seconds(model, space.state(int(source)), step.op, step.mask, n)
    # the tree is what they chose for the default, and Z3's exact value of it is the same
    default = to_raw(default_program(p, req), req.reduced_cells(p))
    model = AlphaBeta(p, req, TINY)
    python = raw_program_cost(lambda P: model, AR, n, default)[0]
    assert math.isclose(python, _tree_all_reduce(TINY), rel_tol=1e-12)
    (z3_default,), _ = ProgramSketch(AR, n, 3, model.step_time).prove_top([default])
    assert z3_default.cost == python
    # and the whole search, with Z3's own proof of its list
    sol = solve(p, req, int(TINY), 3, top=3, proof=Proof.Z3, pieces=(1, 2, 4))
    assert sol.optimal


@pytest.mark.parametrize("pieces", [4, 8])
def test_a_pipelined_program_still_costs_at_least_its_busiest_levels_traffic(pieces):
    # RS(gpu) -> AR(node) -> AG(gpu) on tiny pieces: the node all_reduce of 8 members runs the tree, which moves more
    # than the ring's traffic; the links stay busy for the ring's, which the program's time still covers
    p, req = _placement(), Request(frozenset({0}))
    node, gpu = req.reduced_cells(p)
    raw = to_raw(Program((Step(RS, (gpu,)), Step(AR, (node,)), Step(AG, (gpu,)))), req.reduced_cells(p))
    models = lambda P: AlphaBeta(p, req, TINY, P)
    cost, stages = raw_program_cost(models, AR, 2, raw, pieces)
    _, traffic = program_stages(models(1), AR, 2, raw)
    m = TINY / 8 / pieces  # the AR's piece: after the RS over 8 GPUs
    assert math.isclose(stages[1], 2 * 3 * NODE_LAT + 2 * m / 0.782 / NODE_BW, rel_tol=1e-12)  # the tree
    assert stages[1] < 2 * 7 * NODE_LAT + 2 * 7 / 8 * m / NODE_BW  # below the ring
    for level in range(2):
        assert cost >= sum(t[level] for t in traffic)
