"""The one buffer-layout engine, hierarchies/layout.py: chunk order, repacks, member orders, and that the runtime
and the exports get their chunk order from it (no MPI)."""

from types import SimpleNamespace

import pytest

from p2synth.hierarchies import Cell, Collective, Program, Step
from p2synth.hierarchies.layout import (
    Exchange,
    LayoutError,
    LayoutPlan,
    MemberOrder,
    Transpose,
    mesh_order,
    plan_layout,
    split_cells,
)
from p2synth.runtime.executor import Executor
from p2synth.solver.exports.planning import RepackPlan, dim_names, plan_module
from tests.runtime_support import all_programs, collectives_for, placement_of, request_of

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


# data@gpu = Cell(0, 1) and model@node = Cell(1, 0): cell order (data@gpu, model@node), mesh order the reverse
TWO_AXES = placement_of([("node", 2), ("gpu", 4)], [("data", 4), ("model", 2)], [[1, 4], [2, 1]])
DATA_GPU, MODEL_NODE = Cell(0, 1), Cell(1, 0)


def test_member_order_decides_which_cell_must_lead():
    request = request_of(TWO_AXES, ["data", "model"], RS)
    program = prog((RS, (DATA_GPU, MODEL_NODE)))
    assert mesh_order((DATA_GPU, MODEL_NODE)) == (MODEL_NODE, DATA_GPU)
    by_cell = plan_layout(TWO_AXES, request, program)  # the runtime's sub-communicators: cell order
    assert by_cell.start == (DATA_GPU, MODEL_NODE) and by_cell.transposes == 0
    by_mesh = plan_layout(TWO_AXES, request, program, MemberOrder.MESH)  # torch and JAX groups: rank order
    assert by_mesh.actions[0] == Transpose((DATA_GPU, MODEL_NODE), (MODEL_NODE, DATA_GPU))
    gather = plan_layout(TWO_AXES, request_of(TWO_AXES, ["data", "model"], AG), prog((AG, (DATA_GPU, MODEL_NODE))), MemberOrder.MESH)
    assert [a.after for a in gather.actions] == [(MODEL_NODE, DATA_GPU), (DATA_GPU, MODEL_NODE)]


def test_restricting_a_plan_folds_the_other_cells_into_the_chunk():
    rs, ar = Step(RS, (CORE,)), Step(AR, (NODE,))
    plan = LayoutPlan((NODE, CORE), (Transpose((NODE, CORE), (CORE, NODE)), Exchange(rs, (CORE, NODE), (NODE,)), Exchange(ar, (NODE,), (NODE,))))
    assert plan.restricted({CORE}) == LayoutPlan((CORE,), (Exchange(rs, (CORE,), ()), Exchange(ar, (), ())))
    assert split_cells(PL, request_of(PL, ["data"], AR), prog((RS, (CORE,)), (AR, (NODE,)), (AG, (CORE,)))) == (CORE,)


def export_layouts(placement, request, program):
    """The exports' buffer layouts: the start, then the layout after every step and repack (dimension names)."""
    plan = plan_module(placement, [("r", request, program, 1 << 20)]).requests[0]
    return [plan.layout] + [a.layout for a in plan.actions], sum(isinstance(a, RepackPlan) for a in plan.actions)


def runtime_layouts(placement, request, program, cells):
    """The runtime's buffer layouts (Executor.layout, as a rank compiles them), seen on `cells`, as dimension names."""
    world = SimpleNamespace(Get_size=lambda: placement.num_devices, Get_rank=lambda: 0)
    plan = Executor(None, placement, request, world).layout(program).restricted(cells)
    return [dim_names(placement, plan.start)] + [dim_names(placement, a.after) for a in plan.actions], plan.transposes


AGREEMENT_CASES = [
    (PL, ["data"]),
    (placement_of([("node", 2), ("socket", 2), ("core", 2)], [("data", 8)], [[2, 2, 2]]), ["data"]),
    (TWO_AXES, ["data", "model"]),
    (placement_of([("node", 2), ("gpu", 4)], [("data", 4), ("model", 2)], [[2, 2], [1, 2]]), ["data", "model"]),
]


@pytest.mark.parametrize("collective", list(Collective))
@pytest.mark.parametrize(("placement", "axes"), AGREEMENT_CASES, ids=["2x4", "2x2x2", "data@gpu-model@node", "data-model@gpu"])
def test_runtime_and_exports_get_the_same_chunk_order_from_the_engine(placement, axes, collective):
    """Where a group numbers its members alike in MPI and in the frameworks (every slice in mesh order), the
    exports run the runtime's plan on the cells they chunk; elsewhere they differ only by the member order."""
    if collective not in collectives_for(axes):
        pytest.skip("send_recv runs along one axis")
    request = request_of(placement, axes, collective)
    same = 0
    for program in all_programs(placement, request, 3):
        cells = split_cells(placement, request, program)
        exported = export_layouts(placement, request, program)
        if all(mesh_order(s.slice) == s.slice for s in program.steps):
            assert exported == runtime_layouts(placement, request, program, cells)
            same += 1
        else:
            plan = plan_layout(placement, request, program, MemberOrder.MESH).restricted(cells)
            assert exported[0] == [dim_names(placement, plan.start)] + [dim_names(placement, a.after) for a in plan.actions]
    assert same > 0


def test_runtime_and_exports_repack_alike():
    for collective, program, want in [
        (RS, prog((RS, (CORE,)), (RS, (NODE,))), [("data@node", "data@core"), ("data@core", "data@node"), ("data@node",), ()]),
        (AR, prog((RS, (NODE,)), (RS, (CORE,)), (AG, (NODE,)), (AG, (CORE,))),
         [("data@node", "data@core"), ("data@core",), (), ("data@node",), ("data@core", "data@node"), ("data@node", "data@core")]),
    ]:
        request = request_of(PL, ["data"], collective)
        assert export_layouts(PL, request, program) == runtime_layouts(PL, request, program, (NODE, CORE)) == (want, 1)
