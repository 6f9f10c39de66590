"""The DDP hook's guard (solver/exports/guard.py) on fakes: the trial order, the decision every rank agrees on from
the slowest rank's times, a slow rank, and a tie (tests/test_ddp_torch.py runs it in real gloo processes)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2synth.solver.exports.guard import Guard, Reduction, trial_order

PLAN, DEFAULT = Reduction.PLAN, Reduction.DEFAULT


def run_ranks(times: list[dict[Reduction, list[float]]], trials: int, nbytes: int = 4096) -> list[Guard]:
    """Every rank's guard after `2 * trials` buckets of one size; rank r's trial k of a reduction took
    ``times[r][reduction][k]``. The fake agreement checks that each rank passes its own times (plan's, then the
    default's) and returns the elementwise maximum over the ranks, as the hook's all-reduce does."""
    local = [t[PLAN][:trials] + t[DEFAULT][:trials] for t in times]
    slowest = [max(column) for column in zip(*local)]

    def agree(rank: int):
        def fake_all_reduce(mine: list[float]) -> list[float]:
            assert mine == local[rank]
            return slowest
        return fake_all_reduce

    guards = [Guard(trials) for _ in times]
    seen = {PLAN: 0, DEFAULT: 0}
    for bucket in range(2 * trials):
        ran = {g.next(nbytes) for g in guards}
        assert len(ran) == 1  # every rank runs the same reduction for the same bucket
        ran = ran.pop()
        k = seen[ran]
        seen[ran] += 1
        decided = {g.record(nbytes, ran, t[ran][k], agree(r)) for r, (g, t) in enumerate(zip(guards, times))}
        assert len(decided) == 1 and (decided.pop() is None) == (bucket < 2 * trials - 1)
    return guards


def test_trials_alternate_and_each_pair_swaps_who_goes_first():
    assert [trial_order(t).value for t in range(8)] == ["plan", "default", "default", "plan"] * 2


def test_the_faster_is_kept_and_logged_with_the_slowest_ranks_times():
    times = [{PLAN: [1.0, 1.1, 0.9], DEFAULT: [2.0, 2.1, 1.9]}, {PLAN: [1.2, 1.0, 1.0], DEFAULT: [2.2, 2.0, 2.0]}]
    guards = run_ranks(times, 3)
    assert [g.next(4096) for g in guards] == [PLAN, PLAN]
    assert guards[0].decisions() == guards[1].decisions() == {4096: {
        "kept": "plan", "trials": 3, "plan_s": [1.2, 1.1, 1.0], "default_s": [2.2, 2.1, 2.0],
        "plan_median_s": 1.1, "default_median_s": 2.1}}


def test_one_slow_rank_decides_for_all():
    # rank 2 runs the plan's program 3x slower than the others; on the others it looks faster
    fast = {PLAN: [1.0, 1.0, 1.0], DEFAULT: [1.5, 1.5, 1.5]}
    slow = {PLAN: [3.0, 3.0, 3.0], DEFAULT: [1.6, 1.6, 1.6]}
    guards = run_ranks([fast, fast, slow, fast], 3)
    assert {g.next(4096) for g in guards} == {DEFAULT}
    assert {g.decisions()[4096]["plan_median_s"] for g in guards} == {3.0}


def test_a_tie_keeps_the_default_and_sizes_are_decided_apart():
    guards = run_ranks([{PLAN: [1.0], DEFAULT: [1.0]}], 1, nbytes=8)
    assert guards[0].next(8) is DEFAULT
    assert guards[0].next(16) is PLAN and guards[0].decisions()[16] == {"kept": None, "trials": 1}


def test_zero_trials_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        Guard(0)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.lists(st.lists(st.floats(0.001, 10.0), min_size=8, max_size=8), min_size=1, max_size=6))
def test_every_rank_takes_the_decision_of_the_slowest_ranks_medians(trials, rows):
    times = [{PLAN: r[:trials], DEFAULT: r[4:4 + trials]} for r in rows]
    guards = run_ranks(times, trials)
    worst = {red: [max(t[red][k] for t in times) for k in range(trials)] for red in (PLAN, DEFAULT)}
    import statistics
    expected = PLAN if statistics.median(worst[PLAN]) < statistics.median(worst[DEFAULT]) else DEFAULT
    assert {g.next(4096) for g in guards} == {expected}
