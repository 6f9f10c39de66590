"""Pipelined programs: the cost on hand-computed pipelines, the search against Z3 on random hierarchies, the certificate."""

import dataclasses
import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from p2synth.hierarchies import Axis, Collective, Hierarchy, Level, Placement, Request
from p2synth.hierarchies.program import Program, Step
from p2synth.hierarchies.statespace import state_space
from p2synth.solver import certificate, pipelined_certificate, ranking
from p2synth.solver.certificate import CertificateError
from p2synth.solver.algebra import PY
from p2synth.solver.cost import AlphaBeta, mask_bits, raw_program_cost
from p2synth.solver.pipeline_time import level_floor, pipeline_period, pipelined_seconds
from p2synth.solver.costtogo import cost_to_go, successors_by_state, traffic_to_go
from p2synth.solver.models import CostModelKind, cost_model, program_cost
from p2synth.solver.pipelined import bracketed_tables, cheapest_pipelined_all, pipeline_tables, whole_traffic
from p2synth.solver.search import Proof, solve
from p2synth.solver.stepcosts import edge_costs, split_costs
from p2synth.solver.topn import Candidates
from tests.test_certificate import cases

AR, RS, AG, R, B, A2A, SR = Collective

# node 2 x gpu 4, data = 8: inner links 20x the outer ones
H = Hierarchy(levels=(Level(name="node", count=2, bandwidth_GBps=1.0, latency_us=10.0),
                      Level(name="gpu", count=4, bandwidth_GBps=20.0, latency_us=1.0)))
P8 = Placement(H, (Axis(name="data", size=8),), ((2, 4),))
REQ = Request(frozenset({0}))
NODE, GPU = P8.cells
HIER = ((RS, 0b10), (AR, 0b01), (AG, 0b10))  # RS(gpu) -> AR(node) -> AG(gpu), masks over (node, gpu)


def test_pipelined_time_of_hand_made_stages():
    # three stages of 1, 4, 2 s; traffic (node, gpu) per stage; 4 pieces: stages 0..3 overlap, so every level's
    # traffic adds up over all three: gpu 0.8 + 1.5 = 2.3 < slowest stage 4 -> period 4; total 7 + 3 * 4 = 19
    stages, traffic = [1.0, 4.0, 2.0], [[0.0, 0.8], [3.9, 0.0], [0.0, 1.5]]
    assert pipeline_period(PY, stages, traffic, 4) == 4.0
    assert pipelined_seconds(PY, stages, traffic, 4) == 7.0 + 3 * 4.0
    # the gpu traffic of steps 0 and 2 adds up when they overlap: with 0.8 -> 3.0 the gpu carries 4.5 per period
    assert pipeline_period(PY, stages, [[0.0, 3.0], [3.9, 0.0], [0.0, 1.5]], 4) == 4.5
    # with 2 pieces only neighbours overlap: steps 0 and 2 never share the gpu links
    assert pipeline_period(PY, stages, [[0.0, 3.0], [3.9, 0.0], [0.0, 1.5]], 2) == 4.0
    assert pipelined_seconds(PY, stages, traffic, 1) == 7.0


def test_a_pipeline_never_ends_before_its_busiest_level_carries_everything():
    """Four steps of 1 s, each keeping one level busy 1 s per piece, on 2 pieces: windows of 2 steps give a period of
    2 s, so fill and periods come to 4 + 2 = 6 s, yet the level carries 2 x 4 s: the level floor sets 8 s. With 4
    pieces one window holds every step and the periods are above it already (4 + 3 x 4 = 16 > 16 - 0)."""
    stages, traffic = [1.0] * 4, [[1.0]] * 4
    assert pipeline_period(PY, stages, traffic, 2) == 2.0
    assert level_floor(PY, traffic, 2) == 8.0 and pipelined_seconds(PY, stages, traffic, 2) == 8.0
    assert pipelined_seconds(PY, stages, traffic, 4) == 4.0 + 3 * 4.0 >= level_floor(PY, traffic, 4)


