"""scripts.han_check: MPI's own calls timed under real mpiexec, the simulator's coll/han term beside each; bad input
gets one line and exit 2."""

import math

import pytest

from p2synth.hierarchies import Collective, Hierarchy, Level
from p2synth.hierarchies.model import CollectiveLibrary
from scripts import han_check
from scripts.tables import printed_rows
from tests.runtime_support import ROOT, run_mpi

H = Hierarchy(levels=(Level(name="node", count=2, bandwidth_GBps=1.0, uplink_GBps=1.0, latency_us=10.0),
                      Level(name="core", count=2, bandwidth_GBps=10.0, latency_us=1.0)), library=CollectiveLibrary.OPEN_MPI)
CALLS = ("Allreduce", "Reduce_scatter_block", "Reduce", "Bcast")


def test_each_default_record_is_predicted_and_the_median_printed(tmp_path, capsys):
    """A coll/han broadcast over 2 hosts x 2 ranks at 64 MiB, by hand: one copy out of the root's NIC (m / 1 GB/s),
    the intra-host broadcast of one 64 KiB segment (fill), alpha(node) per segment; the ^han record is ignored."""
    (tmp_path / "h.json").write_text(H.model_dump_json())
    run = tmp_path / "run.txt"
    m = 64 << 20
    expected = m / 1e9 + 65536 / 10e9 + 10e-6 * m / 65536
    run.write_text(f"# header\ndefault   64 MiB Bcast {2e3 * expected:.3f} ms\n^han      64 MiB Bcast 1.0 ms\n")
    assert math.isclose(han_check.predicted_seconds(H, Collective.BROADCAST, m), expected, rel_tol=1e-12)
    assert han_check.main(["predict", str(tmp_path / "h.json"), str(run)]) == 0
    out = capsys.readouterr().out
    assert printed_rows(out) == [["broadcast", "64", f"{2e3 * expected:.1f}", f"{1e3 * expected:.1f}", "2.00"]]
    assert out.splitlines()[-1] == "median measured / predicted: 2.00 over 1 calls"


@pytest.mark.parametrize("testbed,median", [("4x2-1gbit", "0.85"), ("2x2x2-1gbit-400mbit", "0.96"), ("4x2-200mbit", "0.95")])
def test_the_recorded_testbed_runs_give_the_medians_docs_simulator_reports(testbed, median, capsys):
    """docs/simulator.md: the han runs (docs/measurements/han/) on the campaign's fitted hierarchies, 8 calls each."""
    hierarchy, run = ROOT / f"docs/accuracy/hierarchies/{testbed}.json", ROOT / f"docs/measurements/han/{testbed}.txt"
    assert han_check.main(["predict", str(hierarchy), str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"median measured / predicted: {median} over 8 calls"


@pytest.mark.parametrize("argv,needle", [
    (["predict", "{h}", "{tmp}/nope.txt"], "cannot read run"),
    (["predict", "{h}", "{tmp}/han-only.txt"], "holds no 'default' record"),
    (["predict", "{tmp}/flat.json", "{tmp}/han-only.txt"], "library"),
    (["predict", "{tmp}/nope.json", "{tmp}/han-only.txt"], "cannot read hierarchy"),
    (["measure", "--sizes", "64K"], "whole number of MiB"),
    (["measure", "--sizes", "lots"], "bad size"),
    (["replay"], "invalid choice"),
])
def test_bad_input_gets_one_line_and_exit_2(tmp_path, capsys, argv, needle):
    (tmp_path / "h.json").write_text(H.model_dump_json())
    (tmp_path / "flat.json").write_text(H.model_copy(update={"library": None}).model_dump_json())
    (tmp_path / "han-only.txt").write_text("^han       4 MiB Bcast 1.0 ms\n")
    argv = [a.format(h=tmp_path / "h.json", tmp=tmp_path) for a in argv]
    assert han_check.main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err


@pytest.mark.mpi
def test_measure_under_real_mpiexec_records_every_call_and_predict_reads_them(tmp_path):
    """``measure --sizes 1M:2M --out`` on 2 ranks: one positive median per call and size, tagged 'default', in the
    table and the file; ``predict`` then prices each record (a 2-rank hierarchy of one host, coll/han's
    pass-through)."""
    run = tmp_path / "run.txt"
    out = run_mpi(2, ["-m", "scripts.han_check", "measure", "--sizes", "1M:2M", "--out", str(run)], timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    records = [line.split() for line in run.read_text().splitlines()]
    assert [(r[0], r[1], r[2], r[3]) for r in records] == [("default", size, "MiB", call) for size in ("1", "2") for call in CALLS]
    assert all(float(r[4]) > 0 and r[5] == "ms" for r in records)
    assert [(c[0], c[1]) for c in printed_rows(out.stdout)] == [(call, size) for size in ("1", "2") for call in CALLS]
    (tmp_path / "h.json").write_text(Hierarchy(levels=(Level(name="node", count=1), Level(name="core", count=2)),
                                               library=CollectiveLibrary.OPEN_MPI).model_dump_json())
    assert han_check.main(["predict", str(tmp_path / "h.json"), str(run)]) == 0


@pytest.mark.mpi
def test_measure_layouts_needs_eight_ranks_and_rank_0_says_so_in_one_line():
    out = run_mpi(2, ["-m", "scripts.han_check", "measure", "--layouts"], timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    lines = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert lines == ["error: --layouts needs 8 ranks (4 nodes x 2), the job has 2"], out.stderr
