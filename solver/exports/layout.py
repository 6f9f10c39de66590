"""What the framework exports share: mesh dimensions, request names and buffer layouts.

A placement becomes a device mesh whose dimensions are its cells in the order
of the device digits (docs/semantics.md section 1): levels outermost first and, within
a level, axes in declared order. Device rank ``r`` then sits at the mesh
coordinate whose row-major index is ``r``, which is how
``torch.distributed.device_mesh.init_device_mesh`` and a reshaped
``jax.sharding.Mesh`` lay ranks out. A dimension is named ``axis@level``
(``data@node``).

A program's steps move chunks around; the exports keep each device's buffer as
an array with one dimension per *layout cell* (a reduced cell that some
reduce-scatter, all-gather or all-to-all of the program splits) that the
device still holds whole, in cell order, plus one trailing dimension for the
rest. An all-to-all keeps every dimension: before a cell is exchanged its
index names the chunk's destination, after it the chunk's source. Chunk
``k`` (the mixed-radix index over the reduced cells in cell order) is then the
``k``-th block of the input's dim 0, as in the plain collective. This module
plans, for every step, where the slice's dimensions sit in that layout; the
framework modules only render the plan.
"""

from __future__ import annotations

import builtins
import json
import keyword
import math
import re
import textwrap
from dataclasses import dataclass
from typing import Callable, NamedTuple

from p2synth.hierarchies.placement import Cell, Placement
from p2synth.hierarchies.program import Collective, Program, Request
from p2synth.hierarchies.abstract import is_goal, run


class ExportRequest(NamedTuple):
    """One request to export: the function's name, the request, its program, the message size it was planned for."""

    name: str
    request: Request
    program: Program
    message_bytes: int


@dataclass(frozen=True)
class MeshDim:
    """One mesh dimension: a cell's name (``data@node``) and size (the cell's factor)."""

    name: str
    size: int


@dataclass(frozen=True)
class StepPlan:
    """One step as the exports run it.

    `dims` are the mesh dimensions of the slice in mesh order, which is the
    order the frameworks number a group's members in. For a reduce-scatter or
    an all-to-all, `lead` gives the buffer positions of those dimensions before
    the step (they are moved to the front and split over the members; an
    all-to-all puts the received blocks back there); for an all-gather, the
    positions the gathered dimensions (sizes `sizes`) take after it.
    `layout` names the buffer dimensions after the step.
    """

    op: Collective
    text: str
    dims: tuple[str, ...]
    lead: tuple[int, ...]
    sizes: tuple[int, ...]
    layout: tuple[str, ...]


@dataclass(frozen=True)
class RequestLayout:
    """A request ready to render: identifier, description, starting buffer layout and steps."""

    name: str
    label: str
    collective: Collective
    axes: tuple[str, ...]
    group_size: int
    program_text: str
    message_bytes: int
    layout: tuple[str, ...]
    layout_sizes: tuple[int, ...]
    steps: tuple[StepPlan, ...]


