"""Chunk layouts and buffer roles of runtime/layout.py (no MPI)."""

import pytest

from p2synth.hierarchies import Cell, Collective, Program, Step
from p2synth.runtime.layout import (
    Exchange,
    LayoutError,
    Role,
    Transpose,
    assign_buffers,
    plan_layout,
)
from tests.runtime_support import all_programs, placement_of, request_of

PL = placement_of([("node", 2), ("core", 4)], [("data", 8)], [[2, 4]])
NODE, CORE = Cell(0, 0), Cell(0, 1)
AR, RS, AG, R, B = (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.REDUCE, Collective.BROADCAST)


def prog(*steps):
    return Program(tuple(Step(op, cells) for op, cells in steps))


def test_hierarchical_all_reduce_needs_no_repack():
    plan = plan_layout(PL, request_of(PL, ["data"], AR), prog((RS, (CORE,)), (AR, (NODE,)), (AG, (CORE,))))
    assert plan.transposes == 0
    assert plan.start == (CORE, NODE)  # core digit outermost, so RS(core) finds its blocks contiguous
    assert [a.after for a in plan.actions] == [(NODE,), (NODE,), (CORE, NODE)]


def test_flat_programs_keep_the_canonical_order():
    for col in (AR, R):
        plan = plan_layout(PL, request_of(PL, ["data"], col), prog((col, (NODE, CORE))))
        assert plan.start == (NODE, CORE) and plan.transposes == 0


def test_reduce_scatter_then_all_gather_in_the_same_order_needs_one_repack():
    # RS(node) RS(core) forces start (node, core); AG(node) AG(core) ends at (core, node)
    plan = plan_layout(PL, request_of(PL, ["data"], AR), prog((RS, (NODE,)), (RS, (CORE,)), (AG, (NODE,)), (AG, (CORE,))))
    assert plan.transposes == 1
    assert plan.actions[-1] == Transpose((CORE, NODE), (NODE, CORE))


def test_reduce_scatter_request_repacks_when_the_inner_cell_goes_first():
    plan = plan_layout(PL, request_of(PL, ["data"], RS), prog((RS, (CORE,)), (RS, (NODE,))))
    assert plan.start == (NODE, CORE)
    assert plan.actions[0] == Transpose((NODE, CORE), (CORE, NODE))
    assert plan.transposes == 1


def test_all_gather_request_ends_canonical():
    inner_first = plan_layout(PL, request_of(PL, ["data"], AG), prog((AG, (CORE,)), (AG, (NODE,))))
    assert inner_first.transposes == 0
    outer_first = plan_layout(PL, request_of(PL, ["data"], AG), prog((AG, (NODE,)), (AG, (CORE,))))
    assert outer_first.actions[-1] == Transpose((CORE, NODE), (NODE, CORE))


def test_scattering_a_scattered_cell_is_refused():
    with pytest.raises(LayoutError):
        plan_layout(PL, request_of(PL, ["data"], AR), prog((RS, (CORE,)), (RS, (CORE,))))


@pytest.mark.parametrize("collective", list(Collective))
def test_every_valid_program_has_a_consistent_plan(collective):
    pl = placement_of([("node", 2), ("socket", 2), ("core", 2)], [("data", 8)], [[2, 2, 2]])
    request = request_of(pl, ["data"], collective)
    for program in all_programs(pl, request, 3):
        plan = plan_layout(pl, request, program)
        layout = plan.start
        for action in plan.actions:
            assert action.before == layout
            assert sorted(action.after) == sorted(action.before) or isinstance(action, Exchange)
            layout = action.after
        final = {Collective.REDUCE_SCATTER: ()}.get(collective, request.reduced_cells(pl))
        assert layout == (plan.start if collective in (AR, R, B) else final)
        assert sorted(layout) == sorted(final)


def test_buffer_roles_are_out_of_place_and_chain():
    plan = plan_layout(PL, request_of(PL, ["data"], AR), prog((RS, (NODE,)), (RS, (CORE,)), (AG, (NODE,)), (AG, (CORE,))))
    roles = assign_buffers(plan.actions)
    assert roles[0][0] is Role.SEND and roles[-1][1] is Role.RECV
    assert all(dst is not Role.SEND for _, dst in roles)
    assert all(roles[i][1] is roles[i + 1][0] for i in range(len(roles) - 1))
    assert all(src is not dst for src, dst in roles)  # RS, AG and transposes cannot run in place


def test_in_place_calls_keep_their_buffer():
    plan = plan_layout(PL, request_of(PL, ["data"], AR), prog((RS, (CORE,)), (AR, (NODE,)), (AG, (CORE,))))
    assert assign_buffers(plan.actions) == (
        (Role.SEND, Role.SCRATCH_A),
        (Role.SCRATCH_A, Role.SCRATCH_A),
        (Role.SCRATCH_A, Role.RECV),
    )
    flat = plan_layout(PL, request_of(PL, ["data"], AR), prog((AR, (NODE, CORE))))
    assert assign_buffers(flat.actions) == ((Role.SEND, Role.RECV),)
