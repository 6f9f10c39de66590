"""Judging the tuner's pick out of sample (python -m runtime.validate) under real mpiexec.

As in tests/test_runtime_tune.py, chosen programs are slowed down with a sleep
in their calls, so which one is really faster is known in each job: the
validation must confirm a pick that stays faster, and must catch one that
turns out slower in the second job (the fault it exists to see).
"""

import json

import pytest

from p2synth.hierarchies import Collective, Program, default_program
from tests.runtime_support import SMALL, all_programs, assert_run_record, request_of, run_mpi, slowed, utc_before, write_plan

pytestmark = [pytest.mark.mpi]
RANKS = 4
TIMING = ["--warmup", "1", "--iters", "2", "--repeats", "8"]


def _tuned(tmp_path):
    """A plan tuned with the default (the only one-step program) sleeping 20 ms a run: the pick leaves the default."""
    request = request_of(SMALL, ["data"], Collective.ALL_REDUCE)
    plan = write_plan(tmp_path / "plan.json", SMALL, request, all_programs(SMALL, request, 3), 64 << 10)
    tuned = tmp_path / "tuned.json"
    job = run_mpi(RANKS, ["-c", slowed("{1: 0.02}"), str(plan), "--out", str(tuned), "--top", "3", *TIMING, "--no-refit"],
                  timeout=180)
    assert job.returncode == 0, job.stderr
    doc = json.loads(tuned.read_text())
    picked = doc["placements"][0]["picked"]
    assert picked["is_default"] is False
    return tuned, Program.from_json(picked, SMALL), default_program(SMALL, request)


def _validate(tuned, out, delays):
    return run_mpi(RANKS, ["-c", slowed(delays, module="p2synth.runtime.validate"), str(tuned), "--out", str(out), *TIMING],
                   timeout=180)


def test_a_pick_that_stays_faster_is_confirmed(tmp_path):
    tuned, pick, default = _tuned(tmp_path)
    out = tmp_path / "validated.json"
    before = utc_before()
    job = _validate(tuned, out, "{1: 0.02}")  # the same world as the tuning run: the default is slow
    assert job.returncode == 0, job.stderr
    doc = json.loads(out.read_text())
    v = doc["placements"][0]["validation"]
    roles = [p["role"] for p in v["programs"]]
    assert roles[:2] == ["default", "pick"] and set(roles[2:]) <= {"runner-up"}
    assert v["programs"][0]["program"] == default.text(SMALL) and v["programs"][1]["program"] == pick.text(SMALL)
    assert all(p["wrong"] == 0 and len(p["measured_repeats_s"]) == 8 for p in v["programs"])
    assert v["confirmed"] is True and v["loss_5pct"] is False and v["pick_over_default"] < 0.7
    assert doc["validated"]["requests"] == 1 and doc["validated"]["confirmed"] == 1 and doc["validated"]["losses_5pct"] == 0
    assert doc["validated"]["timing"]["order"] == "interleaved, reversed"
    assert_run_record({k: doc["validated"][k] for k in ("p2synth", "commit", "dirty", "started_at", "ended_at")}, before)
    assert v["paired"]["verdict"] == "faster" and doc["validated"]["slower_paired"] == 0
    assert "LOSS" not in job.stdout and "confirmed" in job.stdout
    assert "# picks more than 5% slower than the default: 0 of the 1 that left it (0 kept the default) OK" in job.stdout


def test_a_pick_that_turns_out_slower_is_a_loss(tmp_path):
    tuned, pick, _ = _tuned(tmp_path)
    out = tmp_path / "validated.json"
    job = _validate(tuned, out, f"{{{len(pick.steps)}: 0.02}}")  # in the second job the pick is the slow one
    assert job.returncode == 0, job.stderr
    v = json.loads(out.read_text())["placements"][0]["validation"]
    assert v["loss_5pct"] is True and v["confirmed"] is False and v["pick_over_default"] > 1.5 and v["regret"] > 1.5
    assert v["paired"]["verdict"] == "slower" and v["paired"]["slower_rounds"] >= 7
    assert "LOSS" in job.stdout


def test_an_untuned_plan_or_the_wrong_job_size_is_one_line_and_exit_2(tmp_path):
    request = request_of(SMALL, ["data"], Collective.ALL_REDUCE)
    plan = write_plan(tmp_path / "plan.json", SMALL, request, all_programs(SMALL, request, 2), 64 << 10)
    job = run_mpi(RANKS, ["-m", "runtime.validate", str(plan), "--out", str(tmp_path / "v.json")], timeout=120)
    assert job.returncode == 2 and _errors(job) == [
        'error: the plan is not tuned (no "tuned" field): run python -m runtime.tune on it first and validate its --out file']
    assert not (tmp_path / "v.json").exists()
    tuned, _, _ = _tuned(tmp_path)
    job = run_mpi(2, ["-m", "runtime.validate", str(tuned), "--out", str(tmp_path / "v.json")], timeout=120)
    assert job.returncode == 2 and not (tmp_path / "v.json").exists()
    assert _errors(job) == ["error: the plan's hierarchy has 4 devices but the job has 2 ranks; run with -n 4"]


def _errors(job):
    return [line for line in job.stderr.splitlines() if line.startswith("error:")]
