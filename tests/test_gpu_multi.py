"""``python -m scripts.gpu_check --multi`` without GPUs (issue 46): the jobs it builds, the hard timeout that turns a
hang into a failure, the verdicts and exit statuses, and the broken setups that exit 3."""

import json
import os
import sys
import time
from pathlib import Path

import pytest

from p2synth.runtime.faults import FaultKind
from scripts import gpu_multi
from scripts.gpu_multi import BrokenSetup, Job, Outcome
from tests.runtime_support import ROOT
from tests.test_gpu_check import run

TOOLS = ("/bin/mpiexec", "/bin/torchrun", "/bin/p2synth")


@pytest.mark.parametrize("gpus, counts", [(2, [2]), (3, [3]), (4, [2, 2]), (6, [2, 3]), (8, [2, 4])])
def test_the_plan_is_for_two_levels_of_the_gpus_where_they_split_evenly(tmp_path, gpus, counts):
    gpu_multi.jobs(gpus, tmp_path, "py", *TOOLS)
    hierarchy = json.loads((tmp_path / "hierarchy.json").read_text())
    assert [level["count"] for level in hierarchy["levels"]] == counts


def test_the_jobs_run_the_cupy_bench_every_fault_the_torch_checks_and_the_client_tuner(tmp_path):
    jobs = gpu_multi.jobs(4, tmp_path, "py", *TOOLS)
    plan = str(tmp_path / "plan.json")
    assert jobs[0].argv[:4] == ("py", "-m", "scripts.bench_pipeline", "plan") and jobs[0].argv[-1] == plan
    bench = ("/bin/mpiexec", "-n", "4", "py", "-m", "p2synth.runtime.bench", plan, "--backend", "cupy", "--top", "all")
    assert jobs[1].argv[:len(bench)] == bench and "--inject" not in jobs[1].argv
    injects = [j for j in jobs if "--inject" in j.argv]
    assert [j.argv[:len(bench)] for j in injects] == [bench] * len(FaultKind)
    assert [j.argv[-1] for j in injects] == [str(k) for k in FaultKind]
    torch, tune = jobs[-2:]
    assert torch.argv[:3] == ("/bin/torchrun", "--standalone", "--nproc-per-node=4")
    assert torch.argv[3] == str(ROOT / "scripts" / "gpu_torch_check.py") and torch.argv[4:] == (plan, str(tmp_path))
    assert tune.argv[3:7] == ("/bin/p2synth", "tune", "--client", "torch") and plan in tune.argv


@pytest.mark.parametrize("status, output, passed", [
    (3, "", True), (2, "error: --inject wrong-neighbour applies to none of the 3 selected program(s): ...", True),
    (2, "error: bad plan", False), (4, "", False), (0, "", False), (1, "", False),
])
def test_an_injected_fault_must_be_caught_or_apply_to_no_program(status, output, passed):
    assert Job("inject", ("x",), passes=gpu_multi.inject_caught).verdict(status, output) is passed


def test_a_job_that_hangs_is_killed_with_its_children_and_fails(tmp_path):
    """A hang must fail the check, not stall it: the job's whole process group is killed at the timeout."""
    child = tmp_path / "child.pid"
    code = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(child)!r}, 'w').write(str(p.pid)); print('NCCL WARN waiting for peers', flush=True); time.sleep(60)")
    start = time.monotonic()
    outcome = gpu_multi.run_job(Job("stuck", (sys.executable, "-c", code)), os.environ, 2, tmp_path)
    assert time.monotonic() - start < 30
    assert (outcome.passed, outcome.status) == (False, None)
    assert outcome.line(2) == "gpu_check --multi: stuck: FAILED: hung, killed after 2 s: NCCL WARN waiting for peers"
    time.sleep(0.2)
    assert not alive(int(child.read_text()))  # its child is gone too


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def test_a_job_runs_with_nccl_warnings_on_and_its_status_decides(tmp_path):
    code = "import os, sys; print(os.environ['NCCL_DEBUG']); sys.exit(1)"
    outcome = gpu_multi.run_job(Job("wrong", (sys.executable, "-c", code)), {**os.environ, **gpu_multi.ENV}, 60, tmp_path)
    assert (outcome.passed, outcome.status) == (False, 1) and outcome.line(60) == "gpu_check --multi: wrong: FAILED: exit 1: WARN"


def fake_runner(statuses: dict[str, int | None]):
    ran = []

    def runner(job, env, timeout_s, cwd):
        ran.append((job.name, env.get("NCCL_DEBUG")))
        status = statuses.get(job.name, 0)
        return Outcome(job, status is not None and job.verdict(status, ""), status, "last")

    return runner, ran


@pytest.mark.parametrize("statuses, exit_status", [({}, 0), ({"cupy bench": 1}, 1), ({"torch export and hook": None}, 1),
                                                   ({"cupy --inject swap-chunks": 0}, 1)])
def test_every_job_runs_and_any_failure_or_hang_exits_1(tmp_path, statuses, exit_status):
    jobs = [j for j in gpu_multi.jobs(4, tmp_path, "py", *TOOLS) if "swap-chunks" in j.name or "--inject" not in j.argv]
    for job in jobs:
        if "--inject" in job.argv:
            statuses.setdefault(job.name, 3)
    runner, ran = fake_runner(statuses)
    lines = []
    assert gpu_multi.run_all(jobs, gpu_multi.ENV, 5, tmp_path, runner, lines.append) == exit_status
    assert [name for name, _ in ran] == [j.name for j in jobs] and {w for _, w in ran} == {"WARN"}
    assert len(lines) == len(jobs) + 1 and lines[-1].startswith("gpu_check --multi: ok" if not exit_status else
                                                                "gpu_check --multi: FAILED: ")


def test_without_a_plan_nothing_else_runs(tmp_path):
    jobs = gpu_multi.jobs(2, tmp_path, "py", *TOOLS)
    runner, ran = fake_runner({"plan": 1})
    assert gpu_multi.run_all(jobs, gpu_multi.ENV, 5, tmp_path, runner, lambda line: None) == 1 and len(ran) == 1


@pytest.mark.parametrize("devices, wanted", [(1, None), (9, None), (4, 5), (4, 1)])
def test_fewer_than_2_or_more_than_8_gpus_is_a_broken_setup(devices, wanted):
    with pytest.raises(BrokenSetup, match="needs 2 to 8 GPUs"):
        gpu_multi.gpu_count(devices, wanted)


def test_a_missing_launcher_is_a_broken_setup():
    with pytest.raises(BrokenSetup, match="not found on PATH: torchrun"):
        gpu_multi.tools(lambda name: None if name == "torchrun" else f"/bin/{name}")


def test_gpu_check_multi_on_one_gpu_exits_3():
    job = run(["-c", "import sys, tests.fake_cupy as f; f.install(ranks=1); from scripts.gpu_check import main; "
                     "sys.exit(main(['--multi']))"])
    assert job.returncode == 3, job.stdout + job.stderr
    assert job.stdout.splitlines() == ["gpu_check --multi: FAILED: --multi needs 2 to 8 GPUs; 1 visible"]


def test_gpu_check_multi_without_cupy_is_a_broken_setup_not_a_skip():
    job = run(["-c", "import sys; sys.modules['cupy'] = None; from scripts.gpu_check import main; sys.exit(main(['--multi']))"])
    assert job.returncode == 3 and job.stdout.startswith("gpu_check --multi: FAILED: cupy backend unavailable: ")
