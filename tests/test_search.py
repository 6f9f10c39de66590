"""Search: Z3's proved optimum equals the explicit oracle's, and the outcomes the issue names."""

import math

import pytest

from hypothesis import assume, given
from hypothesis import strategies as st

from p2synth.hierarchies import Axis, Collective, Hierarchy, Level, Placement, Request
from p2synth.hierarchies.program import STEP_OPS, Program, Step, default_program
from p2synth.hierarchies import abstract
from p2synth.solver.cost import program_seconds, step_seconds
from p2synth.solver.models import CostModelKind, cost_model
from p2synth.hierarchies.program import to_program
from p2synth.solver.search import solve
from p2synth.hierarchies.verify import Verifier, miniature
from tests import oracles
from tests.strategies import placements, requests

AR, RS, AG, R, B, A2A, SR = Collective


def _with_links(p: Placement, draw) -> Placement:
    levels = tuple(
        lv.model_copy(update={
            "bandwidth_GBps": draw(st.sampled_from([1.0, 10.0, 100.0])),
            "latency_us": draw(st.sampled_from([0.5, 5.0, 50.0])),
            "uplink_GBps": draw(st.sampled_from([None, 5.0, 50.0])),
        })
        for lv in p.hierarchy.levels
    )
    return Placement(Hierarchy(name="random", levels=levels), p.axes, p.matrix)


@st.composite
def _costed_case(draw):
    p = _with_links(draw(placements(max_devices=36)), draw)
    req = draw(requests(p, STEP_OPS))
    size = draw(st.sampled_from([1 << 10, 1 << 20, 1 << 28]))
    return p, req, size


@given(_costed_case())
def test_z3_optimum_equals_dijkstra_optimum(case):
    p, req, size = case
    n = len(req.reduced_cells(p))
    assume(1 <= n <= 4)
    steps = 3
    model = cost_model(p, req, size)
    oracle = oracles.cheapest(req.collective, n, steps, lambda s, op, S: step_seconds(model, s, op, S, n))
    sol = solve(p, req, size, steps, top=1)
    assert sol.optimal and oracle is not None
    assert math.isclose(sol.best.cost_s, oracle[0], rel_tol=1e-9)
    assert sol.best.verified


@given(_costed_case())
def test_top_n_is_the_n_cheapest_of_the_full_list(case):
    p, req, size = case
    n = len(req.reduced_cells(p))
    assume(1 <= n <= 3)
    everything = solve(p, req, size, 3, top=None)
    top = solve(p, req, size, 3, top=4)
    assert [round(r.cost_s, 12) for r in top.programs] == [round(r.cost_s, 12) for r in everything.programs[:4]]
    assert everything.program_count == len(everything.programs) == abstract.count_programs(req.collective, n, 3)


def _two_level(outer_bw, inner_bw, outer_uplink=None):
    h = Hierarchy(levels=(
        Level(name="node", count=2, bandwidth_GBps=outer_bw, latency_us=10.0, uplink_GBps=outer_uplink),
        Level(name="gpu", count=4, bandwidth_GBps=inner_bw, latency_us=1.0),
    ))
    return h


def test_slow_outer_links_make_a_hierarchical_program_best_for_large_messages():
    h = _two_level(outer_bw=10, inner_bw=100)
    p = Placement(h, (Axis(name="data", size=8),), ((2, 4),))
    sol = solve(p, Request(frozenset({0})), 1 << 30, 4, top=3)
    best = sol.best.program
    assert sol.optimal
    assert len(best.steps) > 1 and any(s.slice == (p.cells[0],) for s in best.steps)
    assert sol.best.cost_s < sol.default.cost_s * 0.95
    node, gpu = p.cells
    hier = Program((Step(RS, (gpu,)), Step(AR, (node,)), Step(AG, (gpu,))))
    assert math.isclose(sol.best.cost_s, sum(program_seconds(cost_model(p, Request(frozenset({0})), 1 << 30), p, Request(frozenset({0})), hier)))


def test_reduction_inside_one_node_keeps_the_default_among_the_best():
    h = _two_level(outer_bw=10, inner_bw=100)
    p = Placement(h, (Axis(name="data", size=4), Axis(name="pipe", size=2)), ((1, 4), (2, 1)))
    sol = solve(p, Request(frozenset({0})), 1 << 30, 4, top=5)
    assert sol.optimal
    assert math.isclose(sol.best.cost_s, sol.default.cost_s, rel_tol=1e-12)
    assert default_program(p, Request(frozenset({0}))) in [r.program for r in sol.programs]


