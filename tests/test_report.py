"""The tables solver.run prints fit the width they are printed at, every placement whole, plain text off a terminal,
the same bytes under mpirun as serially, and the first table ends with the next command (issue 48)."""

import contextlib
import io
import json
import os
import subprocess
import sys

import pytest

from p2synth.solver.report import fmt_time, in_unit, time_unit
from p2synth.solver.run import main
from p2synth.solver.terminal import console
from p2synth.solver.textgrid import Column, Grid, Row, fold
from tests.runtime_support import MPI_ENV, ROOT, require_mpiexec

FIRST = ROOT / "examples" / "gpt-3d-on-dgx-a100.json"  # the README's first command


def _printed(spec, columns: int, monkeypatch, *args) -> str:
    """solver.run's stdout with `spec` at COLUMNS=`columns`, stdout not a terminal (as into a file)."""
    monkeypatch.setenv("COLUMNS", str(columns))
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        assert main([str(spec), "--jobs", "1", *args]) == 0, stderr.getvalue()
    return stdout.getvalue()


@pytest.mark.parametrize("columns", [80, 120])
def test_the_first_table_fits_the_width_and_shows_every_placement_whole(columns, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "plan.json"
    text = _printed(FIRST, columns, monkeypatch, "--out", "plan.json")
    lines = text.splitlines()
    assert "\x1b" not in text and max(map(len, lines)) <= columns
    hint = next(i for i, line in enumerate(lines) if line.startswith("next: "))
    first = lines[:hint]  # the first table (the step-time table), up to its hint
    assert first[0].startswith("training step")
    placements = json.loads(out.read_text())["placements"]
    for p in placements:  # every placement whole, on a line of its own, in the first table
        assert any(line.strip().startswith(p["description"]) for line in first), p["description"]
    assert lines[hint] == "next: python -m solver.exports plan.json --placement 0 --format torch"


def test_without_out_the_hint_says_how_to_save_the_plan(monkeypatch):
    lines = _printed(FIRST, 80, monkeypatch).splitlines()
    assert "next: save the plan with --out plan.json, then export it (docs/exports.md)" in lines


def test_a_placement_too_long_for_a_line_folds_between_its_axes_only():
    placement = "data=[node 2, gpu 2] pipeline=[node 2] tensor=[node 2, gpu 2]"
    lines = fold((placement, "[[2,2],[1,2],[2,2]]"), 40)
    assert lines == ["data=[node 2, gpu 2] pipeline=[node 2]", "  tensor=[node 2, gpu 2]", "  [[2,2],[1,2],[2,2]]"]
    assert fold((placement, "[[2,2],[1,2],[2,2]]"), 70) == [placement, "  [[2,2],[1,2],[2,2]]"]  # whole where it fits


def test_headers_fold_only_where_the_columns_would_not_fit():
    grid = Grid("t", [Column("#"), Column("comm sum"), Column("sum rank")], [Row(("0", "37.49", "0"), (("d=[gpu 4]",),))])
    wide = [text for _, text in grid.render(80)]
    assert wide == ["t", "#  comm sum  sum rank", "-" * 21, "0     37.49         0", "   d=[gpu 4]"]
    narrow = [text for _, text in grid.render(14)]
    assert narrow[1:3] == ["    comm   sum", "#    sum  rank"] and max(map(len, narrow)) <= 14


def test_a_difference_that_rounds_to_nothing_prints_without_a_sign():
    """The bubble of a step without a pipeline is 0 less rounding: never ``-0.0 us``."""
    assert fmt_time(-0.0) == "0.0 us" and fmt_time(-1e-12) == "0.0 us"
    assert in_unit(-1e-12, time_unit([0.2])) == "0.00" and in_unit(-0.002, time_unit([0.2])) == "-2.00"


def test_styles_and_the_terminals_width_only_on_a_terminal_of_this_process(monkeypatch):
    """A rank under mpirun writes on Open MPI's 80-column pseudo-terminal whatever mpirun's output is: plain there."""
    leader, follower = os.openpty()
    with os.fdopen(follower, "w") as tty:
        monkeypatch.setattr(sys, "stdout", tty)
        monkeypatch.setenv("COLUMNS", "123")
        assert console().is_terminal
        plain = console(mpi=True)
        assert not plain.is_terminal and plain.width == 123 and plain.color_system is None
        monkeypatch.delenv("COLUMNS")
        assert console(mpi=True).width == 80
    os.close(leader)


@pytest.mark.mpi
def test_under_mpirun_rank_0_prints_the_bytes_a_serial_run_prints(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    with open(tmp_path / "serial.txt", "w") as f:
        serial = subprocess.run([sys.executable, "-m", "solver.run", str(FIRST)], cwd=ROOT, env=env, stdout=f,
                                stderr=subprocess.PIPE, text=True, timeout=300)
    assert serial.returncode == 0, serial.stderr
    with open(tmp_path / "mpi.txt", "w") as f:
        job = subprocess.run([require_mpiexec(), "-n", "2", sys.executable, "-m", "solver.run", str(FIRST)], cwd=ROOT,
                             env={**env, **MPI_ENV}, stdout=f, stderr=subprocess.PIPE, text=True, timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    text = (tmp_path / "mpi.txt").read_text()
    assert text == (tmp_path / "serial.txt").read_text() and "\x1b" not in text


def test_a_workload_too_wide_for_a_column_per_request_puts_their_times_under_each_placement(monkeypatch, tmp_path):
    """Five requests do not fit 80 columns side by side: each placement's line is followed by its requests' times."""
    monkeypatch.chdir(tmp_path)
    text = _printed(ROOT / "examples" / "moe-on-dgx-h100.json", 80, monkeypatch, "--out", "plan.json")
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80
    plan = json.loads((tmp_path / "plan.json").read_text())
    for p in plan["placements"]:
        at = next(i for i, line in enumerate(lines) if line.strip().startswith(p["description"]))
        breakdown = " ".join(lines[at + 1:at + 4])
        assert all(f"{r['name']} {r['step_s'] * 1e3:.2f}" in breakdown for r in p["requests"]), breakdown
    assert any(line.startswith("under each placement, every request's time: token_dispatch 48 x 8 MiB") for line in lines)
