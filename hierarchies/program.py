"""Collectives, requests, steps and programs: the vocabulary every layer shares.

A program is a sequence of steps ``(op, slice)``; a slice is a non-empty set of
reduced cells. Under a slice, a device's group is every device that agrees with
it on all digits except those of the slice's cells.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from p2synth.hierarchies.cli import quote
from p2synth.hierarchies.placement import Cell, Placement


class Collective(str, Enum):
    """The collectives a step (or a request) can be.

    The first five move partial sums; ``ALL_TO_ALL`` moves addressed chunks
    (every member sends a distinct chunk to every other member) and is never
    mixed with them: an all_to_all request's programs are all_to_all steps only.
    These six are the *step ops* (:data:`STEP_OPS`) that synthesis chooses among.

    ``SEND_RECV`` is a request, never a step op of a synthesized program: a
    cyclic shift along one axis, member ``i`` sending its whole buffer to member
    ``(i + 1) mod n`` (docs/workloads.md, "Point-to-point: send_recv"). Its
    program space is one program, its default: one step over the axis's cells.
    """

    ALL_REDUCE = "all_reduce"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_GATHER = "all_gather"
    REDUCE = "reduce"
    BROADCAST = "broadcast"
    ALL_TO_ALL = "all_to_all"
    SEND_RECV = "send_recv"

    def __str__(self) -> str:
        return self.value

    @property
    def short(self) -> str:
        """Two-letter tag used in compact program text."""
        return _SHORT[self]


_SHORT = {
    Collective.ALL_REDUCE: "AR",
    Collective.REDUCE_SCATTER: "RS",
    Collective.ALL_GATHER: "AG",
    Collective.REDUCE: "R",
    Collective.BROADCAST: "B",
    Collective.ALL_TO_ALL: "A2A",
    Collective.SEND_RECV: "SR",
}

STEP_OPS: tuple[Collective, ...] = (
    Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.REDUCE, Collective.BROADCAST,
    Collective.ALL_TO_ALL,
)
"""The collectives a synthesized program's steps choose among (the Z3 sketch, the abstract and dense state spaces,
the cost models' op codes): every collective but ``SEND_RECV``, whose only program is its default."""


@dataclass(frozen=True)
class Request:
    """A reduction to perform: a collective over the axes with indices `axes`."""

    axes: frozenset[int]
    collective: Collective = Collective.ALL_REDUCE

    def reduced_cells(self, placement: Placement) -> tuple[Cell, ...]:
        """The cells of the reduced axes under `placement`, in cell order."""
        return placement.cells_of(self.axes)


@dataclass(frozen=True, order=True)
class Step:
    """One collective over the groups defined by `slice` (a sorted tuple of cells)."""

    op: Collective
    slice: tuple[Cell, ...]

    def __post_init__(self) -> None:
        if not self.slice:
            raise ValueError("a step's slice must not be empty")
        object.__setattr__(self, "slice", tuple(sorted(set(self.slice))))

    def text(self, placement: Placement) -> str:
        """Readable form such as ``RS(data@gpu)``."""
        cells = ",".join("@".join(placement.cell_name(c)) for c in self.slice)
        return f"{self.op.short}({cells})"

    def to_json(self, placement: Placement) -> dict:
        """The step as in the result JSON: ``{"op": ..., "slice": [[axis, level], ...]}``."""
        return {"op": self.op.value, "slice": [list(placement.cell_name(c)) for c in self.slice]}

    @staticmethod
    def from_json(data: dict, placement: Placement) -> "Step":
        """Parse a step written by :meth:`to_json`; KeyError/ValueError on bad names."""
        op = Collective(data["op"])
        cells = tuple(placement.cell_from_names(a, l) for a, l in data["slice"])
        return Step(op, cells)


MAX_PIPELINE = 64  # most pieces a pipelined program may cut its buffer into