def test_shared_uplink_penalises_the_flat_program():
    shared = Placement(_two_level(10, 100, outer_uplink=10), (Axis(name="data", size=8),), ((2, 4),))
    sol = solve(shared, Request(frozenset({0})), 1 << 30, 4, top=1)
    assert sol.speedup > 1.4


def test_miniature_keeps_the_reduced_cells_at_factor_two():
    h = Hierarchy(levels=(Level(name="node", count=512), Level(name="gpu", count=8)))
    p = Placement(h, (Axis(name="data", size=1024), Axis(name="model", size=4)), ((256, 4), (2, 2)))
    req = Request(frozenset({0}))
    mini = miniature(p, req)
    assert mini.matrix == ((2, 2), (2, 2))
    assert mini.cells == p.cells
    v = Verifier(p, req)
    assert v.on_miniature
    node, gpu = req.reduced_cells(p)
    assert v.check(Program((Step(RS, (gpu,)), Step(AR, (node,)), Step(AG, (gpu,))))).ok
    assert not v.check(Program((Step(RS, (gpu,)), Step(AR, (node,))))).ok


def test_large_system_is_solved_and_verified_on_a_miniature():
    h = Hierarchy(levels=(
        Level(name="rack", count=16, bandwidth_GBps=5, latency_us=20),
        Level(name="node", count=32, bandwidth_GBps=25, latency_us=10, uplink_GBps=200),
        Level(name="gpu", count=8, bandwidth_GBps=240, latency_us=3),
    ))
    p = Placement(h, (Axis(name="data", size=512), Axis(name="model", size=8)), ((16, 32, 1), (1, 1, 8)))
    sol = solve(p, Request(frozenset({0})), 1 << 30, 4, top=3)
    assert sol.optimal and all(r.verified for r in sol.programs)
    assert sol.best.cost_s < sol.default.cost_s


@given(_costed_case())
def test_z3_alone_by_tightening_finds_the_dijkstra_optimum(case):
    # the fallback path for spaces too large for the explicit search: Z3 searches on its own
    from p2synth.encodings.programs import ProgramSketch

    p, req, size = case
    n = len(req.reduced_cells(p))
    assume(1 <= n <= 3)
    model = cost_model(p, req, size)
    oracle = oracles.cheapest(req.collective, n, 3, lambda s, op, S: step_seconds(model, s, op, S, n))
    (best,) = ProgramSketch(req.collective, n, 3, model.step_time).top(1)
    assert best.proved and math.isclose(best.cost, oracle[0], rel_tol=1e-9)
    raw_cost = sum(program_seconds(model, p, req, to_program(best.program, p, req)))
    assert math.isclose(raw_cost, oracle[0], rel_tol=1e-9)


def test_send_recv_is_solved_without_a_search_its_default_the_only_proved_program(monkeypatch):
    """A shift has one program, its default; solve returns it as the only, proved-best program and never runs the
    sketch, the state space or the certificate (each made to fail here)."""
    import p2synth.solver.ranking as ranking
    import p2synth.solver.search as search

    def never(*args, **kwargs):
        raise AssertionError("send_recv must not be searched")

    monkeypatch.setattr(search, "rank_signature", never)
    for name in ("count_programs", "state_space", "prove_step_semantics"):
        monkeypatch.setattr(ranking, name, never)
    h = Hierarchy(levels=(Level(name="node", count=2, bandwidth_GBps=1.0, uplink_GBps=1.0, latency_us=20),
                          Level(name="core", count=4, bandwidth_GBps=8.0, latency_us=1)))
    p = Placement(h, (Axis(name="pipe", size=2), Axis(name="data", size=4)), ((2, 1), (1, 4)))
    for kind in CostModelKind:
        s = solve(p, Request(frozenset({0}), SR), 1_000_000, 4, model_kind=kind)
        assert s.default.program.text(p) == "SR(pipe@node)"
        assert s.programs == (s.default,) and s.program_count == 1 and s.optimal and not s.timed_out
        assert s.default.cost_s == pytest.approx(4.02e-3, rel=1e-12)  # 20 us + 1 MB at 1/4 of the 1 GB/s uplink
