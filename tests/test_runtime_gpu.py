"""The cupy/NCCL backend on real GPUs (one per rank); skipped without CuPy, CUDA or enough devices."""

import json

import pytest

from p2synth.hierarchies import Collective
from tests.runtime_support import SEVERAL, all_programs, gpu_count, placement_of, request_of, run_mpi, write_plan



GPUS = gpu_count()

pytestmark = [pytest.mark.gpu]

CASES = {
    2: placement_of([("node", 2)], [("data", 2)], [[2]]),
    4: placement_of([("node", 2), ("gpu", 2)], [("data", 4)], [[2, 2]]),
    8: placement_of([("node", 2), ("gpu", 4)], [("data", 4), ("model", 2)], [[2, 2], [1, 2]]),
}


@pytest.mark.parametrize("ranks", list(CASES))
def test_cupy_backend_runs_every_program_exactly(ranks, tmp_path):
    if GPUS < ranks:
        pytest.skip(f"needs CuPy with NCCL and {ranks} CUDA devices (one per rank); found {GPUS}")
    placement = CASES[ranks]
    calls = []
    for collective in Collective:
        request = request_of(placement, ["data"], collective)
        plan = write_plan(tmp_path / f"{collective.value}.json", placement, request, all_programs(placement, request, 3))
        calls.append(f"{plan} --backend cupy --top all --bytes 64K:1M:4 --warmup 1 --iters 2 --repeats 2 --out {tmp_path / collective.value}.out")
    job = run_mpi(ranks, ["-c", SEVERAL, *calls], timeout=300)
    assert job.returncode == 0, job.stderr
    for collective in Collective:
        doc = json.loads((tmp_path / f"{collective.value}.out").read_text())
        assert doc["backend"] == "cupy"
        assert [(r["wrong"], r["wrong_timed"]) for r in doc["results"]] == [(0, 0)] * len(doc["results"])
