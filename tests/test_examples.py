"""The bundled examples plan, and the README's reading of the first one holds."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.json"))


def _plan(spec: Path, out: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "solver.run", str(spec), "--quiet", "--top", "1", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


@pytest.mark.parametrize("spec", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_is_planned_and_proved(spec, tmp_path):
    result = _plan(spec, tmp_path / "r.json")
    assert result["complete"] is True and result["placements"]


def test_readme_first_example_shows_placement_spread_and_a_hierarchical_win(tmp_path):
    readme = (ROOT / "README.md").read_text()
    assert "examples/gpt-3d-on-dgx-a100.json" in readme.splitlines()[3]
    result = _plan(ROOT / "examples" / "gpt-3d-on-dgx-a100.json", tmp_path / "r.json")
    steps = [p["step"]["step_s"] for p in result["placements"]]
    assert steps == sorted(steps)
    assert f"takes {steps[0] * 1e3:.1f} ms a step, the worst {steps[-1] * 1e3:.1f} ms ({steps[-1] / steps[0]:.1f}x)" in readme
    by_sum = sorted(result["placements"], key=lambda p: p["total_s"])
    assert f"`{by_sum[1]['description']}`\nwould come second" in readme
    assert result["placements"].index(by_sum[1]) == 2 and "it comes third" in readme
    best = result["placements"][0]
    assert best["description"].endswith("tensor=[gpu 4]")  # tensor inside the node
    grad = next(r for r in best["requests"] if r["name"] == "grad_allreduce")
    best_program = grad["programs"][0]
    short = {"all_reduce": "AR", "reduce_scatter": "RS", "all_gather": "AG", "reduce": "R", "broadcast": "B"}
    text = " -> ".join(f"{short[s['op']]}({','.join('@'.join(c) for c in s['slice'])})" for s in best_program["steps"])
    assert len(best_program["steps"]) > 1 and best_program["pipeline"] > 1  # hierarchical, and pipelined
    assert f"`{text} x{best_program['pipeline']} pieces`" in readme
    assert f"{grad['default']['cost_s'] / grad['best_s']:.2f}x faster than one" in readme
