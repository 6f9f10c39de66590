"""The check data of runtime/data.py (no MPI): closed forms against brute-force sums, and the uniqueness claims.

The claims (runtime/data.py, docs/runtime.md "Exact check") are tested over
random placements, requests and chunk sizes: expected elements are pairwise
distinct unless they are the same element; a dropped or doubled contribution
changes every element; a skipped step (a partial sum left in place) changes
every element; any fault that acts alike on two elements and changes the
number of contributions or shifts their indices changes one of the two.
"""

import itertools

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from p2synth.hierarchies import Collective, Request
from p2synth.hierarchies.concrete import ConcreteChecker
from p2synth.runtime.data import (
    CHECK_DTYPE,
    MIN_RANK_BITS,
    SPARE_BITS,
    element_count,
    index_bits,
    rank_tag,
    reduction_group,
    tagged_data,
    timed_expected,
    timed_input,
)
from tests.runtime_support import placement_of, request_of
from tests.strategies import placements, requests

PL = placement_of([("node", 2), ("core", 4)], [("data", 4), ("model", 2)], [[2, 2], [1, 2]])
CHUNKS = st.one_of(st.integers(1, 8), st.integers(9, 80), st.sampled_from([31, 62, 64, 127, 1000]))


@st.composite
def runs(draw, collectives=tuple(Collective)):
    """A random run: placement, request (collective from `collectives`) and element count (whole chunks)."""
    placement = draw(placements(max_devices=32))
    request = draw(requests(placement))
    collective = draw(st.sampled_from(collectives))
    # a shift runs along one axis
    request = Request(frozenset({min(request.axes)}) if collective is Collective.SEND_RECV else request.axes, collective)
    group = reduction_group(placement, request, 0)
    return placement, request, group.size * draw(CHUNKS)


def data_of(placement, request, count):
    """Every rank's TaggedData for the run."""
    n = placement.num_devices
    return [tagged_data(request.collective, reduction_group(placement, request, r), count, n) for r in range(n)]


def some_rank(data, everyone):
    """The TaggedData of a rank drawn by hypothesis."""
    return everyone[data.draw(st.integers(0, len(everyone) - 1))]


def index_field(values, placement, count):
    """The low B bits of tagged values: the exact part of every claim but the last."""
    return values & np.uint64((1 << index_bits(placement.num_devices, count)) - 1)


def wrapping_sum(arrays):
    """Element-wise sum modulo 2**64, as MPI and NCCL sum uint64."""
    total = np.zeros_like(arrays[0])
    for a in arrays:
        total += a
    return total


