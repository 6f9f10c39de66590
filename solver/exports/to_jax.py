"""Export a placement and its programs as a JAX module (a Mesh and functions for shard_map).

The generated module imports only jax and numpy (and ``math``). ``build_mesh()``
builds a ``jax.sharding.Mesh`` whose axes are the placement's cells, outer to
inner, with device ``r`` of ``jax.devices()`` at the coordinate whose row-major
index is ``r`` (see :mod:`solver.exports.planning`). One function per request,
``name(tensor)``, runs its program inside ``shard_map`` with ``lax.psum``,
``lax.psum_scatter``, ``lax.all_gather``, ``lax.all_to_all`` and (a
send_recv's shift, member ``i`` to ``i + 1``) ``lax.ppermute`` over tuples
of axis names;
``on_mesh(fn, mesh)`` wraps one for a global array. ``GROUPS`` names the mesh
axes of each axis and each request, for ``axis_name=`` and ``PartitionSpec``. A pipelined program runs
as a loop over its pieces inside ``shard_map``, cut as the runtime cuts them
and traced in the runtime's wavefront order.

JAX has no rooted reduce or broadcast: each request runs the best program of
its ranked list without such a step (solver/exports/choice.py), or is not
exported.
"""

from __future__ import annotations

import math

from p2synth.hierarchies.placement import Placement
from p2synth.hierarchies.program import Collective
from p2synth.solver.exports.choice import ExportFormat
from p2synth.solver.exports.planning import ActionPlan, ExportRequest, ModulePlan, RequestPlan, StepPlan, plan_module
from p2synth.solver.exports.rendering import (
    WAVEFRONT, groups_table, header, helper_lines, py_strings, request_function, requests_table,
)


def _imports(plan: ModulePlan) -> list[str]:
    """The module's imports: jax.numpy only if a request repacks or runs pipelined, lax only if there are steps."""
    jnp = plan.repacks or plan.pipelined
    lax = any(r.steps for r in plan.requests)
    return [
        "import math",
        "",
        "import jax",
        *(["import jax.numpy as jnp"] if jnp else []),
        "import numpy as np",
        *(["from jax import lax"] if lax else []),
        "from jax.sharding import Mesh, PartitionSpec",
    ]

_CHUNKED = '''
def _chunked(tensor, sizes):
    """`tensor` as a buffer of shape [*sizes, rest]: chunk k is the k-th block of dim 0."""
    n = math.prod(sizes)
    if n > 1 and (tensor.ndim == 0 or tensor.shape[0] % n):
        raise ValueError(f"dim 0 of an array of shape {tensor.shape} doesn't split into {n} chunks")
    return tensor.reshape(*sizes, -1)
'''

_REDUCE_SCATTER = '''
def _reduce_scatter(x, axes, lead):
    """Sum `x` over the mesh axes `axes`; keep this member's part.

    The first `lead` dims of `x` (the slice's cells, in the order of `axes`) index the members:
    flattened, the member whose index over `axes` is i keeps block i.
    """
    out = lax.psum_scatter(x.reshape(-1), axes, scatter_dimension=0, tiled=True)
    return out.reshape(x.shape[lead:])
'''

_ALL_GATHER = '''
def _all_gather(x, axes, sizes):
    """Concatenate `x` from every member over the mesh axes `axes` (in order of their index).

    The gathered dims (sizes `sizes`, in the order of `axes`) lead the result.
    """
    out = lax.all_gather(x.reshape(-1), axes, axis=0, tiled=True)
    return out.reshape(*sizes, *x.shape)
'''

_ALL_TO_ALL = '''
def _all_to_all(x, axes):
    """Exchange blocks of `x` over the mesh axes `axes` (members in order of their index).

    The leading dims of `x` (the slice's cells, in the order of `axes`) index the members:
    flattened, block i goes to the member whose index is i, and the block from that member takes
    its place.
    """
    out = lax.all_to_all(x.reshape(-1), axes, 0, 0, tiled=True)
    return out.reshape(x.shape)
'''

_SEND_RECV = '''
def _send_recv(x, axes, size):
    """A shift over the mesh axes `axes` (members in order of their index, `size` of them): this member's `x`
    goes to member i + 1, and the result is member i - 1's (mod `size`)."""
    return lax.ppermute(x, axes, perm=[(i, (i + 1) % size) for i in range(size)])
'''

_PIPELINED = '''
def _pipelined(tensor, chunks, sizes, pieces, steps, tail):
    """Run a program's `steps` on `pieces` pieces of `tensor`, traced in the runtime's wavefront order; the result, flat.

    `chunks` are the chunks of the input and of the output (dim-0 blocks); piece p is the p-th of
    `pieces` equal slices of every chunk, a buffer [*sizes, rest]. steps[k](x) runs step k + 1 of
    a piece; `tail` (if any) the last repack. The pieces' outputs go back in chunk order.
    """
    if tensor.ndim == 0 or tensor.shape[0] % chunks[0] or tensor.size % (chunks[0] * pieces):
        raise ValueError(f"an array of shape {tensor.shape} doesn't split into {chunks[0]} chunks of {pieces} pieces")
    split = jnp.swapaxes(tensor.reshape(chunks[0], pieces, -1), 0, 1)
    xs = [split[p].reshape(*sizes, -1) for p in range(pieces)]
    for piece, stage in _wavefront(pieces, len(steps)):
        if stage < len(steps):
            xs[piece] = steps[stage](xs[piece])
        elif tail is not None:
            xs[piece] = tail(xs[piece])
    return jnp.stack([x.reshape(chunks[1], -1) for x in xs], axis=1).reshape(-1)
'''

