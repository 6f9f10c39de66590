"""Sweeps: reuse across placements, --jobs and MPI ranks give byte-identical results; a failing rank ends the job."""

import json
import subprocess
import sys

import pytest

from p2synth.solver.spec import load_problem
from p2synth.solver.sweep import assignment, groups, work
from tests.runtime_support import ROOT, run_mpi

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
    # ranks get whole groups, every group once, the largest work first, balanced
    for ranks in (1, 2, 4, 8):
        split = assignment(problem, found, ranks)
        assert sorted(i for mine in split for g in mine for i in g) == list(range(8))
        loads = [sum(work(problem, g) for g in mine) for mine in split]
        assert max(loads) - min(loads) <= max(work(problem, g) for g in found)


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
@pytest.mark.parametrize("ranks", [2, 4])
def test_mpi_ranks_give_the_same_json_and_rank_0_alone_prints(spec, serial, tmp_path, ranks):
    out = tmp_path / "r.json"
    job = run_mpi(ranks, ["-m", "solver.run", str(spec), "--top", "5", "--out", str(out)], timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    assert out.read_bytes() == serial
    assert job.stdout.count("all_reduce over dp on rack2") == 1  # the table's title, once: rank 0's


@pytest.mark.mpi
def test_a_failing_rank_ends_the_job_with_its_error(spec, tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    monkeypatch.setenv("P2SYNTH_FAIL_ON_RANK", "1")  # rank 1 raises before solving anything
    job = run_mpi(2, ["-m", "solver.run", str(spec), "--quiet", "--out", str(out)], timeout=120)
    assert job.returncode != 0 and "rank 1" in job.stderr and "P2SYNTH_FAIL_ON_RANK" in job.stderr
    assert not out.exists()


@pytest.mark.mpi
def test_a_budget_that_runs_out_under_mpi_exits_4_on_every_rank(spec, tmp_path):
    out = tmp_path / "r.json"
    job = run_mpi(2, ["-m", "solver.run", str(spec), "--quiet", "--timeout", "0.01", "--out", str(out)], timeout=120)
    assert job.returncode == 4, job.stderr
    assert json.loads(out.read_text())["complete"] is False and job.stderr.count("timeout:") == 1