@dataclass(frozen=True)
class ModulePlan:
    """Everything a generated module says: where it comes from, its mesh and its requests."""

    hierarchy_name: str
    hierarchy: str
    placement: str
    dims: tuple[MeshDim, ...]
    requests: tuple[RequestLayout, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        """Mesh shape, outer to inner."""
        return tuple(d.size for d in self.dims)

    @property
    def dim_names(self) -> tuple[str, ...]:
        """Mesh dimension names, outer to inner."""
        return tuple(d.name for d in self.dims)

    @property
    def multi_dim_slices(self) -> tuple[tuple[str, ...], ...]:
        """Slices spanning several mesh dimensions, in order of first use (each needs its own groups)."""
        seen: dict[tuple[str, ...], None] = {}
        for req in self.requests:
            for step in req.steps:
                if len(step.dims) > 1:
                    seen.setdefault(step.dims)
        return tuple(seen)

    def uses(self, op: Collective) -> bool:
        """Whether any step of any request is `op`."""
        return any(step.op is op for req in self.requests for step in req.steps)


# Names a generated module defines or imports (besides Python's builtins, which its helpers
# use), which a request function must not shadow. Private helpers start with "_".
RESERVED_NAMES = frozenset(
    {"build_mesh", "on_mesh", "REQUESTS", "MESH_SHAPE", "MESH_DIM_NAMES", "MESH_AXIS_NAMES", "MULTI_DIM_SLICES",
     "math", "np", "jax", "jnp", "lax", "torch", "dist", "init_device_mesh", "Mesh", "PartitionSpec"}
)


def mesh_key(cell: Cell) -> tuple[int, int]:
    """Sort key of mesh order: level first (outermost first), then axis (declared order)."""
    return (cell.level, cell.axis)


def mesh_cells(placement: Placement) -> tuple[Cell, ...]:
    """The placement's cells in device-digit order: levels outermost first, then axes in declared order."""
    return tuple(sorted(placement.cells, key=mesh_key))


def dim_name(placement: Placement, cell: Cell) -> str:
    """Mesh dimension name of `cell`: ``axis@level``."""
    return "@".join(placement.cell_name(cell))


def mesh_dims(placement: Placement) -> tuple[MeshDim, ...]:
    """The mesh dimensions of `placement`, outer to inner (ranks row-major over them)."""
    return tuple(MeshDim(dim_name(placement, c), placement.factor(c)) for c in mesh_cells(placement))


def identifiers(names: list[str]) -> list[str]:
    """Distinct Python identifiers for `names`, in order (``grad-sync`` -> ``grad_sync``).

    Runs of other characters become ``_``; leading and trailing ``_`` go (the
    generated helpers start with one); a name that is empty, starts with a
    digit, is a keyword, a builtin or reserved by the module gets a prefix or suffix;
    repeats get ``_2``, ``_3``...
    """
    out: list[str] = []
    for name in names:
        ident = re.sub(r"[^0-9A-Za-z_]+", "_", name).strip("_") or "request"
        if ident[0].isdigit():
            ident = f"request_{ident}"
        if keyword.iskeyword(ident) or ident in RESERVED_NAMES or hasattr(builtins, ident):
            ident = f"{ident}_request"
        base, n = ident, 1
        while ident in out:
            n += 1
            ident = f"{base}_{n}"
        out.append(ident)
    return out


def check_exportable(placement: Placement, request: Request, program: Program) -> None:
    """Raise ValueError unless `program` is a valid program for `request` (abstract semantics)."""
    cells = request.reduced_cells(placement)
    bits = {c: 1 << i for i, c in enumerate(cells)}
    masks = []
    for step in program.steps:
        stray = [dim_name(placement, c) for c in step.slice if c not in bits]
        if stray:
            raise ValueError(f"step {step.text(placement)} names cells outside the request: {', '.join(stray)}")
        masks.append((step.op, sum(bits[c] for c in step.slice)))
    final = run(request.collective, len(cells), masks)
    if final is None or not is_goal(request.collective, final, len(cells)):
        text = program.text(placement) or "(empty program)"
        raise ValueError(f"{text} does not perform {request.collective.value} over the request's cells")


def plan_steps(
    placement: Placement, request: Request, program: Program
) -> tuple[tuple[Cell, ...], tuple[StepPlan, ...]]:
    """Starting buffer layout (cells, in cell order) and the plan of every step of a valid program."""
    split = {c for s in program.steps if s.op in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.ALL_TO_ALL)
             for c in s.slice}
    layout_cells = tuple(c for c in request.reduced_cells(placement) if c in split)
    # all_gather starts with every device holding only its own chunk: no layout cell is whole yet
    held = [] if request.collective is Collective.ALL_GATHER else list(layout_cells)
    start = tuple(held)
    steps = []
    for step in program.steps:
        group = sorted(step.slice, key=mesh_key)
        lead: tuple[int, ...] = ()
        if step.op is Collective.REDUCE_SCATTER:
            lead = tuple(held.index(c) for c in group)
            held = [c for c in held if c not in step.slice]
        elif step.op is Collective.ALL_GATHER:
            held = sorted(held + group)  # Cell sorts axis-major, then level: cell order
            lead = tuple(held.index(c) for c in group)
        elif step.op is Collective.ALL_TO_ALL:  # the layout stays; the slice's dims now name the source
            lead = tuple(held.index(c) for c in group)
        steps.append(StepPlan(
            op=step.op,
            text=step.text(placement),
            dims=tuple(dim_name(placement, c) for c in group),
            lead=lead,
            sizes=tuple(placement.factor(c) for c in group) if step.op is Collective.ALL_GATHER else (),
            layout=tuple(dim_name(placement, c) for c in held),
        ))
    return start, tuple(steps)


