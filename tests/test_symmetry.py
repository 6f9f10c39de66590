"""Interchangeable cells (solver/symmetry.py): the leader rule against its definition, the folded pipelined search
against the unfolded one on random hierarchies, and the certificate refusing a folding that does not hold."""

from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2synth.hierarchies import Axis, Collective, Hierarchy, Level, Placement, Request
from p2synth.hierarchies.statespace import state_space
from p2synth.solver import pipelined_certificate, ranking, search
from p2synth.solver.certificate import CertificateError
from p2synth.solver.models import InCellOrder, canonical_order, cost_model
from p2synth.solver.pipelined import cheapest_pipelined_all, pipeline_tables, whole_traffic
from p2synth.solver.stepcosts import edge_costs
from p2synth.solver.symmetry import all_tied, class_pairs, orbit, pair_bits
from p2synth.solver.topn import Candidates

AR = Collective.ALL_REDUCE


def test_class_pairs_link_consecutive_equal_cells():
    assert class_pairs([(0, 2), (1, 4), (0, 2), (0, 2), (1, 2)]) == ((0, 2), (2, 3))
    assert class_pairs([(0, 2), (0, 4)]) == ()


def test_an_orbit_is_every_relabelling_within_the_classes_once():
    program = ((AR, 0b001), (AR, 0b110))
    assert sorted(orbit(program, [(0, 1), (1, 2)])) == sorted({((AR, 1 << i), (AR, 0b111 ^ (1 << i))) for i in range(3)})
    assert len(orbit(((AR, 0b11),), [(0, 1)])) == 1  # a slice holding both cells is its own swap


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 63), min_size=1, max_size=5), st.sampled_from([[(0, 1)], [(0, 1), (1, 2)], [(0, 3), (1, 4)],
                                                                               [(0, 2), (2, 4), (1, 5)]]))
def test_the_incremental_rule_keeps_exactly_the_least_of_each_orbit(masks, pairs):
    """The search's rule (a step may not break a pair still tied, ``pair_bits``) accepts a sequence of slices exactly
    when it is the least of its orbit, compared mask by mask: the definition, by brute force over the orbit."""
    tied, kept = all_tied(pairs), True
    for m in masks:
        breaks, splits = pair_bits(np.array([m]), pairs)
        if int(breaks[0]) & tied:
            kept = False
            break
        tied &= ~int(splits[0])
    least = min(tuple(m for _, m in p) for p in orbit(tuple((AR, m) for m in masks), pairs))
    assert kept == (least == tuple(masks))


@st.composite
def symmetric_placements(draw):
    """Two or three axes reduced together on two or three levels with random link figures; each level's count is the
    product of its column, so axes often have equal factors at a level (interchangeable cells)."""
    n = draw(st.integers(2, 3))
    rows = draw(st.lists(st.tuples(*[st.sampled_from([1, 2, 2, 4]) for _ in range(n)]), min_size=2, max_size=3))
    rows = [tuple(2 if all(x == 1 for x in r) and i == 0 else x for i, x in enumerate(r)) for r in rows]
    counts = [int(np.prod([r[i] for r in rows])) for i in range(n)]
    if np.prod(counts) > 64:
        rows, counts = [(2,) * n, (2,) * n], [4] * n
    levels = tuple(Level(name=name, count=c, bandwidth_GBps=draw(st.sampled_from([1.0, 4.0, 25.0, 100.0])),
                         latency_us=draw(st.sampled_from([1.0, 5.0, 20.0])), uplink_GBps=draw(st.sampled_from([None, 8.0])))
                   for name, c in zip(["pod", "node", "gpu"][-n:], counts))
    axes = tuple(Axis(name=f"a{i}", size=int(np.prod(r))) for i, r in enumerate(rows))
    return Placement(Hierarchy(levels=levels), axes, tuple(rows))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(symmetric_placements(), st.sampled_from([(1, 2, 4), (1, 4, 8)]), st.sampled_from([3, 4]),
       st.sampled_from([1 << 20, 1 << 30]))