@pytest.mark.parametrize("axes", [["data"], ["model"], ["data", "model"]])
def test_reduction_group_matches_the_checker(axes):
    request = request_of(PL, axes, Collective.ALL_REDUCE)
    checker = ConcreteChecker(PL, request)
    indices = set()
    for rank in range(PL.num_devices):
        group = reduction_group(PL, request, rank)
        assert sum(1 << m for m in group.members) == checker.group_of[rank]
        assert group.root == checker.root_of_group(rank) and group.rank == rank
        # chunk order: member k has reduced coordinate k (first reduced cell most significant)
        assert [checker.coord[m] for m in group.members] == checker.all_chunks
        assert all(reduction_group(PL, request, m).index == group.index for m in group.members)
        indices.add(group.index)
    assert indices == set(range(PL.num_devices // group.size))


@given(st.data())
def test_group_arithmetic_matches_its_definition(data):
    """Placement.group/position/root/group_index against the definition: devices equal off the cells."""
    placement = data.draw(placements(max_devices=32))
    cells = tuple(data.draw(st.permutations(placement.cells))[: data.draw(st.integers(0, len(placement.cells)))])
    rank = data.draw(st.integers(0, placement.num_devices - 1))
    mine = placement.digits(rank)
    off = lambda r: {c: v for c, v in placement.digits(r).items() if c not in cells}  # noqa: E731
    brute = sorted((r for r in range(placement.num_devices) if off(r) == off(rank)),
                   key=lambda r: tuple(placement.digits(r)[c] for c in cells))
    group = placement.group(rank, cells)
    assert list(group) == brute
    assert group[placement.position(rank, cells)] == rank
    assert placement.root(rank, cells) == group[0] and all(placement.digits(group[0])[c] == 0 for c in cells)
    assert {placement.position(m, cells) for m in group} == set(range(len(group)))
    assert all(placement.digits(m)[c] == mine[c] for m in group for c in placement.cells if c not in cells)
    indices = {placement.group_index(r, cells) for r in range(placement.num_devices)}
    assert indices == set(range(placement.num_devices // len(group)))
    assert {placement.group_index(m, cells) for m in group} == {placement.group_index(rank, cells)}


@given(runs())
def test_expected_is_the_wrapping_sum_of_the_inputs(run):
    """The closed forms equal the brute-force result of each collective on the inputs."""
    placement, request, count = run
    everyone = data_of(placement, request, count)
    inputs = [d.input() for d in everyone]
    col = request.collective
    for d in everyone:
        g = d.group
        assert inputs[g.rank].dtype == CHECK_DTYPE and inputs[g.rank].size == (d.chunk if col is Collective.ALL_GATHER else count)
        if col is Collective.ALL_GATHER:
            want = np.concatenate([inputs[m] for m in g.members])
        elif col is Collective.BROADCAST:
            want = inputs[g.root]
        elif col is Collective.ALL_TO_ALL:  # place i: member i's chunk addressed to this rank
            want = np.concatenate([inputs[m][g.position * d.chunk : (g.position + 1) * d.chunk] for m in g.members])
        elif col is Collective.SEND_RECV:  # the predecessor's input on the axis
            want = inputs[g.members[(g.position - 1) % g.size]]
        else:
            want = wrapping_sum([inputs[m] for m in g.members])
            if col is Collective.REDUCE_SCATTER:
                want = want[g.position * d.chunk : (g.position + 1) * d.chunk]
            if col is Collective.REDUCE and g.position != 0:
                want = None
        got = d.expected()
        assert (got is None and want is None) or np.array_equal(got, want)


@given(runs())
def test_expected_elements_are_equal_only_when_they_are_the_same_element(run):
    """Across all ranks of a run, two expected elements' index fields are equal iff they are the same (group, message index).

    For all_to_all the message index is the destination's (the places of one
    rank's output differ by source, which the rank field tells apart: checked too).
    """
    placement, request, count = run
    a2a = request.collective is Collective.ALL_TO_ALL
    values, idents = [], []
    for d in data_of(placement, request, count):
        got = d.expected()
        if got is None:
            continue
        start = d.group.position * d.chunk if request.collective is Collective.REDUCE_SCATTER or a2a else 0
        values.append(got)
        idents.append(d.group.index * count + start + (np.arange(got.size) % d.chunk if a2a else np.arange(got.size)))
        if a2a:  # same destination index, one place per source: the whole values differ
            by_place = got.reshape(d.group.size, d.chunk)
            assert all(len(set(by_place[:, e].tolist())) == d.group.size for e in range(d.chunk))
    values, idents = index_field(np.concatenate(values), placement, count), np.concatenate(idents)
    for key, other in ((values, idents), (idents, values)):
        order = np.argsort(key, kind="stable")
        k, o = key[order], other[order]
        same = k[1:] == k[:-1]
        assert np.array_equal(o[1:][same], o[:-1][same])


@given(runs(collectives=(Collective.ALL_REDUCE,)), st.data())
def test_a_dropped_or_doubled_contribution_changes_every_element(run, data):
    placement, request, count = run
    everyone = data_of(placement, request, count)
    d = some_rank(data, everyone)
    some = data.draw(st.sets(st.sampled_from(d.group.members), min_size=1))
    part = wrapping_sum([everyone[r].input() for r in some])
    expected = index_field(d.expected(), placement, count)
    assert np.all(index_field(d.expected() - part, placement, count) != expected)
    assert np.all(index_field(d.expected() + part, placement, count) != expected)


@given(runs(collectives=(Collective.ALL_REDUCE,)), st.data())
def test_a_partial_sum_left_in_place_changes_every_element(run, data):
    """What a correct program holds between its steps (a sum over a smaller group) is never the result."""
    placement, request, count = run
    cells = request.reduced_cells(placement)
    assume(len(cells) >= 2)
    everyone = data_of(placement, request, count)
    rank = data.draw(st.integers(0, placement.num_devices - 1))
    for n in range(1, len(cells)):
        for slice_ in itertools.combinations(cells, n):
            partial = wrapping_sum([everyone[m].input() for m in placement.group(rank, slice_)])
            assert np.all(index_field(partial, placement, count) != index_field(everyone[rank].expected(), placement, count))


@given(runs(collectives=(Collective.ALL_REDUCE,)), st.data())
def test_a_fault_acting_alike_on_two_elements_that_moves_or_miscounts_changes_one(run, data):
    """n inputs from any ranks at shifted indices, the same at two positions: caught unless n = G and the shifts cancel."""
    placement, request, count = run
    everyone = data_of(placement, request, count)
    d = some_rank(data, everyone)
    size = d.group.size
    assume(count >= 2)
    i, k = data.draw(st.lists(st.integers(0, count - 1), min_size=2, max_size=2, unique=True))
    n = data.draw(st.integers(1, (1 << SPARE_BITS) * size))
    ranks = data.draw(st.lists(st.integers(0, placement.num_devices - 1), min_size=n, max_size=n))
    low, high = -min(i, k), count - 1 - max(i, k)
    shifts = data.draw(st.lists(st.integers(low, high), min_size=n, max_size=n))
    # global index shift of each contribution: its message index shift plus the distance between the groups
    moved = sum(s + (everyone[r].group.index - d.group.index) * count for r, s in zip(ranks, shifts))
    assume(n != size or moved != 0)
    faulty = [index_field(wrapping_sum([everyone[r].input()[[p + s]] for r, s in zip(ranks, shifts)]), placement, count)[0] for p in (i, k)]
    expected = index_field(d.expected(), placement, count)
    assert faulty[0] != expected[i] or faulty[1] != expected[k]


@given(runs(collectives=(Collective.ALL_REDUCE,)), st.data())
def test_other_ranks_in_the_right_number_at_the_right_index_change_the_rank_field(run, data):
    """The one case the index field cannot see; the pseudo-random rank tags make a collision unlikely (see docs)."""
    placement, request, count = run
    everyone = data_of(placement, request, count)
    d = some_rank(data, everyone)
    members = d.group.members
    chosen = data.draw(st.lists(st.sampled_from(members), min_size=len(members), max_size=len(members)))
    assume(sorted(chosen) != sorted(members))
    assert np.all(wrapping_sum([everyone[r].input() for r in chosen]) != d.expected())


def test_known_values():
    # 4 ranks, one group: x(r, e) = (e + 1) + 2**B t(r), B = bit length of 16 * 4 * count
    pl = placement_of([("node", 2), ("core", 2)], [("data", 4)], [[2, 2]])
    request = request_of(pl, ["data"], Collective.ALL_REDUCE)
    group = reduction_group(pl, request, 2)
    assert index_bits(4, 8) == (16 * 4 * 8).bit_length() == 10
    tag = lambda r: (rank_tag(r) << 10) % 2**64  # noqa: E731
    tags = sum(rank_tag(r) for r in range(4)) << 10
    assert tagged_data(Collective.ALL_REDUCE, group, 8, 4).input().tolist() == [(e + 1 + tag(2)) % 2**64 for e in range(8)]
    assert tagged_data(Collective.ALL_REDUCE, group, 8, 4).expected().tolist() == [(4 * (e + 1) + tags) % 2**64 for e in range(8)]
    assert tagged_data(Collective.REDUCE_SCATTER, group, 8, 4).expected().tolist() == [(4 * (e + 1) + tags) % 2**64 for e in (4, 5)]
    assert tagged_data(Collective.ALL_GATHER, group, 8, 4).input().tolist() == [(e + 1 + tag(2)) % 2**64 for e in (4, 5)]
    assert tagged_data(Collective.BROADCAST, group, 8, 4).expected().tolist() == [(e + 1 + tag(0)) % 2**64 for e in range(8)]
    assert tagged_data(Collective.REDUCE, group, 8, 4).expected() is None  # rank 2 is not the root
    assert rank_tag(0) == 0xE220A8397B1DCDAF  # splitmix64's first output for seed 0


def test_the_global_index_tells_groups_apart():
    request = request_of(PL, ["model"], Collective.BROADCAST)  # 4 groups of 2
    first = tagged_data(Collective.BROADCAST, reduction_group(PL, request, 0), 8, 8)
    other = next(r for r in range(8) if reduction_group(PL, request, r).index == 3)
    last = tagged_data(Collective.BROADCAST, reduction_group(PL, request, other), 8, 8)
    low = (1 << index_bits(8, 8)) - 1
    assert [int(v) & low for v in first.expected()] == list(range(1, 9))
    assert [int(v) & low for v in last.expected()] == list(range(25, 33))


def test_the_rank_field_keeps_its_bits_or_the_size_is_refused():
    assert 64 - index_bits(4096, 2**30) >= MIN_RANK_BITS  # 4 GiB float32 messages on 4,096 devices
    assert 64 - index_bits(65536, 2**28 - 1) == MIN_RANK_BITS
    with pytest.raises(ValueError, match=r"too large for the exact check; use at most 268435455 elements"):
        index_bits(65536, 2**28)


def test_timed_data_is_ones_and_its_output_the_count_of_summed_inputs():
    request = request_of(PL, ["data"], Collective.ALL_GATHER)
    group = reduction_group(PL, request, 3)
    assert timed_input(Collective.ALL_GATHER, group, 16).tolist() == [1.0] * 4
    assert timed_input(Collective.ALL_REDUCE, group, 16).dtype == np.float32
    assert timed_expected(Collective.ALL_REDUCE, group) == 4.0
    assert timed_expected(Collective.ALL_GATHER, group) == 1.0
    assert timed_expected(Collective.REDUCE, reduction_group(PL, request, 0)) == 4.0
    assert timed_expected(Collective.REDUCE, group) is None  # rank 3 is not its group's root


def test_element_count_rounds_down_to_whole_chunks():
    assert element_count(4096, 8) == 1024
    assert element_count(100, 8) == 24
    with pytest.raises(ValueError, match="^16 bytes is less than one float32 per chunk for 8 chunks$"):
        element_count(16, 8)


def test_element_count_rounds_down_to_whole_pieces_of_every_chunk():
    assert element_count(1000, 8, 4) == 224  # 250 elements, 7 per piece of a chunk
    assert element_count(4096, 8, 4) == 1024
    assert element_count(128, 8, 4) == 32
    with pytest.raises(ValueError, match="^64 bytes is less than one float32 per piece for 8 chunks in 4 pieces$"):
        element_count(64, 8, 4)


@given(runs(collectives=(Collective.SEND_RECV,)))
def test_a_shift_from_the_wrong_neighbour_or_to_the_wrong_place_changes_every_element(run):
    """send_recv: rank r must hold its predecessor's input on the axis. Another member's input differs in every
    element (the rank field), the right input moved by any offset in every element's index field."""
    placement, request, count = run
    everyone = data_of(placement, request, count)
    inputs = [d.input() for d in everyone]
    for d in everyone:
        g = d.group
        want = d.expected()
        assert np.array_equal(want, inputs[g.members[g.position - 1]])
        for m in g.members:
            if m != g.members[g.position - 1]:
                assert np.all(inputs[m] != want)
        for offset in range(1, count):
            assert np.all(index_field(np.roll(want, offset), placement, count) != index_field(want, placement, count))
