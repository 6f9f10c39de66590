"""The input spec (pydantic v2): hierarchy, axes, the reduction(s) to synthesize, bounds.

Unknown fields are rejected so typos fail. :func:`load_spec` turns a JSON file
into a checked :class:`Problem` or raises :class:`SpecError` whose lines each
name the field and the fix.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, model_validator

from hierarchies.library import UnknownSystemError, load_system, system_names
from hierarchies.model import NAME_PATTERN, Hierarchy
from hierarchies.placement import Axis, Matrix, Placement, PlacementError
from hierarchies.program import Collective, Request
from solver.models import CostModelKind

MAX_STEPS_LIMIT = 12


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
    Discriminator(_hierarchy_kind),
]
_UNION_TAGS = {"by-name", "by-system", "explicit"}


class RequestSpec(BaseModel):
    """One reduction: a collective over one or more axes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    axes: list[str] = Field(min_length=1, description="names of the axes the collective runs over")
    collective: Collective = Field(default=Collective.ALL_REDUCE, description="the collective to perform")


class WorkloadItem(RequestSpec):
    """A named request of a training step, with its size and how often it runs per step."""

    name: str = Field(pattern=NAME_PATTERN, description="name of this request, e.g. grad_allreduce")
    message_bytes: int = Field(gt=0, description="bytes per device of one occurrence")
    count: int = Field(default=1, gt=0, description="how many times it runs per training step")


class Spec(BaseModel):
    """The whole input of ``python -m solver.run``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hierarchy: HierarchyField = Field(description="a bundled system name, {system, nodes}, or {name, levels}")
    axes: list[Axis] = Field(min_length=1, description="parallelism axes; sizes must multiply to the device count")
    request: RequestSpec | None = Field(default=None, description="the reduction to synthesize (or give a workload)")
    workload: list[WorkloadItem] | None = Field(default=None, min_length=1, description="several named requests of one training step")
    message_bytes: int = Field(default=1 << 20, gt=0, description="bytes per device (full buffer, nccl-tests convention)")
    max_steps: int = Field(default=4, ge=1, le=MAX_STEPS_LIMIT, description="longest program considered")
    placements: Literal["all"] | list[list[list[int]]] = Field(default="all", description='"all" or a list of matrices (rows: axes, columns: levels)')
    cost_model: CostModelKind = Field(default=CostModelKind.ALPHA_BETA, description="alpha-beta (first model) or simulator (algorithm choice by size, reduction compute, step overhead)")

    @model_validator(mode="after")
    def _one_of_request_or_workload(self) -> "Spec":
        if (self.request is None) == (self.workload is None):
            raise ValueError("give exactly one of 'request' or 'workload'")
        return self


@dataclass(frozen=True)
class NamedRequest:
    """A resolved request with its name, size and per-step count."""

    name: str
    request: Request
    message_bytes: int
    count: int = 1


@dataclass(frozen=True)
class Problem:
    """A checked spec: the hierarchy, the axes, the requests and the placements to consider."""

    spec: Spec
    hierarchy: Hierarchy
    axes: tuple[Axis, ...]
    requests: tuple[NamedRequest, ...]
    matrices: tuple[Matrix, ...]

    @property
    def is_workload(self) -> bool:
        """True when the spec gave a workload rather than a single request."""
        return self.spec.workload is not None

    def placement(self, matrix: Matrix) -> Placement:
        """The placement of this problem's axes by `matrix`."""
        return Placement(self.hierarchy, self.axes, matrix)


def _format_validation_error(err: ValidationError) -> list[str]:
    errors = err.errors(include_url=False)
    locs = [tuple(p for p in e["loc"] if p not in _UNION_TAGS) for e in errors]
    lines = []
    for e, loc in zip(errors, locs):
        # a list that is "too short" only because its items were invalid repeats those items' errors
        if e["type"] == "too_short" and any(other[: len(loc)] == loc and len(other) > len(loc) for other in locs):
            continue
        msg = _FIXES.get(e["type"], e["msg"].removeprefix("Value error, "))
        where = ".".join(str(p) for p in loc)
        lines.append(f"{where}: {msg}" if where else msg)
    return lines


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
        return Spec.model_validate(data)
    except ValidationError as e:
        raise SpecError(_format_validation_error(e)) from None


def resolve_hierarchy(value: str | SystemRef | Hierarchy) -> Hierarchy:
    """The hierarchy a spec names; SpecError for an unknown system."""
    if isinstance(value, Hierarchy):
        return value
    name, nodes = (value, None) if isinstance(value, str) else (value.system, value.nodes)
    try:
        return load_system(name, nodes)
    except UnknownSystemError:
        field = "hierarchy" if isinstance(value, str) else "hierarchy.system"
        raise SpecError([f"{field}: unknown system {name!r}; use one of {', '.join(system_names())} or give levels"]) from None


def _resolve_request(req: RequestSpec, axes: tuple[Axis, ...], field: str) -> Request:
    names = [a.name for a in axes]
    unknown = [a for a in req.axes if a not in names]
    if unknown:
        raise SpecError([f"{field}.axes: unknown axis {unknown[0]!r}; known axes: {', '.join(names)}"])
    if len(set(req.axes)) != len(req.axes):
        raise SpecError([f"{field}.axes: an axis is named twice; name each once"])
    return Request(frozenset(names.index(a) for a in req.axes), req.collective)


def build_problem(spec: Spec) -> Problem:
    """Check a parsed spec for consistency and resolve names; SpecError lists the problems."""
    hierarchy = resolve_hierarchy(spec.hierarchy)
    axes = tuple(spec.axes)
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise SpecError(["axes: axis names must be unique; rename the repeated axis"])
    product = math.prod(a.size for a in axes)
    if product != hierarchy.num_devices:
        raise SpecError([
            f"axes: sizes multiply to {product} but the hierarchy ({hierarchy.describe()}) has "
            f"{hierarchy.num_devices} devices; make the product of axis sizes equal the device count"
        ])
    if spec.workload is not None:
        if len({w.name for w in spec.workload}) != len(spec.workload):
            raise SpecError(["workload: request names must be unique; rename the repeated one"])
        requests = tuple(
            NamedRequest(w.name, _resolve_request(w, axes, f"workload.{i}"), w.message_bytes, w.count)
            for i, w in enumerate(spec.workload)
        )
    else:
        assert spec.request is not None
        requests = (NamedRequest("request", _resolve_request(spec.request, axes, "request"), spec.message_bytes),)
    matrices = _matrices(spec, hierarchy, axes)
    return Problem(spec, hierarchy, axes, requests, matrices)


def _matrices(spec: Spec, hierarchy: Hierarchy, axes: tuple[Axis, ...]) -> tuple[Matrix, ...]:
    if spec.placements == "all":
        from p2synth_encodings.placements import enumerate_placements  # Z3; the plain enumerator checks it in tests

        return tuple(sorted(enumerate_placements(tuple(a.size for a in axes), hierarchy.counts)))
    out = []
    for i, rows in enumerate(spec.placements):
        matrix = tuple(tuple(r) for r in rows)
        try:
            Placement(hierarchy, axes, matrix)
        except PlacementError as e:
            raise SpecError([f"placements.{i}: {e}; rows follow axes, columns follow levels"]) from None
        out.append(matrix)
    return tuple(out)


def load_problem(path: str | Path) -> Problem:
    """Read, parse and check the spec at `path`; SpecError on any problem."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise SpecError([f"cannot read spec {str(path)!r}: {e.strerror}"]) from None
    return build_problem(parse_spec(text))
