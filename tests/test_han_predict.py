"""scripts.han_predict: a han_check run predicted on a hierarchy; bad input gets one line and exit 2."""

import math

from p2synth.hierarchies import Collective, Hierarchy, Level
from p2synth.hierarchies.model import CollectiveLibrary
from scripts import han_predict

H = Hierarchy(levels=(Level(name="node", count=2, bandwidth_GBps=1.0, uplink_GBps=1.0, latency_us=10.0),
                      Level(name="core", count=2, bandwidth_GBps=10.0, latency_us=1.0)), library=CollectiveLibrary.OPEN_MPI)


def test_each_default_line_is_predicted_and_the_median_printed(tmp_path, capsys):
    """A coll/han broadcast over 2 hosts x 2 ranks at 64 MiB, by hand: one copy out of the root's NIC (m / 1 GB/s),
    the intra-host broadcast of one 64 KiB segment (fill), alpha(node) per segment; the ^han line is ignored."""
    (tmp_path / "h.json").write_text(H.model_dump_json())
    run = tmp_path / "run.txt"
    m = 64 << 20
    expected = m / 1e9 + 65536 / 10e9 + 10e-6 * m / 65536
    run.write_text(f"# header\ndefault   64 MiB Bcast {2e3 * expected:.3f} ms\n^han      64 MiB Bcast 1.0 ms\n")
    assert math.isclose(han_predict.predicted_seconds(H, Collective.BROADCAST, m), expected, rel_tol=1e-12)
    assert han_predict.main([str(tmp_path / "h.json"), str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and "ratio 2.00" in out[0] and out[1] == "median measured / predicted: 2.00 over 1 calls"


def test_a_missing_file_or_a_run_without_default_lines_exits_2(tmp_path, capsys):
    (tmp_path / "h.json").write_text(H.model_dump_json())
    (tmp_path / "empty.txt").write_text("^han 4 MiB Bcast 1.0 ms\n")
    assert han_predict.main([str(tmp_path / "h.json"), str(tmp_path / "nope.txt")]) == 2
    assert han_predict.main([str(tmp_path / "h.json"), str(tmp_path / "empty.txt")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("han_predict: ") for line in err)
