"""The input spec (pydantic v2): hierarchy, axes, the reduction(s) to synthesize, bounds.

Unknown fields are rejected so typos fail. :func:`load_spec` turns a JSON file
into a checked :class:`Problem` or raises :class:`SpecError` whose lines each
name the field and the fix.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Iterator, Literal, NamedTuple, Union

from pydantic import (
    BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, ValidationInfo, field_validator, model_validator,
)

from p2synth.hierarchies.cli import quote
from p2synth.hierarchies.library import UnknownSystemError, load_system, system_names
from p2synth.hierarchies.model import NAME_PATTERN, Hierarchy
from p2synth.hierarchies.placement import Axis, Matrix, Placement, PlacementError
from p2synth.hierarchies.plan_file import sized_name
from p2synth.hierarchies.program import MAX_PIPELINE, Collective, NamedRequest, Request
from p2synth.hierarchies.step import Part, Role, StepSpec, part_of
from p2synth.solver.gradients import DDP_BUCKET_BYTES, GRADIENT_COLLECTIVES, Buckets
from p2synth.solver.models import CostModelKind

if TYPE_CHECKING:
    from p2synth.encodings.deadline import Deadline

MAX_STEPS_LIMIT = 12
# "placements": "all" is refused beyond this many placements unless the caller raises it
# (--max-placements): listing them in Z3 and solving each must fit a default budget.
MAX_PLACEMENTS = 1000
# Largest device count a hierarchy may have: sizes and counts are factored by trial division.
MAX_DEVICES = 2**24
MAX_AXES = 32
MAX_NAME = 64  # characters in any name (axis, level, request, hierarchy)
MAX_MESSAGE_BYTES = 2**50
MAX_COUNT = 10**6  # occurrences of one request per training step
MAX_SIZES = 32  # message sizes one workload request may list
DEFAULT_PIPELINE = (1, 2, 4, 8, 16)  # piece counts the search considers unless the spec narrows them


class SpecError(Exception):
    """A spec that does not parse or is inconsistent; `lines` name each field and the fix."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


class SystemRef(BaseModel):
    """A bundled system by name, optionally with its number of nodes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str = Field(description="name of a bundled system, e.g. dgx-a100")
    nodes: int | None = Field(default=None, gt=0, description="number of nodes (the outermost level's count)")


def _hierarchy_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "by-name"
    if isinstance(value, dict):
        return "by-system" if "system" in value else "explicit"
    if isinstance(value, SystemRef):
        return "by-system"
    if isinstance(value, Hierarchy):
        return "explicit"
    return None


HierarchyField = Annotated[
    Union[
        Annotated[str, Tag("by-name")],
        Annotated[SystemRef, Tag("by-system")],
        Annotated[Hierarchy, Tag("explicit")],
    ],
    Discriminator(_hierarchy_kind, custom_error_type="hierarchy_kind",
                  custom_error_message='must be a bundled system name, {"system": NAME, "nodes": N}, or {"name": ..., "levels": [...]}'),
]


def _placements_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "all"
    if isinstance(value, list):
        return "matrices"
    return None


MatrixEntry = Annotated[int, Field(ge=1, le=MAX_DEVICES)]
PlacementsField = Annotated[
    Union[
        Annotated[Literal["all"], Tag("all")],
        Annotated[list[list[list[MatrixEntry]]], Field(min_length=1), Tag("matrices")],
    ],
    Discriminator(_placements_kind, custom_error_type="placements_kind",
                  custom_error_message='must be "all" or a non-empty list of matrices (lists of rows of integers)'),
]


def _sizes_kind(value: Any) -> str | None:
    if isinstance(value, list):
        return "sizes"
    return "size" if isinstance(value, (int, float, str)) else None


MessageBytes = Annotated[int, Field(gt=0, le=MAX_MESSAGE_BYTES)]
SizesField = Annotated[
    Union[
        Annotated[MessageBytes, Tag("size")],
        Annotated[list[MessageBytes], Field(min_length=1, max_length=MAX_SIZES), Tag("sizes")],
    ],
    Discriminator(_sizes_kind, custom_error_type="sizes_kind",
                  custom_error_message="must be a number of bytes or a non-empty list of them"),
]
# pydantic names the union member in an error's path, right after the field: not part of the user's path
_UNION_TAGS = {"hierarchy": {"by-name", "by-system", "explicit"}, "placements": {"all", "matrices"},
               "message_bytes": {"size", "sizes"}}


class RequestSpec(BaseModel):
    """One reduction: a collective over one or more axes (a send_recv, a shift: exactly one)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    axes: list[str] = Field(min_length=1, description="names of the axes the collective runs over")
    collective: Collective = Field(default=Collective.ALL_REDUCE, description="the collective to perform")


