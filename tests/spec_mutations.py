"""Mutated specs for fuzzing the CLI: the bundled examples with fields deleted, replaced or inserted.

Replacements are what a careless or hostile file holds: wrong types, huge
strings, huge and negative numbers, NaN, nested garbage, and near-misses of
valid values (another system's name, a size doubled, an axis renamed).
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {p.stem: json.loads(p.read_text()) for p in sorted((ROOT / "examples").glob("*.json"))}

Path_ = tuple  # keys and indices from the spec's root to one value


class Mutation(str, Enum):
    """What one mutation does at its path."""

    DELETE = "delete"
    GARBAGE = "garbage"  # replace with a value of any type
    NEAR = "near"  # replace with a plausible value of the same type (often still a valid spec)
    INSERT = "insert"
    VALID = "valid"  # an edit that keeps the spec valid: the run paths (exit 0 or 4) get fuzzed too


HUGE_STRINGS = ["x" * 5000, "dgx-a100" * 700, "../" * 200 + "etc/passwd", "/" * 300, "a\n" * 1000, "é" * 3000]
NUMBERS = [0, -1, -7, 1, 2, 3, 7, 1 << 31, 1 << 63, -(1 << 63), 10**30, 10**400, 2**24 + 1, 0.5, -0.0, 1e308,
           float("inf"), float("-inf"), float("nan")]
NEAR_MISSES = ["dgx-a100", "dgx-h100", "dgx1-v100", "cpu-cluster", "dgx-z100", "all", "none", "data", "tensor", "node",
               "gpu", "all_reduce", "reduce_scatter", "all_to_all", "simulator", "alpha-beta", "", " "]
KEYS = ["name", "all", "matrices", "by-name", "size", "count", "axes", "system", "nodes", "levels", "collective", "colective", "message_bytes",
        "max_steps", "placements", "cost_model", "request", "workload", "bandwidth_GBps", "latency_us", "", "a.b",
        "x" * 300]

scalars = st.one_of(
    st.none(), st.booleans(), st.sampled_from(NUMBERS), st.integers(-10**6, 10**6),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12), st.sampled_from(HUGE_STRINGS),
    st.sampled_from(NEAR_MISSES),
)
garbage = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=3),
                       max_leaves=10)


def paths(value: Any, prefix: Path_ = ()) -> list[Path_]:
    """Every path into `value` (the root included)."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, prefix + (i,))
    return out


def _parent(spec: Any, path: Path_) -> Any:
    for key in path[:-1]:
        spec = spec[key]
    return spec


def _strings(value: Any) -> set[str]:
    """Every string (key or value) inside `value`."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set(value).union(*map(_strings, value.values()))
    if isinstance(value, list):
        return set().union(*map(_strings, value))
    return set()


def _near(value: Any, spec: dict) -> st.SearchStrategy:
    """Plausible values of `value`'s type: other numbers, other names from the spec, lists cut or repeated."""
    if isinstance(value, bool):
        return st.just(not value)
    if isinstance(value, int):
        return st.sampled_from([0, 1, 2, 4, 8, 16, 1 << 20, 1 << 30, value * 2, -value, value * 10**20])
    if isinstance(value, float):
        return st.sampled_from([0.0, 0.5, 1.0, 25.0, 1e-9, -value, value * 1e300, float("nan")])
    if isinstance(value, str):
        return st.sampled_from(sorted(_strings(spec) | set(NEAR_MISSES) | {value * 2, value + "x"}))
    if isinstance(value, list):
        return st.sampled_from([[], value * 2, value[:1], value[::-1], [value]])
    return st.just({})


COLLECTIVES = ["all_reduce", "reduce_scatter", "all_gather", "reduce", "broadcast"]
OPTIONAL = {"message_bytes", "max_steps", "placements", "cost_model", "collective", "count", "nodes",
            "bandwidth_GBps", "latency_us", "uplink_GBps", "reduce_GBps", "step_overhead_us"}


VALID_VALUES = {
    "message_bytes": st.integers(1, 1 << 40), "max_steps": st.integers(1, 6), "placements": st.just("all"),
    "cost_model": st.sampled_from(["alpha-beta", "simulator"]), "collective": st.sampled_from(COLLECTIVES),
    "count": st.integers(1, 1000), "nodes": st.integers(1, 16),
}


def _valid_edit(draw: st.DrawFn, spec: dict) -> None:
    """Drop or change one optional field (usually keeping the spec valid), or add one with a valid value."""
    optional = [p for p in paths(spec)[1:] if p[-1] in OPTIONAL]
    if optional and draw(st.booleans()):
        where = draw(st.sampled_from(optional))
        parent, key = _parent(spec, where), where[-1]
        if draw(st.booleans()):
            del parent[key]
            return
    else:
        parent, key = spec, draw(st.sampled_from(["message_bytes", "max_steps", "cost_model", "placements"]))
    parent[key] = draw(VALID_VALUES.get(key, st.floats(1e-3, 1e3)))


@st.composite
def mutated_specs(draw: st.DrawFn, max_mutations: int = 3) -> dict:
    """A bundled example with 1..`max_mutations` fields deleted, replaced (garbage or near-miss) or inserted."""
    spec = json.loads(json.dumps(EXAMPLES[draw(st.sampled_from(sorted(EXAMPLES)))]))
    for _ in range(draw(st.integers(1, max_mutations))):
        path = draw(st.sampled_from(paths(spec)[1:]))  # never the root: a spec stays a JSON object
        parent, key = _parent(spec, path), path[-1]
        kind = draw(st.sampled_from(list(Mutation)))
        if kind is Mutation.VALID:
            _valid_edit(draw, spec)
        elif kind is Mutation.DELETE:
            del parent[key]
        elif kind is Mutation.GARBAGE:
            parent[key] = draw(garbage)
        elif kind is Mutation.NEAR:
            parent[key] = draw(_near(parent[key], spec))
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(KEYS))] = draw(garbage)
        else:
            parent.insert(key, draw(st.one_of(garbage, st.just(parent[key]))))
    return spec


def spec_fields() -> set[str]:
    """The top-level field names of a spec."""
    from p2synth.solver.spec import Spec

    return set(Spec.model_fields)