def _program_text(placement: Placement, program: Program) -> str:
    """The program as the generated module describes it; a pipelined one says that the module runs it unpipelined."""
    text = program.sequential().text(placement) or "(nothing to do)"
    if program.pipeline > 1:
        text += (f" (the plan pipelines it on {program.pipeline} pieces; this module runs the steps on the whole "
                 "buffer, one after the other: the same result, without the overlap)")
    return text


def plan_request(placement: Placement, name: str, item: ExportRequest) -> RequestLayout:
    """Validate one request's program and plan it under the identifier `name`."""
    check_exportable(placement, item.request, item.program)
    start, steps = plan_steps(placement, item.request, item.program)
    group_size = math.prod(placement.factor(c) for c in item.request.reduced_cells(placement))
    return RequestLayout(
        name=name,
        label=item.name,
        collective=item.request.collective,
        axes=tuple(placement.axes[a].name for a in sorted(item.request.axes)),
        group_size=group_size,
        program_text=_program_text(placement, item.program),
        message_bytes=item.message_bytes,
        layout=tuple(dim_name(placement, c) for c in start),
        layout_sizes=tuple(placement.factor(c) for c in start),
        steps=steps,
    )


def plan_module(placement: Placement, requests: list[ExportRequest] | list[tuple]) -> ModulePlan:
    """Plan a generated module for `placement` and `requests` ((name, request, program, message_bytes) each).

    Raises ValueError when a program is not valid for its request.
    """
    if not placement.cells:
        raise ValueError("the placement has no cells (a single device): there is no mesh to export")
    items = [ExportRequest(*r) for r in requests]
    names = identifiers([it.name for it in items])
    return ModulePlan(
        hierarchy_name=placement.hierarchy.name,
        hierarchy=placement.hierarchy.describe(),
        placement=placement.describe(),
        dims=mesh_dims(placement),
        requests=tuple(plan_request(placement, n, it) for n, it in zip(names, items, strict=True)),
    )


def py_strings(names: tuple[str, ...]) -> str:
    """A tuple of strings as Python source with double quotes: ``("data@node", "data@gpu")``."""
    items = ", ".join(json.dumps(n) for n in names)
    return f"({items},)" if len(names) == 1 else f"({items})"


def wrap_program(text: str, first: str, rest: str, width: int = 96) -> list[str]:
    """Program `text` as lines starting with `first`, then `rest`, broken before a ``->`` past `width`."""
    lines = [first]
    for i, part in enumerate(text.split(" -> ")):
        if i == 0:
            lines[-1] += part
        elif len(lines[-1]) + len(part) + 4 > width:
            lines.append(f"{rest}-> {part}")
        else:
            lines[-1] += f" -> {part}"
    return lines


def devices(n: int) -> str:
    """``1 device``, ``8 devices``."""
    return f"{n} device" if n == 1 else f"{n} devices"


def header(plan: ModulePlan, framework: str, usage: tuple[str, ...]) -> list[str]:
    """The comment block that opens a generated module: origin, placement, mesh, requests, usage."""
    mesh = ", ".join(f"{d.name}={d.size}" for d in plan.dims)
    lines = [
        f"# Generated by p2synth: synthesized collective programs for {framework}.",
        "#",
        f"# Hierarchy: {plan.hierarchy_name!r} ({plan.hierarchy})",
        f"# Placement: {plan.placement}",
        f"# Mesh:      ({mesh}), outer to inner,",
        "#            one dimension per cell axis@level. Rank r sits at the coordinate whose",
        "#            row-major index is r: its digits on the cells.",
        "#",
        "# A device's coordinate in a reduction group is its coordinate over the reduced axes",
        "# (axes in declared order, first most significant); it numbers the chunks of dim 0.",
        "#",
        "# Requests (function: collective over axes, devices per group, planned message size):",
    ]
    for r in plan.requests:
        what = f"{r.collective.value} over {', '.join(r.axes)}"
        lines.append(f"#   {r.name}: {what} ({devices(r.group_size)}, {r.message_bytes} bytes)")
        lines += wrap_program(r.program_text, "#       ", "#         ")
    lines += ["#", "# Usage:"] + [f"#     {u}" for u in usage]
    return lines


