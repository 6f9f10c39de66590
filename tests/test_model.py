"""The system model: hierarchies, the library, placements and their enumeration."""

import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from p2synth.encodings.deadline import Deadline
from p2synth.encodings.errors import SolverTimeout
from p2synth.encodings.placements import count_placements, enumerate_placements
from p2synth.hierarchies import Axis, Hierarchy, Level, Placement, PlacementError, UnknownSystemError, enumerate_matrices, load_system, system_names
from tests.strategies import placements


def test_library_has_the_named_systems():
    assert {"dgx1-v100", "dgx-a100", "dgx-h100", "cpu-cluster"} <= set(system_names())


@pytest.mark.parametrize("name", ["dgx1-v100", "dgx-a100", "dgx-h100", "cpu-cluster"])
def test_library_systems_load_with_node_count(name):
    h = load_system(name, nodes=16)
    assert h.levels[0].count == 16
    assert h.num_devices == 16 * h.devices_below(0)
    assert all(link.bandwidth > 0 and link.latency > 0 for link in h.links)


@pytest.mark.parametrize("name", ["x" * 5000, "../systems/dgx-a100", "dgx-a100/../dgx-a100", "/etc/passwd", "", "DGX-A100"])
def test_only_a_bundled_name_is_loaded(name):
    with pytest.raises(UnknownSystemError):
        load_system(name)


def test_dgx_a100_figures():
    h = load_system("dgx-a100", nodes=2)
    assert h.describe() == "node 2 x gpu 8"
    assert h.links[0].bandwidth == 25e9 and h.links[0].uplink == 200e9
    assert h.links[1].bandwidth == 240e9 and h.links[1].uplink is None


def test_default_link_figures_thin_out_outward():
    h = Hierarchy(levels=(Level(name="rack", count=2), Level(name="node", count=2), Level(name="gpu", count=2)))
    assert [l.bandwidth for l in h.links] == [100e9 / 16, 100e9 / 4, 100e9]
    assert [round(l.latency * 1e6, 9) for l in h.links] == [18.0, 6.0, 2.0]


def test_ranks_are_mixed_radix_with_level_0_most_significant():
    h = Hierarchy(levels=(Level(name="node", count=2), Level(name="gpu", count=4)))
    assert [h.coords(r) for r in (0, 3, 4, 7)] == [(0, 0), (0, 3), (1, 0), (1, 3)]
    assert all(h.rank(h.coords(r)) == r for r in range(8))


def test_digits_follow_declared_axis_order_within_a_level():
    h = Hierarchy(levels=(Level(name="gpu", count=8),))
    p = Placement(h, (Axis(name="data", size=4), Axis(name="model", size=2)), ((4,), (2,)))
    # gpu coordinate = data digit * 2 + model digit: model is the fastest-varying
    assert [p.axis_coords(r) for r in range(4)] == [(0, 0), (0, 1), (1, 0), (1, 1)]


@given(placements())
def test_digits_are_a_bijection(p):
    coords = {p.axis_coords(r) for r in range(p.num_devices)}
    assert len(coords) == p.num_devices
    assert all(p.rank_of_digits(p.digits(r)) == r for r in range(p.num_devices))
    assert coords == {c for c in _all_coords(p)}


def _all_coords(p):
    import itertools

    return itertools.product(*(range(a.size) for a in p.axes))


def test_bad_matrix_is_rejected():
    h = Hierarchy(levels=(Level(name="node", count=2), Level(name="gpu", count=4)))
    with pytest.raises(PlacementError, match="column of level 'node' multiplies to 4"):
        Placement(h, (Axis(name="data", size=8),), ((4, 2),))


def test_placement_count_for_dgx_a100_dp_tp():
    assert sorted(enumerate_placements((16, 2), (4, 8))) == [((2, 8), (2, 1)), ((4, 4), (1, 2))]


@given(st.lists(st.sampled_from([1, 2, 3, 4, 6, 8]), min_size=1, max_size=3),
       st.lists(st.sampled_from([1, 2, 3, 4, 6, 8]), min_size=1, max_size=3))
def test_z3_placement_enumeration_matches_plain_enumerator(sizes, counts):
    # make the products agree by scaling the last level count
    total = math.prod(sizes)
    if total % math.prod(counts[:-1]):
        counts = [1] * (len(counts) - 1) + [total]
    else:
        counts = counts[:-1] + [total // math.prod(counts[:-1])]
    plain = sorted(enumerate_matrices(tuple(sizes), tuple(counts)))
    z3 = sorted(enumerate_placements(tuple(sizes), tuple(counts)))
    assert z3 == plain
    assert count_placements(tuple(sizes), tuple(counts)) == len(plain)
    assert len(set(plain)) == len(plain) and plain
    for m in plain:
        assert all(math.prod(r) == s for r, s in zip(m, sizes))
        assert all(math.prod(r[l] for r in m) == c for l, c in enumerate(counts))


def test_mismatched_products_give_no_placement():
    assert list(enumerate_placements((3,), (2,))) == []
    assert list(enumerate_matrices((3,), (2,))) == []


@pytest.mark.parametrize("sizes,counts,expected", [
    ((16, 2), (4, 8), 2),
    ((2,) * 9, (2,) * 9, math.factorial(9)),  # permutation matrices
    ((2,) * 24, (2,) * 24, math.factorial(24)),
    ((2**12, 2**12), (2,) * 24, math.comb(24, 12)),  # which 12 levels the first axis takes
    ((6,) * 8, (6,) * 8, math.factorial(8) ** 2),  # one permutation per prime
    ((4, 4), (4, 4), 3),  # exponent rows (2,0)/(0,2), (1,1)/(1,1), (0,2)/(2,0)
    ((12,), (2, 6), 1),
    ((3,), (2,), 0),
])
def test_placement_count_by_hand(sizes, counts, expected):
    started = time.monotonic()
    assert count_placements(sizes, counts) == expected
    assert time.monotonic() - started < 5  # a count, not an enumeration


def test_placement_enumeration_stops_at_its_deadline_keeping_what_it_found():
    found = []
    started = time.monotonic()
    with pytest.raises(SolverTimeout):
        for matrix in enumerate_placements((2,) * 9, (2,) * 9, Deadline(1.0)):
            found.append(matrix)
    assert time.monotonic() - started < 1.0 + 10  # generous: a loaded machine
    assert 0 < len(found) < math.factorial(9) and len(set(found)) == len(found)
    assert all(row.count(2) == 1 for m in found for row in (*m, *zip(*m)))  # one 2 in each row and each column
