"""The input spec (pydantic v2): hierarchy, axes, the reduction(s) to synthesize, bounds.

Unknown fields are rejected so typos fail. :func:`load_problem` turns a JSON file
into a checked :class:`Problem` or raises :class:`SpecError` whose lines each
name the field and the fix, every problem of the spec in one run. The union
fields (hierarchy, placements, sizes) are ``solver/spec_fields.py``'s; the
error lines, in the spec's order, ``solver/spec_lines.py``'s.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Iterator, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from p2synth.hierarchies.cli import quote
from p2synth.hierarchies.library import UnknownSystemError, load_system, system_names
from p2synth.hierarchies.model import NAME_PATTERN, Hierarchy
from p2synth.hierarchies.placement import Axis, Matrix, Placement, PlacementError
from p2synth.hierarchies.plan_file import sized_name
from p2synth.hierarchies.program import MAX_PIPELINE, Collective, NamedRequest, Request
from p2synth.hierarchies.step import Part, Role, StepSpec, part_of
from p2synth.solver.gradients import DDP_BUCKET_BYTES, GRADIENT_COLLECTIVES, Buckets
from p2synth.solver.models import CostModelKind
from p2synth.solver.spec_fields import (
    MAX_DEVICES, MAX_MESSAGE_BYTES, HierarchyField, MessageBytes, PlacementsField, SizesField, SystemRef,
)
from p2synth.solver.spec_lines import in_spec_order, listing, unknown_axes, unknown_axes_unvalidated, validation_problems

if TYPE_CHECKING:
    from p2synth.encodings.deadline import Deadline

MAX_STEPS_LIMIT = 12
# "placements": "all" is refused beyond this many placements unless the caller raises it
# (--max-placements): listing them in Z3 and solving each must fit a default budget.
MAX_PLACEMENTS = 1000
MAX_AXES = 32
MAX_NAME = 64  # characters in any name (axis, level, request, hierarchy)
MAX_COUNT = 10**6  # occurrences of one request per training step
DEFAULT_PIPELINE = (1, 2, 4, 8, 16)  # piece counts the search considers unless the spec narrows them


class SpecError(Exception):
    """A spec that does not parse or is inconsistent; `lines` name each field and the fix."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


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
        problems = validation_problems(e) + unknown_axes_unvalidated(data)
        raise SpecError(in_spec_order(problems, list(Spec.model_fields), list(WorkloadItem.model_fields))) from None
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
    lines = [f"step.roles.{role}: unknown axis {quote(name)}; known axes: {listing(names)}"
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
