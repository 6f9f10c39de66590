"""scripts/gpu_check on a machine without a GPU: the skip line (no CuPy), exit 3 for a CuPy that cannot run, and
its code paths on a fake CuPy built on numpy.

tests/fake_cupy.py stands in for CuPy (host memory, a one-rank NCCL that
copies, streams that defer their work until the host waits), so the buffer,
NCCL, pipeline and bench checks run here; what the fake cannot show (device
memory, real concurrency, real NCCL) waits for a machine with a GPU.
"""

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.runtime_support import MPI_ENV, ROOT

WITH_FAKE = ("import sys, tests.fake_cupy as f; f.install(broken={!r}, schedule={!r}); {}"
             "from scripts.gpu_check import main; sys.exit(main())")
BLIND = "import p2synth.runtime.nccl as b\nclass Blind(b.StreamLane):\n    def wait(self, pending): pass\n"  # a lane that never waits
NO_STEP_EVENTS = BLIND + "stage = b.CupyBackend.stage_lanes\nb.CupyBackend.stage_lanes = lambda self, n: tuple(Blind(l.stream) for l in stage(self, n))\n"
NO_JOIN = BLIND + "b.CupyBackend.main_lane = lambda self: Blind(self.stream)\n"
# a step's event recorded before its collective is queued
EVENT_BEFORE = ("import p2synth.runtime.nccl as b\n"
                "b.StreamLane.start = lambda self, group, op, src, dst, reuse=None: "
                "(self.mark(reuse), getattr(group, op.value)(src, dst, stream=self.stream.ptr))[0]\n")
WITHOUT_CUPY = "import sys; sys.modules['cupy'] = None; from scripts.gpu_check import main; sys.exit(main())"


def run(args: list[str]) -> subprocess.CompletedProcess:
    """``python ARGS`` from the repository root (an MPI singleton, no mpiexec)."""
    return subprocess.run([sys.executable, *args], cwd=ROOT, env={**os.environ, **MPI_ENV}, capture_output=True, text=True,
                          timeout=120, check=False)


def test_without_cupy_it_prints_one_skip_line_and_exits_0():
    job = run(["-c", WITHOUT_CUPY])
    assert job.returncode == 0, job.stderr
    assert job.stdout.splitlines() == ["skipped: cupy backend unavailable: ModuleNotFoundError: import of cupy halted; None in sys.modules"]


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed: the check runs (or fails) for real")
def test_here_without_cupy_it_skips():
    job = run(["-m", "scripts.gpu_check"])
    assert job.returncode == 0, job.stderr
    [line] = job.stdout.splitlines()
    assert line.startswith("skipped: cupy backend unavailable: ModuleNotFoundError: ")


NO_DEVICE = ("import cupy\nclass CUDARuntimeError(RuntimeError): pass\n"
             "def count(): raise CUDARuntimeError('cudaErrorNoDevice: no CUDA-capable device is detected')\n"
             "cupy.cuda.runtime.getDeviceCount = count\n")
NO_NCCL_BUILT = "import cupy\ncupy.cuda.nccl.available = False\n"
NO_NCCL_MODULE = "import cupy\ndel cupy.cuda.nccl, sys.modules['cupy.cuda.nccl']\n"


@pytest.mark.parametrize("broken, why", [
    (NO_DEVICE, "CuPy is installed but fails: CUDARuntimeError: cudaErrorNoDevice: no CUDA-capable device is detected"),
    (NO_NCCL_BUILT, "CuPy is installed but cannot load NCCL (libnccl.so.2); install the gpu extra "
                    "(pip install 'p2synth[gpu]': nvidia-nccl-cu12)"),
    (NO_NCCL_MODULE, "CuPy is installed but fails: ImportError: cannot import name 'nccl' from 'cupy.cuda'"),
])
def test_a_cupy_that_is_installed_but_cannot_run_fails_with_exit_3(broken, why):
    """No CUDA device or driver, or no NCCL: a broken GPU install, which must not pass as skipped (it used to exit 0)."""
    job = run(["-c", WITH_FAKE.format(None, "last", broken)])
    assert job.returncode == 3, job.stdout + job.stderr
    assert job.stderr == ""
    [line] = job.stdout.splitlines()
    assert line.startswith(f"gpu_check: FAILED: cupy backend unavailable: {why}")


