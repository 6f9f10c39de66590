"""The spec's union fields: a hierarchy by name, by system or by levels; placements as "all" or matrices; one
message size or a list of them (pydantic v2 discriminated unions, each with one clear error for a value of no kind).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from p2synth.hierarchies.model import Hierarchy

# Largest device count a hierarchy may have: sizes and counts are factored by trial division.
MAX_DEVICES = 2**24
MAX_MESSAGE_BYTES = 2**50
MAX_SIZES = 32  # message sizes one workload request may list


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
UNION_TAGS = {"hierarchy": {"by-name", "by-system", "explicit"}, "placements": {"all", "matrices"},
               "message_bytes": {"size", "sizes"}}
