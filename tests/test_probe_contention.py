"""scripts/probe_contention.py: its pairs per level, one real 4-rank MPI run, the table of a recorded file, and its
one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from p2synth.hierarchies.model import Hierarchy
from p2synth.runtime.calibration import BenchComm
from scripts import probe_contention
from tests.runtime_support import run_mpi

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "docs" / "measurements" / "contention" / "2x4x2-1gbit-400mbit.json"
H8 = {"name": "t", "levels": [{"name": "node", "count": 4}, {"name": "core", "count": 2}]}


def test_each_level_pairs_a_rank_with_its_partner_in_the_next_unit():
    h = Hierarchy.model_validate(H8)
    assert probe_contention.level_pairs(h, 1) == ([(0, 1)], [(0, 1), (2, 3), (4, 5), (6, 7)])
    assert probe_contention.level_pairs(h, 0) == ([(0, 2)], [(0, 2), (1, 3), (4, 6), (5, 7)])
    three = Hierarchy.model_validate({"name": "t", "levels": [{"name": "node", "count": 3}, {"name": "core", "count": 2}]})
    assert probe_contention.level_pairs(three, 0)[1] == [(0, 2), (1, 3)]  # the third unit has no partner
    # 3 levels: pairs stay inside their rack, the odd node of each rack left out; a level of one unit has none
    racks = Hierarchy.model_validate({"name": "t", "levels": [{"name": "rack", "count": 2}, {"name": "node", "count": 3},
                                                             {"name": "core", "count": 2}]})
    assert probe_contention.level_pairs(racks, 1) == ([(0, 2)], [(0, 2), (1, 3), (6, 8), (7, 9)])
    assert probe_contention.level_pairs(racks, 0)[1] == [(r, r + 6) for r in range(6)]
    single = Hierarchy.model_validate({"name": "t", "levels": [{"name": "rack", "count": 2}, {"name": "node", "count": 1},
                                                              {"name": "core", "count": 2}]})
    assert probe_contention.level_pairs(single, 1) == ([], [])


class FakeComm(BenchComm):
    """One rank's side of a calibration communicator that logs its calls and never blocks (each rank is run on its
    own)."""

    def __init__(self, rank: int, size: int) -> None:
        self._rank, self.size, self.calls = rank, size, []

    def rank(self) -> int:
        return self._rank

    def wtime(self) -> float:
        return 0.0

    def message(self, buf):
        return buf

    def ibarrier(self):
        self.calls.append("sleep")
        return type("Done", (), {"Test": lambda _self: True})()

    def barrier(self) -> None:
        self.calls.append("barrier")

    def sendrecv(self, out, back, peer: int, tag: int) -> None:
        assert out.nbytes == back.nbytes
        self.calls.append(f"exchange {peer} {out.nbytes}")

    def max_on(self, value, root):
        self.calls.append("max")
        return value if self._rank == root else None


def test_in_each_regime_the_pairs_exchange_while_the_others_sleep_or_wait_inside_mpi():
    """One iteration on 4 ranks, pair (0, 2): idle, the others sleep through it; waiting, they wait in a blocking
    barrier; every pair, everyone exchanges. The pair's first exchange is the empty one that starts the clock."""
    def calls(rank, pairs, others_sleep):
        comm = FakeComm(rank, 4)
        probe_contention.Probe(comm, rounds=2, iters=1, warmup=0, max_bytes=8).per_exchange(pairs, 8, others_sleep)
        return comm.calls
    pair = ["sleep", "exchange 2 0", "exchange 2 8", "exchange 2 8"]
    assert calls(0, [(0, 2)], True) == pair + ["sleep", "max"]
    assert calls(1, [(0, 2)], True) == ["sleep", "sleep", "max"]
    assert calls(0, [(0, 2)], False) == pair + ["barrier", "max"]
    assert calls(1, [(0, 2)], False) == ["sleep", "barrier", "max"]
    assert calls(3, [(0, 2), (1, 3)], False) == ["sleep", "exchange 1 0", "exchange 1 8", "exchange 1 8", "barrier", "max"]


def test_a_real_4_rank_run_times_every_level_and_size_three_ways(tmp_path):
    h = tmp_path / "h.json"
    h.write_text(json.dumps({"name": "t", "levels": [{"name": "node", "count": 2}, {"name": "core", "count": 2}]}))
    out = tmp_path / "probe.json"
    job = run_mpi(4, ["-m", "scripts.probe_contention", str(h), "--out", str(out), "--sizes", "8,4096",
                      "--rounds", "4", "--iters", "3", "--warmup", "1"])
    assert job.returncode == 0, job.stderr
    doc = json.loads(out.read_text())
    assert doc["ranks"] == 4 and doc["rounds"] == 4 and doc["started"] <= doc["finished"] and "commit" in doc
    assert [(r["level"], r["bytes"], r["pairs"]) for r in doc["rows"]] == [
        ("node", 8, 2), ("node", 4096, 2), ("core", 8, 2), ("core", 4096, 2)]
    assert all(r[f"{k}_s"] > 0 for r in doc["rows"] for k in probe_contention.REGIMES)


def test_the_recorded_table_is_rebuilt_from_its_raw_file(tmp_path):
    """docs/measurements/contention.md's table is what --from-raw makes of the recorded file."""
    md = tmp_path / "t.md"
    r = subprocess.run([sys.executable, "-m", "scripts.probe_contention", "--from-raw", str(RECORDED), "--markdown", str(md)],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert md.read_text().strip() in (ROOT / "docs" / "measurements" / "contention.md").read_text()
    doc = json.loads(RECORDED.read_text())
    assert doc["ranks"] == 16 and doc["commit"] and doc["dirty"] is False


@pytest.mark.parametrize("argv, line", [
    ([], "error: give HIERARCHY (to measure, under mpirun) or --from-raw FILE"),
    (["--from-raw", "/nonexistent.json"], "error: [Errno 2] No such file or directory"),
    (["h.json", "--sizes", "8,x"], "error: --sizes '8,x': give whole byte counts"),
    (["h.json", "--rounds", "0"], "error: --sizes, --rounds and --iters must be at least 1"),
    (["h.json", "--sizes", str(1 << 30)], "error: --sizes: at most 1048576 bytes"),
    (["h.json", "--out", "/nonexistent/p.json"], "error: --out /nonexistent/p.json: folder /nonexistent does not exist"),
    (["--from-raw", "docs/measurements/contention/2x4x2-1gbit-400mbit.json", "--markdown", "/nonexistent/t.md"],
     "error: --markdown /nonexistent/t.md: folder /nonexistent does not exist"),
    (["--from-raw", "pyproject.toml"], "error: Expecting value"),
])
def test_bad_usage_is_one_line(argv, line):
    r = subprocess.run([sys.executable, "-m", "scripts.probe_contention", *argv], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and r.stderr.startswith(line) and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_raw_file_without_rows_is_one_line(tmp_path):
    for content in ("null", "[]", '{"rows": 3}'):
        raw = tmp_path / "raw.json"
        raw.write_text(content)
        r = subprocess.run([sys.executable, "-m", "scripts.probe_contention", "--from-raw", str(raw)], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and r.stderr == f"error: {raw}: not a probe_contention --out file (no list of rows)\n"


def test_a_rank_count_other_than_the_hierarchys_is_one_line_from_rank_0(tmp_path):
    h = tmp_path / "h.json"
    h.write_text(json.dumps(H8))
    job = run_mpi(2, ["-m", "scripts.probe_contention", str(h)])
    assert job.returncode == 2
    assert job.stderr.count("error: the hierarchy has 8 devices but the job has 2 ranks; run with -n 8") == 1
