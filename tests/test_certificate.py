"""The explicit search, its certificate and the Z3 proofs: they agree, and each check catches the faults it exists for."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from p2synth.hierarchies import Axis, Collective, Hierarchy, Level, Placement, Request
from p2synth.hierarchies.model import CollectiveLibrary
from p2synth.hierarchies.program import STEP_OPS
from p2synth.hierarchies import statespace
from p2synth.hierarchies.statespace import state_space
from p2synth.encodings import stepsemantics
from p2synth.encodings.programs import ProgramSketch
from p2synth.encodings.stepsemantics import SemanticsMismatch, prove_step_semantics
from p2synth.solver import certificate
from p2synth.solver.certificate import CertificateError
from p2synth.solver.cost import step_seconds
from p2synth.solver.costtogo import cost_to_go
from p2synth.solver.stepcosts import edge_costs, step_cases
from p2synth.solver.topn import cheapest_programs
from p2synth.solver.models import CostModelKind, InCellOrder, canonical_order, cost_model, cost_signature
from p2synth.solver.search import Proof, solve
from tests import oracles
from tests.strategies import placements, requests

AR, RS, AG, R, B, A2A, SR = Collective
SLOW = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _links(p: Placement, draw) -> Placement:
    levels = tuple(lv.model_copy(update={
        "bandwidth_GBps": draw(st.sampled_from([1.0, 10.0, 100.0])),
        "latency_us": draw(st.sampled_from([0.5, 5.0, 50.0])),
        "uplink_GBps": draw(st.sampled_from([None, 5.0, 50.0])),
    }) for lv in p.hierarchy.levels)
    return Placement(Hierarchy(name="random", levels=levels, reduce_GBps=draw(st.sampled_from([None, 20.0])),
                               step_overhead_us=draw(st.sampled_from([None, 30.0])),
                               library=draw(st.sampled_from([None, CollectiveLibrary.OPEN_MPI]))), p.axes, p.matrix)


@st.composite
def cases(draw, max_cells: int = 3):
    p = _links(draw(placements(max_devices=36)), draw)
    req = draw(requests(p, STEP_OPS))
    n = len(req.reduced_cells(p))
    assume(1 <= n <= max_cells)
    return p, req, draw(st.sampled_from([1 << 10, 1 << 20, 1 << 28])), draw(st.sampled_from(list(CostModelKind)))


def _search(p, req, size, kind, K, top):
    model = cost_model(p, req, size, kind)
    costs = edge_costs(state_space(req.collective, len(req.reduced_cells(p))), model)
    h = cost_to_go(costs, K)
    return model, costs, h, cheapest_programs(costs, h, top)


# ---- agreement -------------------------------------------------------------------------------
@SLOW
@given(cases(), st.integers(1, 3), st.sampled_from([1, 3, 5]))
def test_explicit_top_n_is_z3s_top_n_and_z3_proves_it(case, K, top):
    """The explicit search's top N costs equal Z3's own (iterative tightening), and Z3's unsat over the whole
    sketch proves the same list; the certificate holds; Dijkstra's optimum is the first."""
    p, req, size, kind = case
    n = len(req.reduced_cells(p))
    model, costs, h, found = _search(p, req, size, kind, K, top)
    listed = [prog for _, prog in found]
    certificate.check(costs, h, listed, top)
    z3_top = ProgramSketch(req.collective, n, K, model.step_time).top(top)
    assert [round(r.cost, 9) for r in z3_top] == [round(c, 9) for c, _ in found[:len(z3_top)]]
    ranked, proved = ProgramSketch(req.collective, n, K, model.step_time).prove_top(listed)
    assert proved and all(math.isclose(r.cost, c, rel_tol=1e-6) for r, (c, _) in zip(ranked, found))
    oracle = oracles.cheapest(req.collective, n, K, lambda s, op, S: step_seconds(model, s, op, S, n))
    assert oracle is not None and math.isclose(oracle[0], found[0][0], rel_tol=1e-9)


