"""Export a placement and its programs as a PyTorch module (torch.distributed over a DeviceMesh).

The generated module imports only torch (and ``math``). ``build_mesh()`` builds
a ``DeviceMesh`` whose dimensions are the placement's cells, outer to inner
(see :mod:`solver.exports.planning`), and the process groups of every slice that
spans several of them; one function per request, ``name(tensor, mesh)``, runs
its program with ``torch.distributed`` collectives and returns what the plain
collective over the whole reduction group would (a send_recv's shift, member
``i`` to ``i + 1`` of its group: one ``dist.batch_isend_irecv``). A pipelined program runs on
its pieces as the runtime's wavefront, every step started with
``async_op=True`` and waited for before the piece's next step. ``groups(mesh)``
gives one process group per axis and per request (``GROUPS`` names the mesh
dimensions each spans), such as the tensor-parallel group and DDP's
data-parallel group.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from p2synth.hierarchies.placement import Placement
from p2synth.hierarchies.program import Collective
from p2synth.solver.exports.choice import ExportFormat
from p2synth.solver.exports.planning import ActionPlan, ExportRequest, ModulePlan, RequestPlan, StepPlan, plan_module
from p2synth.solver.exports.rendering import (
    WAVEFRONT, groups_table, header, helper_lines, py_strings, request_function, requests_table,
)


def _imports(plan: ModulePlan) -> list[str]:
    """The module's imports: math for the helpers, torch.distributed only if there are steps."""
    steps = any(r.steps for r in plan.requests)
    return [
        *(["import math", ""] if steps else []),
        "import torch",
        *(["import torch.distributed as dist"] if steps else []),
        "from torch.distributed.device_mesh import init_device_mesh",
    ]

_CHUNKED = '''
def _chunked(tensor, sizes):
    """`tensor` as a contiguous buffer [*sizes, rest]: chunk k is the k-th block of dim 0."""
    n = math.prod(sizes)
    if n > 1 and (tensor.dim() == 0 or tensor.shape[0] % n):
        shape = tuple(tensor.shape)
        raise ValueError(f"dim 0 of a tensor of shape {shape} does not split into {n} chunks")
    return tensor.contiguous().view(*sizes, -1)
'''

_FLAT_GROUP = '''
def _flat_group(mesh, dims):
    """This rank's process group among the ranks that differ from it only on the mesh dims `dims`.

    Every rank creates every such group, in the same order, as torch.distributed requires.
    Members are numbered in rank order, i.e. row-major over `dims`, like a mesh dimension's group.
    """
    axes = [MESH_DIM_NAMES.index(d) for d in dims]
    tail = list(range(mesh.ndim - len(axes), mesh.ndim))
    size = math.prod(mesh.size(a) for a in axes)
    rows = mesh.mesh.movedim(axes, tail).reshape(-1, size)
    group, _ = dist.new_subgroups_by_enumeration(rows.tolist())
    return group
'''

_GROUPS = '''
def groups(mesh):
    """One process group per axis and per request, by name (GROUPS: the mesh dims each spans).

    groups(mesh)["tensor"] is this rank's tensor-parallel group; groups(mesh)["data"] is the
    data-parallel group to hand DDP (process_group=...). A group numbers its members in rank
    order, row-major over its mesh dims. Collective: call it on every rank after build_mesh(); the
    groups over several mesh dims are made on the first call for `mesh` and kept.
    """
    if _NAMED_GROUPS.get("mesh") is not mesh:
        made = {}
        for dims in dict.fromkeys(GROUPS.values()):
            if len(dims) == 1:
                made[dims] = mesh.get_group(dims[0])
            else:
                made[dims] = _FLAT_GROUPS.get(dims) or _flat_group(mesh, dims)
        _NAMED_GROUPS.update(mesh=mesh, groups={name: made[dims] for name, dims in GROUPS.items()})
    return dict(_NAMED_GROUPS["groups"])
'''