def test_the_folded_search_lists_what_the_unfolded_one_does(placement, pieces, steps, size):
    """One program per orbit, each listed with its orbit, and the joint tables (every search treated as a hard one, as
    small ones are): the same programs, costs, piece counts and proof as the search that expands every program
    without them (pairs switched off, every search run first without the joint tables)."""
    request = Request(frozenset(range(len(placement.axes))))
    with mock.patch.object(ranking, "HARD_FIRST_ROWS", 1 << 40):
        folded = search.solve(placement, request, size, steps, top=6, pieces=pieces)
    with mock.patch.object(ranking, "class_pairs", lambda cells: ()), mock.patch.object(ranking, "HARD_FIRST_ROWS", 0), \
            mock.patch.object(ranking, "EASY_SEARCH_ROWS", 1):
        plain = search.solve(placement, request, size, steps, top=6, pieces=pieces)
    assert folded == plain and folded.optimal


def _folded_search(pieces=4):
    """dp and tp both 2-way across nodes and 2-way across GPUs: cells (0, 2) and (1, 3) interchangeable."""
    h = Hierarchy(levels=(Level(name="node", count=4, bandwidth_GBps=2.0, latency_us=10.0),
                          Level(name="gpu", count=4, bandwidth_GBps=50.0, latency_us=1.0)))
    p = Placement(h, (Axis(name="dp", size=4), Axis(name="tp", size=4)), ((2, 2), (2, 2)))
    req = Request(frozenset({0, 1}))
    order = canonical_order(p, req)
    pairs = class_pairs([(c.level, p.factor(c)) for c in (req.reduced_cells(p)[i] for i in order)])
    space = state_space(AR, 4)
    model = lambda k: InCellOrder(cost_model(p, req, 1 << 30, pieces=k), order)
    whole = whole_traffic(space, model(1), 4)
    tab = pipeline_tables(edge_costs(space, model(pieces)), pieces, 4, None, whole).with_joint()
    one = pipeline_tables(edge_costs(space, model(1)), 1, 4, None, whole)
    cands = Candidates(5)
    searched = cheapest_pipelined_all([tab], cands, None, pairs)
    return whole, one, tab, searched, cands.nth(), pairs


def test_the_certificate_accepts_the_folded_search_and_it_expands_less():
    whole, one, tab, searched, nth, pairs = _folded_search()
    assert pairs == ((0, 1), (2, 3))
    pipelined_certificate.check_pipelined_all(whole, one, [tab], searched, nth, pairs=pairs)
    plain = Candidates(5)
    unfolded = cheapest_pipelined_all([tab], plain)
    folded = Candidates(5)
    cheapest_pipelined_all([tab], folded, None, pairs)
    assert len(searched[0][0]) < len(unfolded[0][0]) and folded.kept() == plain.kept()


@pytest.mark.parametrize("fault", ["not-closed", "no-pairs", "not-a-symmetry", "cut-leader"])
def test_the_certificate_refuses_a_wrong_folding(fault):
    whole, one, tab, searched, nth, pairs = _folded_search()
    (expanded, found), = searched
    if fault == "not-closed":  # one program of an orbit listed without its twins
        kept = min((k for k in found if len(orbit(k, pairs)) > 1), key=found.get)
        found = {k: v for k, v in found.items() if k == kept or k not in orbit(kept, pairs)}
    elif fault == "no-pairs":  # the folded tree claimed as a whole one
        pairs = ()
    elif fault == "not-a-symmetry":  # swap a node cell with a GPU cell: their links differ
        pairs = ((0, 2),)
    else:  # the tree without the branch of the cheapest program's leader
        leader = min(orbit(min(found, key=found.get), pairs), key=lambda p: tuple(m for _, m in p))
        first = next(j for j, s in enumerate(tab.costs.space.steps) if (s.op, s.mask) == leader[0])
        expanded = [q for q in expanded if q[:1] != (first,)]
    with pytest.raises(CertificateError):
        pipelined_certificate.check_pipelined_all(whole, one, [tab], [(expanded, found)], nth, pairs=pairs)
