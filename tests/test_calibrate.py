"""scripts.calibrate under real mpiexec: a fitted hierarchy and the table of what changed; bad arguments or a
hierarchy that does not match the job get one line from rank 0 and exit 2. (The fit itself: tests/test_testbed.py.)"""

import json

import numpy as np
import pytest

from p2synth.hierarchies.model import Hierarchy, Level
from p2synth.runtime.calibration import Bench, BenchComm
from scripts.tables import printed_rows
from tests.runtime_support import assert_run_record, run_mpi, utc_before

pytestmark = pytest.mark.mpi
H = Hierarchy(name="local", levels=(Level(name="node", count=1), Level(name="core", count=2, bandwidth_GBps=1.0)))


def calibrate(tmp_path, *args, hierarchy=H):
    """Run the calibration on 2 ranks with `hierarchy`; the job's outcome."""
    (tmp_path / "h.json").write_text(hierarchy.model_dump_json())
    return run_mpi(2, ["-m", "scripts.calibrate", "--hierarchy", str(tmp_path / "h.json"), "--out",
                       str(tmp_path / "fitted.json"), *args], timeout=300)


def test_two_local_ranks_fit_the_core_level_and_print_what_changed(tmp_path):
    before = utc_before()
    job = calibrate(tmp_path, "--max-bytes", "1M", "--iters", "2", "--small-iters", "3", "--warmup", "0")
    assert job.returncode == 0, job.stderr[-2000:]
    assert_run_record(json.loads((tmp_path / "fitted.calibration.json").read_text())["run"], before)
    fitted = Hierarchy.model_validate_json((tmp_path / "fitted.json").read_text())
    assert fitted.name == "local-fitted" and fitted.counts == (1, 2)
    core = fitted.levels[1]
    assert core.bandwidth_GBps > 0 and core.bandwidth_GBps != 1.0 and core.latency_us > 0
    rows = {row[0]: row for row in printed_rows(job.stderr)}
    assert rows["node"][1:] == ["- -> -", "- -> -", "- -> -", "- -> -", "not measured: count 1"]
    assert rows["core"][2] == f"1 -> {core.bandwidth_GBps:g}" and rows["core"][1] == f"- -> {core.latency_us:g}"
    # the two-way probe moves the same bytes as the one-way one, in rounds of 512 KiB
    duplex = json.loads((tmp_path / "fitted.calibration.json").read_text())["levels"][0]["duplex"]
    assert duplex["bytes_each"] == duplex["two_way_bytes_each"] == 1 << 20 and duplex["two_way_round_bytes"] == 512 << 10


class _Recorder(BenchComm):
    """A BenchComm on one rank that records the exchanges instead of making them."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int]] = []
        self.clock = 0.0

    def rank(self) -> int:
        return 0

    def wtime(self) -> float:
        self.clock += 1.0
        return self.clock

    def message(self, buf):
        return buf

    def sendrecv(self, out, back, peer, tag) -> None:
        self.sent.append((len(out), peer))

    def barrier(self) -> None:
        pass

    def max_on(self, value, root):
        return value

    def ibarrier(self):
        return type("Done", (), {"Test": staticmethod(lambda: True)})()


def test_the_exchange_runs_its_rounds_back_to_back_within_one_timed_iteration():
    """Bench.exchange(size, rounds): each timed iteration sends `rounds` messages of `size` bytes to the partner."""
    comm = _Recorder()
    bench = Bench(comm, 3, 3, 1, np.zeros(1 << 20, dtype=np.uint8))
    samples = bench.exchange([0], [1], 512 << 10, rounds=4)
    assert len(samples) == 3 and comm.sent == [(512 << 10, 1)] * (4 * (1 + 3))


@pytest.mark.parametrize("args,hierarchy,line", [
    (["--iters", "0"], H, "error: --iters and --small-iters must be at least 1, --warmup at least 0"),
    ([], Hierarchy(levels=(Level(name="node", count=2), Level(name="core", count=2))),
     "error: the hierarchy has 4 devices (node 2 x core 2) but the job has 2 ranks; run with -n 4"),
])
def test_bad_arguments_get_one_line_from_rank_0_and_exit_2(tmp_path, args, hierarchy, line):
    job = calibrate(tmp_path, *args, hierarchy=hierarchy)
    assert job.returncode == 2 and [x for x in job.stderr.splitlines() if x.startswith("error:")] == [line], job.stderr
    assert not (tmp_path / "fitted.json").exists()
