"""scripts.layer_waits: a traced step's layer runs split at their group's arrival.

On hand-made traces the split is exact and a late member's delay lands on the
others' waiting; on a real 8-rank step (mpiexec) every run splits into parts
that add up, the last member to enter waits for no one, and every rank made
the plan's number of runs.
"""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scripts.layer_waits import TraceError, groups, layer_waits, load_trace, main, split_step

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
    # group {0, 1}: rank 1 enters 3 ms late, both leave at 5 ms; group {2, 3} enter together, leave 1 ms later;
    # rank 3 waits on a pipeline receive over [3.5, 4.5] ms, the middle of group {0, 1}'s time after arrival
    runs = [[[(0.000, 0.005)]], [[(0.003, 0.005)]], [[(0.010, 0.011)]], [[(0.010, 0.011)]]]
    trace = _trace(runs, COORDS)
    trace["ranks"][3]["steps"][0]["events"].append({"kind": "recv", "pass": "F", "microbatch": 0, "start": 0.0035, "end": 0.0045})
    steps = [r["steps"][0] for r in trace["ranks"]]
    split = split_step(steps, groups([list(c) for c in COORDS], [1]), 0)
    assert [(s.runs, round(s.waiting_s, 9), round(s.after_arrival_s, 9), s.in_mpi_each) for s in split] == [
        (1, 0.003, 0.002, (3,)), (1, 0.0, 0.002, (3,)), (1, 0.0, 0.001, (2,)), (1, 0.0, 0.001, (2,))]
    (row,) = layer_waits(trace)
    assert (row.request, row.variant, row.rounds, row.runs_per_rank) == ("tp", "best", 1, 1)
    assert row.in_call_s == pytest.approx((0.005 + 0.002 + 0.001 + 0.001) / 4)
    assert row.waiting_s == pytest.approx(0.003 / 4) and row.after_arrival_s == pytest.approx(0.006 / 4)
    assert row.waiting_share == pytest.approx(0.003 / 0.009)
    assert (row.ranks_in_mpi, row.ranks) == (2.5, 4)
    trace["poll_sleep_us"] = 500  # receive waits asleep: rank 3's no longer counts
    assert [s.in_mpi_each for s in split_step(steps, groups([list(c) for c in COORDS], [1]), 0, receives_poll=False)] \
        == [(2,), (2,), (2,), (2,)]
    assert layer_waits(trace)[0].ranks_in_mpi == 2


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


WAITS = Path(__file__).resolve().parent.parent / "docs" / "measurements" / "step" / "waits"
TRACES = ["dp4-pp2-tp2-t128k-0", "dp4-pp2-tp2-t128k-5", "dp4-pp2-tp2-t128k-3", "dp2-pp4-tp2-t128k-6",
          "dp2-pp2-tp4-t128k-0", "dp2-pp2-tp4-t128k-3", "dp2-pp2-tp4-t128k-4"]  # step.md's order


def test_step_md_split_tables_are_rebuilt_from_the_committed_traces(capsys):
    """step.md's "Waiting or calling": the split table is what the command makes of the committed traces, and the
    price table sets each run's time after arrival beside the recorded plan's price of the program that ran; every
    run was exact and from a clean checkout."""
    doc = (WAITS.parent.parent / "step.md").read_text()
    assert main([str(WAITS / f"{name}.trace.json.gz") for name in TRACES]) == 0
    assert capsys.readouterr().out.strip() in doc
    for name in TRACES:
        job, index = name.rsplit("-", 1)
        step = json.loads((WAITS / f"{name}.step.json").read_text())
        assert step["wrong"] == {"check": 0, "activations": 0, "outputs": 0} and not step["run"]["dirty"]
        entry = json.loads((WAITS / f"{job}.plan.json").read_text())["placements"][int(index)]
        assert step["description"] == entry["description"]
        (priced,) = [r for r in entry["requests"] if r["name"] == "tp_allreduce"]
        (ran,) = [r for r in step["requests"] if r["name"] == "tp_allreduce"]
        rows = {r.variant: r for r in layer_waits(load_trace(WAITS / f"{name}.trace.json.gz"))}
        best, default = priced["programs"][0]["cost_s"], priced["default"]["cost_s"]
        b, d = rows["best"].after_arrival_run_s, rows["default"].after_arrival_run_s
        row = (f"| {name} | {step['description'].split('tensor=')[1]} | `{ran['best']}` | {best * 1e3:.2f} | "
               f"{b * 1e3:.2f} | {b / best:.1f}x | {default * 1e3:.2f} | {d * 1e3:.2f} | {d / default:.1f}x |")
        assert row in doc, row