_PIPELINED = '''
def _pipelined(tensor, chunks, sizes, pieces, steps, tail):
    """Run a program's `steps` on `pieces` pieces of `tensor` as the runtime's wavefront; the result, flat.

    `chunks` are the chunks of the input and of the output (dim-0 blocks); piece p is the p-th of
    `pieces` equal slices of every chunk, a buffer [*sizes, rest]. steps[k](x) starts step k + 1
    of a piece (async_op=True) and returns its buffer and the work to wait for; before a piece's
    next step, and before its `tail` (the last repack, if any), the piece waits for that work.
    Every rank starts the collectives in the same order. The pieces' outputs go back in chunk order.
    """
    if tensor.dim() == 0 or tensor.shape[0] % chunks[0] or tensor.numel() % (chunks[0] * pieces):
        shape = tuple(tensor.shape)
        raise ValueError(f"a tensor of shape {shape} does not split into {chunks[0]} chunks of {pieces} pieces")
    split = tensor.contiguous().view(chunks[0], pieces, -1).transpose(0, 1).contiguous()
    xs = [split[p].view(*sizes, -1) for p in range(pieces)]
    works = [None] * pieces
    for piece, stage in _wavefront(pieces, len(steps)):
        if stage > 0:
            works[piece].wait()
        if stage < len(steps):
            xs[piece], works[piece] = steps[stage](xs[piece])
        elif tail is not None:
            xs[piece] = tail(xs[piece])
    return torch.stack([x.reshape(chunks[1], -1) for x in xs], dim=1).view(-1)
'''

_REDUCE_SCATTER = '''
class _Summed:
    """A reduce_scatter run as an exchange: wait() waits for the all_to_all, then sums the blocks it received."""

    def __init__(self, work, blocks, out):
        self.work, self.blocks, self.out = work, blocks, out

    def wait(self):
        self.work.wait()
        torch.sum(self.blocks, dim=0, out=self.out)
        return True


def _reduce_scatter(x, group, lead, async_op=False):
    """Sum `x` over `group`; keep this member's part.

    The first `lead` dims of `x` (the slice's cells, in mesh order) index the members: flattened,
    group rank i receives the block where they read i. With async_op, returns (result, work):
    the result is there once work.wait() returns. On gloo, whose reduce_scatter all-reduces the
    whole buffer (each member sends 2 (k-1)/k of it), the members exchange their blocks
    (all_to_all_single: (k-1)/k sent) and each sums the k blocks it received, in group rank order.
    """
    out = x.new_empty(x.shape[lead:])
    send = x.contiguous().view(-1)
    if dist.get_backend(group) != "gloo":
        work = _reduce_scatter_flat(out.view(-1), send, group=group, async_op=async_op)
        return (out, work) if async_op else out
    blocks = torch.empty_like(send)
    work = dist.all_to_all_single(blocks, send, group=group, async_op=True)
    work = _Summed(work, blocks.view(dist.get_world_size(group), -1), out.view(-1))
    if async_op:
        return out, work
    work.wait()
    return out
'''

_ALL_GATHER = '''
def _all_gather(x, group, sizes, async_op=False):
    """Concatenate `x` from every member of `group` (in group rank order).

    The gathered dims (sizes `sizes`, the slice's cells in mesh order) lead the result. With
    async_op, returns (result, work): the result is there once work.wait() returns.
    """
    out = x.new_empty((*sizes, *x.shape))
    work = _all_gather_flat(out.view(-1), x.contiguous().view(-1), group=group, async_op=async_op)
    return (out, work) if async_op else out
'''

_ALL_TO_ALL = '''
def _all_to_all(x, group, async_op=False):
    """Exchange blocks of `x` over `group` (group rank order).

    The leading dims of `x` (the slice's cells, in mesh order) index the members: flattened,
    block i goes to group rank i, and the block from group rank i takes its place. With
    async_op, returns (result, work): the result is there once work.wait() returns.
    """
    send = x.contiguous()
    out = torch.empty_like(send)
    work = dist.all_to_all_single(out.view(-1), send.view(-1), group=group, async_op=async_op)
    return (out, work) if async_op else out
'''

