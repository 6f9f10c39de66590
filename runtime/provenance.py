"""Where and when a measurement was taken: the p2synth checkout's commit, whether its tracked files were changed, and
UTC times. The tools that write measured figures record them: ``runtime.tune`` and ``runtime.client_tune`` in a tuned
plan's ``tuned`` block, ``runtime.validate`` in ``validated``, ``runtime.step`` under ``run``, the benchmarks under
scripts/ in their raw files."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout (an editable install), or where the package is installed


def checkout_state(root: Path = ROOT) -> dict:
    """``commit`` (``git rev-parse HEAD`` of the checkout at `root`) and ``dirty`` (whether a tracked file differs
    from it); both None where git cannot say (no git, or an installed package rather than a checkout).
    ``safe.directory`` lets root (the testbed runs as root) read a checkout it does not own."""
    def git(*argv: str) -> str | None:
        try:
            done = subprocess.run(["git", "-c", f"safe.directory={root}", "-C", str(root), *argv],
                                  capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    commit, status = git("rev-parse", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip() if commit else None, "dirty": None if status is None else bool(status.strip())}


def utc_now() -> str:
    """The time now in UTC, ISO 8601 to the second (``2026-12-06T15:53:14+00:00``)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def package_version() -> str | None:
    """The installed p2synth's version, None where it is not installed (run from a bare checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("p2synth")
    except PackageNotFoundError:
        return None


@dataclass(frozen=True)
class RunStart:
    """The checkout a run measured with and when it started; :meth:`record` at its end gives what the run's output
    records of it."""

    commit: str | None
    dirty: bool | None
    started_at: str

    @classmethod
    def now(cls) -> RunStart:
        """The checkout's state (:func:`checkout_state`) and the time, taken now, as a run starts."""
        return cls(**checkout_state(), started_at=utc_now())

    def record(self) -> dict:
        """``p2synth`` (the version), ``commit``, ``dirty``, ``started_at`` and ``ended_at`` (now)."""
        return {"p2synth": package_version(), "commit": self.commit, "dirty": self.dirty,
                "started_at": self.started_at, "ended_at": utc_now()}
