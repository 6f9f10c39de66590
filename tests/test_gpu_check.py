"""scripts/gpu_check on a machine without a GPU: the skip line, and its code paths on a fake CuPy built on numpy.

tests/fake_cupy.py stands in for CuPy (host memory, a one-rank NCCL that
copies, streams that defer their work until the host waits), so the buffer,
NCCL, pipeline and bench checks run here; what the fake cannot show (device
memory, real concurrency, real NCCL) waits for a machine with a GPU.
"""

import os
import subprocess
import sys

import pytest

from tests.runtime_support import MPI_ENV, ROOT, gpu_count

WITH_FAKE = ("import sys, tests.fake_cupy as f; f.install(broken={!r}, schedule={!r}); {}"
             "from scripts.gpu_check import main; sys.exit(main())")
BLIND = "import p2synth.runtime.backends as b\nclass Blind(b.StreamLane):\n    def wait(self, pending): pass\n"  # a lane that never waits
NO_STEP_EVENTS = BLIND + "stage = b.CupyBackend.stage_lanes\nb.CupyBackend.stage_lanes = lambda self, n: tuple(Blind(l.stream) for l in stage(self, n))\n"
NO_JOIN = BLIND + "b.CupyBackend.main_lane = lambda self: Blind(self.stream)\n"
WITHOUT_CUPY = "import sys; sys.modules['cupy'] = None; from scripts.gpu_check import main; sys.exit(main())"


def run(args: list[str]) -> subprocess.CompletedProcess:
    """``python ARGS`` from the repository root (an MPI singleton, no mpiexec)."""
    return subprocess.run([sys.executable, *args], cwd=ROOT, env={**os.environ, **MPI_ENV}, capture_output=True, text=True,
                          timeout=120, check=False)


def test_without_cupy_it_prints_one_skip_line_and_exits_0():
    job = run(["-c", WITHOUT_CUPY])
    assert job.returncode == 0, job.stderr
    assert job.stdout.splitlines() == ["skipped: cupy backend unavailable: ModuleNotFoundError: import of cupy halted; None in sys.modules"]


@pytest.mark.skipif(gpu_count() > 0, reason="a GPU is present: the check runs for real")
def test_here_without_a_gpu_it_skips():
    job = run(["-m", "scripts.gpu_check"])
    assert job.returncode == 0, job.stderr
    [line] = job.stdout.splitlines()
    assert line.startswith("skipped: cupy backend unavailable: ")


@pytest.mark.parametrize("schedule", ["last", "first"])
def test_on_the_fake_cupy_every_check_runs_and_passes(schedule):
    job = run(["-c", WITH_FAKE.format(None, schedule, "")])
    assert job.returncode == 0, job.stdout + job.stderr
    [line] = job.stdout.splitlines()
    assert line.startswith("gpu_check: ok: fake GPU (numpy), CuPy fake, NCCL 0: buffers 48 checks, nccl 18 one-rank collectives, "
                           "pipeline 4 pipelined runs, bench 6 one-device plans, all exact, in ")


@pytest.mark.parametrize("broken, schedule", [(NO_STEP_EVENTS, "last"), (NO_STEP_EVENTS, "first"), (NO_JOIN, "first")])
def test_a_pipeline_missing_its_events_fails_the_check(broken, schedule):
    """Stage lanes that do not wait for a piece's previous step (or the rank's stream that does not wait for the last
    lane before the merge) let the fake's favoured stream run too early: the pipelined output is wrong."""
    job = run(["-c", WITH_FAKE.format(None, schedule, broken)])
    assert job.returncode == 1, job.stdout + job.stderr
    [line] = job.stdout.splitlines()
    assert line.startswith("gpu_check: FAILED: pipeline float32 on 2 pieces of ")


@pytest.mark.parametrize("op, what", [("allGather", "nccl all_gather float32 out of place"), ("broadcast", "nccl broadcast float32 out of place"),
                                      ("send", "nccl all_to_all float32 out of place")])
def test_a_wrong_collective_fails_the_check_in_one_line(op, what):
    job = run(["-c", WITH_FAKE.format(op, "last", "")])
    assert job.returncode == 1
    [line] = job.stdout.splitlines()
    assert line.startswith(f"gpu_check: FAILED: {what} on one rank: 1 of ")
