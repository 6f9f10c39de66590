"""scripts.accuracy.remeasure: the recorded programs of a combo become one plan; the comparison pairs them; bad
arguments get one line and exit 2 (the testbed runs themselves are in docs/measurements/remeasure-campaign-defaults.txt)."""

import json
import subprocess
from pathlib import Path

import pytest

from scripts.accuracy import remeasure

RAW = Path(__file__).resolve().parent.parent / "docs" / "accuracy" / "raw.json"


@pytest.fixture(scope="module")
def raw():
    return json.loads(RAW.read_text())


def test_the_plan_holds_exactly_the_recorded_programs_default_first(raw):
    plan, results, iters, label = remeasure.recorded(raw, "4x2-1gbit", 2, 4 << 20)
    body = plan["placements"][0]["requests"][0]
    assert results[0]["default"] and not any(r["default"] for r in results[1:])
    assert body["default"]["steps"] == results[0]["program"]["steps"]
    assert [(p["steps"], p["pipeline"]) for p in body["programs"]] == \
        [(r["program"]["steps"], r["program"].get("pipeline", 1)) for r in results[1:]]
    assert plan["workload"] == [{"name": "s4194304", "axes": ["data"], "collective": "all_reduce", "message_bytes": 4 << 20, "count": 1}]
    assert iters == raw["suite"]["iters"] and label == "data=[node 2, core 2] model=[node 2] all_reduce(data)"


def test_the_comparison_pairs_each_program_with_its_record(raw):
    plan, results, _, _ = remeasure.recorded(raw, "4x2-1gbit", 2, 4 << 20)
    tuned = json.loads(json.dumps(plan))
    body = tuned["placements"][0]["requests"][0]
    body["default"]["measured_s"] = results[0]["time_s"] / 2   # the default twice as fast now
    for p, r in zip(body["programs"], results[1:]):
        p["measured_s"] = r["time_s"]                          # the others as recorded
    old, new, ratios = remeasure.compare(results, tuned)
    assert (old, new) == (results[0]["time_s"], results[0]["time_s"] / 2)
    assert sorted(ratios) == [0.5] + [1.0] * (len(results) - 1)


@pytest.mark.parametrize("args, says", [(["--testbed", "nope", "--size", "4M", "--combo", "2"], "--testbed nope"),
                                        (["--testbed", "4x2-1gbit", "--size", "4M", "--combo", "999"], "--combo 999"),
                                        (["--testbed", "4x2-1gbit", "--size", "3M", "--combo", "2"], "--size"),
                                        (["--testbed", "4x2-1gbit", "--size", "four", "--combo", "2"], "bad size")])
def test_bad_arguments_get_one_line_and_exit_2(args, says, capsys, tmp_path):
    assert remeasure.main([str(RAW), *args, "--workdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and says in err[0]


def test_main_prints_one_table_row_per_combo_and_stops_at_a_failed_tuner_run(raw, monkeypatch, capsys, tmp_path):
    """runtime.tune stood in for: combo 2 measures every program at its record, combo 21 fails."""
    def tune(cmd, **kw):
        plan = json.loads(Path(cmd[cmd.index("runtime.tune") + 1]).read_text())
        if "plan-21" in cmd[cmd.index("runtime.tune") + 1]:
            return subprocess.CompletedProcess(cmd, 1, "", "no testbed")
        _, results, _, _ = remeasure.recorded(raw, "4x2-1gbit", 2, 4 << 20)
        body = plan["placements"][0]["requests"][0]
        body["default"]["measured_s"] = results[0]["time_s"]
        for p, r in zip(body["programs"], results[1:]):
            p["measured_s"] = r["time_s"]
        Path(cmd[cmd.index("--out") + 1]).write_text(json.dumps(plan))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(remeasure.subprocess, "run", tune)
    args = [str(RAW), "--testbed", "4x2-1gbit", "--size", "4M", "--combo", "2", "--combo", "21", "--workdir", str(tmp_path)]
    assert remeasure.main(args) == 1
    out, err = capsys.readouterr()
    [row] = [line.split("│")[1:-1] for line in out.splitlines() if line.startswith("│ 2 ")]
    assert [c.strip() for c in row[2:]] == ["4M", "236.2", "236.2", "31", "1.00", "1.00", "1.00"]
    assert err == "error: combo 21: runtime.tune exited 1: no testbed\n"


def test_a_bad_command_line_is_one_line_and_exit_2_in_both_accuracy_tools(capsys):
    from scripts.accuracy import cli

    assert remeasure.main([]) == 2
    assert capsys.readouterr().err == "error: the following arguments are required: raw, --testbed, --size, --combo\n"
    assert cli.main(["--from-raw", str(RAW)]) == 2
    assert capsys.readouterr().err == "error: the following arguments are required: --out\n"
