"""Export a placement and its programs as a JAX module (a Mesh and functions for shard_map).

The generated module imports only jax and numpy (and ``math``). ``build_mesh()``
builds a ``jax.sharding.Mesh`` whose axes are the placement's cells, outer to
inner, with device ``r`` of ``jax.devices()`` at the coordinate whose row-major
index is ``r`` (see :mod:`solver.exports.planning`). One function per request,
``name(tensor)``, runs its program inside ``shard_map`` with ``lax.psum``,
``lax.psum_scatter``, ``lax.all_gather`` and ``lax.all_to_all`` over tuples
of axis names;
``on_mesh(fn, mesh)`` wraps one for a global array.

JAX has no rooted reduce or broadcast. A reduce is a ``psum`` (every member
gets the sum, the root included, so the root's result is the reduce's); a
broadcast is a ``psum`` of the values masked to zero off the root (exact: the
others add zeros). The generated helpers say so.
"""

from __future__ import annotations

from p2synth.hierarchies.placement import Placement
from p2synth.hierarchies.program import Collective
from p2synth.solver.exports.planning import ActionPlan, ExportRequest, ModulePlan, RequestPlan, StepPlan, plan_module
from p2synth.solver.exports.rendering import header, helper_lines, py_strings, request_function, requests_table


def _imports(plan: ModulePlan) -> list[str]:
    """The module's imports: jax.numpy only if a request repacks or a helper masks values, lax only if there are steps."""
    jnp = plan.repacks or plan.uses(Collective.BROADCAST)
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

_REDUCE = '''
def _reduce(x, axes):
    """Reduce to the root of each group over `axes` (index 0 on all of them).

    JAX has no rooted reduce: this is a psum, so every member gets the sum. The root's result is
    the reduce's; the others' copies are extra (a reduce leaves them undefined).
    """
    return lax.psum(x, axes)
'''

_BROADCAST = '''
def _broadcast(x, axes):
    """Send the root's `x` (index 0 on every axis of `axes`) to every member of its group.

    JAX has no rooted broadcast: this is a psum of `x` masked to zero off the root, which is
    exact (the other members add zeros).
    """
    is_root = lax.axis_index(axes) == 0
    return lax.psum(jnp.where(is_root, x, jnp.zeros_like(x)), axes)
'''

_NOTES = "Call it inside shard_map over the mesh of build_mesh(), on the device's own block (on_mesh does that)."
_REDUCE_NOTE = "JAX has no rooted reduce: the other devices get the sum too. "

_FINAL = {
    Collective.REDUCE_SCATTER: "x.reshape(tensor.shape[0] // {g}, *tensor.shape[1:])",
    Collective.ALL_GATHER: "x.reshape(tensor.shape[0] * {g}, *tensor.shape[1:])",
}


def _action_code(action: ActionPlan) -> str:
    """The line that runs one step, or the repack, on buffer `x`."""
    if not isinstance(action, StepPlan):
        return f"x = jnp.transpose(x, {action.axes!r})"
    axes = py_strings(action.dims)
    call = {
        Collective.ALL_REDUCE: f"lax.psum(x, {axes})",
        Collective.REDUCE_SCATTER: f"_reduce_scatter(x, {axes}, lead={len(action.dims)})",
        Collective.ALL_GATHER: f"_all_gather(x, {axes}, sizes={action.sizes!r})",
        Collective.REDUCE: f"_reduce(x, {axes})",
        Collective.BROADCAST: f"_broadcast(x, {axes})",
        Collective.ALL_TO_ALL: f"_all_to_all(x, {axes})",
    }[action.op]
    return f"x = {call}"


def _request_function(req: RequestPlan) -> list[str]:
    """Source lines of the function that runs one request's program on a device's block."""
    notes = (_REDUCE_NOTE if req.collective is Collective.REDUCE else "") + _NOTES
    final = _FINAL.get(req.collective, "x.reshape(tensor.shape)").format(g=req.group_size)
    return request_function(req, "tensor", notes, _action_code, final)


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
    chosen = [_CHUNKED] if any(r.steps for r in plan.requests) else []
    for op, text in ((Collective.REDUCE_SCATTER, _REDUCE_SCATTER), (Collective.ALL_GATHER, _ALL_GATHER),
                     (Collective.REDUCE, _REDUCE), (Collective.BROADCAST, _BROADCAST), (Collective.ALL_TO_ALL, _ALL_TO_ALL)):
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
    )
    lines = header(plan, "JAX (Mesh, shard_map)", usage) + ["", *_imports(plan), ""]
    lines += [f"MESH_SHAPE = {plan.shape!r}", f"MESH_AXIS_NAMES = {py_strings(plan.dim_names)}", ""]
    lines += _MESH_FUNCTIONS.rstrip("\n").split("\n") + [""] + _helpers(plan)
    for req in plan.requests:
        lines += ["", *_request_function(req), ""]
    return "\n".join(lines + ["", *requests_table(plan)]) + "\n"


def export_jax(placement: Placement, requests: list[ExportRequest] | list[tuple]) -> str:
    """Source of a self-contained JAX module for `placement` and `requests`.

    `requests` holds ``(name, request, program, message_bytes)`` items. The module
    defines ``build_mesh()``, ``on_mesh(fn, mesh)`` and one ``<name>(tensor)`` per
    request, to call inside ``shard_map`` (names made into identifiers). Raises
    ValueError if a program is not valid for its request.
    """
    return render_jax(plan_module(placement, requests))
