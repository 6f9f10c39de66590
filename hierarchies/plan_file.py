"""Read the solver's result JSON (a *plan file*) into typed objects, for everything downstream of the solver.

``python -m solver.run SPEC --out plan.json`` writes it (``solver/result.py``);
the runtime, the tuner and the exports read it here, so none of them needs the
solver or Z3. Two formats exist:

* single request: ``request`` and ``message_bytes`` at the top, and per placement
  ``default`` and ``programs``;
* workload: ``workload`` (named requests with sizes and counts) at the top
  (and ``step``, the spec's step section, when it had one), and
  per placement a list ``requests``, one entry per workload request in the same
  order, each with its own ``default`` and ``programs``. A request whose spec
  listed several sizes has one workload entry per size, named by :func:`sized_name`,
  whose ``item`` field names the request as the spec gave it.

Both become a :class:`PlanFile` of :class:`~hierarchies.program.NamedRequest` descriptions and, per
placement, :class:`PlannedPlacement` entries holding one
:class:`RequestPrograms` per request. A program entry keeps every field the file
has (``cost_s``, ``verified``, measured figures a tuner added ...) in ``fields``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from p2synth.hierarchies.cli import one_line, quote
from p2synth.hierarchies.model import Hierarchy
from p2synth.hierarchies.placement import Axis, Placement, PlacementError
from p2synth.hierarchies.program import Collective, NamedRequest, Program, Request
from p2synth.hierarchies.step import StepSpec

SINGLE_REQUEST_NAME = "request"  # the name a single-request plan's request goes by


def sized_name(name: str, message_bytes: int) -> str:
    """The name a request that lists several sizes is planned under for one of them: ``grad_allreduce_1048576``."""
    return f"{name}_{message_bytes}"


class PlanFileError(ValueError):
    """A plan file that cannot be read, or a choice from it that does not exist; the message is one line."""


@dataclass(frozen=True)
class PlannedProgram:
    """A program of the plan with the predicted cost and every other field of its entry."""

    program: Program
    cost_s: float | None
    fields: dict = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class RequestPrograms:
    """What the plan holds for one request on one placement: the default, then the programs best first."""

    named: NamedRequest
    default: PlannedProgram
    programs: tuple[PlannedProgram, ...]

    @property
    def best(self) -> PlannedProgram:
        """The program the plan runs for this request: the first of `programs`, or the default if there are none."""
        return self.programs[0] if self.programs else self.default


@dataclass(frozen=True)
class PlannedPlacement:
    """One placement of the plan (its index in the file) with the programs of every request."""

    index: int
    placement: Placement
    requests: tuple[RequestPrograms, ...]

    def request(self, name: str | None = None) -> RequestPrograms:
        """The programs of the request called `name` (None: the plan's only request)."""
        if name is None:
            if len(self.requests) != 1:
                names = ", ".join(r.named.name for r in self.requests)
                raise PlanFileError(f"the plan has {len(self.requests)} requests ({names}); choose one with --request NAME")
            return self.requests[0]
        for r in self.requests:
            if r.named.name == name:
                return r
        names = ", ".join(r.named.name for r in self.requests)
        raise PlanFileError(f"no request {quote(name)} in the plan; its requests: {names}")


@dataclass(frozen=True)
class PlanFile:
    """A parsed plan file: hierarchy, axes, requests and the raw placement entries (parsed on demand)."""

    hierarchy: Hierarchy
    axes: tuple[Axis, ...]
    requests: tuple[NamedRequest, ...]
    entries: tuple[dict, ...]
    is_workload: bool
    document: dict = field(compare=False, hash=False, repr=False)
    items: tuple[str, ...] = ()  # per request, the workload request it was planned for (its own name if empty)
    step: StepSpec | None = None  # the spec's step section (docs/workloads.md, "The step-time model"), if it had one

    def placement(self, index: int) -> PlannedPlacement:
        """Placement `index` (in the file's order, best first) with every request's programs."""
        if not 0 <= index < len(self.entries):
            raise PlanFileError(f"placement index {index} out of range: the plan has {len(self.entries)} placement(s)")
        entry = self.entries[index]
        try:
            placement = Placement(self.hierarchy, self.axes, tuple(tuple(r) for r in entry["matrix"]))
            bodies = entry["requests"] if self.is_workload else [entry]
            if len(bodies) != len(self.requests):
                raise ValueError(f"{len(bodies)} request entries for {len(self.requests)} requests")
            requests = tuple(_request_programs(p, body, placement) for p, body in zip(self.requests, bodies))
        except (AttributeError, KeyError, TypeError, ValueError, PlacementError) as e:
            raise PlanFileError(f"placement {index}: bad entry: {one_line(e)}") from None
        return PlannedPlacement(index, placement, requests)

    def request_names(self) -> tuple[str, ...]:
        """The names of the plan's requests, in order."""
        return tuple(r.name for r in self.requests)

    def item_of(self, index: int) -> str:
        """The name of the workload request (as the spec gave it) that request `index` was planned for."""
        return self.items[index] if self.items else self.requests[index].name

    def item_names(self) -> tuple[str, ...]:
        """The workload requests as the spec gave them, each once, in order."""
        return tuple(dict.fromkeys(self.item_of(i) for i in range(len(self.requests))))

    def only_item(self) -> str:
        """The name of the plan's only workload request; PlanFileError if there are several."""
        items = self.item_names()
        if len(items) != 1:
            raise PlanFileError(f"the plan has {len(items)} requests ({', '.join(items)}); choose one by name")
        return items[0]

    def sizes_of(self, item: str) -> tuple[str, ...]:
        """The names of the requests planned for the workload request `item`: itself, or one per listed size."""
        names = tuple(r.name for i, r in enumerate(self.requests) if self.item_of(i) == item)
        if not names:
            raise PlanFileError(f"no request {quote(item)} in the plan; its requests: {', '.join(self.item_names())}")
        return names


def _request_programs(named: NamedRequest, body: dict, placement: Placement) -> RequestPrograms:
    default = _program(body["default"], placement)
    programs = tuple(_program(p, placement) for p in body["programs"])
    return RequestPrograms(named, default, programs)


def _program(entry: dict, placement: Placement) -> PlannedProgram:
    cost = entry.get("cost_s")
    return PlannedProgram(Program.from_json(entry, placement), None if cost is None else float(cost), dict(entry))


def _request(axes: tuple[Axis, ...], spec: dict) -> Request:
    names = [a.name for a in axes]
    unknown = [a for a in spec["axes"] if a not in names]
    if unknown:
        raise ValueError(f"request names unknown axis {quote(unknown[0])}")
    collective = Collective(spec.get("collective", "all_reduce"))
    if collective is Collective.SEND_RECV and len(spec["axes"]) != 1:
        raise ValueError(f"send_recv shifts along exactly one axis, not {len(spec['axes'])}")
    return Request(frozenset(names.index(a) for a in spec["axes"]), collective)


def parse_plan_file(data: Any) -> PlanFile:
    """A PlanFile from the decoded JSON of a result; PlanFileError with the first problem found."""
    if not isinstance(data, dict):
        raise PlanFileError("bad plan: not a JSON object")
    if not isinstance(data.get("placements"), list):
        raise PlanFileError("bad plan: 'placements' must be a list (is this a solver spec rather than its result?)")
    try:
        hierarchy = Hierarchy.model_validate(data["hierarchy"])
        axes = tuple(Axis(**a) for a in data["axes"])
        is_workload = "workload" in data
        items: tuple[str, ...] = ()
        if is_workload:
            requests = tuple(NamedRequest(str(w["name"]), _request(axes, w), int(w["message_bytes"]), int(w.get("count", 1)))
                             for w in data["workload"])
            items = tuple(str(w.get("item", w["name"])) for w in data["workload"])
        else:
            requests = (NamedRequest(SINGLE_REQUEST_NAME, _request(axes, data["request"]), int(data.get("message_bytes", 0))),)
        step = StepSpec.model_validate(data["step"]) if data.get("step") is not None else None
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        raise PlanFileError(f"bad plan: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise PlanFileError(f"bad plan: {type(e).__name__}: {one_line(e)}") from None
    return PlanFile(hierarchy, axes, requests, tuple(data["placements"]), is_workload, data, items, step)


def load_plan_file(path: str | Path) -> PlanFile:
    """Read and parse the plan file at `path`; PlanFileError if it is missing or malformed."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise PlanFileError(f"cannot read plan {quote(str(path))}: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PlanFileError(f"plan {quote(str(path))} is not JSON: {one_line(e)}") from None
    return parse_plan_file(data)