class Planned(NamedTuple):
    """One request as the planner sees it: its planned name, the bytes of one occurrence, occurrences per step."""

    name: str
    message_bytes: int
    count: int


class WorkloadItem(RequestSpec):
    """A named request of a training step, with its size and how often it runs per step."""

    name: str = Field(pattern=NAME_PATTERN, description="name of this request, e.g. grad_allreduce")
    message_bytes: SizesField = Field(
        description="bytes per device of one occurrence, or a list of sizes to plan separately (e.g. DDP bucket sizes)")
    count: int = Field(default=1, gt=0, le=MAX_COUNT, description="how many times it runs per training step (each size, for a list)")
    gradient: bool = Field(
        default=False, description="a gradient, reduced in buckets as the backward pass produces it (as DDP does): "
                                   "message_bytes is the whole gradient, priced as ceil(message_bytes / bucket_bytes) buckets")
    bucket_bytes: MessageBytes | None = Field(
        default=None, description=f"bucket size of a gradient (default {DDP_BUCKET_BYTES}, DDP's 25 MiB bucket_cap_mb)")

    @field_validator("message_bytes")
    @classmethod
    def _sizes_once(cls, sizes: int | list[int]) -> int | list[int]:
        if isinstance(sizes, list):
            if len(set(sizes)) != len(sizes):
                raise ValueError("lists a size twice; list each once")
            return sorted(sizes)
        return sizes

    @field_validator("gradient")
    @classmethod
    def _gradient_is_one_reduction(cls, gradient: bool, info: ValidationInfo) -> bool:
        collective = info.data.get("collective")
        if gradient and collective is not None and collective not in GRADIENT_COLLECTIVES:
            raise ValueError(f"a gradient is reduced, and {collective.value} does not reduce; "
                             "use all_reduce or reduce_scatter, or drop \"gradient\"")
        if gradient and isinstance(info.data.get("message_bytes"), list):
            raise ValueError("a gradient is one size, its total bytes, split into buckets of bucket_bytes; "
                             "give message_bytes as one number")
        return gradient

    @field_validator("bucket_bytes")
    @classmethod
    def _buckets_of_a_gradient(cls, bucket_bytes: int | None, info: ValidationInfo) -> int | None:
        if bucket_bytes is not None and info.data.get("gradient") is False:
            raise ValueError("sizes a gradient's buckets; add \"gradient\": true or drop bucket_bytes")
        return bucket_bytes

    def buckets(self) -> Buckets | None:
        """How a gradient is priced: its split into buckets (None: not marked as a gradient)."""
        if not self.gradient:
            return None
        assert isinstance(self.message_bytes, int)
        return Buckets(self.message_bytes, self.bucket_bytes or DDP_BUCKET_BYTES, self.count)

    def planned(self) -> list[Planned]:
        """The requests this item is planned as: itself; one per listed size, named ``NAME_BYTES``; or for a
        gradient one per bucket size (``NAME_BYTES`` when there are two: the full buckets and the last)."""
        buckets = self.buckets()
        if buckets is not None:
            sizes = buckets.sizes()
        elif isinstance(self.message_bytes, int):
            sizes = [(self.message_bytes, self.count)]
        else:
            sizes = [(size, self.count) for size in self.message_bytes]
        if len(sizes) == 1 and not isinstance(self.message_bytes, list):
            return [Planned(self.name, *sizes[0])]
        return [Planned(sized_name(self.name, size), size, count) for size, count in sizes]


