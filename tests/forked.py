"""Run a job's ranks as forked processes of one parent (torch imported once, before forking), and run that parent
as a worker module of its own."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_worker(module: str, args: list[str], timeout_s: float, env: dict[str, str] | None = None) -> None:
    """Run ``python -m module args`` from the repository root (one thread per process unless `env` says otherwise);
    fail the test with the end of its stderr if it fails or outlives `timeout_s`."""
    command = [sys.executable, "-m", module, *args]
    try:
        done = subprocess.run(command, cwd=ROOT, env=env or dict(os.environ, OMP_NUM_THREADS="1"),
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(command[1:])} did not finish in {timeout_s} s")
    if done.returncode != 0:
        pytest.fail(f"{' '.join(command[1:])} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")


def run_forked(target: Callable[..., None], args: tuple, ranks: int, timeout_s: float) -> int:
    """Fork `ranks` processes running ``target(rank, *args)``; 0 if all exit 0, else 1.

    A rank that fails leaves the others waiting in a collective, so once one
    fails, or `timeout_s` passes, the rest are stopped.
    """
    processes = [multiprocessing.get_context("fork").Process(target=target, args=(r, *args)) for r in range(ranks)]
    for p in processes:
        p.start()
    deadline = time.monotonic() + timeout_s
    while any(p.is_alive() for p in processes) and not any(p.exitcode for p in processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in processes:
        if p.is_alive():
            p.terminate()
        p.join()
    return 0 if all(p.exitcode == 0 for p in processes) else 1
