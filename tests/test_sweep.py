"""Sweeps: reuse across placements, --jobs and MPI ranks give byte-identical results; a failing rank ends the job."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from p2synth.solver.spec import load_problem
from p2synth.solver.sweep import groups
from tests.runtime_support import MPI_ENV, ROOT, find_mpiexec, run_mpi

# 8 placements of dp 8 x tp 2 x pp 2 on rack 2 x node 4 x gpu 4, in 5 groups of equal cost signatures
SPEC = {
    "hierarchy": {"name": "rack2", "levels": [
        {"name": "rack", "count": 2, "bandwidth_GBps": 3, "latency_us": 30, "uplink_GBps": 6},
        {"name": "node", "count": 4, "bandwidth_GBps": 12.5, "latency_us": 14, "uplink_GBps": 25},
        {"name": "gpu", "count": 4, "bandwidth_GBps": 240, "latency_us": 3.4}]},
    "axes": [{"name": "dp", "size": 8}, {"name": "tp", "size": 2}, {"name": "pp", "size": 2}],
    "request": {"axes": ["dp"], "collective": "all_reduce"},
    "message_bytes": 64 << 20, "max_steps": 4,
}


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    path = tmp_path_factory.mktemp("sweep") / "spec.json"
    path.write_text(json.dumps(SPEC))
    return path


def _solve(*args, env=None):
    return subprocess.run([sys.executable, "-m", "solver.run", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False, env=env)


@pytest.fixture(scope="module")
def serial(spec, tmp_path_factory):
    out = tmp_path_factory.mktemp("serial") / "r.json"
    r = _solve(str(spec), "--quiet", "--jobs", "1", "--top", "5", "--out", str(out))
    assert r.returncode == 0, r.stderr
    return out.read_bytes()


def test_the_groups_share_cost_signatures(spec):
    problem = load_problem(spec)
    found = groups(problem)
    assert sorted(i for g in found for i in g) == list(range(8)) and len(found) == 5
    for g in found:  # placements of a group have the same dp row: the only thing an all_reduce over dp sees
        assert len({problem.matrices[i][0] for i in g}) == 1



@pytest.mark.parametrize("flags", [["--no-reuse", "--jobs", "1"], ["--jobs", "2"], ["--jobs", "3", "--no-reuse"]])
def test_reuse_and_worker_processes_give_the_same_json(spec, serial, tmp_path, flags):
    out = tmp_path / "r.json"
    r = _solve(str(spec), "--quiet", "--top", "5", "--out", str(out), *flags)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == serial
    doc = json.loads(serial)
    assert doc["complete"] and doc["proof"] == "certificate" and len(doc["placements"]) == 8
    assert all(p["optimal"] and all(q["verified"] for q in p["programs"]) for p in doc["placements"])


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_mpi_ranks_give_the_same_json_and_rank_0_alone_prints(spec, serial, tmp_path, monkeypatch, ranks):
    out, shares = tmp_path / "r.json", tmp_path / "shares.json"
    monkeypatch.setenv("P2SYNTH_SWEEP_SHARES", str(shares))  # rank 0 writes the placements each rank solved
    job = run_mpi(ranks, ["-m", "solver.run", str(spec), "--top", "5", "--out", str(out)], timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    assert out.read_bytes() == serial
    assert job.stdout.count("all_reduce over dp on rack2") == 1  # the table's title, once: rank 0's
    assert "osc_ucx" not in job.stderr  # no bogus Open MPI one-sided error for the sweep's counters on one host
    solved = json.loads(shares.read_text())
    assert len(solved) == ranks and sorted(i for s in solved for i in s) == list(range(8))  # each placement once
    problem = load_problem(spec)
    assert all(set(g) <= set(s) or not set(g) & set(s) for g in groups(problem) for s in solved)  # whole groups
    if ranks == 2:  # 5 groups, each far longer than taking one from the counter: rank 0 solves its share too
        assert solved[0] and solved[1], solved


# two placements of x 32 x y 32 on five levels of 4, all_reduce over both axes: one with 10 cells (4^10 abstract
# states, minutes of search here) and one with 6 cells (about a second); different cost signatures, so two groups
TEN_AND_SIX = {
    "hierarchy": {"name": "t", "levels": [{"name": f"l{i}", "count": 4} for i in range(5)]},
    "axes": [{"name": "x", "size": 32}, {"name": "y", "size": 32}], "request": {"axes": ["x", "y"], "collective": "all_reduce"},
    "message_bytes": 1 << 30, "max_steps": 12,
    "placements": [[[2, 2, 2, 2, 2], [2, 2, 2, 2, 2]], [[4, 4, 2, 1, 1], [1, 1, 2, 4, 4]]],
}


def _failure_line(stderr: str, rank: int) -> None:
    # prterun ends its MPI_ABORT notice with a NUL byte, which may come out just before the rank's own line
    lines = [line for line in stderr.replace("\0", "").splitlines() if "error" in line]
    assert lines == [f"internal error: rank {rank}: RuntimeError: failure injected by P2SYNTH_FAIL_ON_RANK={rank}"], stderr


@pytest.mark.mpi
@pytest.mark.parametrize("rank", [0, 1])
def test_a_failing_rank_ends_the_job_with_its_error(spec, tmp_path, monkeypatch, rank):
    out = tmp_path / "r.json"
    monkeypatch.setenv("P2SYNTH_FAIL_ON_RANK", str(rank))  # this rank raises before solving anything
    job = run_mpi(2, ["-m", "solver.run", str(spec), "--quiet", "--out", str(out)], timeout=120)
    assert job.returncode == 1
    _failure_line(job.stderr, rank)
    assert not out.exists()


@pytest.mark.mpi
@pytest.mark.parametrize("rank", [0, 2])
def test_a_failing_rank_ends_the_job_while_another_still_solves(tmp_path, monkeypatch, rank):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(TEN_AND_SIX))
    out = tmp_path / "r.json"
    # `rank` fails at once; one of the others takes the 10-cell group (first in the order) and searches for minutes
    monkeypatch.setenv("P2SYNTH_FAIL_ON_RANK", str(rank))
    started = time.monotonic()
    job = run_mpi(3, ["-m", "solver.run", str(spec), "--quiet", "--out", str(out)], timeout=180)
    seconds = time.monotonic() - started
    assert job.returncode == 1
    _failure_line(job.stderr, rank)
    assert seconds < 30 and not out.exists()  # the 10-cell search is cut short, not waited for


@pytest.mark.mpi
def test_a_budget_that_runs_out_under_mpi_exits_4_on_every_rank(spec, tmp_path):
    out = tmp_path / "r.json"
    job = run_mpi(2, ["-m", "solver.run", str(spec), "--quiet", "--timeout", "0.01", "--out", str(out)], timeout=120)
    assert job.returncode == 4, job.stderr
    assert json.loads(out.read_text())["complete"] is False and job.stderr.count("timeout:") == 1


@pytest.mark.mpi
def test_the_budget_bounds_the_groups_on_the_ranks(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(TEN_AND_SIX))
    out = tmp_path / "r.json"
    started = time.monotonic()
    job = run_mpi(3, ["-m", "solver.run", str(spec), "--quiet", "--timeout", "8", "--out", str(out)], timeout=180)
    assert time.monotonic() - started < 8 + 30
    assert job.returncode == 4, job.stderr
    (line,) = [line for line in job.stderr.splitlines() if line.startswith("timeout:")]
    assert line.startswith("timeout: --timeout 8 s ran out with 2 of 2 placement(s) reached, 1 of them not fully proved")
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and [p["timed_out"] for p in doc["placements"]].count(True) == 1


def _rank_pid(parent: int, rank: int) -> int | None:
    """The pid of `rank` among the children of mpiexec `parent` (Linux /proc), None while it has not started."""
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == parent:
                if f"OMPI_COMM_WORLD_RANK={rank}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                    return int(entry.name)
        except (OSError, IndexError, ValueError):
            continue
    return None


@pytest.mark.mpi
def test_ctrl_c_on_rank_0_ends_the_job_with_130(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(TEN_AND_SIX))
    proc = subprocess.Popen([find_mpiexec(), "-n", "2", sys.executable, "-m", "solver.run", str(spec), "--quiet"], cwd=ROOT,
                            env={**os.environ, **MPI_ENV}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ranks = []
    try:
        time.sleep(15)  # start-up, then rank 0 or 1 is deep in the 10-cell search (minutes), rank 0 maybe waiting
        ranks = [_rank_pid(proc.pid, r) for r in (0, 1)]
        assert None not in ranks and proc.poll() is None
        os.kill(ranks[0], signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:  # the ranks are not in mpiexec's process group: end them too if the job hangs
        for pid in ranks:
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.kill(pid, signal.SIGKILL)
        proc.kill()
    # prterun may print its own notice of the ended job first (ending it with a NUL byte): ours is one line of it
    assert proc.returncode == 130 and "interrupted" in err.replace("\0", "").splitlines(), err
