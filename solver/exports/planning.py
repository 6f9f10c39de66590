"""What a generated module does: its mesh, its request functions' names, and each step's groups and buffer layout.

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
device still holds whole, plus one trailing dimension for the rest. The order
of those dimensions, and where the buffer must be repacked, is the layout plan
of hierarchies/layout.py (the one the MPI runtime runs) for groups that number
their members in mesh order, seen on the layout cells only. This module turns
that plan into steps and repacks over named mesh dimensions; to_torch and
to_jax render them (with solver/exports/rendering.py).

Each request runs the program solver/exports/choice.py picks from its ranked
list for the target framework. A pipelined program (``Program.pipeline = P >
1``) keeps the runtime's cut (runtime/executor.py): piece ``p`` is the ``p``-th
of P equal slices of every chunk of the input, each piece runs the layout plan
on its own buffer, and the pieces' steps run as the runtime's wavefront.
"""

from __future__ import annotations

import builtins
import keyword
import re
from dataclasses import dataclass
from typing import NamedTuple

from p2synth.hierarchies.abstract import is_goal, run
from p2synth.hierarchies.layout import (
    Exchange, Layout, LayoutPlan, MemberOrder, held_chunks, mesh_order, plan_layout, split_cells,
)
from p2synth.hierarchies.placement import Cell, Placement
from p2synth.hierarchies.program import Collective, Program, Request
from p2synth.solver.exports.choice import Choice, ExportFormat, RankedProgram, choose


class ExportRequest(NamedTuple):
    """One request to export: the function's name, the request, its program, the message size it was planned for,
    and the plan's ranked programs for it (best first, with predicted seconds).

    With `ranked`, the exporter runs the first of them its framework can
    express (`program` is then the first, for the record); without, it runs
    `program`, whose rank and predicted time it says are unknown.
    """

    name: str
    request: Request
    program: Program
    message_bytes: int
    ranked: tuple[RankedProgram, ...] = ()


@dataclass(frozen=True)
class MeshDim:
    """One mesh dimension: a cell's name (``data@node``) and size (the cell's factor)."""

    name: str
    size: int


@dataclass(frozen=True)
class StepPlan:
    """One step as the exports run it.

    `dims` are the mesh dimensions of the slice in mesh order, which is the
    order the frameworks number a group's members in, and `sizes` their sizes.
    A reduce-scatter or an all-to-all finds them leading the buffer, in that
    order (the reduce-scatter drops them); an all-gather puts them in front.
    `layout` names the buffer dimensions after the step.
    """

    op: Collective
    text: str
    dims: tuple[str, ...]
    sizes: tuple[int, ...]
    layout: tuple[str, ...]


@dataclass(frozen=True)
class RepackPlan:
    """A local reorder of the buffer: dimension ``i`` of the result is dimension ``axes[i]`` of the buffer.

    `axes` covers the trailing dimension too (it stays last); `layout` names
    the buffer dimensions after the repack.
    """

    axes: tuple[int, ...]
    layout: tuple[str, ...]


ActionPlan = StepPlan | RepackPlan


@dataclass(frozen=True)
class GroupPlan:
    """A named group of the module's ``groups()``: an axis (its name) or a request (its function's name), and the
    mesh dimensions it spans, in mesh order (members numbered row-major over them, as the frameworks number them)."""

    name: str
    dims: tuple[str, ...]


@dataclass(frozen=True)
class RequestPlan:
    """A request ready to render: identifier, description, starting buffer layout, and its steps and repacks."""

    name: str
    label: str
    collective: Collective
    axes: tuple[str, ...]
    group_size: int
    program_text: str
    choice: str
    message_bytes: int
    pieces: int
    chunks: tuple[int, int]
    layout: tuple[str, ...]
    layout_sizes: tuple[int, ...]
    actions: tuple[ActionPlan, ...]

    @property
    def pipelined(self) -> bool:
        """Whether the request runs on several pieces (a program with steps and ``pipeline > 1``)."""
        return self.pieces > 1 and bool(self.steps)

    @property
    def steps(self) -> tuple[StepPlan, ...]:
        """The collective steps, in order (the actions without the repacks)."""
        return tuple(a for a in self.actions if isinstance(a, StepPlan))


