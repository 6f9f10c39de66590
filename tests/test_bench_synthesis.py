"""scripts.bench_synthesis: bad arguments get one line and exit 2 before any work (the benchmark itself runs for
minutes; its recorded run is docs/measurements/bench_synthesis.txt). scripts.bench_guard: its comparison, baseline
file and command line, with the timed runs faked (nothing here times anything real)."""

import json
import math
import os

import pytest

from scripts import bench_guard, bench_synthesis, tables


@pytest.mark.parametrize("argv,line", [
    (["--repeats", "0"], "error: --repeats, --sample and --placement-repeats must be at least 1, the limits positive"),
    (["--brute-limit", "0"], "error: --repeats, --sample and --placement-repeats must be at least 1, the limits positive"),
    (["--sample", "many"], "error: argument --sample: invalid int value: 'many'"),
])
def test_bad_arguments_get_one_line_and_exit_2(argv, line, capsys):
    assert bench_synthesis.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [line] and captured.out == ""


# ---- scripts.bench_guard: the regression guard's logic, with the timed runs faked ----------------------------
DP, DPTP = bench_guard.SWEEPS  # the two sweeps' names


def write_base(path, ratios, cores=None):
    """A baseline at `path` with these ratios, as --write-baseline writes it."""
    measured = [bench_guard.Measured(name, 3, (r,), (1.0,)) for name, r in ratios.items()]
    bench_guard.write_baseline(path, measured, {"commit": "abc1234", "date": "2024-01-01 00:00 UTC", "cores": cores or 2,
                                                "load_average": 0.5})


@pytest.fixture
def fake_runs(monkeypatch):
    """Fake the timed runs: the reference takes 2 s; a sweep takes walls[name][round] s and writes a result JSON
    (complete and proved unless told otherwise). Returns the settings and the log of runs, in order."""
    state = {"walls": {DP: [1.0, 1.1, 0.9], DPTP: [50.0, 52.0, 48.0]}, "optimal": True, "code": 0, "log": []}

    def fake_reference(args, timeout, mpi_ranks=0, label=None):
        assert args[0] == "-c" and label == "the reference workload"
        state["log"].append("reference")
        return 2.0, 0, 50

    def fake_cli(args, timeout, mpi_ranks=0):
        name = next(n for n, s in bench_guard.SWEEPS.items() if json.loads(open(args[0]).read()) == s)
        assert args[1:1 + len(bench_guard.SWEEP_FLAGS)] == bench_guard.SWEEP_FLAGS
        rounds = state["log"].count(name) % len(state["walls"][name])  # main() may run more than once
        state["log"].append(name)
        out = args[args.index("--out") + 1]
        with open(out, "w") as f:
            json.dump({"complete": state["code"] == 0, "placement_count": 3,
                       "placements": [{"optimal": True}, {"optimal": state["optimal"]}, {"optimal": True}]}, f)
        return state["walls"][name][rounds], state["code"], 100

    monkeypatch.setattr(bench_guard, "run_python", fake_reference)
    monkeypatch.setattr(bench_guard, "run_cli", fake_cli)
    return state


@pytest.mark.parametrize("ratio,base,margin,expected", [
    (1.26, 1.0, 0.25, "slower"), (1.25, 1.0, 0.25, "ok"), (1.0, 1.0, 0.0, "ok"), (1.01, 1.0, 0.0, "slower"),
    (0.81, 1.0, 0.25, "ok"), (0.79, 1.0, 0.25, "faster"), (16.0, 2.0, 0.5, "slower"),
])
def test_verdict_fails_only_past_the_margin(ratio, base, margin, expected):
    assert bench_guard.verdict(ratio, base, margin) == expected


def test_measured_ratio_is_the_ratio_of_medians():
    m = bench_guard.Measured("x", 1, (10.0, 30.0, 12.0), (2.0, 3.0, 1.0))
    assert m.ratio == 6.0  # 12 / 2, not the median of the round ratios (5, 10, 12)
    assert m.round_ratios == (5.0, 10.0, 12.0)


