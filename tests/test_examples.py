"""The bundled examples plan, and the README's reading of the first one holds."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.json"))


def _plan(spec: Path, out: Path, top: int = 1) -> dict:
    proc = subprocess.run([sys.executable, "-m", "solver.run", str(spec), "--quiet", "--top", str(top), "--out", str(out)],
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


def test_readme_shows_the_first_commands_first_table_as_printed_at_80_columns():
    """The README's copy of the first table, its hint line included, is what the first command prints into a file."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run([sys.executable, "-m", "solver.run", "examples/gpt-3d-on-dgx-a100.json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    first = "\n".join(lines[:next(i for i, line in enumerate(lines) if line.startswith("next: ")) + 1])
    assert f"```text\n{first}\n```" in (ROOT / "README.md").read_text()


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_workloads_doc_figures_are_the_plans(tmp_path):
    """Every figure docs/workloads.md quotes for the bundled workloads, recomputed from the solver's results."""
    doc = _flat((ROOT / "docs" / "workloads.md").read_text())
    small = _plan(ROOT / "examples" / "gpt-3d-on-dgx-a100.json", tmp_path / "small.json")["placements"]
    step = small[0]["step"]
    for key in ("compute_s", "layer_comm_s", "bubble_s", "pipeline_comm_s", "gradient_exposed_s", "step_s"):
        assert f"**{step[key] * 1e3:.2f} ms**" in doc, key
    assert f"splits data as `[node 2, gpu 2]`, {step['step_s'] * 1e3:.1f} ms per step" in doc
    by_sum = sorted(small, key=lambda p: p["total_s"])
    assert f"`{by_sum[1]['description']}` is second ({by_sum[1]['total_s'] * 1e3:.1f} ms" in doc
    assert f"it is third ({small[2]['step']['step_s'] * 1e3:.1f} ms against {small[1]['step']['step_s'] * 1e3:.1f} ms)" in doc
    large = _plan(ROOT / "examples" / "gpt-3d-on-64-dgx-a100.json", tmp_path / "large.json")["placements"]
    assert f"**Best step: `{large[0]['description']}`**, {large[0]['step']['step_s']:.2f} s per step" in doc
    by_sum = sorted(large, key=lambda p: p["total_s"])
    assert f"by summed communication `{by_sum[0]['description']}` is best ({by_sum[0]['total_s'] * 1e3:.1f} ms against " \
           f"{large[0]['total_s'] * 1e3:.1f} ms)" in doc
    exposed = [f"{p['step']['gradient_exposed_s'] * 1e3:.1f} ms" for p in (by_sum[0], large[0])]
    assert f"({exposed[0]} exposed against {exposed[1]})" in doc
    more = (by_sum[0]["step"]["layer_comm_s"] - large[0]["step"]["layer_comm_s"]) * 1e3
    assert f"its {more:.1f} ms more tensor communication" in doc
    assert f"{by_sum[0]['step']['step_s']:.2f} s against {large[0]['step']['step_s']:.2f} s" in doc
    gradient = lambda p: sum(r["step_s"] for r in p["requests"] if r["name"].startswith("grad_allreduce"))  # its buckets
    grad_best = min(large, key=gradient)
    ordinal = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth"][large.index(grad_best)]
    assert f"`{grad_best['description']}` ({gradient(grad_best) * 1e3:.1f} ms for the gradient), is among the worst " \
           f"({grad_best['step']['step_s']:.2f} s, {ordinal} of nine)" in _flat(doc)
    moe = _plan(ROOT / "examples" / "moe-on-dgx-h100.json", tmp_path / "moe.json")["placements"]
    assert f"The best placement ({moe[0]['total_s'] * 1e3:.1f} ms per step)" in doc
    assert f"Total: {moe[0]['default_total_s'] / moe[0]['total_s']:.2f}x better than defaults" in doc
    zero = _plan(ROOT / "examples" / "zero-dp-on-dgx-h100.json", tmp_path / "zero.json", top=3)["placements"][0]["requests"][0]
    two_step = min(p["cost_s"] for p in zero["programs"] if len(p["steps"]) == 2)
    assert zero["best_s"] == zero["default"]["cost_s"]  # the flat call is the best
    assert f"the flat ones take {zero['default']['cost_s'] * 1e3:.2f} ms each, the two-step forms pipelined on 8 " \
           f"pieces {two_step * 1e3:.2f} ms" in doc