@dataclass(frozen=True)
class ModulePlan:
    """Everything a generated module says: where it comes from, its mesh and its requests."""

    hierarchy_name: str
    hierarchy: str
    placement: str
    dims: tuple[MeshDim, ...]
    requests: tuple[RequestPlan, ...]
    groups: tuple[GroupPlan, ...] = ()

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

    @property
    def flat_groups(self) -> bool:
        """Whether the module makes a group over several mesh dimensions (a step's slice or a named group)."""
        return bool(self.multi_dim_slices) or any(len(g.dims) > 1 for g in self.groups)

    def uses(self, op: Collective) -> bool:
        """Whether any step of any request is `op`."""
        return any(step.op is op for req in self.requests for step in req.steps)

    @property
    def pipelined(self) -> bool:
        """Whether any request runs pipelined."""
        return any(req.pipelined for req in self.requests)

    @property
    def repacks(self) -> bool:
        """Whether any request repacks its buffer."""
        return any(isinstance(a, RepackPlan) for req in self.requests for a in req.actions)


# Names a generated module defines or imports (besides Python's builtins, which its helpers
# use), which a request function must not shadow. Private helpers start with "_".
RESERVED_NAMES = frozenset(
    {"build_mesh", "on_mesh", "groups", "GROUPS", "REQUESTS", "MESH_SHAPE", "MESH_DIM_NAMES", "MESH_AXIS_NAMES", "MULTI_DIM_SLICES",
     "math", "np", "jax", "jnp", "lax", "torch", "dist", "init_device_mesh", "Mesh", "PartitionSpec"}
)


def dim_name(placement: Placement, cell: Cell) -> str:
    """Mesh dimension name of `cell`: ``axis@level``."""
    return "@".join(placement.cell_name(cell))


def dim_names(placement: Placement, cells: Layout) -> tuple[str, ...]:
    """Mesh dimension names of `cells`, in their order."""
    return tuple(dim_name(placement, c) for c in cells)


def mesh_dims(placement: Placement) -> tuple[MeshDim, ...]:
    """The mesh dimensions of `placement`, outer to inner (ranks row-major over them)."""
    return tuple(MeshDim(dim_name(placement, c), placement.factor(c)) for c in mesh_order(placement.cells))


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


class NotExportable(ValueError):
    """The user's plan cannot be exported as it stands: a program that does not perform its request, no mesh, or
    no program the framework can express."""


def check_exportable(placement: Placement, request: Request, program: Program) -> None:
    """Raise NotExportable unless `program` is a valid program for `request` (abstract semantics)."""
    cells = request.reduced_cells(placement)
    bits = {c: 1 << i for i, c in enumerate(cells)}
    masks = []
    for step in program.steps:
        stray = [dim_name(placement, c) for c in step.slice if c not in bits]
        if stray:
            raise NotExportable(f"step {step.text(placement)} names cells outside the request: {', '.join(stray)}")
        masks.append((step.op, sum(bits[c] for c in step.slice)))
    final = run(request.collective, len(cells), masks)
    if final is None or not is_goal(request.collective, final, len(cells)):
        text = program.text(placement) or "(empty program)"
        raise NotExportable(f"{text} does not perform {request.collective.value} over the request's cells")


def export_layout(placement: Placement, request: Request, program: Program) -> LayoutPlan:
    """The layout plan the exports run for a valid program: the engine's, members in mesh order, on the layout cells."""
    plan = plan_layout(placement, request, program, MemberOrder.MESH)
    return plan.restricted(split_cells(placement, request, program))


def plan_actions(placement: Placement, plan: LayoutPlan) -> tuple[ActionPlan, ...]:
    """The steps and repacks of a layout plan, over named mesh dimensions."""
    out: list[ActionPlan] = []
    for action in plan.actions:
        layout = dim_names(placement, action.after)
        if not isinstance(action, Exchange):
            axes = tuple(action.before.index(c) for c in action.after) + (len(action.before),)
            out.append(RepackPlan(axes, layout))
            continue
        group = MemberOrder.MESH.of(action.step.slice)
        out.append(StepPlan(
            op=action.step.op,
            text=action.step.text(placement),
            dims=dim_names(placement, group),
            sizes=tuple(placement.factor(c) for c in group),
            layout=layout,
        ))
    return tuple(out)


