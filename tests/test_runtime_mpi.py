"""The runtime under real MPI: every program of small cases checked exactly, the CLI, and failures.

Each test launches ``mpiexec`` (oversubscribed, shared memory only) as a
subprocess with a hard timeout. To keep launches few, a job may run
``runtime.bench.main`` several times in a row, one plan per call.
"""

import json
import math
import os
import subprocess
import sys
import time

import pytest

from p2synth.hierarchies.bound import lower_bound
from p2synth.hierarchies.cli import quote

from p2synth.hierarchies import Collective, Program, default_program
from tests.runtime_support import (
    CASES,
    EACH,
    MPI_ENV,
    NO_CHECKER,
    ROOT,
    SEVERAL,
    SMALL,
    all_programs,
    bench_once,
    collectives_for,
    cpu_2x4,
    gpu_count,
    pipelined,
    placement_of,
    request_of,
    run_mpi,
    write_plan,
)

pytestmark = [pytest.mark.mpi]  # no skip without mpiexec: run_mpi fails, naming the fix

QUICK = "--top all --bytes 1000 --warmup 0 --iters 1 --repeats 1"


PIPELINES = (2, 4)  # the piece counts every program of the small cases also runs on


@pytest.mark.parametrize("case", list(CASES))
def test_every_program_of_every_collective_is_exact(case, tmp_path):
    """Every program, and every program pipelined on 2 and 4 pieces (a second plan per collective, same job), is exact."""
    placement, axes, max_steps = CASES[case]
    group = math.prod(placement.axes[a].size for a in request_of(placement, axes, Collective.ALL_REDUCE).axes)
    calls, expected = [], {}
    for collective in collectives_for(axes):
        request = request_of(placement, axes, collective)
        programs = all_programs(placement, request, max_steps)
        for name, listed, unit in ((collective.value, programs, group), (f"{collective.value}-pipelined", pipelined(programs, PIPELINES), 4 * group)):
            plan = write_plan(tmp_path / f"{name}.json", placement, request, listed)
            out = tmp_path / f"{name}.out.json"
            calls.append(f"{plan} {QUICK} --out {out}")
            expected[out] = ({default_program(placement, request), *listed}, unit)
    job = run_mpi(placement.num_devices, ["-c", SEVERAL, *calls], timeout=300)
    assert job.returncode == 0, job.stderr
    for out, (programs, unit) in expected.items():
        results = json.loads(out.read_text())["results"]
        ran = {Program.from_json(r["program"], placement) for r in results}
        assert ran == programs and len(results) == len(programs)
        assert [(r["wrong"], r["wrong_timed"]) for r in results] == [(0, 0)] * len(results)
        assert results[0]["is_default"]
        # 1000 bytes, rounded to whole chunks (to whole pieces of every chunk with programs on 2 and 4 pieces)
        assert {r["count"] for r in results} == {250 // unit * unit}
    assert " x4 pieces " in job.stdout


SAME_AS_SEQUENTIAL = """
import json, sys
from dataclasses import replace
import numpy as np
from mpi4py import MPI
from p2synth.hierarchies import Collective
from p2synth.runtime.backends import NumpyBackend
from p2synth.runtime.data import CHECK_DTYPE, reduction_group
from p2synth.runtime.executor import Buffers, Executor
from p2synth.runtime.layout import Role
from tests.runtime_support import CASES, all_programs, collectives_for, request_of
world = MPI.COMM_WORLD
out = {}
for case in sys.argv[1:]:
    placement, axes, max_steps = CASES[case]
    for collective in collectives_for(axes):
        request = request_of(placement, axes, collective)
        programs = all_programs(placement, request, max_steps)
        ex = Executor(NumpyBackend(), placement, request, world)
        ex.connect(programs)
        size = reduction_group(placement, request, world.rank).size
        bufs = Buffers(ex.backend, collective, size * 4 * 3, size, CHECK_DTYPE)  # 3 elements per piece-chunk at 4 pieces
        send = bufs.get(Role.SEND)
        send[:] = np.random.default_rng(world.rank).integers(0, 2**64, send.size, dtype=np.uint64, endpoint=False)
        differ = 0
        for program in programs:
            outputs = []
            for pieces in (1, 2, 4):
                bufs.poison(7)
                ex.compile(replace(program, pipeline=pieces), bufs).run()
                outputs.append(bufs.get(Role.RECV).copy())
            differ += any(not np.array_equal(outputs[0], o) for o in outputs[1:])
        total = world.allreduce(differ)
        out[f"{case} {collective.value}"] = [len(programs), total]
        ex.close()
world.rank == 0 and print(json.dumps(out))
"""


@pytest.mark.parametrize("ranks, cases", [(4, ["4-ranks-data", "4-ranks-model-of-two-axes"]), (8, ["8-ranks-cpu-2x4"])])
def test_a_pipelined_run_gives_the_sequential_runs_output(ranks, cases):
    """Random uint64 data (sums exact in any order): every program on 2 and 4 pieces leaves the very buffer it leaves
    run sequentially, on every rank (the exact test above covers every case; here one 8-rank case keeps the time down)."""
    job = run_mpi(ranks, ["-c", SAME_AS_SEQUENTIAL, *cases], timeout=300)
    assert job.returncode == 0, job.stderr
    compared = json.loads(job.stdout.splitlines()[-1])
    assert len(compared) == sum(len(collectives_for(CASES[case][1])) for case in cases)
    assert {name: differ for name, (_, differ) in compared.items() if differ} == {}
    assert all(programs > 0 for programs, _ in compared.values())


def test_cli_table_and_json(tmp_path):
    placement = cpu_2x4()
    request = request_of(placement, ["data"], Collective.ALL_REDUCE)
    plan = write_plan(tmp_path / "plan.json", placement, request, all_programs(placement, request, 4))
    out = tmp_path / "bench.json"
    job = run_mpi(8, ["-m", "runtime.bench", str(plan), "--placement", "0", "--top", "5", "--bytes", "4K:8K",
                      "--warmup", "1", "--iters", "2", "--repeats", "3", "--out", str(out)], timeout=120)
    assert job.returncode == 0, job.stderr
    rows = [line for line in job.stdout.splitlines() if line and not line.startswith("#")]
    assert len(rows) == 2 * 5  # default + programs #1..#4 (#0 is the default), at two sizes
    assert "# Out of bounds values : 0 OK" in job.stdout
    doc = json.loads(out.read_text())
    assert doc["world_size"] == 8 and doc["backend"] == "numpy"
    first = doc["results"][0]
    assert first["placement"] == 0 and first["is_default"] and first["bytes"] == 4096 and first["wrong"] == 0
    assert first["program"] == {"steps": [{"op": "all_reduce", "slice": [["data", "node"], ["data", "core"]]}], "pipeline": 1}
    for r in doc["results"]:
        assert r["time_s"] > 0 and len(r["repeats_s"]) == 3
        assert r["algbw_GBps"] == pytest.approx(r["bytes"] / r["time_s"] / 1e9)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 2 * 7 / 8)
        assert r["bound_s"] == lower_bound(placement, request, r["bytes"]).seconds
        assert f"{r['time_s'] / r['bound_s']:.2f}x" in job.stdout
    assert "of bound" in job.stdout
    assert [r["bytes"] for r in doc["results"]] == [4096] * 5 + [8192] * 5
    assert not any(r["is_default"] for r in doc["results"][1:5])


