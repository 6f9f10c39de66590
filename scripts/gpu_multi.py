"""``python -m scripts.gpu_check --multi``: the GPU path on one machine with 2 to 8 GPUs, every job under a hard timeout.

It runs, one after the other, with ``NCCL_DEBUG=WARN`` (NCCL's warnings in the output) and each job in its own
process group, killed whole after ``--timeout`` seconds (a hang is a failure, not a stall):

1. **cupy**: ``mpiexec -n G python -m p2synth.runtime.bench PLAN --backend cupy --top all``, PLAN a plan of
   ``scripts.bench_pipeline plan`` for an all_reduce over the G GPUs as two levels (2 x G/2; one level of G
   when G < 4), which lists one program of two or more steps pipelined on 4 and 2 pieces and sequentially:
   every program checked exactly and timed, exit 0; then the same job with every ``--inject`` fault, each of
   which must be caught (exit 3) or apply to none of the programs (exit 2, "applies to none");
2. **torch**: ``torchrun --nproc-per-node G scripts/gpu_torch_check.py PLAN``: the exported module and the DDP
   hook with its guard over NCCL, each checked elementwise (scripts/gpu_torch_check.py);
3. **tune**: ``torchrun --nproc-per-node G p2synth tune --client torch PLAN``: the client tuner over NCCL, whose
   every candidate is checked exactly (exit 0).

G is the number of GPUs CuPy sees (``--gpus`` to use fewer). Exit: 0 every job as expected; 1 a job gave a wrong
result, failed or hung; 3 a broken setup (fewer than 2 or more than 8 GPUs, no ``mpiexec``, ``torchrun`` or torch
with CUDA). One line per job, then one summary line.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from p2synth.runtime.faults import FaultKind

MIN_GPUS, MAX_GPUS = 2, 8
DEFAULT_TIMEOUT_S = 600
PLAN_BYTES = "8M"
PIECES = "4,2"
BENCH_BYTES = "1M:8M:8"
EXIT_OK, EXIT_FAILED, EXIT_BROKEN = 0, 1, 3
BENCH_INJECT_DETECTED, BENCH_USAGE = 3, 2
ENV = {"NCCL_DEBUG": "WARN", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


class BrokenSetup(Exception):
    """What the multi-GPU check needs is missing (its message is the one line to print)."""


@dataclass(frozen=True)
class Job:
    """One command of the check: its name, argv, and the exit statuses that pass (`passes` decides on the output)."""

    name: str
    argv: tuple[str, ...]
    ok: frozenset[int] = frozenset({0})
    passes: Callable[[int, str], bool] | None = field(default=None, compare=False)

    def verdict(self, status: int, output: str) -> bool:
        """Whether exit `status` with `output` (stdout and stderr) passes."""
        return self.passes(status, output) if self.passes is not None else status in self.ok


@dataclass(frozen=True)
class Outcome:
    """A job's result: passed or not, its exit status (None: killed after the timeout) and its last output line."""

    job: Job
    passed: bool
    status: int | None
    last: str

    def line(self, timeout_s: float) -> str:
        """The job's line of the report."""
        if self.status is None:
            return f"gpu_check --multi: {self.job.name}: FAILED: hung, killed after {timeout_s:g} s: {self.last}"
        word = "ok" if self.passed else "FAILED"
        return f"gpu_check --multi: {self.job.name}: {word}: exit {self.status}: {self.last}"


