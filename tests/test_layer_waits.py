"""scripts.layer_waits: a traced step's layer runs split at their group's arrival.

On hand-made traces the split is exact and a late member's delay lands on the
others' waiting; on a real 8-rank step (mpiexec) every run splits into parts
that add up, the last member to enter waits for no one, and every rank made
the plan's number of runs.
"""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scripts.layer_waits import TraceError, groups, layer_waits, main, split_step

CLOCK = "boot:one"


def _trace(runs_by_rank, coords, axes=(1,), rounds=(0,), clock=CLOCK):
    """A trace of one layer request: per rank, per step, its runs as (start, end) pairs."""
    ranks = []
    for rank, (c, steps) in enumerate(zip(coords, runs_by_rank)):
        ranks.append({"rank": rank, "clock": clock, "coords": list(c), "stage": 0, "steps": [
            {"variant": "best", "round": r, "events": [{"kind": "layer", "request": 0, "start": a, "end": b} for a, b in runs]}
            for r, runs in zip(rounds, steps)]})
    return {"axes": ["data", "tensor"], "pipeline_axis": None,
            "layers": [{"request": 0, "name": "tp", "axes": list(axes), "message_bytes": 8}], "ranks": ranks}


COORDS = [(0, 0), (0, 1), (1, 0), (1, 1)]  # data x tensor: tensor groups {0, 1} and {2, 3}


def test_a_late_member_shows_as_its_partners_waiting():
    # group {0, 1}: rank 1 enters 3 ms late, both leave at 5 ms; group {2, 3} enter together, leave 1 ms later
    runs = [[[(0.000, 0.005)]], [[(0.003, 0.005)]], [[(0.010, 0.011)]], [[(0.010, 0.011)]]]
    steps = [r["steps"][0] for r in _trace(runs, COORDS)["ranks"]]
    split = split_step(steps, groups([list(c) for c in COORDS], [1]), 0)
    assert [(s.runs, round(s.waiting_s, 9), round(s.after_arrival_s, 9)) for s in split] == [
        (1, 0.003, 0.002), (1, 0.0, 0.002), (1, 0.0, 0.001), (1, 0.0, 0.001)]
    (row,) = layer_waits(_trace(runs, COORDS))
    assert (row.request, row.variant, row.rounds, row.runs_per_rank) == ("tp", "best", 1, 1)
    assert row.in_call_s == pytest.approx((0.005 + 0.002 + 0.001 + 0.001) / 4)
    assert row.waiting_s == pytest.approx(0.003 / 4) and row.after_arrival_s == pytest.approx(0.006 / 4)
    assert row.waiting_share == pytest.approx(0.003 / 0.009)


def test_the_group_is_the_request_axes_not_the_whole_job():
    # over the data axis instead, rank 1 and rank 3 form a group: rank 1 entered at 3 ms, rank 3 at 10 ms
    runs = [[[(0.000, 0.011)]], [[(0.003, 0.011)]], [[(0.010, 0.011)]], [[(0.010, 0.011)]]]
    (row,) = layer_waits(_trace(runs, COORDS, axes=(0,)))
    assert row.waiting_s == pytest.approx((0.010 + 0.007) / 4)


def test_warmups_are_left_out_and_rounds_are_medians():
    one = [(0.0, 0.001)]
    runs = [[[(0.0, 1.0)], one, one, one] for _ in COORDS]  # a slow warm-up, then three rounds of 1 ms
    (row,) = layer_waits(_trace(runs, COORDS, rounds=(-1, 0, 1, 2)))
    assert row.rounds == 3 and row.in_call_s == pytest.approx(0.001)


def test_traces_that_cannot_be_split_fail_in_one_line(tmp_path, capsys):
    runs = [[[(0.0, 0.001)]] for _ in COORDS]
    two_clocks = _trace(runs, COORDS)
    two_clocks["ranks"][3]["clock"] = "boot:other"
    early_exit = _trace([[[(0.0, 0.001)]], [[(0.002, 0.003)]], [[(0.0, 0.001)]], [[(0.0, 0.001)]]], COORDS)
    uneven = _trace([[[(0.0, 0.001), (0.002, 0.003)]], [[(0.0, 0.001)]], [[(0.0, 0.001)]], [[(0.0, 0.001)]]], COORDS)
    no_layers = {**_trace(runs, COORDS), "layers": []}
    for name, doc, words in [("clocks", two_clocks, "2 clocks"), ("early", early_exit, "clocks do not compare"),
                             ("uneven", uneven, "not one step's trace"), ("none", no_layers, "no layer requests")]:
        with pytest.raises(TraceError, match=words):
            layer_waits(doc)
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc))
        assert main([str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=3, max_size=3).flatmap(
    lambda dims: st.tuples(st.just(dims), st.sets(st.integers(0, 2)))))
def test_groups_partition_the_ranks_by_the_other_coordinates(case):
    dims, axes = case
    sizes = [d + 1 for d in dims]
    coords = [[r // (sizes[1] * sizes[2]), r // sizes[2] % sizes[1], r % sizes[2]] for r in range(sizes[0] * sizes[1] * sizes[2])]
    group = groups(coords, sorted(axes))
    for rank, members in enumerate(group):
        assert rank in members and all(group[m] == members for m in members)
        expected = [o for o, c in enumerate(coords) if all(c[a] == coords[rank][a] for a in range(3) if a not in axes)]
        assert list(members) == expected