def test_the_recorded_plans_are_the_fourth_campaigns():
    raw = json.loads((WAITS.parent / "step16b.raw.json").read_text())
    for job in raw["testbeds"][0]["jobs"]:
        assert json.loads((WAITS / f"{job['job']}.plan.json").read_text()) == job["plan"]


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 4), st.data())
def test_every_run_splits_into_parts_that_add_up_and_the_last_to_enter_waits_for_no_one(groups_n, size, runs, data):
    """Random traces of one step: `groups_n` groups of `size` members, `runs` runs each, every run entered at random
    and left after its group's last member entered."""
    coords = [[g, m] for g in range(groups_n) for m in range(size)]
    times = st.floats(0.0, 1.0, allow_nan=False)
    steps = []
    starts = [[data.draw(times) for _ in range(runs)] for _ in coords]
    for rank, (g, _) in enumerate(coords):
        members = [r for r, c in enumerate(coords) if c[0] == g]
        events = []
        for k in range(runs):
            arrival = max(starts[m][k] for m in members)
            events.append({"kind": "layer", "request": 0, "start": starts[rank][k],
                           "end": arrival + data.draw(st.floats(0.0, 1.0, allow_nan=False))})
        steps.append({"variant": "best", "round": 0, "events": events})
    split = split_step(steps, groups(coords, [1]), 0)
    for rank, s in enumerate(split):
        total = sum(e["end"] - e["start"] for e in steps[rank]["events"])
        assert s.runs == runs and s.in_call_s == pytest.approx(total, abs=1e-9)
        assert min(s.waiting_each_s) >= 0 and min(s.after_arrival_each_s) >= 0
        assert all(1 <= n <= len(coords) for n in s.in_mpi_each)
    for g in range(groups_n):
        members = [r for r, c in enumerate(coords) if c[0] == g]
        assert all(min(split[m].waiting_each_s[k] for m in members) == 0 for k in range(runs))


def test_step_md_intervention_tables_are_rebuilt_from_the_committed_traces(capsys):
    """step.md's "An intervention": the split of both waits' traces (best variant), and per placement the ranks
    polling, the run's time after arrival and the step, each way; every run exact, clean, and waiting as named."""
    poll = WAITS / "poll"
    doc = (WAITS.parent.parent / "step.md").read_text()
    traces = [poll / f"{name}.{wait}.trace.json.gz" for name in TRACES for wait in ("mpi", "sleep")]
    assert main([*map(str, traces), "--variant", "best"]) == 0
    assert capsys.readouterr().out.strip() in doc
    for name in TRACES:
        rows, steps = {}, {}
        for wait, sleep_us in (("mpi", 0), ("sleep", 500)):
            trace = load_trace(poll / f"{name}.{wait}.trace.json.gz")
            assert trace["poll_sleep_us"] == sleep_us
            (rows[wait],) = [r for r in layer_waits(trace) if r.variant == "best"]
            steps[wait] = json.loads((poll / f"{name}.{wait}.step.json").read_text())
            assert steps[wait]["timing"]["poll_sleep_us"] == sleep_us and not steps[wait]["run"]["dirty"]
            assert steps[wait]["wrong"] == {"check": 0, "activations": 0, "outputs": 0}

        def step(d):
            b = d["variants"]["best"]
            return f"{b['step_s'] * 1e3:.0f} [{b['step_ci_s'][0] * 1e3:.0f}, {b['step_ci_s'][1] * 1e3:.0f}]"
        m, s = rows["mpi"], rows["sleep"]
        row = (f"| {name} | {steps['mpi']['description'].split('tensor=')[1]} | {m.ranks_in_mpi:g} -> "
               f"{s.ranks_in_mpi:g} | {m.after_arrival_run_s * 1e3:.2f} -> {s.after_arrival_run_s * 1e3:.2f} "
               f"({s.after_arrival_run_s / m.after_arrival_run_s:.2f}x) | {step(steps['mpi'])} | {step(steps['sleep'])} |")
        assert row in doc, row