class Spec(BaseModel):
    """The whole input of ``python -m solver.run``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hierarchy: HierarchyField = Field(description="a bundled system name, {system, nodes}, or {name, levels}")
    axes: list[Axis] = Field(min_length=1, max_length=MAX_AXES, description="parallelism axes; sizes must multiply to the device count")
    request: RequestSpec | None = Field(default=None, description="the reduction to synthesize (or give a workload)")
    workload: list[WorkloadItem] | None = Field(default=None, min_length=1, description="several named requests of one training step")
    message_bytes: int = Field(default=1 << 20, gt=0, le=MAX_MESSAGE_BYTES, description="bytes per device (full buffer, nccl-tests convention)")
    max_steps: int = Field(default=4, ge=1, le=MAX_STEPS_LIMIT, description="longest program considered")
    placements: PlacementsField = Field(default="all", description='"all" or a non-empty list of matrices (rows: axes, columns: levels)')
    cost_model: CostModelKind = Field(default=CostModelKind.ALPHA_BETA, description="alpha-beta (first model) or simulator (algorithm choice by size, reduction compute, step overhead)")
    step: StepSpec | None = Field(
        default=None, description="the training step: axis roles, schedule, microbatches, layers, compute (ranks by step time)")
    pipeline: list[Annotated[int, Field(ge=1, le=MAX_PIPELINE)]] = Field(
        default=list(DEFAULT_PIPELINE), min_length=1,
        description="piece counts a program of two or more steps may run pipelined on (1: sequential; must include 1)")

    @model_validator(mode="after")
    def _one_of_request_or_workload(self) -> "Spec":
        if (self.request is None) == (self.workload is None):
            raise ValueError("give exactly one of 'request' or 'workload'")
        return self

    @field_validator("pipeline")
    @classmethod
    def _pipeline_has_one(cls, pieces: list[int]) -> list[int]:
        if 1 not in pieces:
            raise ValueError("must include 1 (every program can run sequentially), e.g. [1, 2, 4, 8, 16]")
        if len(set(pieces)) != len(pieces):
            raise ValueError("lists a piece count twice; list each once")
        return sorted(pieces)


@dataclass(frozen=True)
class Problem:
    """A checked spec: the hierarchy, the axes, the requests and the placements to consider.

    `placement_count` is how many placements the spec asks for; `matrices`
    holds fewer only when the time budget ran out while they were enumerated.
    """

    spec: Spec
    hierarchy: Hierarchy
    axes: tuple[Axis, ...]
    requests: tuple[NamedRequest, ...]
    matrices: tuple[Matrix, ...]
    placement_count: int

    @property
    def placements_complete(self) -> bool:
        """True when `matrices` holds every placement the spec asks for."""
        return len(self.matrices) == self.placement_count

    @property
    def is_workload(self) -> bool:
        """True when the spec gave a workload rather than a single request."""
        return self.spec.workload is not None

    def placement(self, matrix: Matrix) -> Placement:
        """The placement of this problem's axes by `matrix`."""
        return Placement(self.hierarchy, self.axes, matrix)


def _format_validation_error(err: ValidationError) -> list[tuple[tuple, str]]:
    """Pydantic's errors as (path, line) pairs, one per problem."""
    errors = err.errors(include_url=False)
    locs = [_user_path(e["loc"]) for e in errors]
    lines = []
    for e, loc in zip(errors, locs):
        # a list that is "too short" only because its items were invalid repeats those items' errors
        if e["type"] == "too_short" and any(other[: len(loc)] == loc and len(other) > len(loc) for other in locs):
            continue
        msg = _FIXES.get(e["type"], e["msg"].removeprefix("Value error, "))
        where = ".".join(field_key(p) for p in loc) or _ROOT_FIELDS
        lines.append((loc, f"{where}: {msg}"))
    return lines


def _unknown_axes_unvalidated(data: dict) -> list[tuple[tuple, str]]:
    """(path, line) for each unknown axis the requests name, read from the JSON of a spec that failed validation,
    so that one run reports a misspelled axis beside the validation's problems (where names can be read at all)."""
    axes = data.get("axes")
    if not isinstance(axes, list) or not all(isinstance(a, dict) and isinstance(a.get("name"), str) for a in axes):
        return []
    names = [a["name"] for a in axes]
    workload = data.get("workload") if isinstance(data.get("workload"), list) else []
    requests = [(("request",), data.get("request"))] + [(("workload", i), w) for i, w in enumerate(workload)]
    return [(loc + ("axes",), line) for loc, r in requests
            if isinstance(r, dict) and isinstance(r.get("axes"), list) and all(isinstance(a, str) for a in r["axes"])
            for line in unknown_axes(".".join(map(str, loc)), r["axes"], names)]