def layout_comment(layout: tuple[str, ...]) -> str:
    """Buffer layout as text: ``[data@node, data@gpu, *]``."""
    return "[" + ", ".join(layout + ("*",)) + "]"


# What a request function returns, by collective (the plain collective over the whole group).
RESULTS = {
    Collective.ALL_REDUCE: "Returns the sum of `tensor` over the reduction group, same shape.",
    Collective.REDUCE_SCATTER: (
        "Returns chunk k of the sum over the reduction group, k = this device's coordinate in the "
        "group: dim 0 of `tensor` splits into {g} chunks."
    ),
    Collective.ALL_GATHER: (
        "Returns the group's tensors concatenated along dim 0, in order of the devices' "
        "coordinates in the group."
    ),
    Collective.REDUCE: "The group's root (coordinate 0) gets the sum of `tensor` over the reduction group.",
    Collective.BROADCAST: "Returns, on every device, the `tensor` of the group's root (coordinate 0).",
    Collective.ALL_TO_ALL: (
        "Dim 0 of `tensor` splits into {g} chunks, chunk k addressed to the device whose coordinate in the "
        "group is k. Returns the chunks addressed to this device, same shape: chunk k came from the device "
        "whose coordinate is k."
    ),
}


# What the comment above a step adds to the step's text ({} is the buffer layout after it).
_STEP_NOTES = {
    Collective.REDUCE_SCATTER: ": buffer -> {}",
    Collective.ALL_GATHER: ": buffer -> {}",
    Collective.REDUCE: ": the sum goes to the root (digits 0 on the slice)",
    Collective.BROADCAST: ": from the root (digits 0 on the slice)",
    Collective.ALL_TO_ALL: ": exchanged over the slice, buffer {}",
}


def request_function(
    req: RequestLayout, signature: str, notes: str, step_code: Callable[[StepPlan], str], final: str
) -> list[str]:
    """Source lines of the function running one request: docstring, buffer layout, one commented line per step.

    `notes` (framework-specific) follow the result in the docstring; `step_code` renders a
    step's call on buffer ``x``; `final` is the returned expression.
    """
    doc = RESULTS[req.collective].format(g=req.group_size) + " " + notes
    lines = [
        f"def {req.name}({signature}):",
        f'    """{req.collective.value} over {", ".join(req.axes)} ({devices(req.group_size)}).',
        "",
        *wrap_program(req.program_text, "    Program: ", "             "),
        f"    Planned for {req.message_bytes}-byte messages.",
        "",
        *textwrap.wrap(doc, width=96, initial_indent="    ", subsequent_indent="    "),
        '    """',
    ]
    if not req.steps:
        return lines + ["    return tensor  # a group of one device: nothing to do"]
    lines.append(f"    x = _chunked(tensor, {req.layout_sizes!r})  # buffer {layout_comment(req.layout)}")
    for i, step in enumerate(req.steps, 1):
        lines += [f"    # {i}. {step.text}{_STEP_NOTES.get(step.op, '').format(layout_comment(step.layout))}",
                  f"    {step_code(step)}"]
    return lines + [f"    return {final}"]


def requests_table(plan: ModulePlan) -> list[str]:
    """The closing ``REQUESTS`` dict: request functions by the names they were exported under."""
    rows = [f"    {json.dumps(r.label)}: {r.name}," for r in plan.requests]
    return ["# Request functions by the names they were exported under.", "REQUESTS = {", *rows, "}"]


def helper_lines(snippets: list[str]) -> list[str]:
    """Helper sources as module lines, each with the blank lines PEP 8 puts around a function."""
    return [line for text in snippets for line in ["", *text.strip("\n").split("\n"), ""]]