def levels(gpus: int) -> list[dict]:
    """The hierarchy's levels for `gpus` GPUs: two (2 x gpus/2) where gpus is even and at least 4, else one."""
    if gpus >= 4 and gpus % 2 == 0:
        return [{"name": "half", "count": 2, "bandwidth_GBps": 50.0, "uplink_GBps": 25.0, "latency_us": 5},
                {"name": "gpu", "count": gpus // 2, "bandwidth_GBps": 200.0, "latency_us": 2}]
    return [{"name": "gpu", "count": gpus, "bandwidth_GBps": 200.0, "latency_us": 2}]


def inject_caught(status: int, output: str) -> bool:
    """An ``--inject`` job passes when the check caught the fault (3) or the fault applies to no program (2)."""
    return status == BENCH_INJECT_DETECTED or (status == BENCH_USAGE and "applies to none" in output)


def jobs(gpus: int, workdir: Path, python: str, mpiexec: str, torchrun: str, p2synth: str) -> list[Job]:
    """Every job of the check for `gpus` GPUs, in order; the plan is `workdir`/plan.json (made by the first job)."""
    hierarchy, plan = workdir / "hierarchy.json", workdir / "plan.json"
    hierarchy.write_text(json.dumps({"name": f"gpus-{gpus}", "levels": levels(gpus)}))
    bench = (mpiexec, "-n", str(gpus), python, "-m", "p2synth.runtime.bench", str(plan),
             "--backend", "cupy", "--top", "all")
    run = (torchrun, "--standalone", f"--nproc-per-node={gpus}")
    return [
        Job("plan", (python, "-m", "scripts.bench_pipeline", "plan", "--hierarchy", str(hierarchy), "--bytes",
                     PLAN_BYTES, "--pieces", PIECES, "--out", str(plan))),
        Job("cupy bench", bench + ("--bytes", BENCH_BYTES, "--warmup", "1", "--iters", "2", "--repeats", "2")),
        *(Job(f"cupy --inject {kind}", bench + ("--inject", str(kind)), passes=inject_caught) for kind in FaultKind),
        Job("torch export and hook", run + (str(Path(__file__).with_name("gpu_torch_check.py")), str(plan), str(workdir))),
        Job("tune --client torch", run + (p2synth, "tune", "--client", "torch", str(plan), "--out",
                                          str(workdir / "tuned.json"), "--repeats", "3", "--validate-repeats", "0")),
    ]


def run_job(job: Job, env: Mapping[str, str], timeout_s: float, cwd: Path) -> Outcome:
    """Run `job` in a process group of its own; kill the whole group after `timeout_s` seconds."""
    proc = subprocess.Popen(job.argv, cwd=cwd, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return Outcome(job, False, None, last_line(output))
    return Outcome(job, job.verdict(proc.returncode, output), proc.returncode, last_line(output))


def last_line(output: str | None) -> str:
    """The last line of `output` with a letter or digit in it (not an MPI banner's rule; "no output" if none)."""
    lines = [line.strip() for line in (output or "").splitlines() if any(c.isalnum() for c in line)]
    return lines[-1] if lines else "no output"


def tools(which: Callable[[str], str | None] = shutil.which) -> tuple[str, str, str]:
    """The paths of mpiexec, torchrun and p2synth; BrokenSetup naming what is missing."""
    found = {name: which(name) for name in ("mpiexec", "torchrun", "p2synth")}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise BrokenSetup(f"not found on PATH: {', '.join(missing)} (install p2synth[gpu,torch] in this environment)")
    return found["mpiexec"], found["torchrun"], found["p2synth"]


def gpu_count(devices: int, wanted: int | None) -> int:
    """The GPUs to use of the `devices` CuPy sees (`wanted`, None: all); BrokenSetup outside 2 to 8."""
    gpus = devices if wanted is None else wanted
    if not MIN_GPUS <= gpus <= MAX_GPUS or gpus > devices:
        raise BrokenSetup(f"--multi needs {MIN_GPUS} to {MAX_GPUS} GPUs; {devices} visible"
                          + (f", {wanted} asked for" if wanted is not None else ""))
    return gpus


def torch_cuda(gpus: int) -> None:
    """BrokenSetup unless torch is installed and sees at least `gpus` CUDA devices."""
    try:
        import torch
    except ImportError:
        raise BrokenSetup("torch is not installed: install p2synth[torch] (a CUDA build)") from None
    if torch.cuda.device_count() < gpus:
        raise BrokenSetup(f"torch sees {torch.cuda.device_count()} CUDA device(s), not {gpus}")


def run_all(job_list: Sequence[Job], env: Mapping[str, str], timeout_s: float, cwd: Path,
            runner: Callable[..., Outcome] = run_job, out=print) -> int:
    """Run the jobs in order, one line each, stopping at a failed plan; the exit status (0 all passed, else 1)."""
    failed = []
    for job in job_list:
        outcome = runner(job, env, timeout_s, cwd)
        out(outcome.line(timeout_s))
        if not outcome.passed:
            failed.append(job.name)
            if job is job_list[0]:
                break  # no plan: nothing else can run
    out(f"gpu_check --multi: {'ok' if not failed else 'FAILED: ' + ', '.join(failed)}: {len(job_list) - len(failed)} "
        f"of {len(job_list)} jobs as expected")
    return EXIT_FAILED if failed else EXIT_OK


def main(devices: int, wanted: int | None, timeout_s: float, workdir: Path, cwd: Path) -> int:
    """The multi-GPU check on `devices` visible GPUs; its exit status (one line per job, one summary line)."""
    try:
        gpus = gpu_count(devices, wanted)
        mpiexec, torchrun, p2synth = tools()
        torch_cuda(gpus)
    except BrokenSetup as e:
        print(f"gpu_check --multi: FAILED: {e}")
        return EXIT_BROKEN
    env = {**os.environ, **ENV}
    return run_all(jobs(gpus, workdir, sys.executable, mpiexec, torchrun, p2synth), env, timeout_s, cwd)
