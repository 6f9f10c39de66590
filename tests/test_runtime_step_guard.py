"""runtime.step --guard under real mpiexec (issue 47, item 1): inside the job, each request's plan program against
its default in paired, interleaved rounds; the default kept unless the program is faster by the one-sided paired
test; the decisions in the step's document and, with --guard-out, in the plan, which a later run follows.

The faults are made on purpose (the hidden ``--slow program:MS`` / ``--slow default:MS``: every run of that side
of a request whose program is not its default sleeps MS after it), so the verdicts do not rest on this machine's
noise: 100 ms against runs of about a millisecond."""

import json

import pytest

from tests.runtime_support import run_mpi
from tests.test_runtime_step import _dp_pp_plan

pytestmark = [pytest.mark.mpi]

GUARD = ["--rounds", "1", "--warmup", "0", "--guard", "--guard-rounds", "6"]
SLOW_S = 0.1


def _step(tmp_path, plan, *extra, name="step"):
    out, trace = tmp_path / f"{name}.json", tmp_path / f"{name}.trace.json"
    job = run_mpi(4, ["-m", "runtime.step", str(plan), "--out", str(out), "--trace", str(trace), *extra], timeout=180)
    assert job.returncode == 0, job.stderr
    return json.loads(out.read_text()), json.loads(trace.read_text()), job.stdout


def _bucket_seconds(trace: dict, variant: str) -> list[float]:
    """Every rank's gradient bucket runs of `variant`'s timed steps, in seconds."""
    return [e["end"] - e["start"] for r in trace["ranks"] for s in r["steps"] if s["variant"] == variant
            for e in s["events"] if e["kind"] == "bucket"]


def test_a_slower_program_is_measured_in_the_job_and_the_default_kept(tmp_path):
    plan = _dp_pp_plan(tmp_path)
    guarded = tmp_path / "guarded.json"
    doc, trace, stdout = _step(tmp_path, plan, *GUARD, "--slow", f"program:{SLOW_S * 1e3:g}", "--guard-out", str(guarded))
    grad, act = doc["guard"]["decisions"]
    assert act is None  # the pipeline's sends run no collective
    assert (doc["guard"]["source"], doc["guard"]["rounds"]) == ("measured", 6)
    assert (grad["request"], grad["kept"], grad["runs_per_round"]) == ("grad", "default", 3)
    assert grad["verdict"]["verdict"] == "slower" and grad["verdict"]["slower_rounds"] == 6
    assert grad["verdict"]["median_ratio"] < 0.5
    assert "# grad: runs the default (slower (6 of 6 rounds, p = 0.016))" in stdout
    # the step's best variant ran the default's buckets, not the slowed program's; the plan as planned ran beside it
    assert _bucket_seconds(trace, "best") and max(_bucket_seconds(trace, "best")) < SLOW_S
    assert set(doc["variants"]) == {"best", "default", "plan"} and min(_bucket_seconds(trace, "plan")) >= SLOW_S
    # the plan records the decision, and a run without --guard follows it
    written = json.loads(guarded.read_text())
    assert written["placements"][0]["step_guard"] == doc["guard"]
    assert {k: v for k, v in written.items() if k != "placements"} == {
        k: v for k, v in json.loads(plan.read_text()).items() if k != "placements"}
    again, trace, _ = _step(tmp_path, guarded, "--rounds", "1", "--warmup", "0", "--slow", f"program:{SLOW_S * 1e3:g}",
                            name="again")
    assert again["guard"]["source"] == "recorded" and again["guard"]["decisions"] == doc["guard"]["decisions"]
    assert max(_bucket_seconds(trace, "best")) < SLOW_S


def test_a_faster_program_is_kept(tmp_path):
    doc, trace, stdout = _step(tmp_path, _dp_pp_plan(tmp_path), *GUARD, "--slow", f"default:{SLOW_S * 1e3:g}")
    grad = doc["guard"]["decisions"][0]
    assert grad["kept"] == "program" and grad["verdict"]["verdict"] == "faster"
    assert grad["verdict"]["faster_rounds"] == 6 and grad["verdict"]["p_faster"] == round(1 / 64, 4)
    assert max(_bucket_seconds(trace, "best")) < SLOW_S <= min(_bucket_seconds(trace, "default"))


def test_without_the_guard_or_a_recorded_decision_the_plan_runs_as_before(tmp_path):
    doc, trace, stdout = _step(tmp_path, _dp_pp_plan(tmp_path), "--rounds", "1", "--warmup", "0")
    assert doc["guard"] is None and "# guard" not in stdout and set(doc["variants"]) == {"best", "default"}
