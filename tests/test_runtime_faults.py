"""Fault injection (runtime/faults.py, ``runtime.bench --inject``): where each kind applies, and that the check sees it.

The MPI test runs every KIND on every program of the small cases of all six
collectives (tests/runtime_support.py CASES), sequential and pipelined on 2
pieces, one mpiexec job per case, and
asserts that every run the fault struck is detected and every other program is
reported not applicable (and ran exact, as a control). scripts/fault_audit.py
runs the same injections with the data pattern the check used before.
"""

import json
import math
from itertools import combinations

import pytest

from p2synth.hierarchies import Collective, Program, Step, default_program
from p2synth.runtime.faults import FaultKind, place_fault
from p2synth.hierarchies.layout import plan_layout
from tests.runtime_support import (
    CASES,
    EACH,
    collectives_for,
    NO_CHECKER,
    SMALL,
    all_programs,
    bench_once,
    case_plans,
    request_of,
    run_mpi,
    write_plan,
)

SUMMING = {Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.REDUCE}
BLOCKS = {Collective.REDUCE_SCATTER, Collective.ALL_GATHER}
BLOCK_ORDER = BLOCKS | {Collective.ALL_TO_ALL}


def applies(kind: FaultKind, placement, request, program: Program) -> bool:
    """Where each kind can strike, stated from the program alone (independently of place_fault)."""
    ops = [s.op for s in program.steps]
    cells = request.reduced_cells(placement)
    size = lambda s: math.prod(placement.factor(c) for c in s)  # noqa: E731
    if kind is FaultKind.SWAP_CHUNKS:  # a rank holds every chunk before step 1, except in an all_gather (one chunk)
        return len(ops) >= (2 if request.collective is Collective.ALL_GATHER else 1)
    if kind is FaultKind.SKIP_REPACK:
        return plan_layout(placement, request, program).transposes > 0
    if kind is FaultKind.REVERSE_BLOCKS:
        return any(op in BLOCK_ORDER for op in ops)
    if kind in (FaultKind.DROP_CONTRIBUTION, FaultKind.DOUBLE_CONTRIBUTION):
        return any(op in SUMMING for op in ops)
    if kind is FaultKind.WRONG_NEIGHBOUR:  # with two members the predecessor is the successor
        return any(s.op is Collective.SEND_RECV and size(s.slice) >= 3 for s in program.steps)
    others = lambda s: [o for n in range(1, len(cells) + 1) for o in combinations(cells, n) if o != s]  # noqa: E731
    return any(others(s.slice) and (s.op not in BLOCKS or any(size(o) == size(s.slice) for o in others(s.slice))) for s in program.steps)


def candidates(placement, request, programs: list[Program]) -> list[Program]:
    """What runtime.bench runs for a plan: the default, then the programs that differ from it."""
    default = default_program(placement, request)
    return [default, *(p for p in programs if p != default)]


@pytest.mark.parametrize("case", list(CASES))
def test_a_fault_applies_exactly_where_the_program_has_what_it_needs(case):
    placement, axes, max_steps = CASES[case]
    for collective in collectives_for(axes):
        request = request_of(placement, axes, collective)
        for program in candidates(placement, request, all_programs(placement, request, max_steps)):
            plan = plan_layout(placement, request, program)
            for kind in FaultKind:
                fault = place_fault(kind, placement, request, plan)
                assert (fault is not None) == applies(kind, placement, request, program), (kind, program.text(placement))
                if fault is not None and kind is FaultKind.WRONG_SLICE:
                    step = plan.actions[fault.action].step
                    assert fault.slice != step.slice and set(fault.slice) <= set(request.reduced_cells(placement))


def test_a_fault_strikes_the_first_action_it_applies_to():
    request = request_of(SMALL, ["data"], Collective.ALL_REDUCE)
    node, core = request.reduced_cells(SMALL)
    program = Program((Step(Collective.REDUCE_SCATTER, (node,)), Step(Collective.REDUCE_SCATTER, (core,)),
                       Step(Collective.ALL_GATHER, (node,)), Step(Collective.ALL_GATHER, (core,))))
    plan = plan_layout(SMALL, request, program)  # RS(node) RS(core) AG(node) AG(core), then a repack
    actions = [type(a).__name__ for a in plan.actions]
    assert actions == ["Exchange"] * 4 + ["Transpose"]
    assert place_fault(FaultKind.SKIP_REPACK, SMALL, request, plan).action == 4
    assert place_fault(FaultKind.REVERSE_BLOCKS, SMALL, request, plan).action == 0
    assert place_fault(FaultKind.DROP_CONTRIBUTION, SMALL, request, plan).action == 0
    wrong = place_fault(FaultKind.WRONG_SLICE, SMALL, request, plan)
    assert (wrong.action, wrong.slice) == (0, (core,))  # same group size as node
    assert wrong.describe(SMALL, plan) == "at RS(data@node): run over data@core"
    piped = place_fault(FaultKind.WRONG_SLICE, SMALL, request, plan, pieces=4)  # the same site, in the last piece
    assert (piped.action, piped.slice, piped.piece, piped.pieces) == (0, (core,), 3, 4)
    assert piped.describe(SMALL, plan) == "at RS(data@node) in piece 3 of 4: run over data@core"