def test_the_search_and_its_certificate_price_the_level_floor_as_the_model_does():
    """Two axes of 2 on one level of 4 devices: on 2 pieces the four-step programs are priced by their level floor
    (their windows miss traffic). The search's top 10 over 1, 2 and 4 pieces is the brute force's, bit for bit, and
    its certificate holds (solve checks it)."""
    from p2synth.hierarchies.abstract import enumerate_programs

    h = Hierarchy(levels=(Level(name="node", count=4, bandwidth_GBps=1.0, latency_us=1.0),))
    p = Placement(h, (Axis(name="a", size=2), Axis(name="b", size=2)), ((2,), (2,)))
    req = Request(frozenset({0, 1}))
    models = lambda k: cost_model(p, req, 1e9, CostModelKind.ALPHA_BETA, k)
    costs = sorted(min(raw_program_cost(models, AR, 2, raw, k)[0] for k in (1, 2, 4) if k == 1 or len(raw) > 1)
                   for raw in enumerate_programs(AR, 2, 4))
    sol = solve(p, req, 1e9, 4, top=10, pieces=(1, 2, 4))
    assert sol.optimal and [r.cost_s for r in sol.programs] == costs[:10]
    four = ((RS, 0b01), (RS, 0b10), (AG, 0b10), (AG, 0b01))
    cost, _ = raw_program_cost(models, AR, 2, four, 2)
    assert cost == pytest.approx(1.5, rel=1e-12)  # the cut: 1.5 GB per device at 1 GB/s, where the windows said 1.125


def test_a_hierarchical_all_reduce_on_4_pieces_by_hand():
    """RS(gpu) -> AR(node) -> AG(gpu) of 64 MiB on 4 pieces of 16 MiB, alpha-beta, worked out by hand."""
    piece = (64 << 20) / 4
    rs = 3 * 1e-6 + (3 / 4) * piece / 20e9                   # k=4 over gpu: 3 rounds, (k-1)/k of the piece
    ar = 2 * 10e-6 + 2 * (1 / 2) * (piece / 4) / 1e9         # k=2 over node on a quarter of the piece (scattered)
    ag = 3 * 1e-6 + 3 * (piece / 4) / 20e9                   # (k-1) quarters back over gpu
    gpu_traffic, node_traffic = (3 / 4) * piece / 20e9 + 3 * (piece / 4) / 20e9, 2 * (1 / 2) * (piece / 4) / 1e9
    period = max(rs, ar, ag, gpu_traffic, node_traffic)
    expected = rs + ar + ag + 3 * period
    models = lambda p: AlphaBeta(P8, REQ, (64 << 20) / p)
    cost, stages = raw_program_cost(models, AR, 2, HIER, 4)
    assert stages == pytest.approx([rs, ar, ag], rel=1e-12) and cost == pytest.approx(expected, rel=1e-12)
    sequential, _ = raw_program_cost(lambda p: AlphaBeta(P8, REQ, (64 << 20) / p), AR, 2, HIER, 1)
    assert cost < sequential  # the node stage dominates; its neighbours hide under it


def test_slow_outer_links_make_a_pipelined_program_best_and_single_steps_never_pipeline():
    sol = solve(P8, REQ, 64 << 20, 4, top=10, pieces=(1, 2, 4, 8, 16))
    assert sol.optimal and sol.best.program.pipeline > 1 and len(sol.best.program) > 1
    assert all(r.program.pipeline == 1 for r in sol.programs if len(r.program) == 1)
    # each program once, at its cheapest piece count
    assert len({r.program.steps for r in sol.programs}) == len(sol.programs)
    sequential = solve(P8, REQ, 64 << 20, 4, top=1)
    assert sol.best.cost_s < sequential.best.cost_s


