"""A library of real systems as data files (``hierarchies/systems/*.json``), loadable by name."""

from __future__ import annotations

import json
from importlib import resources

from p2synth.hierarchies.model import Hierarchy, Level


class UnknownSystemError(KeyError):
    """No system of that name in the library."""


def system_names() -> list[str]:
    """Names of the bundled systems."""
    files = resources.files("p2synth.hierarchies") / "systems"
    return sorted(p.name.removesuffix(".json") for p in files.iterdir() if p.name.endswith(".json"))


def system_info(name: str) -> dict:
    """The raw data file of system `name` (levels, description, sources); UnknownSystemError if not bundled.

    The name becomes a file path only once it is known to be one of
    :func:`system_names`, so no user string ever reaches the file system.
    """
    if name not in system_names():
        raise UnknownSystemError(name)
    return json.loads((resources.files("p2synth.hierarchies") / "systems" / f"{name}.json").read_text())


def load_system(name: str, nodes: int | None = None) -> Hierarchy:
    """The hierarchy of system `name`, with its outermost (node) level set to `nodes` if given."""
    info = system_info(name)
    levels = [Level(**lv) for lv in info["levels"]]
    if nodes is not None:
        i = info.get("nodes_level", 0)
        levels[i] = levels[i].model_copy(update={"count": nodes})
    extra = {key: info[key] for key in ("library", "nccl") if key in info}
    return Hierarchy(name=info["name"] if nodes is None else f"{info['name']}x{nodes}", levels=tuple(levels), **extra)
