"""Input data and closed-form expected results of runtime/data.py (no MPI)."""

import numpy as np
import pytest

from hierarchies import Collective
from runtime.data import (
    EXACT_LIMIT,
    element_count,
    expected_values,
    group_sum,
    input_values,
    rank_period,
    reduction_group,
    values,
)
from hierarchies.concrete import ConcreteChecker
from tests.runtime_support import placement_of, request_of

PL = placement_of([("node", 2), ("core", 4)], [("data", 4), ("model", 2)], [[2, 2], [1, 2]])


@pytest.mark.parametrize("axes", [["data"], ["model"], ["data", "model"]])
def test_reduction_group_matches_the_checker(axes):
    request = request_of(PL, axes, Collective.ALL_REDUCE)
    checker = ConcreteChecker(PL, request)
    for rank in range(PL.num_devices):
        group = reduction_group(PL, request, rank)
        assert sum(1 << m for m in group.members) == checker.group_of[rank]
        assert group.root == checker.root_of_group(rank)
        assert group.members[group.position] == rank
        # chunk order: member k has reduced coordinate k (first reduced cell most significant)
        assert [checker.coord[m] for m in group.members] == checker.all_chunks


def test_closed_form_sum_equals_the_brute_force_sum():
    request = request_of(PL, ["data"], Collective.ALL_REDUCE)
    group = reduction_group(PL, request, 5)
    period = rank_period(4, 8)
    brute = sum(values(r, 100, period).astype(np.float64) for r in group.members)
    assert np.array_equal(group_sum(group, 0, 100, period), brute)
    assert np.array_equal(group_sum(group, 40, 20, period), brute[40:60])


def test_known_values():
    # ranks 0..3 of a 4-device group: f(r, i) = 1 + i % 31 + 32 r
    pl = placement_of([("node", 2), ("core", 2)], [("data", 4)], [[2, 2]])
    request = request_of(pl, ["data"], Collective.ALL_REDUCE)
    group = reduction_group(pl, request, 2)
    assert values(3, 3, rank_period(4, 4)).tolist() == [97, 98, 99]
    assert expected_values(Collective.ALL_REDUCE, group, 4, 4).tolist() == [196, 200, 204, 208]
    assert expected_values(Collective.REDUCE_SCATTER, group, 8, 4).tolist() == [212, 216]  # chunk 2 of 4
    assert expected_values(Collective.ALL_GATHER, group, 4, 4).tolist() == [1, 33, 65, 97]
    assert expected_values(Collective.BROADCAST, group, 2, 4).tolist() == [1, 2]
    assert expected_values(Collective.REDUCE, group, 4, 4) is None  # rank 2 is not the root


def test_all_gather_input_is_one_chunk_and_output_the_owners_chunks():
    request = request_of(PL, ["data"], Collective.ALL_GATHER)
    group = reduction_group(PL, request, 3)
    period = rank_period(4, 8)
    assert input_values(Collective.ALL_GATHER, group, 3, 16, period).size == 4
    out = expected_values(Collective.ALL_GATHER, group, 16, period)
    for k, owner in enumerate(group.members):
        assert np.array_equal(out[4 * k : 4 * k + 4], input_values(Collective.ALL_GATHER, group, owner, 16, period))


def test_sums_stay_exact_in_float32():
    for group_size, world in [(8, 8), (4096, 4096), (8, 65536)]:
        period = rank_period(group_size, world)
        assert group_size * (1 + 30 + 32 * (period - 1)) < EXACT_LIMIT
    with pytest.raises(ValueError):
        rank_period(2**20, 2**20)


def test_element_count_rounds_down_to_whole_chunks():
    assert element_count(4096, 8) == 1024
    assert element_count(100, 8) == 24
    with pytest.raises(ValueError):
        element_count(16, 8)