SLOW = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SLOW
@given(cases(max_cells=3), st.sampled_from([(1, 2), (1, 4), (1, 2, 8)]))
def test_the_explicit_choice_of_program_and_pieces_is_z3s(case, pieces):
    """On random hierarchies the explicit search's best (program, pieces) costs what Z3 finds on its own, and Z3's
    unsat over the whole sketch (with every piece count) proves the explicit list."""
    from p2synth.encodings.programs import PieceCosts, ProgramSketch

    p, req, size, kind = case
    n = len(req.reduced_cells(p))
    K = 3
    models = lambda k: cost_model(p, req, size, kind, k)
    pipelines = [PieceCosts(k, models(k).step_time, models(k).traffic, pipelined_seconds) for k in pieces if k > 1]
    (z3_best,) = ProgramSketch(req.collective, n, K, models(1).step_time, pipelines).top(1)
    ours = solve(p, req, size, K, top=3, model_kind=kind, pieces=pieces, proof=Proof.Z3)
    assert ours.optimal and math.isclose(ours.best.cost_s, z3_best.cost, rel_tol=1e-6)
    if len(ours.programs) > 1 and ours.programs[1].cost_s > ours.best.cost_s * (1 + 1e-6):  # a unique best program
        assert len(z3_best.program) == len(ours.best.program)
        # the piece count Z3 chose gives that program the same cost (two counts can tie to the last bit)
        at_z3s = dataclasses.replace(ours.best.program, pipeline=z3_best.pieces)
        assert math.isclose(program_cost(p, req, at_z3s, size, kind), ours.best.cost_s, rel_tol=1e-6)


def _pipelined_search(pieces=4, top=5):
    space = state_space(AR, 2)
    model = cost_model(P8, REQ, 64 << 20, pieces=pieces)
    tab = pipeline_tables(edge_costs(space, model, with_traffic=True), pieces, 4).with_joint()
    cands = Candidates(top)
    ((expanded, found),) = cheapest_pipelined_all([tab], cands)
    return tab, expanded, found, cands.nth()


def test_the_pipelined_certificate_accepts_the_search():
    tab, expanded, found, nth = _pipelined_search()
    assert len(found) >= 5 and () in expanded
    pipelined_certificate.check_pipelined(tab, expanded, found, nth)


@pytest.mark.parametrize("fault", ["drop-found", "cut-tree", "cost-to-go-too-high", "traffic-too-high", "joint-too-high",
                                   "wrong-cost", "invalid-step", "orphan"])
def test_the_pipelined_certificate_refuses_a_wrong_one(fault):
    tab, expanded, found, nth = _pipelined_search()
    costs, h, t, j = tab.costs, tab.h, tab.t, tab.j
    cheapest = min(found, key=found.get)
    if fault == "drop-found":
        found = {k: v for k, v in found.items() if k != cheapest}
    elif fault == "cut-tree":  # the tree without the branch that holds the cheapest program
        first = next(j for j, s in enumerate(costs.space.steps) if (s.op, s.mask) == cheapest[0])
        expanded = [q for q in expanded if q[:1] != (first,)]
    elif fault == "cost-to-go-too-high":
        h = h.copy()
        h[3][np.isfinite(h[3]) & (h[3] > 0)] *= 1.5
    elif fault == "invalid-step":  # a node that takes a step its state does not allow: the same step twice
        first = next(q for q in expanded if len(q) == 1)
        expanded = [*expanded, first + first]
    elif fault == "orphan":  # a node whose parent was not expanded
        deepest = max(expanded, key=len)
        expanded = [q for q in expanded if q != deepest[:-1]]
    elif fault == "traffic-too-high":
        t = t.copy()
        t[3][np.isfinite(t[3]) & (t[3] > 0)] *= 1.5
    elif fault == "joint-too-high":
        j = j.copy()
        j[3][np.isfinite(j[3]) & (j[3] > 0)] *= 1.5
    else:
        found = {**found, cheapest: found[cheapest] * 0.9}
    with pytest.raises(CertificateError):
        pipelined_certificate.check_pipelined(dataclasses.replace(tab, h=h, t=t, j=j), expanded, found, nth)


def test_the_tables_bound_each_completion_within_the_steps_left():
    """t[r] and j[r] are the least per-level sums over the completions of at most r steps, brute-forced here: the
    step limit counts (a completion of any length could put the goal off and carry less)."""
    tab, *_ = _pipelined_search()
    space, rows, K = tab.costs.space, tab.rows, tab.h.shape[0] - 1
    share = 3 / 1  # 4 pieces, at most 4 steps: one window
    traffic = rows.traffic[:, :]

    def least(state, r, values):
        best = np.where(space.goal[state], 0.0, np.inf) * np.ones(values.shape[0])
        if r == 0:
            return best
        for i in range(rows.offsets[state], rows.offsets[state + 1]):
            best = np.minimum(best, values[:, i] + least(int(rows.target[i]), r - 1, values))
        return best

    joint = rows.weight[None, :] + share * traffic
    for r in range(K + 1):
        assert np.allclose(tab.t[r][:, space.start], least(space.start, r, traffic), rtol=1e-12)
        assert np.allclose(tab.j[r][:, space.start], least(space.start, r, joint), rtol=1e-12)
    assert np.any(np.isfinite(tab.t[1]) & (tab.t[1] > tab.t[K]))  # one step left carries more somewhere than four


