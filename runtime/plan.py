"""Load the solver's result JSON (a *plan*) and pick the programs of one placement.

The format (written by ``python -m solver.run``)::

    {"hierarchy": {...}, "axes": [{"name": "data", "size": 8}],
     "request": {"axes": ["data"], "collective": "all_reduce"},
     "message_bytes": 1048576, "max_steps": 4,
     "placements": [{"matrix": [[2, 4]],
                     "default": {"steps": [...], "cost_s": 0.0021},
                     "programs": [{"steps": [...], "cost_s": 0.0012, "verified": true}, ...]}]}

``matrix`` rows follow ``axes``, columns follow the hierarchy's levels;
programs are best first. Every program is checked with the concrete semantics
(hierarchies/concrete.py) before it may run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from hierarchies.model import Hierarchy
from hierarchies.placement import Axis, Placement
from hierarchies.program import Collective, Program, Request
from hierarchies.verify import Verifier


class PlanError(ValueError):
    """A plan file, or a choice made from it, that cannot be run."""


@dataclass(frozen=True)
class Candidate:
    """A program to run, with the cost the solver predicted and its rank in the plan (None: the default)."""

    program: Program
    cost_s: float | None
    position: int | None

    @property
    def is_default(self) -> bool:
        """Whether this is the default collective (one call over the whole reduction group)."""
        return self.position is None


@dataclass(frozen=True)
class Selection:
    """What one run executes: a placement, the request, and the default first, then the chosen programs."""

    index: int
    placement: Placement
    request: Request
    candidates: tuple[Candidate, ...]


@dataclass(frozen=True)
class Plan:
    """A parsed plan: the hierarchy, axes, request and the raw placement entries."""

    hierarchy: Hierarchy
    axes: tuple[Axis, ...]
    request: Request
    message_bytes: int
    placements: tuple[dict, ...]

    def select(self, index: int, top: int | None) -> Selection:
        """The default and the best `top` programs (all if None) of placement `index`, each checked.

        A top program equal to the default runs once, as the default.
        Raises PlanError on a bad index, a bad entry, or a program that fails
        the concrete checker.
        """
        if not 0 <= index < len(self.placements):
            raise PlanError(f"placement index {index} out of range: the plan has {len(self.placements)} placement(s)")
        entry = self.placements[index]
        try:
            placement = Placement(self.hierarchy, self.axes, tuple(tuple(r) for r in entry["matrix"]))
            default = Candidate(Program.from_json(entry["default"], placement), entry["default"].get("cost_s"), None)
            chosen = entry["programs"] if top is None else entry["programs"][:top]
            programs = [Candidate(Program.from_json(p, placement), p.get("cost_s"), i) for i, p in enumerate(chosen)]
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise PlanError(f"placement {index}: bad entry: {e}") from None
        candidates = (default, *(c for c in programs if c.program != default.program))
        checker = Verifier(placement, self.request)  # on a miniature when the system is large
        for c in candidates:
            verdict = checker.check(c.program)
            if not verdict:
                which = "the default program" if c.is_default else f"program {c.position}"
                raise PlanError(f"placement {index}: {which} {c.program.text(placement)} fails the checker: {verdict.reason}")
        return Selection(index, placement, self.request, candidates)


def parse_plan(data: dict) -> Plan:
    """A Plan from the decoded JSON; PlanError with the first problem found."""
    try:
        hierarchy = Hierarchy.model_validate(data["hierarchy"])
        axes = tuple(Axis(**a) for a in data["axes"])
        names = [a.name for a in axes]
        req = data["request"]
        request = Request(frozenset(names.index(a) for a in req["axes"]), Collective(req.get("collective", "all_reduce")))
        placements = data["placements"]
        message_bytes = int(data.get("message_bytes", 0))
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        raise PlanError(f"bad plan: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise PlanError(f"bad plan: {type(e).__name__}: {e}") from None
    if not isinstance(placements, list):
        raise PlanError("bad plan: 'placements' must be a list (is this a solver spec rather than its result?)")
    return Plan(hierarchy, axes, request, message_bytes, tuple(placements))


def load_plan(path: str | Path) -> Plan:
    """Read and parse the plan file at `path`; PlanError if it is missing or malformed."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise PlanError(f"cannot read plan {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise PlanError(f"plan {path} is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise PlanError(f"plan {path} is not a JSON object")
    return parse_plan(data)
