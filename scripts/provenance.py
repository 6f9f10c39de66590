"""Where a measurement was taken: the checkout's commit and whether its tracked files were changed (the tools under
scripts/ that write raw files record it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def checkout_state(root: Path = ROOT) -> dict:
    """``commit`` (``git rev-parse HEAD`` of the checkout at `root`) and ``dirty`` (whether a tracked file differs
    from it); both None where git cannot say. ``safe.directory`` lets root (the testbed runs as root) read a
    checkout it does not own."""
    def git(*argv: str) -> str | None:
        try:
            done = subprocess.run(["git", "-c", f"safe.directory={root}", "-C", str(root), *argv],
                                  capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    commit, status = git("rev-parse", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip() if commit else None, "dirty": None if status is None else bool(status.strip())}
