"""Plan loading, program selection and the report helpers (no MPI)."""

import json
import os
import subprocess
import sys

import pytest

from hierarchies import Collective
from runtime.plan import PlanError, load_plan, parse_plan
from hierarchies.cli import parse_size, parse_sizes
from runtime.report import bus_factor
from tests.runtime_support import MPI_ENV, ROOT, all_programs, placement_of, plan_json, request_of, write_plan

PL = placement_of([("node", 2), ("core", 4)], [("data", 8)], [[2, 4]])
REQ = request_of(PL, ["data"], Collective.ALL_REDUCE)
PROGRAMS = all_programs(PL, REQ, 3)


def test_select_puts_the_default_first_and_runs_it_once():
    data = plan_json(PL, REQ, PROGRAMS)
    sel = parse_plan(data).select(0, 3)
    assert sel.candidates[0].is_default
    assert sel.candidates[0].program == PROGRAMS[0]  # the flat all_reduce, listed first by the enumerator
    assert [c.position for c in sel.candidates] == [None, 1, 2]
    assert len(parse_plan(data).select(0, None).candidates) == len(PROGRAMS)


def test_the_cpu_example_shape_round_trips(tmp_path):
    plan = load_plan(write_plan(tmp_path / "plan.json", PL, REQ, PROGRAMS, message_bytes=1 << 20))
    assert plan.message_bytes == 1 << 20 and plan.request == REQ
    assert plan.select(0, 5).placement.matrix == ((2, 4),)


def test_bad_placement_index():
    with pytest.raises(PlanError, match="placement index 1 out of range: the plan has 1 placement"):
        parse_plan(plan_json(PL, REQ, PROGRAMS)).select(1, 5)


def test_a_program_that_fails_the_checker_is_refused():
    data = plan_json(PL, REQ, PROGRAMS)
    data["placements"][0]["programs"][2] = {"steps": [{"op": "all_reduce", "slice": [["data", "core"]]}]}
    with pytest.raises(PlanError, match=r"program 2 AR\(data@core\) fails the checker"):
        parse_plan(data).select(0, 5)
    parse_plan(data).select(0, 2)  # not among the chosen: fine


def test_unknown_cells_and_missing_files_are_plan_errors(tmp_path):
    data = plan_json(PL, REQ, PROGRAMS)
    data["placements"][0]["default"]["steps"][0]["slice"] = [["data", "rack"]]
    with pytest.raises(PlanError, match="placement 0: bad entry"):
        parse_plan(data).select(0, 1)
    with pytest.raises(PlanError, match="cannot read plan"):
        load_plan(tmp_path / "missing.json")
    (tmp_path / "spec.json").write_text((ROOT / "examples" / "cpu-2x4.json").read_text())
    with pytest.raises(PlanError, match="solver spec rather than its result"):
        load_plan(tmp_path / "spec.json")
    (tmp_path / "bad.json").write_text(json.dumps({**data, "axes": [{"name": "data", "size": 0}]}))
    with pytest.raises(PlanError, match="size"):
        load_plan(tmp_path / "bad.json")


def test_sizes():
    assert parse_size("4096") == 4096 and parse_size("64K") == 65536 and parse_size("1m") == 2**20
    assert parse_sizes("1M:64M") == tuple(2**20 * 2**i for i in range(7))
    assert parse_sizes("1K:64K:4") == (1024, 4096, 16384, 65536)
    assert parse_sizes("8M") == (8 * 2**20,)
    for bad in ("", "0", "1X", "4M:1M", "1K:4K:1", "1K:4K:x", "1:2:3:4"):
        with pytest.raises(ValueError):
            parse_sizes(bad)


def test_bus_factors_are_nccl_tests():
    assert bus_factor(Collective.ALL_REDUCE, 8) == 2 * 7 / 8
    assert bus_factor(Collective.REDUCE_SCATTER, 8) == bus_factor(Collective.ALL_GATHER, 8) == 7 / 8
    assert bus_factor(Collective.REDUCE, 8) == bus_factor(Collective.BROADCAST, 8) == 1.0


def test_runtime_never_imports_z3():
    code = (
        "import sys, runtime.bench, runtime.executor, runtime.backends, runtime.plan, scripts.bench_runtime; "
        "sys.exit('z3' in sys.modules)"
    )
    env = {**os.environ, **MPI_ENV}  # importing mpi4py.MPI initialises MPI: keep it quick
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=False).returncode == 0