def _in_spec_order(problems: list[tuple[tuple, str]]) -> list[str]:
    """The lines of (path, line) problems in the order of the spec's fields, list items and a request's fields (the
    whole spec last)."""
    top, inner = list(Spec.model_fields), list(WorkloadItem.model_fields)

    def key(loc: tuple) -> tuple[int, ...]:
        if not loc:
            return (len(top),)
        rest = (p if isinstance(p, int) else inner.index(p) if p in inner else len(inner) for p in loc[1:])
        return (top.index(loc[0]) if loc[0] in top else len(top), *rest)
    return [line for _, line in sorted(problems, key=lambda p: key(p[0]))]


def _user_path(loc: tuple) -> tuple:
    """An error's path as the user wrote it (without the union member pydantic inserts after some fields)."""
    return tuple(part for i, part in enumerate(loc) if not (i and part in _UNION_TAGS.get(loc[i - 1], ())))


_ROOT_FIELDS = "request/workload"  # the one check on the spec as a whole: give one of them


def field_key(part: str | int) -> str:
    """One step of a field path: an index or a plain key as it is, any other key quoted and shortened."""
    if isinstance(part, int) or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]{0,39}", part):
        return str(part)
    return quote(part, 30)


_FIXES = {
    "extra_forbidden": "unknown field; remove it or fix its spelling (python -m solver.run --print-schema lists the fields)",
    "missing": "required field is missing; add it (python -m solver.run --print-schema lists the fields)",
}


