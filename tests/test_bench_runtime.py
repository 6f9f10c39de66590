"""scripts.bench_runtime under real mpiexec: both contenders checked and timed at every size, the table from rank 0;
bad arguments get one line from rank 0 and exit 2."""

import json

import pytest

from scripts.tables import printed_rows
from tests.runtime_support import run_mpi

pytestmark = pytest.mark.mpi


def test_two_ranks_time_both_contenders_at_every_size_and_print_the_rows_written(tmp_path):
    out = tmp_path / "rows.json"
    job = run_mpi(2, ["-m", "scripts.bench_runtime", "--bytes", "64K:128K", "--iters", "1", "--repeats", "2",
                      "--warmup", "0", "--out", str(out)], timeout=300)
    assert job.returncode == 0, job.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["world_size"] == 2 and [r["bytes"] for r in doc["rows"]] == [65536, 131072]
    assert all(len(r["runtime_repeats_s"]) == len(r["direct_repeats_s"]) == 2 for r in doc["rows"])
    printed = printed_rows(job.stdout)
    assert [row[0] for row in printed] == ["65536", "131072"]
    assert [row[5] for row in printed] == [f"{r['ratio']:.3f}" for r in doc["rows"]]
    assert job.stdout.splitlines()[-1] == "# wrong values: 0 OK"


def test_bad_arguments_get_one_line_from_rank_0_and_exit_2():
    job = run_mpi(2, ["-m", "scripts.bench_runtime", "--repeats", "0"], timeout=120)
    errors = [line for line in job.stderr.splitlines() if line.startswith("error:")]
    assert job.returncode == 2 and errors == ["error: --iters and --repeats must be at least 1, --warmup at least 0"]
    assert "Traceback" not in job.stderr and job.stdout == ""
