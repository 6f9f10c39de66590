"""Plan loading, program selection and the report helpers (no MPI)."""

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from p2synth.hierarchies import Collective
from p2synth.hierarchies.plan_file import PlanFileError, load_plan_file, parse_plan_file
from p2synth.runtime.plan import select
from p2synth.hierarchies.cli import parse_size, parse_sizes
from p2synth.runtime.report import bus_factor
from tests.runtime_support import MPI_ENV, ROOT, all_programs, placement_of, plan_json, request_of, write_plan

PL = placement_of([("node", 2), ("core", 4)], [("data", 8)], [[2, 4]])
REQ = request_of(PL, ["data"], Collective.ALL_REDUCE)
PROGRAMS = all_programs(PL, REQ, 3)


def test_select_puts_the_default_first_and_runs_it_once():
    data = plan_json(PL, REQ, PROGRAMS)
    sel = select(parse_plan_file(data), 0, 3)
    assert sel.candidates[0].is_default
    assert sel.candidates[0].program == PROGRAMS[0]  # the flat all_reduce, listed first by the enumerator
    assert [c.position for c in sel.candidates] == [None, 1, 2]
    assert len(select(parse_plan_file(data), 0, None).candidates) == len(PROGRAMS)


def test_a_selection_cuts_chunks_into_the_lcm_of_its_programs_pieces():
    assert select(parse_plan_file(plan_json(PL, REQ, PROGRAMS)), 0, None).pieces == 1
    mixed = PROGRAMS[:2] + [replace(PROGRAMS[1], pipeline=4), replace(PROGRAMS[2], pipeline=6)]
    sel = select(parse_plan_file(plan_json(PL, REQ, mixed)), 0, None)
    assert [c.program.pipeline for c in sel.candidates] == [1, 1, 4, 6] and sel.pieces == 12
    assert select(parse_plan_file(plan_json(PL, REQ, mixed)), 0, 3).pieces == 4  # only the programs selected count


def test_the_cpu_example_shape_round_trips(tmp_path):
    plan = load_plan_file(write_plan(tmp_path / "plan.json", PL, REQ, PROGRAMS, message_bytes=1 << 20))
    sel = select(plan, 0, 5)
    assert sel.message_bytes == 1 << 20 and sel.request == REQ and sel.request_name == "request"
    assert sel.placement.matrix == ((2, 4),)


def test_bad_placement_index():
    with pytest.raises(PlanFileError, match="placement index 1 out of range: the plan has 1 placement"):
        select(parse_plan_file(plan_json(PL, REQ, PROGRAMS)), 1, 5)


def test_a_program_that_fails_the_checker_is_refused():
    data = plan_json(PL, REQ, PROGRAMS)
    data["placements"][0]["programs"][2] = {"steps": [{"op": "all_reduce", "slice": [["data", "core"]]}]}
    with pytest.raises(PlanFileError, match=r"program 2 AR\(data@core\) fails the checker"):
        select(parse_plan_file(data), 0, 5)
    select(parse_plan_file(data), 0, 2)  # not among the chosen: fine


def test_unknown_cells_and_missing_files_are_plan_errors(tmp_path):
    data = plan_json(PL, REQ, PROGRAMS)
    data["placements"][0]["default"]["steps"][0]["slice"] = [["data", "rack"]]
    with pytest.raises(PlanFileError, match="placement 0: bad entry"):
        select(parse_plan_file(data), 0, 1)
    with pytest.raises(PlanFileError, match="cannot read plan"):
        load_plan_file(tmp_path / "missing.json")
    (tmp_path / "spec.json").write_text((ROOT / "examples" / "cpu-2x4.json").read_text())
    with pytest.raises(PlanFileError, match="solver spec rather than its result"):
        load_plan_file(tmp_path / "spec.json")
    (tmp_path / "bad.json").write_text(json.dumps({**data, "axes": [{"name": "data", "size": 0}]}))
    with pytest.raises(PlanFileError, match="size"):
        load_plan_file(tmp_path / "bad.json")


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
    assert bus_factor(Collective.ALL_TO_ALL, 8) == 7 / 8  # nccl-tests alltoall_perf
    assert bus_factor(Collective.REDUCE, 8) == bus_factor(Collective.BROADCAST, 8) == 1.0


def test_runtime_never_imports_z3():
    code = (
        "import sys, p2synth.runtime.bench, p2synth.runtime.executor, p2synth.runtime.backends, p2synth.runtime.plan, scripts.bench_runtime; "
        "sys.exit('z3' in sys.modules)"
    )
    env = {**os.environ, **MPI_ENV}  # importing mpi4py.MPI initialises MPI: keep it quick
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=False).returncode == 0


@pytest.fixture(scope="module")
def workload_plan(tmp_path_factory):
    """The solver's result for the bundled GPT workload example (two requests)."""
    out = tmp_path_factory.mktemp("plan") / "gpt.json"
    subprocess.run([sys.executable, "-m", "solver.run", "examples/gpt-3d-on-dgx-a100.json", "--quiet", "--top", "3",
                    "--out", str(out)], cwd=ROOT, check=True, timeout=300)
    return load_plan_file(out)


def test_a_workload_plan_selects_each_request_by_name(workload_plan):
    assert workload_plan.request_names() == ("grad_allreduce", "tp_allreduce", "pp_send")
    doc = workload_plan.document["placements"][0]["requests"]
    for i, name in enumerate(workload_plan.request_names()):
        sel = select(workload_plan, 0, 3, name)
        assert sel.request_name == name and sel.message_bytes == doc[i]["message_bytes"]
        assert [c.program.to_json(sel.placement)["steps"] for c in sel.candidates[1:]] == \
               [p["steps"] for p in doc[i]["programs"] if p["steps"] != doc[i]["default"]["steps"]]


def test_a_workload_plan_needs_a_request_name(workload_plan):
    with pytest.raises(PlanFileError, match=r"3 requests \(grad_allreduce, tp_allreduce, pp_send\); choose one with --request"):
        select(workload_plan, 0, 3)
    with pytest.raises(PlanFileError, match=r"no request 'nope' in the plan; its requests: grad_allreduce, tp_allreduce"):
        select(workload_plan, 0, 3, "nope")