_NOTES = "Call it inside shard_map over the mesh of build_mesh(), on the device's own block (on_mesh does that)."

_FINAL = {
    Collective.REDUCE_SCATTER: "x.reshape(tensor.shape[0] // {g}, *tensor.shape[1:])",
    Collective.ALL_GATHER: "x.reshape(tensor.shape[0] * {g}, *tensor.shape[1:])",
}


def _action_code(action: ActionPlan, pipelined: bool) -> str:
    """The line that runs one step, or the repack, on buffer `x` (a pipelined step returns the new buffer)."""
    if not isinstance(action, StepPlan):
        return f"x = jnp.transpose(x, {action.axes!r})"
    axes = py_strings(action.dims)
    call = {  # reduce and broadcast never come here: choice.py passes over programs that have them
        Collective.ALL_REDUCE: f"lax.psum(x, {axes})",
        Collective.REDUCE_SCATTER: f"_reduce_scatter(x, {axes}, lead={len(action.dims)})",
        Collective.ALL_GATHER: f"_all_gather(x, {axes}, sizes={action.sizes!r})",
        Collective.ALL_TO_ALL: f"_all_to_all(x, {axes})",
        Collective.SEND_RECV: f"_send_recv(x, {axes}, size={math.prod(action.sizes)})",
    }[action.op]
    return f"return {call}" if pipelined else f"x = {call}"


def _request_function(req: RequestPlan) -> list[str]:
    """Source lines of the function that runs one request's program on a device's block."""
    final = _FINAL.get(req.collective, "x.reshape(tensor.shape)").format(g=req.group_size)
    return request_function(req, "tensor", _NOTES, _action_code, final)


_MESH_FUNCTIONS = '''
def build_mesh(devices=None):
    """The Mesh of this placement (axes MESH_AXIS_NAMES, shape MESH_SHAPE).

    Device r of `devices` (default jax.devices()) sits at the coordinate whose row-major index
    is r, so its position on every axis is its digit on that cell.
    """
    devices = jax.devices() if devices is None else devices
    n = math.prod(MESH_SHAPE)
    if len(devices) < n:
        raise ValueError(f"the mesh needs {n} devices, only {len(devices)} are available")
    return Mesh(np.asarray(devices[:n]).reshape(MESH_SHAPE), MESH_AXIS_NAMES)


def on_mesh(fn, mesh):
    """`fn` (a request function of this module) jitted under shard_map on `mesh`.

    Dim 0 of the argument and of the result is split over the devices in rank order:
    device r works on, and returns, the r-th block.
    """
    spec = PartitionSpec(MESH_AXIS_NAMES)
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=spec, out_specs=spec))
'''


def _helpers(plan: ModulePlan) -> list[str]:
    """The private helpers the module's programs use, each once."""
    chosen = [_CHUNKED] if any(r.steps and not r.pipelined for r in plan.requests) else []
    if plan.pipelined:
        chosen += [WAVEFRONT, _PIPELINED]
    for op, text in ((Collective.REDUCE_SCATTER, _REDUCE_SCATTER), (Collective.ALL_GATHER, _ALL_GATHER),
                     (Collective.ALL_TO_ALL, _ALL_TO_ALL), (Collective.SEND_RECV, _SEND_RECV)):
        if plan.uses(op):
            chosen.append(text)
    return helper_lines(chosen)


def render_jax(plan: ModulePlan) -> str:
    """Source of the JAX module for `plan`."""
    first = plan.requests[0].name if plan.requests else "<request>"
    usage = (
        "mesh = build_mesh()",
        f"out = on_mesh({first}, mesh)(x)  # x: device r's block is the r-th block of dim 0",
        f"# or call {first}(block) inside your own shard_map over this mesh",
        "GROUPS[name]  # the mesh axes of an axis or a request, e.g. PartitionSpec(GROUPS[\"data\"])",
    )
    lines = header(plan, "JAX (Mesh, shard_map)", usage) + ["", *_imports(plan), ""]
    lines += [f"MESH_SHAPE = {plan.shape!r}", f"MESH_AXIS_NAMES = {py_strings(plan.dim_names)}", ""]
    lines += groups_table(plan, "Mesh axes (for axis_name= and PartitionSpec)") + [""]
    lines += _MESH_FUNCTIONS.rstrip("\n").split("\n") + [""] + _helpers(plan)
    for req in plan.requests:
        lines += ["", *_request_function(req), ""]
    return "\n".join(lines + ["", *requests_table(plan)]) + "\n"


def export_jax(placement: Placement, requests: list[ExportRequest] | list[tuple]) -> str:
    """Source of a self-contained JAX module for `placement` and `requests`.

    `requests` holds ExportRequest items (plain ``(name, request, program,
    message_bytes[, ranked])`` tuples work too); each request runs the best of
    its ranked programs that has no reduce or broadcast step (`program` when
    none are given). The module defines ``build_mesh()``, ``on_mesh(fn, mesh)``
    and one ``<name>(tensor)`` per request, to call inside ``shard_map`` (names
    made into identifiers). Raises NotExportable (a ValueError) if a program is
    not valid for its request or no program of a request is free of reduce and
    broadcast steps.
    """
    return render_jax(plan_module(placement, requests, ExportFormat.JAX))
