"""Run a job's ranks as forked processes of one parent (torch imported once, before forking)."""

from __future__ import annotations

import multiprocessing
import time
from typing import Callable


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