def test_a_pipelined_program_is_checked_as_one_piece_and_reads_back():
    sol = solve(P8, REQ, 64 << 20, 4, top=3, pieces=(1, 4))
    best = sol.best.program
    assert best.pipeline == 4 and sol.best.verified
    assert Program.from_json(best.to_json(P8), P8) == best and best.text(P8).endswith(" x4 pieces")
    with pytest.raises(ValueError):
        Program((Step(AR, (NODE, GPU)),), 0)


def test_the_spec_narrows_the_piece_counts():
    from p2synth.solver.spec import SpecError, build_problem, parse_spec

    base = ('{"hierarchy": {"system": "dgx-a100", "nodes": 2}, "axes": [{"name": "d", "size": 16}], '
            '"request": {"axes": ["d"]}, "pipeline": %s}')
    assert build_problem(parse_spec(base % "[4, 1]")).spec.pipeline == [1, 4]
    for bad in ("[2, 4]", "[1, 1]", "[1, 65]", "[]"):
        with pytest.raises(SpecError) as e:
            parse_spec(base % bad)
        assert all(line.startswith("pipeline") for line in e.value.lines)


@settings(max_examples=15, deadline=None)
@given(cases(max_cells=3))
def test_more_pieces_never_change_what_a_sequential_search_finds(case):
    """Allowing pipelines can only lower the best cost, never raise it; single steps stay sequential."""
    p, req, size, kind = case
    assume(len(req.reduced_cells(p)) >= 1)
    seq = solve(p, req, size, 3, top=3, model_kind=kind)
    piped = solve(p, req, size, 3, top=3, model_kind=kind, pieces=(1, 2, 4))
    assert piped.best.cost_s <= seq.best.cost_s * (1 + 1e-9)
    assert all(r.program.pipeline == 1 for r in piped.programs if len(r.program) == 1)


def test_the_timeline_is_as_long_as_the_prediction_and_its_pieces_never_collide():
    from p2synth.hierarchies.program import NamedRequest
    from p2synth.solver.timeline import bars

    named = NamedRequest("grads", REQ, 64 << 20)
    program = Program(tuple(Step(op, tuple(c for c, bit in ((NODE, 1), (GPU, 2)) if mask & bit)) for op, mask in HIER), 4)
    seq, seq_total = bars(P8, named, program.sequential(), 1, CostModelKind.ALPHA_BETA)
    piped, total = bars(P8, named, program, 4, CostModelKind.ALPHA_BETA)
    assert max(b.start + b.length for b in seq) == pytest.approx(seq_total, rel=1e-12)
    assert max(b.start + b.length for b in piped) == pytest.approx(total, rel=1e-12) and total < seq_total
    assert {b.piece for b in piped} == {0, 1, 2, 3} and {b.step for b in piped} == {0, 1, 2}
    for step in range(3):  # one step of two pieces never runs at once: the period is at least every step
        spans = sorted((b.start, b.start + b.length) for b in piped if b.step == step and b.level == piped[0].level)
        assert all(a[1] <= b[0] * (1 + 1e-12) for a, b in zip(spans, spans[1:]))


