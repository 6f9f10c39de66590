"""scripts/bench_alltoall.py: the hierarchical-vs-flat all-to-all table from raw measurements, and (root) end to end.

tests/data/alltoall-raw-tiny.json is a real smoke run of the ``alltoall-tiny``
suite on the 2 x 2 testbed (every program checked exactly).
"""

import json
import os
import subprocess
import sys

import pytest

from scripts.accuracy.cases import measured_time
from scripts.accuracy.report import build_report
from scripts.bench_alltoall import rows
from scripts.tables import printed_rows
from tests.runtime_support import ROOT, testbed_skip_reason

FIXTURE = ROOT / "tests" / "data" / "alltoall-raw-tiny.json"


def run(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scripts.bench_alltoall", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def test_rows_put_each_program_beside_the_flat_one():
    raw = json.loads(FIXTURE.read_text())
    found = rows(build_report(raw))
    measured = {(r["nbytes"], json.dumps(r["program"])): measured_time(r) for r in raw["testbeds"][0]["combos"][0]["results"]}
    assert len(found) == len(measured) == 6  # 3 programs x 2 sizes
    assert {r["bytes"] for r in found} == {4096, 65536}
    flats = [r for r in found if r["flat"]]
    assert [r["program"] for r in flats] == ["A2A(data@node,data@core)"] * 2 and all(r["speedup"] == 1.0 for r in flats)
    for r in found:
        flat = next(f for f in flats if f["bytes"] == r["bytes"])
        assert r["speedup"] == pytest.approx(flat["measured_s"] / r["measured_s"])
        assert r["predicted_speedup"] == pytest.approx(flat["simulator_s"] / r["simulator_s"])
    assert sorted(r["measured_s"] for r in found) == sorted(measured.values())


def test_cli_prints_the_table_and_writes_markdown(tmp_path):
    md = tmp_path / "a2a.md"
    r = run("--from-raw", str(FIXTURE), "--markdown", str(md))
    assert r.returncode == 0, r.stderr
    printed = printed_rows(r.stdout)
    assert len(printed) == 6 and {row[1] for row in printed} == {"data=[node 2, core 2]"}
    assert [row[4] for row in printed[:3]] == ["flat A2A(data@node,data@core)", "A2A(data@core) -> A2A(data@node)",
                                               "A2A(data@node) -> A2A(data@core)"]
    assert [row[8] for row in printed if row[4].startswith("flat ")] == ["1.00", "1.00"]
    assert md.read_text().startswith("| testbed | placement |") and len(md.read_text().splitlines()) == 8


@pytest.mark.parametrize("args,needle", [([], "give --out (to measure) or --from-raw"),
                                         (["--from-raw", "/nonexistent.json"], "cannot read raw measurements")])
def test_bad_usage_is_one_line_and_exit_2(args, needle):
    r = run(*args)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr and "Traceback" not in r.stderr


@pytest.mark.testbed
@pytest.mark.mpi
def test_tiny_suite_end_to_end(tmp_path):
    reason = testbed_skip_reason()
    if reason:
        pytest.skip(reason)
    env = dict(os.environ, P2S_ACCURACY_INSTANCE=f"t{os.getpid() % 10**6}")
    r = run("--suite", "alltoall-tiny", "--workdir", str(tmp_path / "w"), "--out", str(tmp_path / "a.json"), env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    raw = json.loads((tmp_path / "a.raw.json").read_text())
    [combo] = raw["testbeds"][0]["combos"]
    assert combo["program_count"] == 3 and len(combo["results"]) == 6 and all(x["wrong"] == 0 for x in combo["results"])
    assert len(printed_rows(r.stdout)) == 6