@pytest.mark.mpi
@pytest.mark.parametrize("case", list(CASES))
def test_every_injected_fault_is_detected(case, tmp_path):
    """Every program run sequentially and on 2 pieces (where the fault strikes the last piece only)."""
    placement, *_ = CASES[case]
    plans = case_plans(case, tmp_path, pieces=(1, 2))
    runs, calls = [], []
    for collective, (plan, _, request, programs) in plans.items():
        for kind in FaultKind:
            out = tmp_path / f"{collective.value}-{kind}.out.json"
            runs.append((kind, request, candidates(placement, request, programs), out))
            calls.append(f"{plan} --top all --bytes 1000 --inject {kind} --out {out}")
    job = run_mpi(placement.num_devices, ["-c", EACH, *calls], timeout=600)
    assert job.returncode == 0, job.stderr
    codes = json.loads(job.stdout.splitlines()[-1])
    assert len(codes) == len(runs)
    none_apply = 0
    for (kind, request, programs, out), code in zip(runs, codes):
        want = [applies(kind, placement, request, p) for p in programs]
        if not any(want):
            assert code == 2 and not out.exists()
            none_apply += 1
            continue
        assert code == 3, (kind, request.collective)
        results = json.loads(out.read_text())["results"]
        assert [Program.from_json(r["program"], placement) for r in results] == programs
        assert [r["verdict"] for r in results] == ["detected" if w else "not applicable" for w in want]
        assert all((r["wrong"] > 0) == w and (r["fault"] is not None) == w for r, w in zip(results, want))
        assert all(r["fault"] is None or (" in piece 1 of 2: " in r["fault"]) == (r["program"]["pipeline"] == 2) for r in results)
    errors = [line for line in job.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == none_apply and all(" applies to none of the " in e for e in errors)


@pytest.mark.mpi
def test_a_fault_the_check_misses_fails_the_run_loudly(tmp_path):
    """With the old data (chunks of 62 elements repeat every 31), a swap of two chunks goes unseen: exit 4."""
    request = request_of(SMALL, ["data"], Collective.ALL_REDUCE)
    plan = write_plan(tmp_path / "plan.json", SMALL, request, [])
    out = tmp_path / "out.json"
    job = run_mpi(4, ["-c", bench_once(data="scripts.fault_audit:OldPattern"), f"{plan} --bytes 1000 --inject swap-chunks --out {out}"], timeout=90)
    assert job.returncode == 4, job.stderr
    assert "# Injected swap-chunks: detected in 0 of 1 runs it struck" in job.stdout and "FAILED" in job.stdout
    [result] = json.loads(out.read_text())["results"]
    assert result["verdict"] == "missed" and result["wrong"] == 0


@pytest.mark.mpi
def test_a_wrong_program_the_fault_does_not_strike_still_fails_the_run(tmp_path):
    request = request_of(SMALL, ["data"], Collective.ALL_REDUCE)
    plan = write_plan(tmp_path / "plan.json", SMALL, request, all_programs(SMALL, request, 3))
    data = json.loads(plan.read_text())
    data["placements"][0]["programs"] = [
        {"steps": [{"op": "reduce_scatter", "slice": [["data", "core"]]}, {"op": "all_reduce", "slice": [["data", "node"]]},
                   {"op": "all_gather", "slice": [["data", "core"]]}]},
        {"steps": [{"op": "all_reduce", "slice": [["data", "core"]]}]},  # forgets the node level, and has no block step
    ]
    plan.write_text(json.dumps(data))
    out = tmp_path / "out.json"
    job = run_mpi(4, ["-c", bench_once(NO_CHECKER), f"{plan} --bytes 1000 --inject reverse-blocks --out {out}"], timeout=90)
    assert job.returncode == 1, job.stderr
    results = json.loads(out.read_text())["results"]
    assert [r["verdict"] for r in results] == ["not applicable", "detected", "not applicable"]
    assert [r["wrong"] > 0 for r in results] == [False, True, True]