@dataclass(frozen=True, order=True)
class Program:
    """A sequence of steps that together perform a request, run on `pipeline` pieces of the buffer.

    With ``pipeline = P > 1`` every chunk of the buffer is cut into P equal
    slices and *piece* ``p`` is the p-th slice of every chunk: each piece is an
    independent instance of the program on 1/P of the data, and step ``k`` of
    piece ``p`` may run while step ``k + 1`` of piece ``p - 1`` does (a software
    pipeline). The result is the same as the program's on the whole buffer, so
    validity is that of one piece. ``pipeline = 1`` runs the steps one after
    the other on the whole buffer.
    """

    steps: tuple[Step, ...]
    pipeline: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.pipeline <= MAX_PIPELINE:
            raise ValueError(f"a program's pipeline must be between 1 and {MAX_PIPELINE} pieces, not {self.pipeline}")

    def __len__(self) -> int:
        return len(self.steps)

    def text(self, placement: Placement) -> str:
        """Readable form such as ``RS(data@gpu) -> AR(data@node) -> AG(data@gpu)``, with `` x4 pieces`` when pipelined."""
        steps = " -> ".join(s.text(placement) for s in self.steps)
        return steps if self.pipeline == 1 else f"{steps} x{self.pipeline} pieces"

    def to_json(self, placement: Placement) -> dict:
        """The program as in the result JSON: ``{"steps": [...], "pipeline": P}``."""
        return {"steps": [s.to_json(placement) for s in self.steps], "pipeline": self.pipeline}

    @staticmethod
    def from_json(data: dict, placement: Placement) -> "Program":
        """Parse a program written by :meth:`to_json` (a missing ``pipeline`` is 1, as in plans before it)."""
        pipeline = data.get("pipeline", 1)
        if not isinstance(pipeline, int) or isinstance(pipeline, bool):
            raise ValueError(f"pipeline must be an integer number of pieces, not {quote(pipeline)}")
        return Program(tuple(Step.from_json(s, placement) for s in data["steps"]), pipeline)

    def sequential(self) -> "Program":
        """The same steps run one after the other (``pipeline = 1``)."""
        return Program(self.steps)


@dataclass(frozen=True)
class NamedRequest:
    """A request with its name, its message size in bytes and how often it runs per training step."""

    name: str
    request: Request
    message_bytes: int
    count: int = 1


RawProgram = tuple[tuple[Collective, int], ...]
"""A program over cell indices: ``(collective, slice mask)`` pairs, bit ``i`` of a mask for reduced cell ``i``."""


def mask_cells(mask: int, cells: tuple[Cell, ...]) -> tuple[Cell, ...]:
    """The cells of `cells` whose bits are set in `mask` (bit ``i`` for ``cells[i]``)."""
    return tuple(c for i, c in enumerate(cells) if mask >> i & 1)


def cells_mask(slice_: tuple[Cell, ...], cells: tuple[Cell, ...]) -> int:
    """The mask of `slice_` over `cells` (the inverse of :func:`mask_cells`)."""
    return sum(1 << cells.index(c) for c in slice_)


def to_raw(program: Program, cells: tuple[Cell, ...]) -> RawProgram:
    """`program`'s steps as ``(collective, slice mask)`` pairs over `cells` (the request's reduced cells; the
    inverse of :func:`to_program`, its piece count aside)."""
    return tuple((step.op, cells_mask(step.slice, cells)) for step in program.steps)


def to_program(raw: RawProgram, placement: Placement, request: Request) -> Program:
    """Decode ``(collective, slice mask)`` pairs into a Program over the request's reduced cells."""
    cells = request.reduced_cells(placement)
    return Program(tuple(Step(op, mask_cells(mask, cells)) for op, mask in raw))


def default_program(placement: Placement, request: Request) -> Program:
    """The default: one collective of the requested kind over the whole reduction group."""
    cells = request.reduced_cells(placement)
    if not cells:
        return Program(())
    return Program((Step(request.collective, cells),))