@SLOW
@given(cases(max_cells=4))
def test_the_array_algebra_gives_every_step_the_scalar_cost(case):
    """edge_costs (numpy, every step from every state at once) equals the scalar PyAlgebra evaluation, case by case."""
    p, req, size, kind = case
    n = len(req.reduced_cells(p))
    model = cost_model(p, req, size, kind)
    space = state_space(req.collective, n)
    costs = edge_costs(space, model)
    for step, w in zip(space.steps, costs.weights):
        for src, cost in list(zip(step.sources.tolist(), w.tolist()))[:: max(1, len(w) // 7)]:
            assert cost == step_seconds(model, space.state(src), step.op, step.mask, n)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_equal_cost_signatures_mean_equal_step_costs(data):
    """Two placements of one hierarchy with the same signature cost every step alike, under both models, each read
    in its canonical cell order (the signature's), bit for bit where the cells come in the same order and within
    float rounding (products in another order) otherwise; a placement whose signature differs costs some step
    otherwise (the signature misses nothing)."""
    h = Hierarchy(levels=(Level(name="node", count=4, bandwidth_GBps=10, latency_us=10, uplink_GBps=20),
                          Level(name="gpu", count=4, bandwidth_GBps=100, latency_us=1)))
    axes = (Axis(name="dp", size=4), Axis(name="tp", size=2), Axis(name="pp", size=2))
    from p2synth.hierarchies.placement import enumerate_matrices

    matrices = list(enumerate_matrices((4, 2, 2), (4, 4)))
    req = Request(frozenset(data.draw(st.sets(st.integers(0, 2), min_size=1))), data.draw(st.sampled_from([AR, RS, A2A])))
    kind = data.draw(st.sampled_from(list(CostModelKind)))
    a = Placement(h, axes, data.draw(st.sampled_from(matrices)))
    n = len(req.reduced_cells(a))
    assume(n > 0)
    twins = [m for m in matrices if cost_signature(Placement(h, axes, m), req, 1 << 20, kind) == cost_signature(a, req, 1 << 20, kind)]
    b = Placement(h, axes, data.draw(st.sampled_from(twins)))
    space = state_space(req.collective, n)
    read = lambda p: InCellOrder(cost_model(p, req, 1 << 20, kind), canonical_order(p, req))
    wa, wb = edge_costs(space, read(a)).weights, edge_costs(space, read(b)).weights
    own = lambda p: [(c.level, p.factor(c)) for c in req.reduced_cells(p)]
    same_order = own(a) == own(b)
    assert all(np.array_equal(x, y) if same_order else np.allclose(x, y, rtol=1e-12, atol=0) for x, y in zip(wa, wb))
    others = [m for m in matrices if len(req.reduced_cells(Placement(h, axes, m))) == n and m not in twins]
    if others:
        c = Placement(h, axes, data.draw(st.sampled_from(others)))
        wc = edge_costs(space, read(c)).weights
        assert not all(np.allclose(x, y, rtol=1e-9) for x, y in zip(wa, wc))


def test_solve_with_the_z3_proof_gives_the_same_solution():
    h = Hierarchy(levels=(Level(name="node", count=2, bandwidth_GBps=10, latency_us=10), Level(name="gpu", count=4, bandwidth_GBps=100, latency_us=1)))
    p = Placement(h, (Axis(name="data", size=8),), ((2, 4),))
    req = Request(frozenset({0}))
    a, b = (solve(p, req, 1 << 30, 4, top=5, proof=proof) for proof in Proof)
    assert a == b and a.optimal and len(a.programs) == 5


# ---- the certificate catches a wrong list ---------------------------------------------------------------
@pytest.fixture(scope="module")
def four_cells():
    """A 4-cell all_reduce with slow outer links (many programs, distinct costs)."""
    h = Hierarchy(levels=(
        Level(name="pod", count=2, bandwidth_GBps=3, latency_us=30, uplink_GBps=100),
        Level(name="rack", count=2, bandwidth_GBps=12.5, latency_us=20, uplink_GBps=400),
        Level(name="node", count=2, bandwidth_GBps=25, latency_us=14, uplink_GBps=200),
        Level(name="gpu", count=8, bandwidth_GBps=240, latency_us=3.4)))
    p = Placement(h, (Axis(name="dp", size=64),), ((2, 2, 2, 8),))
    req = Request(frozenset({0}))
    model, costs, h_table, found = _search(p, req, 1 << 30, CostModelKind.ALPHA_BETA, 6, 10)
    more = cheapest_programs(costs, h_table, 20)
    return costs, h_table, [prog for _, prog in found][:10], [prog for _, prog in more]


def test_the_certificate_accepts_the_search(four_cells):
    costs, h, listed, _ = four_cells
    got = certificate.check(costs, h, listed, 10)
    assert got == sorted(got) and len(got) == 10


@pytest.mark.parametrize("fault", ["drop-one", "shifted", "invalid-step", "no-goal"])
def test_the_certificate_refuses_a_wrong_list(four_cells, fault):
    costs, h, listed, more = four_cells
    wrong = {
        "drop-one": listed[:3] + listed[4:] + [more[10]],   # a cheaper program left out
        "shifted": more[1:11],                               # the best left out
        "invalid-step": [((AG, 1),)] + listed[1:],           # all_gather before anything is scattered
        "no-goal": [listed[0][:-1]] + listed[1:],            # stops short of the goal
    }[fault]
    with pytest.raises(CertificateError):
        certificate.check(costs, h, wrong, 10)


def test_the_certificate_refuses_a_list_that_skips_a_program_inside_another():
    """A reduce program stays a reduce program when a broadcast follows it: listing only the longer one, the
    cheaper prefix is a program the list leaves out."""
    h = Hierarchy(levels=(Level(name="node", count=2, bandwidth_GBps=10, latency_us=10), Level(name="gpu", count=4, bandwidth_GBps=100, latency_us=1)))
    p = Placement(h, (Axis(name="data", size=8),), ((2, 4),))
    _, costs, table, found = _search(p, Request(frozenset({0}), R), 1 << 20, CostModelKind.ALPHA_BETA, 3, 30)
    listed = [prog for _, prog in found][:30]
    certificate.check(costs, table, listed, 30)
    short = next(q[:-1] for q in listed if q[-1][0] is B and q[:-1] in listed)  # listed, and listed again + broadcast
    with pytest.raises(CertificateError, match="not listed"):
        certificate.check(costs, table, [q for q in listed if q != short], 29)


def test_the_certificate_refuses_a_table_that_claims_too_much(four_cells):
    costs, h, listed, _ = four_cells
    finite = np.flatnonzero(np.isfinite(h[3]) & (h[3] > 0))
    bad = h.copy()
    bad[3][finite[len(finite) // 2]] *= 1.01  # above the true cost-to-go: some step's inequality fails
    with pytest.raises(CertificateError, match="Bellman"):
        certificate.check(costs, bad, listed, 10)


def test_the_certificate_sees_a_search_that_used_wrong_costs(four_cells):
    """A search whose step costs were wrong (the best program's first step 10x too dear) lists other programs;
    checked against the true costs, its list fails."""
    costs, h, listed, _ = four_cells
    space = costs.space
    index = {(s.op, s.mask): j for j, s in enumerate(space.steps)}
    j = index[listed[0][0]]
    cases = step_cases(space)
    values = costs.values.copy()
    values[cases.start[j]:cases.start[j + 1]] *= 10
    wrong_costs = dataclasses.replace(costs, values=values)
    wrong_h = cost_to_go(wrong_costs, 6)
    wrong_list = [p for _, p in cheapest_programs(wrong_costs, wrong_h, 10)][:10]
    assert listed[0] not in wrong_list
    certificate.check(wrong_costs, wrong_h, wrong_list, 10)  # consistent with its own (wrong) costs ...
    with pytest.raises(CertificateError):
        certificate.check(costs, h, wrong_list, 10)          # ... not with the model's


# ---- the Z3 proof of the step semantics catches a wrong table or sketch ------------------------------------
@pytest.mark.parametrize("collective", STEP_OPS)
def test_the_sketch_steps_are_the_state_space_moves(collective):
    for cells in (1, 3, 5):
        prove_step_semantics(collective, cells)


def test_a_wrong_move_table_is_caught(monkeypatch):
    def wrong(collective):  # reduce_scatter would leave its cells summed, not scattered
        return tuple(statespace.Move(m.op, m.source, statespace.Status.SUMMED) if m.op is RS else m
                     for m in statespace.moves(collective))

    monkeypatch.setattr(stepsemantics, "moves", wrong)
    with pytest.raises(SemanticsMismatch):
        prove_step_semantics.__wrapped__(RS, 2)


def test_a_wrong_sketch_is_caught(monkeypatch):
    real = stepsemantics._cell_transition

    def lax(exchange, op, used, s, before, after):  # all_reduce no longer needs untouched cells
        import z3

        x, y, z, p = before
        x1, y1, z1, p1 = after
        return z3.Or(real(exchange, op, used, s, before, after),
                     z3.And(op[AR], s, x, x1, y1 == y, z1 == z, p1 == p))

    monkeypatch.setattr(stepsemantics, "_cell_transition", lax)
    with pytest.raises(SemanticsMismatch):
        prove_step_semantics.__wrapped__(AR, 2)
