"""scripts/bench_step.py: the figures of the step campaign, computed from recorded measurements (no testbed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.bench_step import JOBS, cells, rows, summary

ROOT = Path(__file__).resolve().parent.parent


def _placement(index: int, predicted: float, measured: float, sum_s: float) -> dict:
    parts = {"compute_s": 0.1, "layer_comm_s": 0.01, "bubble_s": 0.02, "pipeline_comm_s": 0.0, "gradient_exposed_s": 0.0,
             "after_s": 0.0, "exposed_comm_s": 0.01}
    got = {"step_s": measured, "step_ci_s": [measured * 0.98, measured * 1.02], "rounds_s": [measured] * 3,
           "compute_s": 0.1, "layer_comm_s": 0.01, "pipeline_wait_s": 0.02, "gradient_exposed_s": 0.0, "after_s": 0.0}
    return {"index": index, "matrix": [[1]], "description": f"p{index}", "predicted": {**parts, "step_s": predicted},
            "sum_s": sum_s, "measured": got, "default": {**got, "step_s": measured * 1.1},
            "wrong": {"check": 0, "activations": 0, "outputs": 0}}


RAW = {"testbeds": [{"testbed": {"name": "tb"}, "jobs": [
    # job a: the model ranks p0 < p1 < p2, measured p1 < p0 < p2; the sum model puts p2 first
    {"job": "a", "placements": [_placement(0, 1.00, 1.10, 0.30), _placement(1, 1.20, 1.00, 0.20), _placement(2, 1.50, 1.60, 0.10)]},
    # job b: both models right; one placement failed
    {"job": "b", "placements": [_placement(0, 2.0, 2.0, 0.1), _placement(1, 3.0, 2.5, 0.2),
                                {"index": 2, "matrix": [[1]], "description": "p2", "predicted": {"step_s": 9.0},
                                 "sum_s": 1.0, "error": "runtime.step exit 1"}]},
]}]}


def test_summary_by_hand():
    s = summary(rows(RAW))["tb"]
    assert s["placements"] == 5 and s["failed"] == 1 and s["wrong_elements"] == 0
    # relative errors: |1-1.1|/1.1 = .0909, .2, .0625, 0, .2 -> median .0909
    assert s["median_rel_error"] == pytest.approx(0.1 / 1.1)
    # job a: predicted ranks 1 2 3, measured 2 1 3: rho = 1 - 6 * (1 + 1) / (3 * 8) = 0.5; job b: 1
    assert s["spearman_by_job"] == {"a": pytest.approx(0.5), "b": pytest.approx(1.0)}
    # the model's first in a is p0 (1.10) over the fastest p1 (1.00); the sum model's first is p2 (1.60)
    assert s["best_regret_by_job"] == {"a": pytest.approx(1.1), "b": pytest.approx(1.0)}
    assert s["best_regret"] == pytest.approx(1.1)
    assert s["sum_model_regret_by_job"] == {"a": pytest.approx(1.6), "b": pytest.approx(1.0)}
    # job a: step model p0<p1<p2, sum model p2<p1<p0: all 3 pairs differ; measured p1<p0<p2 sides with the step
    # model on (p0,p2) and (p1,p2), with the sum on (p0,p1)
    assert s["disagreements_by_job"] == {"a": {"pairs": 3, "step_model_right": 2}, "b": {"pairs": 0, "step_model_right": 0}}
    # over the testbed: predicted 1, 1.2, 1.5, 2, 3 and measured 1.1, 1, 1.6, 2, 2.5: one swapped pair of 5
    assert s["spearman"] == pytest.approx(1 - 6 * 2 / (5 * 24))


def test_table_rows_mark_failures_and_sum_ranks():
    table = cells(rows(RAW))
    assert table[2][-1] == "0" and table[0][-1] == "2"  # the sum model ranks job a's p2 first
    assert table[5][5].startswith("failed: runtime.step exit 1")


def test_from_raw_writes_the_summary(tmp_path):
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps(RAW))
    out = tmp_path / "summary.json"
    r = subprocess.run([sys.executable, "-m", "scripts.bench_step", "--from-raw", str(raw), "--summary", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["tb"]["best_regret"] == pytest.approx(1.1)


@pytest.mark.parametrize("argv, line", [
    ([], "error: give --out (to measure) or --from-raw"),
    (["--from-raw", "/nonexistent.json"], "error: cannot read raw measurements /nonexistent.json"),
    (["--out", "x.json", "--rounds", "2"], "error: --rounds must be at least 3"),
])
def test_bad_usage_is_one_line(argv, line):
    r = subprocess.run([sys.executable, "-m", "scripts.bench_step", *argv], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith(line) and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_jobs_are_valid_step_specs():
    from p2synth.hierarchies.model import Hierarchy
    from p2synth.solver.spec import build_problem, parse_spec
    from scripts.bench_step import spec_for

    h = Hierarchy.model_validate({"name": "t", "levels": [{"name": "node", "count": 4}, {"name": "core", "count": 2}]})
    for job in JOBS:
        problem = build_problem(parse_spec(json.dumps(spec_for(h, job))))
        assert problem.spec.step is not None and len(problem.matrices) >= 2


def test_committed_tables_and_summary_are_rebuilt_from_the_raw_data(tmp_path):
    """docs/measurements/step.md's tables and step-summary.json are what --from-raw makes of the committed raw files."""
    doc = (ROOT / "docs" / "measurements" / "step.md").read_text()
    for raw, summary_path in (("step.raw.json", ROOT / "docs" / "measurements" / "step-summary.json"),
                              ("step-before.raw.json", None)):
        md, out = tmp_path / f"{raw}.md", tmp_path / f"{raw}.summary.json"
        r = subprocess.run([sys.executable, "-m", "scripts.bench_step", "--from-raw", f"docs/measurements/step/{raw}",
                            "--markdown", str(md), "--summary", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        tables = md.read_text().strip().split("\n\n")
        if summary_path is not None:
            assert all(t in doc for t in tables)
            assert out.read_bytes() == summary_path.read_bytes()
        else:
            assert tables[1] in doc
    figures = json.loads((ROOT / "docs" / "measurements" / "step-summary.json").read_text())
    for name, f in figures.items():
        assert {"placements", "median_rel_error", "spearman", "best_regret", "sum_model_regret"} <= set(f)
        assert f["wrong_elements"] == 0 and f["failed"] == 0