_SEND_RECV = '''
class _Works:
    """The works of one batch_isend_irecv, waited for together."""

    def __init__(self, works):
        self.works = works

    def wait(self):
        for work in self.works:
            work.wait()
        return True


def _send_recv(x, group, async_op=False):
    """A shift over `group` (group rank order): this member's `x` goes to group rank i + 1, and the result is
    group rank i - 1's (mod the group's size), one batch_isend_irecv. With async_op, returns (result, work):
    the result is there once work.wait() returns.
    """
    send = x.contiguous()
    out = torch.empty_like(send)
    size, me = dist.get_world_size(group), dist.get_rank(group)
    work = _Works(dist.batch_isend_irecv([
        dist.P2POp(dist.isend, send, dist.get_global_rank(group, (me + 1) % size), group),
        dist.P2POp(dist.irecv, out, dist.get_global_rank(group, (me - 1) % size), group),
    ]))
    if async_op:
        return out, work
    work.wait()
    return out
'''

_NOTES = "Like torch.distributed's collectives it may overwrite `tensor`. Every rank calls it."
_REDUCE_NOTE = "The result is undefined on the other ranks, as after dist.reduce. "

_FINAL = {
    Collective.REDUCE_SCATTER: "x.view(tensor.shape[0] // {g}, *tensor.shape[1:])",
    Collective.ALL_GATHER: "x.view(tensor.shape[0] * {g}, *tensor.shape[1:])",
}


def _group_expr(step: StepPlan) -> str:
    """Python expression of the process group of `step`'s slice."""
    if len(step.dims) == 1:
        return f'mesh.get_group("{step.dims[0]}")'
    return f"_FLAT_GROUPS[{py_strings(step.dims)}]"


def _action_code(action: ActionPlan, pipelined: bool) -> str:
    """The line that runs one step, or the repack, on buffer `x`; a pipelined step starts it and returns (x, work)."""
    if not isinstance(action, StepPlan):
        return f"x = x.permute{action.axes!r}.contiguous()"
    group = _group_expr(action)
    in_place = {
        Collective.ALL_REDUCE: f"dist.all_reduce(x, group={group}",
        Collective.REDUCE: f"dist.reduce(x, group_dst=0, group={group}",
        Collective.BROADCAST: f"dist.broadcast(x, group_src=0, group={group}",
    }
    if action.op in in_place:
        return f"return x, {in_place[action.op]}, async_op=True)" if pipelined else f"{in_place[action.op]})"
    call = {
        Collective.REDUCE_SCATTER: f"_reduce_scatter(x, {group}, lead={len(action.dims)}",
        Collective.ALL_GATHER: f"_all_gather(x, {group}, sizes={action.sizes!r}",
        Collective.ALL_TO_ALL: f"_all_to_all(x, {group}",
        Collective.SEND_RECV: f"_send_recv(x, {group}",
    }[action.op]
    return f"return {call}, async_op=True)" if pipelined else f"x = {call})"


def _request_function(req: RequestPlan) -> list[str]:
    """Source lines of the function that runs one request's program."""
    notes = (_REDUCE_NOTE if req.collective is Collective.REDUCE else "") + _NOTES
    final = _FINAL.get(req.collective, "x.view(tensor.shape)").format(g=req.group_size)
    return request_function(req, "tensor, mesh", notes, _action_code, final)


def _build_mesh(plan: ModulePlan) -> list[str]:
    """Source lines of ``build_mesh``."""
    lines = [
        "def build_mesh(device_type=None):",
        '    """The DeviceMesh of this placement (dims MESH_DIM_NAMES, shape MESH_SHAPE, ranks row-major).',
        "",
        "    Collective: call it once on every rank, after dist.init_process_group(). It also creates",
        "    the process groups of the slices that span several mesh dims. `device_type` defaults to",
        '    "cuda" when available, else "cpu".',
        '    """',
        "    if device_type is None:",
        '        device_type = "cuda" if torch.cuda.is_available() else "cpu"',
        "    mesh = init_device_mesh(device_type, MESH_SHAPE, mesh_dim_names=MESH_DIM_NAMES)",
    ]
    if plan.multi_dim_slices:
        lines += ["    for dims in MULTI_DIM_SLICES:", "        _FLAT_GROUPS[dims] = _flat_group(mesh, dims)"]
    return lines + ["    return mesh"]