def test_the_solver_result_runs_as_it_is(tmp_path):
    """End to end: python -m solver.run writes the plan, the runtime runs its default and top programs."""
    plan, out = tmp_path / "plan.json", tmp_path / "bench.json"
    solve = subprocess.run([sys.executable, "-m", "solver.run", "examples/cpu-2x4.json", "--quiet", "--out", str(plan)],
                           cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert solve.returncode == 0, solve.stderr
    job = run_mpi(8, ["-m", "runtime.bench", str(plan), "--top", "3", "--bytes", "64K", "--warmup", "0", "--iters", "1",
                      "--repeats", "1", "--out", str(out)], timeout=120)
    assert job.returncode == 0, job.stderr
    entry = json.loads(plan.read_text())["placements"][0]
    wanted = [entry["default"]["steps"]] + [p["steps"] for p in entry["programs"][:3] if p["steps"] != entry["default"]["steps"]]
    results = json.loads(out.read_text())["results"]
    assert [r["program"]["steps"] for r in results] == wanted
    assert results[0]["predicted_s"] == entry["default"]["cost_s"]
    assert all(r["wrong"] == 0 and r["bytes"] == 65536 for r in results)


def test_all_to_all_node2_gpu4_every_program_runs_exactly_and_bad_bytes_exit_2(tmp_path):
    """The issue's done-means case: the solver lists the 3 programs, mpiexec -n 8 runs each with 0 wrong elements."""
    plan, out = tmp_path / "plan.json", tmp_path / "bench.json"
    solve = subprocess.run([sys.executable, "-m", "solver.run", "examples/all-to-all-2x4.json", "--quiet", "--top", "all",
                            "--out", str(plan)], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert solve.returncode == 0, solve.stderr
    calls = [f"{plan} --top all --bytes 4K:64K:4 --warmup 0 --iters 1 --repeats 1 --out {out}", f"{plan} --bytes 16"]
    job = run_mpi(8, ["-c", EACH, *calls], timeout=120)
    assert job.returncode == 0, job.stderr
    assert json.loads(job.stdout.splitlines()[-1]) == [0, 2]
    assert _errors(job.stderr) == ["error: 16 bytes is less than one float32 per chunk for 8 chunks"]
    results = json.loads(out.read_text())["results"]
    ran = {(r["bytes"], json.dumps(r["program"]["steps"])) for r in results}
    steps = {json.dumps(p["steps"]) for p in json.loads(plan.read_text())["placements"][0]["programs"]}
    assert len(steps) == 3 and ran == {(b, s) for b in (4096, 16384, 65536) for s in steps}
    assert len(results) == 9 and all(r["wrong"] == 0 and r["wrong_timed"] == 0 for r in results)


KNOWN_VALUES = """
import json, numpy as np
from mpi4py import MPI
from p2synth.hierarchies import Cell, Collective, Program, Request, Step
from p2synth.runtime.backends import NumpyBackend
from p2synth.runtime.executor import Buffers, Executor
from p2synth.runtime.layout import Role
from tests.runtime_support import placement_of
world = MPI.COMM_WORLD
pl = placement_of([("node", 2), ("core", 2)], [("data", 4)], [[2, 2]])
node, core = Cell(0, 0), Cell(0, 1)
cases = {
    "all_reduce": Program((Step(Collective.REDUCE_SCATTER, (core,)), Step(Collective.ALL_REDUCE, (node,)), Step(Collective.ALL_GATHER, (core,)))),
    "reduce_scatter": Program((Step(Collective.REDUCE_SCATTER, (core,)), Step(Collective.REDUCE_SCATTER, (node,)))),
    "all_gather": Program((Step(Collective.ALL_GATHER, (node,)), Step(Collective.ALL_GATHER, (core,)))),
    "broadcast": Program((Step(Collective.BROADCAST, (node,)), Step(Collective.BROADCAST, (core,)))),
}
out = {}
for name, program in cases.items():
    collective = Collective(name)
    ex = Executor(NumpyBackend(), pl, Request(frozenset({0}), collective), world)
    ex.connect([program])
    bufs = Buffers(ex.backend, collective, 8, 4)
    send = bufs.get(Role.SEND)
    send[:] = 100 * world.rank + np.arange(send.size)
    bufs.poison(float("nan"))
    ex.compile(program, bufs).run()
    out[name] = bufs.get(Role.RECV).tolist()
    ex.close()
print(json.dumps({"rank": world.rank, **out}))
"""


def test_known_values_through_the_executor():
    job = run_mpi(4, ["-c", KNOWN_VALUES], timeout=90)
    assert job.returncode == 0, job.stderr
    by_rank = {d["rank"]: d for d in map(json.loads, job.stdout.splitlines())}
    total = [600 + 4 * i for i in range(8)]  # sum over ranks r of 100 r + i
    for r in range(4):
        assert by_rank[r]["all_reduce"] == total
        assert by_rank[r]["reduce_scatter"] == total[2 * r : 2 * r + 2]  # chunk r: rank r's reduced coordinate
        assert by_rank[r]["all_gather"] == [0, 1, 100, 101, 200, 201, 300, 301]  # owners' first 2 elements, in rank order
        assert by_rank[r]["broadcast"] == list(range(8))  # the root's (rank 0's) input


EXCHANGED = """
import json, numpy as np
from mpi4py import MPI
from p2synth.hierarchies import Cell, Collective, Program, Request, Step
from p2synth.runtime import backends
from p2synth.runtime.executor import Buffers, Executor
from p2synth.runtime.layout import Role
from tests.runtime_support import placement_of
calls = []
def record(cls, name, label):
    def call(self, src, dst, nonblocking=False, _call=getattr(cls, name)):
        calls.append(label if not nonblocking else "i" + label)
        return _call(self, src, dst, nonblocking=nonblocking)
    setattr(cls, name, call)
record(backends.MpiGroup, "reduce_scatter", "library")
record(backends.PairwiseExchange, "reduce_scatter", "pairwise")
world = MPI.COMM_WORLD
pl = placement_of([("node", 2), ("core", 3)], [("data", 6)], [[2, 3]])
node, core = Cell(0, 0), Cell(0, 1)
out = {}
for pieces in (1, 2):
    program = Program((Step(Collective.REDUCE_SCATTER, (core,)), Step(Collective.REDUCE_SCATTER, (node,))), pieces)
    ex = Executor(backends.NumpyBackend(), pl, Request(frozenset({0}), Collective.REDUCE_SCATTER), world)
    ex.connect([program])
    bufs = Buffers(ex.backend, Collective.REDUCE_SCATTER, 24, 6, np.dtype(np.uint64))
    bufs.get(Role.SEND)[:] = 2**63 + 1000 * world.rank + np.arange(24, dtype=np.uint64)
    bufs.poison(7)
    calls.clear()
    ex.compile(program, bufs).run()
    out[pieces] = {"recv": [int(v) for v in bufs.get(Role.RECV)], "calls": list(calls)}
    ex.close()
print(json.dumps({"rank": world.rank, **out}))
"""


def test_reduce_scatter_steps_run_as_a_pairwise_exchange():
    """numpy runs a reduce_scatter step as the pairwise exchange (started non-blocking when pipelined), never as
    MPI_Reduce_scatter_block, and the sums are exact: uint64, wrapping, each of 6 ranks its own chunk, over groups
    of 3 (core) and 2 (node) members."""
    job = run_mpi(6, ["-c", EXCHANGED], timeout=90)
    assert job.returncode == 0, job.stderr
    by_rank = {d["rank"]: d for d in map(json.loads, job.stdout.splitlines())}
    total = [(6 * 2**63 + 1000 * 15 + 6 * i) % 2**64 for i in range(24)]  # sum over ranks r of 2^63 + 1000 r + i
    for r in range(6):
        # rank r = (node digit r // 3, core digit r % 3) keeps chunk r: its 4 elements
        assert by_rank[r]["1"] == {"recv": total[4 * r : 4 * r + 4], "calls": ["pairwise", "pairwise"]}
        assert by_rank[r]["2"] == {"recv": total[4 * r : 4 * r + 4], "calls": ["ipairwise"] * 4}


def test_a_corrupted_program_is_caught_by_the_exact_check(tmp_path):
    request = request_of(SMALL, ["data"], Collective.ALL_REDUCE)
    plan = write_plan(tmp_path / "plan.json", SMALL, request, [default_program(SMALL, request)])
    data = json.loads(plan.read_text())
    data["placements"][0]["programs"] = [
        {"steps": [{"op": "all_reduce", "slice": [["data", "core"]]}]},  # forgets the node level
        {"steps": [{"op": "all_reduce", "slice": [["data", "node"]]}, {"op": "all_reduce", "slice": [["data", "node"], ["data", "core"]]}]},  # counts twice
        {"steps": [{"op": "reduce", "slice": [["data", "core"]]}, {"op": "all_reduce", "slice": [["data", "node"]]},
                   {"op": "broadcast", "slice": [["data", "node"]]}]},  # broadcasts over the wrong cell
    ]
    plan.write_text(json.dumps(data))
    out = tmp_path / "out.json"
    job = run_mpi(4, ["-c", bench_once(NO_CHECKER), f"{plan} {QUICK} --out {out}"], timeout=90)
    assert job.returncode == 1, job.stderr
    assert "Out of bounds values" in job.stdout and "FAILED" in job.stdout
    wrong = [r["wrong"] for r in json.loads(out.read_text())["results"]]
    assert wrong[0] == 0 and all(w > 0 for w in wrong[1:]) and len(wrong) == 4


FAIL_ON_RANK_1 = """
import sys
from mpi4py import MPI
import p2synth.runtime.executor as ex
run = ex.CompiledProgram.run
def failing(self):
    if MPI.COMM_WORLD.Get_rank() == 1:
        raise RuntimeError("injected failure on rank 1")
    run(self)
ex.CompiledProgram.run = failing
from p2synth.runtime.bench import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_failing_rank_ends_the_job(tmp_path):
    request = request_of(SMALL, ["data"], Collective.ALL_REDUCE)
    plan = write_plan(tmp_path / "plan.json", SMALL, request, all_programs(SMALL, request, 2))
    start = time.monotonic()
    job = run_mpi(4, ["-c", FAIL_ON_RANK_1, str(plan), "--bytes", "4K"], timeout=60)
    assert job.returncode != 0
    assert "injected failure on rank 1" in job.stderr
    assert time.monotonic() - start < 60


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_bad_arguments_give_one_line_each(tmp_path):
    request = request_of(SMALL, ["data"], Collective.ALL_REDUCE)
    good = write_plan(tmp_path / "plan.json", SMALL, request, all_programs(SMALL, request, 2))
    data = json.loads(good.read_text())
    data["placements"][0]["programs"][1] = {"steps": [{"op": "all_reduce", "slice": [["data", "core"]]}]}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    pieces = write_plan(tmp_path / "pieces.json", SMALL, request, pipelined(all_programs(SMALL, request, 2), (4,)))
    data["placements"][0]["programs"][1] = {**data["placements"][0]["programs"][0], "pipeline": 65}
    too_many = tmp_path / "too-many.json"
    too_many.write_text(json.dumps(data))
    calls = [f"{good} --placement 5", f"{bad} --top 3", f"{good} --bytes 3x", f"{tmp_path / 'none.json'}", f"{good} --bytes 8",
             f"{good} --inject bogus", f"{good} --top 0 --inject skip-repack", f"{pieces} --bytes 32:64", f"{pieces} --bytes 48 --inject swap-chunks",
             f"{too_many}"]
    job = run_mpi(4, ["-c", SEVERAL, *calls], timeout=90)
    assert job.returncode == 2
    assert _errors(job.stderr) == [
        "error: placement index 5 out of range: the plan has 1 placement(s)",
        "error: placement 0: program 1 AR(data@core) fails the checker: device 0 does not hold the all_reduce result",
        "error: argument --bytes: bad size '3x': expected e.g. 4096, 64K, 1M or 2G",
        f"error: cannot read plan {quote(str(tmp_path / 'none.json'))}: No such file or directory",
        "error: 8 bytes is less than one float32 per chunk for 4 chunks",
        "error: argument --inject: invalid choice: 'bogus' (choose from swap-chunks, skip-repack, reverse-blocks, "
        "drop-contribution, double-contribution, wrong-slice, wrong-neighbour)",
        "error: --inject skip-repack applies to none of the 1 selected program(s): it needs a local repack; "
        "choose another kind, or more programs (--top all)",
        "error: 32 bytes is less than one float32 per piece for 4 chunks in 4 pieces",
        "error: 48 bytes is less than one float32 per piece for 4 chunks in 4 pieces",
        "error: placement 0: bad entry: a program's pipeline must be between 1 and 64 pieces, not 65",
    ]


@pytest.mark.parametrize("ranks", [2, 8])
def test_wrong_rank_count(ranks, tmp_path):
    request = request_of(SMALL, ["data"], Collective.ALL_REDUCE)
    plan = write_plan(tmp_path / "plan.json", SMALL, request, all_programs(SMALL, request, 2))
    job = run_mpi(ranks, ["-m", "runtime.bench", str(plan)], timeout=60)
    assert job.returncode == 2
    assert _errors(job.stderr) == [f"error: the plan's hierarchy has 4 devices but the job has {ranks} ranks; run with -n 4"]


@pytest.mark.skipif(gpu_count() > 0, reason="CuPy and a GPU are present: the unavailable path cannot be shown")
def test_cupy_backend_reports_unavailable(tmp_path):
    placement = placement_of([("node", 2)], [("data", 2)], [[2]])
    request = request_of(placement, ["data"], Collective.ALL_REDUCE)
    plan = write_plan(tmp_path / "plan.json", placement, request, all_programs(placement, request, 2))
    job = run_mpi(2, ["-m", "runtime.bench", str(plan), "--backend", "cupy"], timeout=60)
    assert job.returncode == 2
    errors = _errors(job.stderr)
    assert len(errors) == 1 and errors[0].startswith("error: cupy backend unavailable: ")


NO_SOLVER = bench_once("sys.modules.update(dict.fromkeys(['z3', 'p2synth.solver', 'p2synth.encodings'], None)); ")


def test_the_runtime_needs_neither_z3_nor_the_solver(tmp_path):
    """With z3, solver and the encodings blocked (importing them raises), --help and a whole run work."""
    help_ = subprocess.run([sys.executable, "-c", NO_SOLVER, "--help"], cwd=ROOT, env={**os.environ, **MPI_ENV},
                           capture_output=True, text=True, timeout=60, check=False)
    assert help_.returncode == 0, help_.stderr
    assert help_.stdout.startswith("usage: python -m runtime.bench") and "--inject KIND" in help_.stdout
    request = request_of(SMALL, ["data"], Collective.ALL_REDUCE)
    programs = all_programs(SMALL, request, 3)
    plan = write_plan(tmp_path / "plan.json", SMALL, request, programs)
    out = tmp_path / "out.json"
    job = run_mpi(4, ["-c", NO_SOLVER, f"{plan} {QUICK} --out {out}"], timeout=90)
    assert job.returncode == 0, job.stderr
    results = json.loads(out.read_text())["results"]
    assert {Program.from_json(r["program"], SMALL) for r in results} == {default_program(SMALL, request), *programs}
    assert all(r["wrong"] == 0 and r["wrong_timed"] == 0 for r in results)


def test_a_one_device_plan_runs_the_collective_over_the_one_member_group(tmp_path):
    """A request that reduces nothing: the default (no steps) is one real call on a one-member communicator."""
    placement = placement_of([("gpu", 1)], [("data", 1)], [[1]])
    calls, outs = [], {}
    for collective in Collective:
        request = request_of(placement, ["data"], collective)
        plan = write_plan(tmp_path / f"{collective.value}.json", placement, request, all_programs(placement, request, 2))
        outs[collective] = tmp_path / f"{collective.value}.out.json"
        calls.append(f"{plan} --bytes 4:4K:32 --warmup 0 --iters 1 --repeats 1 --out {outs[collective]}")
    job = run_mpi(1, ["-c", SEVERAL, *calls], timeout=90)
    assert job.returncode == 0, job.stderr
    for collective, out in outs.items():
        results = json.loads(out.read_text())["results"]
        assert [(r["bytes"], r["program"], r["wrong"], r["wrong_timed"]) for r in results] == [
            (4, {"steps": [], "pipeline": 1}, 0, 0), (128, {"steps": [], "pipeline": 1}, 0, 0), (4096, {"steps": [], "pipeline": 1}, 0, 0)]
        assert all(r["is_default"] for r in results)
