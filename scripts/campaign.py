"""What the testbed campaigns share (scripts/bench_limit.py, scripts/bench_step.py): each testbed's session, read raw files.

A campaign measures on one emulated cluster after another and writes its raw
JSON after every case; ``--from-raw`` rebuilds its tables from such files
without a testbed.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from p2synth.hierarchies.cli import UsageError, one_line, write_json_atomic
from p2synth.hierarchies.model import Hierarchy
from scripts.accuracy.suite import Testbed


def now() -> str:
    """The time, UTC, as the raw files record it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def log_line(text: str) -> None:
    """A campaign's progress line on stderr, with the time."""
    print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


@contextmanager
def testbed_session(tb: Testbed, entry: dict, raw: dict, out: Path, workdir: Path, calibrate_bytes: int, instance: str,
                    log: Callable[[str], None]) -> Iterator[Hierarchy | None]:
    """Testbed `tb` up and calibrated for the block: yields the fitted hierarchy (its record added to `entry`), or None
    when it could not be brought up or calibrated (the block then measures nothing).

    A failure is recorded in ``entry["error"]`` and logged, and the campaign
    goes on with the next testbed; the testbed goes down and `raw` is written
    to `out` in every case.
    """
    from scripts.accuracy.measure import testbed, up_and_calibrate

    testbed("down", check=False, instance=instance)
    try:
        try:
            fitted, record = up_and_calibrate(tb, workdir, calibrate_bytes, log, instance=instance)
        except _FAILURES as e:
            _failed(tb, entry, e, log)
            yield None
            return
        entry.update(record)
        write_json_atomic(raw, out)
        try:
            yield fitted
        except _FAILURES as e:
            _failed(tb, entry, e, log)
    finally:
        testbed("down", check=False, instance=instance)
        write_json_atomic(raw, out)


_FAILURES = (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired)


def _failed(tb: Testbed, entry: dict, error: BaseException, log: Callable[[str], None]) -> None:
    entry["error"] = one_line(error)[:2000]
    log(f"[{tb.name}] FAILED: {entry['error']}")


def read_raws(paths: list[Path], check: Callable[[dict], object]) -> dict:
    """The raw documents at `paths` as one (their testbeds in order, each with its file's ``checkout``, ``commit``,
    ``started`` and ``finished`` as ``document``), each passed to `check` (its rows) first; UsageError naming the
    first that is unreadable."""
    testbeds = []
    for path in paths:
        try:
            raw = json.loads(path.read_text())
            check(raw)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UsageError(f"cannot read raw measurements {path}: {one_line(e)}") from None
        provenance = {k: raw.get(k) for k in ("checkout", "commit", "started", "finished")}
        testbeds += [{**tb, "document": provenance} for tb in raw["testbeds"]]  # each testbed keeps its file's commit
    return {"testbeds": testbeds}


def campaign_input(argv: list[str] | None, parse_args: Callable[[list[str] | None], argparse.Namespace],
                   check: Callable[[dict], object], measure: Callable[[argparse.Namespace, Callable[[str], None]], dict],
                   errors: tuple[type[Exception], ...] = (UsageError,)) -> tuple[argparse.Namespace, dict] | None:
    """A campaign's command line and its raw document: read from ``--from-raw`` (:func:`read_raws`), or measured by
    `measure` (a plain kill still ends it through the finally that brings the testbed down). On bad usage or an
    unreadable file (`errors`), one ``error:`` line on stderr and None (the caller exits 2)."""
    try:
        args = parse_args(argv)
        raw = read_raws(args.from_raw, check) if args.from_raw is not None else None
    except errors as e:
        print(f"error: {e}", file=sys.stderr)
        return None
    if raw is None:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        raw = measure(args, log_line)
    return args, raw