def test_cli_timeline_writes_a_png_and_refuses_without_matplotlib(tmp_path):
    import json
    import subprocess
    import sys

    from tests.runtime_support import ROOT

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"hierarchy": H.model_dump(mode="json", exclude_none=True), "axes": [{"name": "data", "size": 8}],
                                "request": {"axes": ["data"]}, "message_bytes": 64 << 20}))
    png = tmp_path / "t.png"
    r = subprocess.run([sys.executable, "-m", "solver.run", str(spec), "--quiet", "--timeline", str(png)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    blocked = "import sys; sys.modules['matplotlib'] = None; from p2synth.solver.run import main; sys.exit(main(sys.argv[1:]))"
    r = subprocess.run([sys.executable, "-c", blocked, str(spec), "--timeline", str(tmp_path / "u.png")], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.strip() == "error: --timeline needs matplotlib: pip install -e '.[plot]'"
    assert not (tmp_path / "u.png").exists()


# ---- one traffic evaluation and bracketed tables serve every piece count --------------------------------------
@SLOW
@given(cases(max_cells=4), st.sampled_from([2, 4, 8, 16]))
def test_traffic_on_a_piece_is_the_whole_buffers_over_the_pieces(case, pieces):
    """What ``solver.pipelined.WholeTraffic`` relies on, for both cost models: a step's per-level traffic at 1/P of
    the message is its traffic at the whole message over P (to rounding), in every case of the state space."""
    p, req, size, kind = case
    space = state_space(req.collective, len(req.reduced_cells(p)))
    whole = edge_costs(space, cost_model(p, req, size, kind), with_traffic=True).loads
    piece = edge_costs(space, cost_model(p, req, size, kind, pieces), with_traffic=True).loads
    np.testing.assert_allclose(piece, whole / pieces, rtol=1e-12, atol=0)


@SLOW
@given(cases(max_cells=4), st.sampled_from([1, 2, 3, 4, 8, 16]))
def test_split_costs_are_the_models_own_at_every_piece_count(case, pieces):
    """Alpha-beta's one evaluation (``solver.stepcosts.SplitCosts``) gives, bit for bit, the step costs of the model
    evaluated at each piece count and the whole message's traffic; the simulator does not split (exact tables)."""
    p, req, size, kind = case
    space = state_space(req.collective, len(req.reduced_cells(p)))
    split = split_costs(space, cost_model(p, req, size, kind))
    if kind is CostModelKind.SIMULATOR:
        assert split is None
        return
    assert np.array_equal(split.on_pieces(pieces).values, edge_costs(space, cost_model(p, req, size, kind, pieces)).values)
    assert np.array_equal(split.traffic, edge_costs(space, cost_model(p, req, size, kind), with_traffic=True).loads)
    assert split_costs(space, cost_model(p, req, size, kind, 2)) is None  # only the one-piece model splits
    # the scalar walk of a pipelined program's cost evaluates both at once (on_piece): the same floats
    model, n = cost_model(p, req, size, kind, pieces), len(req.reduced_cells(p))
    for step in space.steps[:: max(1, len(space.steps) // 5)]:
        state = space.state(int(step.sources[0]))
        bits = mask_bits(step.mask, n), mask_bits(state.Y, n), mask_bits(state.Z, n)
        assert model.on_piece(PY, step.op, *bits) == (model.step_time(PY, step.op, *bits), model.traffic(PY, step.op, *bits))


@SLOW
@given(cases(max_cells=4))
def test_bracketed_tables_rank_as_exact_ones_do(case):
    """On random hierarchies, the search with the piece counts between 1 and 16 bracketed ranks exactly the programs,
    piece counts and costs it ranks with every table computed, and both are proved; with alpha-beta every middle
    piece count is bracketed (its steps are affine in 1/P, or the lesser of two affine ones: concave)."""
    p, req, size, kind = case
    pieces = (1, 2, 4, 8, 16)
    used = []
    real = ranking.bracketed_tables

    def spy(*args, **kw):
        out = real(*args, **kw)
        used.append(out is not None)
        return out

    with mock.patch.object(ranking, "bracketed_tables", spy):
        bracketed = solve(p, req, size, 4, top=5, model_kind=kind, pieces=pieces)
    with mock.patch.object(ranking, "bracketed_tables", lambda *a, **k: None):
        exact = solve(p, req, size, 4, top=5, model_kind=kind, pieces=pieces)
    assert bracketed.optimal and exact.optimal
    assert [(r.program, r.cost_s) for r in bracketed.programs] == [(r.program, r.cost_s) for r in exact.programs]
    if kind is CostModelKind.ALPHA_BETA:
        assert all(used)


def _tables(pieces=(2, 4, 16)):
    """The whole traffic, one piece's tables and the search's tables for P8 at 64 MiB (middle ones bracketed)."""
    space = state_space(AR, 2)
    models = lambda k: cost_model(P8, REQ, 64 << 20, pieces=k)
    whole = whole_traffic(space, models(1), 4)
    one = pipeline_tables(edge_costs(space, models(1)), 1, 4, None, whole)
    top = pipeline_tables(edge_costs(space, models(pieces[-1])), pieces[-1], 4, None, whole)
    middle = [bracketed_tables(edge_costs(space, models(k)), k, one, top, whole) for k in pieces[:-1]]
    assert all(t is not None and t.bracketed for t in middle)
    tables = [*middle, top]
    cands = Candidates(5)
    searched = cheapest_pipelined_all(tables, cands)
    return whole, one, tables, searched, cands.nth()


def test_the_certificate_accepts_bracketed_tables():
    pipelined_certificate.check_pipelined_all(*_tables())


@pytest.mark.parametrize("fault", ["chord-too-high", "cost-below-chord", "traffic-not-scaled",
                                   "exact-top-bracketed"])
def test_the_certificate_refuses_wrong_bracketed_tables(fault):
    whole, one, tables, searched, nth = _tables()
    mid = tables[1]  # 4 pieces
    if fault == "chord-too-high":
        h = mid.h.copy()
        h[2][np.isfinite(h[2]) & (h[2] > 0)] *= 1.01
        tables[1] = dataclasses.replace(mid, h=h)
    elif fault == "cost-below-chord":  # a model whose steps on 4 pieces cost less than the chord allows
        values = mid.costs.values * 0.9
        tables[1] = dataclasses.replace(mid, costs=dataclasses.replace(mid.costs, values=values))
    elif fault == "traffic-not-scaled":
        tables[1] = dataclasses.replace(mid, rows=dataclasses.replace(mid.rows, traffic=mid.rows.traffic[:, :] * 0.5))
    else:
        tables[-1] = dataclasses.replace(tables[-1], bracketed=True)
    with pytest.raises(CertificateError):
        pipelined_certificate.check_pipelined_all(whole, one, tables, searched, nth)


def test_a_model_not_affine_in_the_piece_size_gets_exact_tables():
    """Step costs that fall faster than 1/P allows (a cost model with a term in the square of the bytes) are not
    bracketed: bracketed_tables refuses them and the search computes their tables."""
    space = state_space(AR, 2)

    class Squared:
        def __init__(self, size):
            self.inner, self.size = AlphaBeta(P8, REQ, size), size

        def step_time(self, alg, op, S, Y, Z):
            return self.inner.step_time(alg, op, S, Y, Z) * (self.size / (64 << 20))

        def traffic(self, alg, op, S, Y, Z):
            return self.inner.traffic(alg, op, S, Y, Z)

    models = lambda k: Squared((64 << 20) / k)
    whole = whole_traffic(space, models(1), 4)
    one = pipeline_tables(edge_costs(space, models(1)), 1, 4, None, whole)
    top = pipeline_tables(edge_costs(space, models(16)), 16, 4, None, whole)
    assert bracketed_tables(edge_costs(space, models(4)), 4, one, top, whole) is None


@SLOW
@given(cases(max_cells=3), st.sampled_from([(1, 2, 4), (1, 2, 4, 8, 16), (1, 4, 16)]), st.integers(3, 5))
def test_the_pipelined_top_is_the_brute_forces(case, pieces, K):
    """Every program within K steps costed at every piece count by solver.cost directly, the cheapest N kept: the
    search's top N has exactly those costs (its bounds prune nothing that belongs there)."""
    from p2synth.hierarchies.abstract import enumerate_programs

    p, req, size, kind = case
    n = len(req.reduced_cells(p))
    models = lambda k: cost_model(p, req, size, kind, k)
    best = sorted(min(raw_program_cost(models, req.collective, n, raw, k)[0] for k in pieces if k == 1 or len(raw) > 1)
                  for raw in enumerate_programs(req.collective, n, K))
    sol = solve(p, req, size, K, top=5, model_kind=kind, pieces=pieces)
    assert sol.optimal
    assert [r.cost_s for r in sol.programs] == pytest.approx(best[:5], rel=1e-9)