def test_a_cupy_that_fails_to_import_fails_with_exit_3(tmp_path):
    """``import cupy`` raising ImportError (as CuPy does when its CUDA libraries are missing) is not "no CuPy"."""
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text("raise ImportError('CuPy is not correctly installed: libcudart.so.12 not found')\n")
    job = run(["-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r}); from scripts.gpu_check import main; sys.exit(main())"])
    assert job.returncode == 3, job.stdout + job.stderr
    assert job.stdout.splitlines() == ["gpu_check: FAILED: cupy backend unavailable: CuPy is installed but fails: ImportError: "
                                       "CuPy is not correctly installed: libcudart.so.12 not found"]


@pytest.mark.parametrize("schedule", ["last", "first"])
def test_on_the_fake_cupy_every_check_runs_and_passes(schedule):
    job = run(["-c", WITH_FAKE.format(None, schedule, "")])
    assert job.returncode == 0, job.stdout + job.stderr
    [line] = job.stdout.splitlines()
    assert line.startswith("gpu_check: ok: fake GPU (numpy), CuPy 14 (fake), NCCL 23203: buffers 48 checks, nccl 20 one-rank collectives, "
                           "pipeline 4 pipelined runs, bench 7 one-device plans, all exact, in ")


@pytest.mark.parametrize("broken, schedule", [(NO_STEP_EVENTS, "last"), (NO_STEP_EVENTS, "first"), (NO_JOIN, "first"),
                                              (EVENT_BEFORE, "last")])
def test_a_pipeline_missing_its_events_fails_the_check(broken, schedule):
    """Stage lanes that do not wait for a piece's previous step (or the rank's stream that does not wait for the last
    lane before the merge, or events recorded before the collective is queued) let the fake's
    favoured stream run too early: the pipelined output is wrong."""
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


def test_bad_arguments_are_one_line_and_exit_2(capsys):
    from scripts.gpu_check import main

    assert main(["--seed", "x"]) == 2
    assert capsys.readouterr().err == "error: argument --seed: invalid int value: 'x'\n"


NO_NVRTC = ("import cupy\ndef nvrtc(): raise RuntimeError('CuPy failed to load libnvrtc.so.12: OSError: libnvrtc.so.12: "
            "cannot open shared object file: No such file or directory')\ncupy.cuda.nvrtc.getVersion = nvrtc\n")


def test_a_cupy_without_nvrtc_is_a_broken_setup_not_a_wrong_result():
    """Issue 46: without a CUDA toolkit or the NVRTC wheel, CuPy's first kernel failed on libnvrtc.so.12 inside the
    buffer check, which reported a wrong result (exit 1). It is a broken setup (exit 3) naming the wheel."""
    job = run(["-c", WITH_FAKE.format(None, "last", NO_NVRTC)])
    assert job.returncode == 3, job.stdout + job.stderr
    [line] = job.stdout.splitlines()
    assert line == ("gpu_check: FAILED: cupy backend unavailable: CuPy is installed but cannot load NVRTC, which "
                    "compiles its kernels (RuntimeError: CuPy failed to load libnvrtc.so.12: OSError: libnvrtc.so.12: "
                    "cannot open shared object file: No such file or directory); install the gpu extra "
                    "(pip install 'p2synth[gpu]': nvidia-cuda-nvrtc-cu12)")


BENCH_RAISES = ("import p2synth.runtime.bench as b\n"
                "def sweep(*a, **k): raise RuntimeError('ncclUnhandledCudaError: a CUDA call failed')\nb.sweep = sweep\n")


def test_an_exception_inside_the_bench_is_one_failed_line_not_an_mpi_abort():
    """Issue 46: runtime.bench's entry point aborts the MPI job on an exception, which ended gpu_check before it
    printed its FAILED line (only a traceback on stderr). The bench now runs without that guard."""
    job = run(["-c", WITH_FAKE.format(None, "last", BENCH_RAISES)])
    assert job.returncode == 1, job.stdout + job.stderr
    assert job.stdout.splitlines() == ["gpu_check: FAILED: bench: RuntimeError: ncclUnhandledCudaError: a CUDA call failed"]


@pytest.mark.parametrize("version", [13, 14])
def test_every_check_passes_on_the_nccl_signatures_of_cupy(version):
    job = run(["-c", f"import sys, tests.fake_cupy as f; f.install(version={version}); "
                     "from scripts.gpu_check import main; sys.exit(main())"])
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.stdout.startswith(f"gpu_check: ok: fake GPU (numpy), CuPy {version} (fake), NCCL 23203: ")