def choose_program(placement: Placement, item: ExportRequest, fmt: ExportFormat) -> Choice:
    """The program `fmt`'s export of `item` runs (choice.py); NotExportable, saying why and what to do, if none."""
    choice = choose(item.program, item.ranked, fmt)
    if choice is not None:
        return choice
    best = (item.ranked[0].program if item.ranked else item.program).text(placement)
    which = f"every program the plan lists for it uses one (the best: {best})" if item.ranked else f"its program {best} uses one"
    rooted = " or ".join(op.value for op in Collective if op in fmt.missing)
    raise NotExportable(f"{fmt.title} has no rooted {rooted} step, and {which}; export it for PyTorch (--format torch)")


def plan_request(placement: Placement, name: str, item: ExportRequest, fmt: ExportFormat) -> RequestPlan:
    """Choose one request's program for `fmt`, validate it and plan it under the identifier `name`."""
    choice = choose_program(placement, item, fmt)
    program = choice.chosen.program
    check_exportable(placement, item.request, program)
    full = plan_layout(placement, item.request, program, MemberOrder.MESH)
    layout = export_layout(placement, item.request, program)
    group_size = placement.group_size(item.request.reduced_cells(placement))
    return RequestPlan(
        name=name,
        label=item.name,
        collective=item.request.collective,
        axes=tuple(placement.axes[a].name for a in sorted(item.request.axes)),
        group_size=group_size,
        program_text=program.text(placement) or "(nothing to do)",
        choice=choice.describe(),
        message_bytes=item.message_bytes,
        pieces=program.pipeline,
        chunks=(held_chunks(placement, full.start), held_chunks(placement, full.end)),
        layout=dim_names(placement, layout.start),
        layout_sizes=tuple(placement.factor(c) for c in layout.start),
        actions=plan_actions(placement, layout),
    )


def plan_module(
    placement: Placement, requests: list[ExportRequest] | list[tuple], fmt: ExportFormat | str = ExportFormat.TORCH
) -> ModulePlan:
    """Plan a `fmt` module for `placement` and `requests` (ExportRequest items; plain tuples work too).

    Raises NotExportable (naming the request) when a request's program is not
    valid for it or `fmt` can express none of its programs, and when the
    placement has no mesh.
    """
    if not placement.cells:
        raise NotExportable("the placement has no cells (a single device): there is no mesh to export")
    items = [ExportRequest(*r) for r in requests]
    names = identifiers([it.name for it in items])
    planned = []
    for name, item in zip(names, items, strict=True):
        try:
            planned.append(plan_request(placement, name, item, ExportFormat(fmt)))
        except NotExportable as e:
            raise NotExportable(f"request {item.name}: {e}") from None
    return ModulePlan(
        hierarchy_name=placement.hierarchy.name,
        hierarchy=placement.hierarchy.describe(),
        placement=placement.describe(),
        dims=mesh_dims(placement),
        requests=tuple(planned),
        groups=named_groups(placement, items, names),
    )


def named_groups(placement: Placement, items: list[ExportRequest], names: list[str]) -> tuple[GroupPlan, ...]:
    """The groups a module names: each axis that spans a cell (declared order), then each request by its
    function's name (`names`), over its reduced cells. A request named like an axis over other cells is
    ``NAME_request``."""
    def dims(cells: list[Cell]) -> tuple[str, ...]:
        return dim_names(placement, MemberOrder.MESH.of(tuple(cells)))

    axes = {a.name: dims([c for c in placement.cells if c.axis == i]) for i, a in enumerate(placement.axes)}
    out = [GroupPlan(name, d) for name, d in axes.items() if d]
    for name, item in zip(names, items, strict=True):
        reduced = dims(list(item.request.reduced_cells(placement)))
        if axes.get(name, reduced) != reduced:
            name = f"{name}_request"
        if name not in axes:
            out.append(GroupPlan(name, reduced))
    return tuple(out)