def _helpers(plan: ModulePlan) -> list[str]:
    """The private helpers the module's programs use, each once."""
    chosen = [_CHUNKED] if any(r.steps and not r.pipelined for r in plan.requests) else []
    if plan.pipelined:
        chosen += [WAVEFRONT, _PIPELINED]
    if plan.flat_groups:
        chosen.append(_FLAT_GROUP)
    if plan.uses(Collective.REDUCE_SCATTER):
        chosen.append(_REDUCE_SCATTER)
    if plan.uses(Collective.ALL_GATHER):
        chosen.append(_ALL_GATHER)
    if plan.uses(Collective.ALL_TO_ALL):
        chosen.append(_ALL_TO_ALL)
    if plan.uses(Collective.SEND_RECV):
        chosen.append(_SEND_RECV)
    return helper_lines(chosen)


_ALIAS = '{} = getattr(dist, "{}", None) or dist.{}'


def reduce_scatter_step() -> Callable[..., Any]:
    """The exported modules' reduce_scatter step, ``_reduce_scatter(x, group, lead, async_op=False)``, compiled from
    the same source, for tools that time what a module runs (torch is imported here)."""
    namespace: dict[str, Any] = {}
    alias = _ALIAS.format("_reduce_scatter_flat", "reduce_scatter_single", "reduce_scatter_tensor")
    exec("import torch\nimport torch.distributed as dist\n" + alias + "\n" + _REDUCE_SCATTER, namespace)
    return namespace["_reduce_scatter"]


def _compat(plan: ModulePlan) -> list[str]:
    """Aliases of the flat collectives, which torch 2.13 renamed (the old names warn there)."""
    lines = []
    if plan.uses(Collective.REDUCE_SCATTER):
        lines.append(_ALIAS.format("_reduce_scatter_flat", "reduce_scatter_single", "reduce_scatter_tensor"))
    if plan.uses(Collective.ALL_GATHER):
        lines.append(_ALIAS.format("_all_gather_flat", "all_gather_single", "all_gather_into_tensor"))
    if lines:
        lines = ["", "# torch >= 2.13 calls these *_single, older releases *_tensor (same arguments)."] + lines
    return lines


def _slices(plan: ModulePlan) -> list[str]:
    """The table of multi-dim slices, whose groups build_mesh creates, and the named groups of ``groups()``."""
    lines = ["", *groups_table(plan, "Process groups (groups(mesh))"), "_NAMED_GROUPS = {}"]
    if plan.flat_groups:
        lines.append("_FLAT_GROUPS = {}")
    if not plan.multi_dim_slices:
        return lines
    return [
        "",
        "# Slices that span several mesh dims: build_mesh() creates their process groups.",
        "MULTI_DIM_SLICES = (",
        *[f"    {py_strings(d)}," for d in plan.multi_dim_slices],
        ")",
        *lines,
    ]


def render_torch(plan: ModulePlan) -> str:
    """Source of the PyTorch module for `plan`."""
    first = plan.requests[0].name if plan.requests else "<request>"
    usage = (
        "import torch.distributed as dist",
        'dist.init_process_group("nccl")  # or "gloo" on CPU; one process per device',
        "mesh = build_mesh()",
        f"out = {first}(tensor, mesh)",
        f"group = groups(mesh)[{json.dumps(plan.groups[0].name if plan.groups else first)}]"
        "  # a process group per axis and per request (GROUPS)",
    )
    lines = header(plan, "PyTorch (torch.distributed, DeviceMesh)", usage) + ["", *_imports(plan), ""]
    lines += [f"MESH_SHAPE = {plan.shape!r}", f"MESH_DIM_NAMES = {py_strings(plan.dim_names)}"]
    lines += _compat(plan) + _slices(plan) + ["", "", *_build_mesh(plan), ""] + _helpers(plan)
    lines += ["", *_GROUPS.strip("\n").split("\n"), ""]
    for req in plan.requests:
        lines += ["", *_request_function(req), ""]
    return "\n".join(lines + ["", *requests_table(plan)]) + "\n"


def export_torch(placement: Placement, requests: list[ExportRequest] | list[tuple]) -> str:
    """Source of a self-contained PyTorch module for `placement` and `requests`.

    `requests` holds ExportRequest items (plain ``(name, request, program,
    message_bytes[, ranked])`` tuples work too); each request runs the best of
    its ranked programs (`program` when none are given). The module defines
    ``build_mesh()`` and one ``<name>(tensor, mesh)`` per request (names made
    into identifiers). Raises NotExportable (a ValueError) if a program is not
    valid for its request.
    """
    return render_torch(plan_module(placement, requests, ExportFormat.TORCH))
