"""Buffer roles of runtime/layout.py: which buffer each action of a layout plan reads and writes (no MPI)."""

from p2synth.hierarchies import Cell, Collective, Program, Step
from p2synth.hierarchies.layout import plan_layout
from p2synth.runtime.layout import Role, assign_buffers
from tests.runtime_support import placement_of, request_of

PL = placement_of([("node", 2), ("core", 4)], [("data", 8)], [[2, 4]])
NODE, CORE = Cell(0, 0), Cell(0, 1)
AR, RS, AG = Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER


def prog(*steps):
    return Program(tuple(Step(op, cells) for op, cells in steps))


def test_buffer_roles_are_out_of_place_and_chain():
    plan = plan_layout(PL, request_of(PL, ["data"], AR), prog((RS, (NODE,)), (RS, (CORE,)), (AG, (NODE,)), (AG, (CORE,))))
    roles = assign_buffers(plan.actions)
    assert roles[0][0] is Role.SEND and roles[-1][1] is Role.RECV
    assert all(dst is not Role.SEND for _, dst in roles)
    assert all(roles[i][1] is roles[i + 1][0] for i in range(len(roles) - 1))
    assert all(src is not dst for src, dst in roles)  # RS, AG and transposes cannot run in place


def test_all_reduce_runs_out_of_place():
    # Open MPI's libnbc runs an in-place Iallreduce binomially whatever the size (docs/measurements/limit.md)
    plan = plan_layout(PL, request_of(PL, ["data"], AR), prog((RS, (CORE,)), (AR, (NODE,)), (AG, (CORE,))))
    assert assign_buffers(plan.actions) == (
        (Role.SEND, Role.SCRATCH_B),
        (Role.SCRATCH_B, Role.SCRATCH_A),
        (Role.SCRATCH_A, Role.RECV),
    )
    flat = plan_layout(PL, request_of(PL, ["data"], AR), prog((AR, (NODE, CORE))))
    assert assign_buffers(flat.actions) == ((Role.SEND, Role.RECV),)


def test_reduce_and_broadcast_keep_their_buffer():
    R, B = Collective.REDUCE, Collective.BROADCAST
    plan = plan_layout(PL, request_of(PL, ["data"], AR), prog((R, (CORE,)), (AR, (NODE,)), (B, (CORE,))))
    assert assign_buffers(plan.actions) == (
        (Role.SEND, Role.SCRATCH_A),
        (Role.SCRATCH_A, Role.RECV),
        (Role.RECV, Role.RECV),
    )