def parse_spec(text: str) -> Spec:
    """Parse spec JSON text; SpecError with one line per problem."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecError([f"spec is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}"]) from None
    if not isinstance(data, dict):
        raise SpecError(["spec must be a JSON object with fields hierarchy, axes, request, ..."])
    try:
        spec = Spec.model_validate(data)
    except ValidationError as e:
        raise SpecError(_in_spec_order(_format_validation_error(e) + _unknown_axes_unvalidated(data))) from None
    long_names = [f"{field}: {len(name):,} characters, more than {MAX_NAME}; shorten it"
                  for field, name in _names(spec) if len(name) > MAX_NAME]
    if long_names:
        raise SpecError(long_names)
    return spec


def _names(spec: Spec) -> Iterator[tuple[str, str]]:
    """Every name the spec gives, with its field path."""
    for i, axis in enumerate(spec.axes):
        yield f"axes.{i}.name", axis.name
    if isinstance(spec.hierarchy, Hierarchy):
        yield "hierarchy.name", spec.hierarchy.name
        for i, level in enumerate(spec.hierarchy.levels):
            yield f"hierarchy.levels.{i}.name", level.name
    for i, item in enumerate(spec.workload or ()):
        yield f"workload.{i}.name", item.name


def resolve_hierarchy(value: str | SystemRef | Hierarchy) -> Hierarchy:
    """The hierarchy a spec names; SpecError for an unknown system."""
    if isinstance(value, Hierarchy):
        return value
    name, nodes = (value, None) if isinstance(value, str) else (value.system, value.nodes)
    try:
        return load_system(name, nodes)
    except UnknownSystemError:
        field = "hierarchy" if isinstance(value, str) else "hierarchy.system"
        raise SpecError([f"{field}: unknown system {quote(name, 24)}; use one of {', '.join(system_names())} or give levels"]) from None


def unknown_axes(field: str, given: list[str], names: list[str]) -> list[str]:
    """One line per axis in `given` (a request's ``axes`` at `field`) that is not among the axis `names`."""
    return [f"{field}.axes: unknown axis {quote(a)}; known axes: {_listing(names)}" for a in given if a not in names]


def _request_problems(req: RequestSpec, names: list[str], field: str) -> list[str]:
    """The problems of the request at `field` over the axes `names`, one line each."""
    lines = unknown_axes(field, req.axes, names)
    if len(set(req.axes)) != len(req.axes):
        lines.append(f"{field}.axes: an axis is named twice; name each once")
    if req.collective is Collective.SEND_RECV and len(req.axes) != 1:
        lines.append(f"{field}.axes: send_recv shifts along exactly one axis, not {len(req.axes)}; "
                     "name one axis (one send_recv request per axis)")
    return lines


def _request(req: RequestSpec, names: list[str]) -> Request:
    """A checked request (:func:`_request_problems` found none) over indices into the axes `names`."""
    return Request(frozenset(names.index(a) for a in req.axes), req.collective)


def _listing(names: list[str], most: int = 6) -> str:
    """Names for an error line: each quoted and shortened, at most `most` of them."""
    shown = ", ".join(quote(n, 24) for n in names[:most])
    return shown + (f", ... ({len(names)} in all)" if len(names) > most else "")


def build_problem(spec: Spec, deadline: Deadline | None = None, max_placements: int | None = MAX_PLACEMENTS) -> Problem:
    """Check a parsed spec for consistency and resolve names; SpecError lists every problem, one line each.

    ``"placements": "all"`` is refused (SpecError) when there are more than
    `max_placements` (None: no limit); their enumeration stops when `deadline`
    runs out, leaving ``placements_complete`` False.
    """
    axes = tuple(spec.axes)
    names = [a.name for a in axes]
    hierarchy, lines = _hierarchy_problems(spec, axes)
    lines += _requests_problems(spec, names)
    if len(set(names)) != len(names):
        lines.insert(0, "axes: axis names must be unique; rename the repeated axis")
    elif spec.step is not None and spec.workload is not None:
        lines += _step_problems(spec.step, axes, spec.workload)
    if lines:
        raise SpecError(lines)
    assert hierarchy is not None
    if spec.workload is not None:
        requests = _workload_requests(spec.workload, names)
    else:
        assert spec.request is not None
        requests = (NamedRequest("request", _request(spec.request, names), spec.message_bytes),)
    if spec.placements == "all":
        matrices, count = _all_matrices(hierarchy, axes, deadline, max_placements)
    else:
        matrices = _listed_matrices(spec.placements, hierarchy, axes)
        count = len(matrices)
    return Problem(spec, hierarchy, axes, requests, matrices, count)


def _hierarchy_problems(spec: Spec, axes: tuple[Axis, ...]) -> tuple[Hierarchy | None, list[str]]:
    """The spec's hierarchy (None: an unknown system) and its problems and the axes' against it: an unknown
    system, too many devices, a product of axis sizes that is not the device count."""
    try:
        hierarchy = resolve_hierarchy(spec.hierarchy)
    except SpecError as e:
        return None, e.lines
    if hierarchy.num_devices > MAX_DEVICES:
        return hierarchy, [f"hierarchy: the level counts multiply to more than {MAX_DEVICES:,} devices, the most this tool handles; lower them"]
    product = math.prod(a.size for a in axes)
    if product != hierarchy.num_devices:
        return hierarchy, [f"axes: sizes multiply to {quote(product, 30)} but the hierarchy {quote(hierarchy.describe())} "
                           f"has {hierarchy.num_devices} devices; make the product of axis sizes equal the device count"]
    return hierarchy, []


def _requests_problems(spec: Spec, names: list[str]) -> list[str]:
    """Every request's problems against the axes `names`, and a step section given with a single request."""
    if spec.workload is None:
        assert spec.request is not None
        lines = _request_problems(spec.request, names, "request")
        if spec.step is not None:
            lines.append("step: a step runs a workload; give the requests as \"workload\" instead of \"request\"")
        return lines
    lines = [line for i, w in enumerate(spec.workload) for line in _request_problems(w, names, f"workload.{i}")]
    planned = [p.name for w in spec.workload for p in w.planned()]
    if len(set(planned)) != len(planned):
        lines.append("workload: request names must be unique (a request that lists sizes, or a gradient in buckets "
                     "of two sizes, is planned as NAME_BYTES for each); rename the repeated one")
    return lines


def _step_problems(step: StepSpec, axes: tuple[Axis, ...], workload: list[WorkloadItem]) -> list[str]:
    """The step section against the axes and the workload, one line per problem."""
    names = [a.name for a in axes]
    lines = [f"step.roles.{role}: unknown axis {quote(name)}; known axes: {_listing(names)}"
             for role, name in step.roles.items() if name not in names]
    if len(set(step.roles.values())) != len(step.roles):
        lines.append("step.roles: an axis plays two roles; give each axis one role")
    if lines:
        return lines
    stages = step.axis_size(Role.PIPELINE, axes)
    if step.layers % stages:
        lines.append(f"step.layers: {step.layers} layers do not split evenly over {stages} pipeline stages; "
                     f"use a multiple of {stages}")
    passes = 2 * step.microbatches
    for i, w in enumerate(workload):
        part = part_of(step, tuple(w.axes), w.collective)
        if part is Part.LAYER and w.count % passes:
            lines.append(f"workload.{i}.count: a request inside every layer runs in each of the {passes} passes "
                         f"(forward and backward of {step.microbatches} microbatches); use a multiple of {passes}")
        if part is Part.PIPELINE and w.count != passes:
            lines.append(f"workload.{i}.count: a send_recv over the pipeline axis runs once per pass, {passes} times a "
                         f"step (forward and backward of {step.microbatches} microbatches); set count to {passes}")
        if w.gradient and part is not Part.GRADIENT:
            data = step.axis(Role.DATA)
            lines.append(f"workload.{i}.gradient: in a step a gradient's buckets overlap the backward pass over the "
                         f"data axis ({quote(data) if data else 'no axis has the data role'}); reduce it over that "
                         "one axis, or drop \"gradient\"")
    return lines


def _workload_requests(workload: list[WorkloadItem], names: list[str]) -> tuple[NamedRequest, ...]:
    """The workload's requests as planned (:meth:`WorkloadItem.planned`), checked by :func:`_requests_problems`."""
    return tuple(NamedRequest(p.name, _request(w, names), p.message_bytes, p.count)
                 for w in workload for p in w.planned())


def _all_matrices(hierarchy: Hierarchy, axes: tuple[Axis, ...], deadline: Deadline | None,
                  max_placements: int | None) -> tuple[tuple[Matrix, ...], int]:
    """Every placement (found by Z3 until `deadline`, its count checked combinatorially) and their count."""
    from p2synth.encodings.errors import SolverTimeout
    from p2synth.encodings.placements import count_placements, enumerate_placements  # Z3

    sizes = tuple(a.size for a in axes)
    count = count_placements(sizes, hierarchy.counts)
    if max_placements is not None and count > max_placements:
        raise SpecError([
            f'placements: "all" means {count:,} placements of these axes on this hierarchy, more than '
            f"--max-placements {max_placements:,}; list the ones to consider in \"placements\" or raise --max-placements"
        ])
    found: list[Matrix] = []
    try:
        for matrix in enumerate_placements(sizes, hierarchy.counts, deadline):
            found.append(matrix)
    except SolverTimeout:
        return tuple(sorted(found)), count
    if len(found) != count:
        raise RuntimeError(f"Z3 enumerated {len(found)} placements, the combinatorial count is {count}")
    return tuple(sorted(found)), count


def _listed_matrices(listed: list[list[list[int]]], hierarchy: Hierarchy, axes: tuple[Axis, ...]) -> tuple[Matrix, ...]:
    """The spec's own placements, each checked against the axes and levels."""
    out = []
    for i, rows in enumerate(listed):
        matrix = tuple(tuple(r) for r in rows)
        try:
            Placement(hierarchy, axes, matrix)
        except PlacementError as e:
            raise SpecError([f"placements.{i}: {e}; rows follow axes, columns follow levels"]) from None
        out.append(matrix)
    return tuple(out)


def load_problem(path: str | Path, deadline: Deadline | None = None, max_placements: int | None = MAX_PLACEMENTS) -> Problem:
    """Read, parse and check the spec at `path` (see :func:`build_problem`); SpecError on any problem."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise SpecError([f"cannot read spec {quote(str(path))}: {e.strerror}"]) from None
    return build_problem(parse_spec(text), deadline, max_placements)
