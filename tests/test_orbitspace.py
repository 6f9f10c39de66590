"""Folding interchangeable cells (hierarchies/orbitspace.py, solver/folding.py): the orbit space against the unfolded
state space step by step, lifts against images, the folded search against the unfolded one on random hierarchies, and
the invariance check catching a cost model that tells equal cells apart."""

import dataclasses
import itertools
import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from p2synth.hierarchies import Axis, Collective, Hierarchy, Level, Placement, Request
from p2synth.hierarchies.orbitspace import OrbitSpace, compositions
from p2synth.hierarchies.statespace import StateSpace
from p2synth.solver import ranking, search
from p2synth.solver.certificate import CertificateError
from p2synth.solver.folding import case_count, cell_classes, check_invariance, folds
from p2synth.solver.models import InCellOrder, canonical_order, cost_model, cost_signature

from .test_symmetry import symmetric_placements

COLLECTIVES = [Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.REDUCE, Collective.ALL_GATHER,
               Collective.BROADCAST, Collective.ALL_TO_ALL]


@st.composite
def partitions(draw, most: int = 5):
    """A random partition of cells 0..n-1 (n <= `most`) into classes."""
    n = draw(st.integers(1, most))
    labels = draw(st.lists(st.integers(0, n - 1), min_size=n, max_size=n))
    groups: dict[int, list[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(label, []).append(i)
    return tuple(tuple(g) for g in groups.values())


def _orbit_of_every_state(orbits: OrbitSpace, space: StateSpace) -> np.ndarray:
    R = space.radix
    return np.array([orbits.orbit_of([(i // R ** c) % R for c in range(space.cells)]) for i in range(space.size)])


def test_compositions_are_every_split_once():
    assert compositions(2, 3) == [(0, 0, 2), (0, 1, 1), (0, 2, 0), (1, 0, 1), (1, 1, 0), (2, 0, 0)]
    assert len(compositions(3, 4)) == math.comb(6, 3)


def test_cell_classes_group_equal_level_and_factor():
    assert cell_classes([(0, 2), (1, 4), (0, 2), (0, 2), (1, 2)]) == ((0, 2, 3), (1,), (4,))
    assert not folds(cell_classes([(0, 2), (0, 4)]))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(COLLECTIVES), partitions())
def test_the_orbit_steps_are_the_images_of_the_concrete_steps(collective, classes):
    """Every concrete step valid in a state maps to an orbit step valid in its orbit, into the orbit of its target,
    and every orbit step valid in an orbit is the image of one; start and goal agree (the module's two lemmas)."""
    orbits = OrbitSpace(collective, classes)
    space = StateSpace(collective, orbits.cells)
    q = _orbit_of_every_state(orbits, space)
    orbit_rows = {(int(s), st.op, st.mask): int(t) for st in orbits.steps for s, t in zip(st.sources, st.targets)}
    images = set()
    for step in space.steps:
        (_, code), = orbits.image(((step.op, step.mask),))
        for s, t in zip(step.sources.tolist(), step.targets.tolist()):
            assert orbit_rows[int(q[s]), step.op, code] == q[t]
            images.add((int(q[s]), step.op, code))
    assert images == set(orbit_rows)
    assert q[space.start] == orbits.start and np.array_equal(orbits.goal[q], space.goal)
    assert orbits.size == len(set(q.tolist()))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(COLLECTIVES), partitions())
def test_an_orbit_steps_cost_is_read_at_a_concrete_step_of_its_orbit(collective, classes):
    """The case each orbit row's cost is read at (slice, scattered and rooted cells) is the case of a concrete step
    above it: one valid in a state of the orbit, taking cells of the step's counts."""
    orbits = OrbitSpace(collective, classes)
    space = StateSpace(collective, orbits.cells)
    q = _orbit_of_every_state(orbits, space)
    above: dict[tuple, set[int]] = {}
    for j, step in enumerate(space.steps):
        (_, code), = orbits.image(((step.op, step.mask),))
        for s, key in zip(step.sources.tolist(), space.case_keys(j).tolist()):
            above.setdefault((int(q[s]), step.op, code), set()).add(key)
    for j, step in enumerate(orbits.steps):
        for s, key in zip(step.sources.tolist(), orbits.case_keys(j).tolist()):
            assert key in above[s, step.op, step.mask]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(COLLECTIVES), partitions(), st.data())
def test_the_lifts_of_a_programs_image_are_the_programs_with_that_image(collective, classes, data):
    """A random concrete program (a walk over valid steps) is among the lifts of its image, every lift has the same
    image, and the lifts number the product over steps of the choices of cells, each once."""
    orbits = OrbitSpace(collective, classes)
    space = StateSpace(collective, orbits.cells)
    state, program = space.start, []
    for _ in range(data.draw(st.integers(1, 4))):
        valid = [s for s in space.steps if state in set(s.sources.tolist())]
        if not valid:
            break
        step = data.draw(st.sampled_from(valid))
        program.append((step.op, step.mask))
        state = int(step.targets[np.searchsorted(step.sources, state)])
    image = orbits.image(tuple(program))
    lifts = list(orbits.lifts(image))
    assert tuple(program) in lifts and len(set(lifts)) == len(lifts)
    assert all(orbits.image(p) == image for p in lifts)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(symmetric_placements(), st.sampled_from([(1, 2, 4), (1, 4, 8)]), st.sampled_from([3, 4]),
       st.sampled_from([1 << 20, 1 << 30]))
def test_the_search_over_orbits_lists_what_the_unfolded_one_does(placement, pieces, steps, size):
    """Forced over the orbit space (as beyond EXPLICIT_MAX_STATES), the search lists the same programs, costs, piece
    counts and proof as the unfolded search, on random hierarchies with interchangeable cells."""
    request = Request(frozenset(range(len(placement.axes))))
    assume(folds(cell_classes(cost_signature(placement, request, size, "alpha-beta").cells)))
    spaces = []
    real = ranking.orbit_space

    def spy(collective, classes):
        spaces.append(classes)
        return real(collective, classes)

    spy.cache_clear = real.cache_clear

    with mock.patch.object(ranking, "state_space_fits", lambda *a: False), mock.patch.object(ranking, "orbit_space", spy):
        folded = search.solve(placement, request, size, steps, top=6, pieces=pieces)
    plain = search.solve(placement, request, size, steps, top=6, pieces=pieces)
    assert spaces and folded == plain and folded.optimal


def _two_pairs() -> Placement:
    """dp and tp both 2-way across 4 nodes and across 4 GPUs each: cells (node, 2) twice and (gpu, 2) twice."""
    h = Hierarchy(levels=(Level(name="node", count=4, bandwidth_GBps=2.0, latency_us=10.0),
                          Level(name="gpu", count=4, bandwidth_GBps=50.0, latency_us=1.0)))
    return Placement(h, (Axis(name="dp", size=4), Axis(name="tp", size=4)), ((2, 2), (2, 2)))


def test_z3_proves_the_list_of_an_orbit_search():
    """With ``--proof z3``, Z3's own unsat proves the lifted list of an orbit search, as it does the unfolded one's."""
    placement = _two_pairs()
    request = Request(frozenset({0, 1}))
    with mock.patch.object(ranking, "state_space_fits", lambda *a: False):
        folded = search.solve(placement, request, 1 << 30, 3, top=5, pieces=(1,), proof=search.Proof.Z3)
    plain = search.solve(placement, request, 1 << 30, 3, top=5, pieces=(1,), proof=search.Proof.Z3)
    assert folded == plain and folded.optimal and len(folded.programs) == 5


def test_an_orbit_search_on_two_pairs_of_cells_lists_the_unfolded_searchs_programs():
    """dp and tp both 2-way across nodes and across GPUs: two pairs of interchangeable cells, folded."""
    placement = _two_pairs()
    request = Request(frozenset({0, 1}))
    with mock.patch.object(ranking, "state_space_fits", lambda *a: False):
        folded = search.solve(placement, request, 1 << 30, 4, top=8, pieces=(1, 2, 4))
        # a search over orbits leaves no space's layout cached: a sweep holds one such space at a time
        assert ranking.rows_layout.cache_info().currsize == 0 and ranking.orbit_space.cache_info().currsize == 0
    plain = search.solve(placement, request, 1 << 30, 4, top=8, pieces=(1, 2, 4))
    assert folded == plain and folded.optimal and len(folded.programs) == 8


def _model_of(placement, request, size=1 << 30):
    order = canonical_order(placement, request)
    return InCellOrder(cost_model(placement, request, size), order), cell_classes(cost_signature(placement, request, size, "alpha-beta").cells)


@dataclasses.dataclass(frozen=True)
class _TellsCellsApart:
    """A model whose latency grows when the slice holds cell `cell` and not the next one: it breaks their swap."""

    inner: object
    cell: int
    pieces: int = 1

    def split(self, alg, op, S, Y, Z):
        found = self.inner.split(alg, op, S, Y, Z)
        extra = alg.ite(S[self.cell], 1e-6, 0.0)
        return dataclasses.replace(found, latency=found.latency + extra)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(symmetric_placements())
def test_the_invariance_check_passes_the_models_and_catches_one_that_tells_equal_cells_apart(placement):
    request = Request(frozenset(range(len(placement.axes))))
    model, classes = _model_of(placement, request)
    C = sum(len(c) for c in classes)
    assert check_invariance(model.split, Collective.ALL_REDUCE, classes) == case_count(Collective.ALL_REDUCE, C)
    for cls in classes:
        if len(cls) > 1:
            with pytest.raises(CertificateError, match="changes the cost"):
                check_invariance(_TellsCellsApart(model, cls[0]).split, Collective.ALL_REDUCE, classes)


def test_a_model_that_tells_equal_cells_apart_is_not_folded():
    """The search does not fold where the check fails (it searches the unfolded space, or Z3 alone beyond it)."""
    placement = _two_pairs()
    model, classes = _model_of(placement, Request(frozenset({0, 1})))
    assert classes == ((0, 1), (2, 3))
    deadline = ranking.Deadline(None)
    assert ranking._can_fold(Collective.ALL_REDUCE, classes, lambda p: model, deadline)
    assert not ranking._can_fold(Collective.ALL_REDUCE, classes, lambda p: _TellsCellsApart(model, 2), deadline)


def test_case_count_counts_every_case_with_a_slice():
    # all_reduce: each cell in the slice or out of it with one of 3 (scattered, rooted) pairs; 5 ops
    assert case_count(Collective.ALL_REDUCE, 3) == 5 * (4 ** 3 - 3 ** 3)
    assert list(itertools.islice(compositions(1, 2), 3)) == [(0, 1), (1, 0)]
