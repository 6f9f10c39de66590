"""runtime.provenance: what a measuring run records of the checkout it ran and of when it ran."""

from __future__ import annotations

import re
import subprocess

from p2synth.runtime.provenance import RunStart, checkout_state, utc_now
from tests.runtime_support import assert_run_record, utc_before


def test_a_run_records_the_checkouts_commit_and_its_start_and_end():
    before = utc_before()
    start = RunStart.now()
    assert_run_record(start.record(), before)


def test_a_changed_tracked_file_makes_the_checkout_dirty(tmp_path):
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert checkout_state(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "untracked.txt").write_text("not tracked\n")  # an untracked file changes nothing that was measured
    assert checkout_state(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "a.txt").write_text("two\n")
    assert checkout_state(tmp_path) == {"commit": head, "dirty": True}


def test_outside_a_checkout_nothing_is_claimed(tmp_path):
    assert checkout_state(tmp_path) == {"commit": None, "dirty": None}


def test_times_are_utc_iso_8601_to_the_second():
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", utc_now())