def test_baseline_written_then_read(tmp_path):
    path = tmp_path / "base.json"
    write_base(path, {DP: 0.5, DPTP: 25.0})
    entries = bench_guard.read_baseline(path)
    assert {n: e["ratio"] for n, e in entries.items()} == {DP: 0.5, DPTP: 25.0}
    assert entries[DP]["commit"] == "abc1234" and entries[DP]["cores"] == 2 and entries[DPTP]["placements"] == 3


@pytest.mark.parametrize("content,words", [
    (None, "no baseline"),
    ("{not json", "unreadable"),
    ('{"other": {}}', "unreadable"),
    (json.dumps({"sweeps": {DP: {"ratio": 0.5}}}), f"no positive ratio for sweep '{DPTP}'"),
    (json.dumps({"sweeps": {DP: {"ratio": 0.5}, DPTP: {"ratio": 0}}}), f"no positive ratio for sweep '{DPTP}'"),
    (json.dumps({"sweeps": {DP: {"ratio": "0.5"}, DPTP: {"ratio": 1}}}), f"no positive ratio for sweep '{DP}'"),
])
def test_bad_or_missing_baseline_is_a_usage_error_before_any_run(tmp_path, fake_runs, capsys, content, words):
    path = tmp_path / "base.json"
    if content is not None:
        path.write_text(content)
    assert bench_guard.main(["--baseline", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and words in err[0]
    assert fake_runs["log"] == []


@pytest.mark.parametrize("argv,line", [
    (["--repeats", "0"], "error: --repeats must be at least 1, --margin at least 0 and --timeout positive"),
    (["--margin", "-0.1"], "error: --repeats must be at least 1, --margin at least 0 and --timeout positive"),
    (["--margin", "nan"], "error: --repeats must be at least 1, --margin at least 0 and --timeout positive"),
    (["--timeout", "0"], "error: --repeats must be at least 1, --margin at least 0 and --timeout positive"),
    (["--margin", "wide"], "error: argument --margin: invalid float value: 'wide'"),
    (["--guard"], "error: unrecognized arguments: --guard"),
])
def test_guard_bad_arguments_get_one_line_and_exit_2(argv, line, fake_runs, capsys):
    assert bench_guard.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [line] and captured.out == "" and fake_runs["log"] == []


def test_runs_alternate_reference_and_sweep(tmp_path, fake_runs):
    write_base(tmp_path / "base.json", {DP: 0.5, DPTP: 25.0})
    assert bench_guard.main(["--baseline", str(tmp_path / "base.json"), "--repeats", "3"]) == 0
    assert fake_runs["log"] == ["reference", DP, "reference", DPTP] * 3


def test_within_the_margin_passes(tmp_path, fake_runs, capsys):
    write_base(tmp_path / "base.json", {DP: 0.45, DPTP: 21.0})  # this run: 0.5 and 25.0, 1.11x and 1.19x
    assert bench_guard.main(["--baseline", str(tmp_path / "base.json")]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    rows = {r[0]: r for r in tables.printed_rows(captured.out)}
    assert rows[DP][1:] == ["3", "1.00 s", "2.00 s", "0.500", "0.450-0.550", "0.450", "ok"]
    assert rows[DPTP][4:] == ["25.000", "24.000-26.000", "21.000", "ok"]


def test_past_the_margin_exits_1_naming_the_sweep(tmp_path, fake_runs, capsys):
    write_base(tmp_path / "base.json", {DP: 0.45, DPTP: 3.0})  # dp+tp: 25 / 3 = 8.3x the baseline
    assert bench_guard.main(["--baseline", str(tmp_path / "base.json")]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"guard failed: {DPTP}: ratio 25.000 > baseline 3.000 x (1 + 0.25) = 3.750 (8.33x the baseline)"]
    assert {r[0]: r[-1] for r in tables.printed_rows(captured.out)} == {DP: "ok", DPTP: "slower"}
    # a wider margin lets the same run pass; a narrower one fails dp too
    assert bench_guard.main(["--baseline", str(tmp_path / "base.json"), "--margin", "8"]) == 0
    assert bench_guard.main(["--baseline", str(tmp_path / "base.json"), "--margin", "0.1"]) == 1
    assert [line.split(":")[1].strip() for line in capsys.readouterr().err.splitlines()] == [DP, DPTP]


def test_rounds_spread_wider_than_the_margin_are_flagged(tmp_path, fake_runs, capsys):
    write_base(tmp_path / "base.json", {DP: 0.5, DPTP: 25.0})
    assert bench_guard.main(["--baseline", str(tmp_path / "base.json")]) == 0
    assert "warning" not in capsys.readouterr().out  # round ratios within 0.45-0.55 and 24-26: under 1.25x apart
    fake_runs["walls"][DP] = [1.0, 1.4, 0.9]  # 0.45 to 0.7: 1.56x apart
    assert bench_guard.main(["--baseline", str(tmp_path / "base.json")]) == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning")]
    assert len(warnings) == 1 and f"round ratios of {DP} spread" in warnings[0]


def test_faster_passes_and_says_so(tmp_path, fake_runs, capsys):
    write_base(tmp_path / "base.json", {DP: 0.5, DPTP: 100.0})
    assert bench_guard.main(["--baseline", str(tmp_path / "base.json")]) == 0
    assert {r[0]: r[-1] for r in tables.printed_rows(capsys.readouterr().out)} == {DP: "ok", DPTP: "faster"}


def test_write_baseline_records_this_run(tmp_path, fake_runs, capsys):
    path = tmp_path / "base.json"
    path.write_text("{broken")  # an unreadable baseline is rewritten, not an error
    assert bench_guard.main(["--baseline", str(path), "--write-baseline"]) == 0
    entries = bench_guard.read_baseline(path)
    assert entries[DP]["ratio"] == 0.5 and entries[DPTP]["ratio"] == 25.0
    assert entries[DPTP]["round_ratios"] == [25.0, 26.0, 24.0] and entries[DPTP]["sweep_s"] == 50.0
    assert entries[DP]["cores"] == os.cpu_count() and entries[DP]["commit"] and entries[DP]["date"]
    assert {r[0]: r[-1] for r in tables.printed_rows(capsys.readouterr().out)} == {DP: "new baseline", DPTP: "new baseline"}


@pytest.mark.parametrize("setting,message", [
    ({"optimal": False}, f"check failed: {DP}: not every placement proved"),
    ({"code": 4}, f"check failed: {DP}: cut by --timeout 600 s"),
])
def test_an_unproved_or_cut_sweep_fails_and_writes_no_baseline(tmp_path, fake_runs, capsys, setting, message):
    fake_runs.update(setting)
    path = tmp_path / "base.json"
    with pytest.raises(SystemExit) as exit_:
        bench_guard.main(["--baseline", str(path), "--write-baseline"])
    assert exit_.value.code == 1 and capsys.readouterr().err.splitlines() == [message] and not path.exists()


def test_reference_work_is_the_same_cost_both_ways():
    """The Python search and the numpy cost-to-go agree (the reference's own check, in its subprocess), and the
    subprocess's code is that function with the fixed size."""
    searched, swept = bench_guard.reference_work(8, 8)
    assert math.isclose(searched, swept, rel_tol=1e-9) and searched > 8
    assert bench_guard.reference_work(8, 3)[1] == math.inf  # fewer rounds than cells: not there yet
    compile(bench_guard.REFERENCE_CODE, "<reference>", "exec")
    assert f"reference_work{bench_guard.REFERENCE_SIZE}" in bench_guard.REFERENCE_CODE
