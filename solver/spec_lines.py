"""The lines of a spec error: pydantic's errors as the user wrote the fields, unknown axes, in the spec's order.

Every line names the field (``workload.1.collective``) and the fix; :func:`in_spec_order` sorts the problems of
one run, however they were found, in the order the spec gives its fields.
"""

from __future__ import annotations

import re

from pydantic import ValidationError

from p2synth.hierarchies.cli import quote
from p2synth.solver.spec_fields import UNION_TAGS

FieldProblem = tuple[tuple, str]  # a field's path, and the line naming it and the fix


def validation_problems(err: ValidationError) -> list[FieldProblem]:
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


def unknown_axes_unvalidated(data: dict) -> list[FieldProblem]:
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


def in_spec_order(problems: list[FieldProblem], top: list[str], inner: list[str]) -> list[str]:
    """The lines of `problems` in the order of the spec's fields (`top`), list items and a request's fields
    (`inner`); a problem of the whole spec last."""

    def key(loc: tuple) -> tuple[int, ...]:
        if not loc:
            return (len(top),)
        rest = (p if isinstance(p, int) else inner.index(p) if p in inner else len(inner) for p in loc[1:])
        return (top.index(loc[0]) if loc[0] in top else len(top), *rest)
    return [line for _, line in sorted(problems, key=lambda p: key(p[0]))]


def _user_path(loc: tuple) -> tuple:
    """An error's path as the user wrote it (without the union member pydantic inserts after some fields)."""
    return tuple(part for i, part in enumerate(loc) if not (i and part in UNION_TAGS.get(loc[i - 1], ())))


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


def unknown_axes(field: str, given: list[str], names: list[str]) -> list[str]:
    """One line per axis in `given` (a request's ``axes`` at `field`) that is not among the axis `names`."""
    return [f"{field}.axes: unknown axis {quote(a)}; known axes: {listing(names)}" for a in given if a not in names]


def listing(names: list[str], most: int = 6) -> str:
    """Names for an error line: each quoted and shortened, at most `most` of them."""
    shown = ", ".join(quote(n, 24) for n in names[:most])
    return shown + (f", ... ({len(names)} in all)" if len(names) > most else "")
