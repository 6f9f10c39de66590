"""Which program of a request's ranked list an export runs: the best one its framework can express.

A plan file ranks each request's programs best first, each with its predicted
time (``cost_s``). PyTorch expresses every step, so its export runs the first.
JAX has no rooted reduce or broadcast, so its export runs the first program
without a reduce or broadcast step, at that program's own predicted time
(never a rewrite of a rooted step as ``psum``, which would be another program
with another cost); a request none of whose programs JAX can express is not
exported (planning.py says why in one line).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from p2synth.hierarchies.program import Collective, Program


class ExportFormat(str, Enum):
    """The frameworks a placement can be exported to."""

    TORCH = "torch"
    JAX = "jax"

    def __str__(self) -> str:
        return self.value

    @property
    def title(self) -> str:
        """The framework's name as a sentence writes it."""
        return {ExportFormat.TORCH: "PyTorch", ExportFormat.JAX: "JAX"}[self]

    @property
    def missing(self) -> frozenset[Collective]:
        """The steps the framework has no collective for."""
        return frozenset({Collective.REDUCE, Collective.BROADCAST}) if self is ExportFormat.JAX else frozenset()

    def can_run(self, program: Program) -> bool:
        """Whether every step of `program` has a collective in this framework."""
        return not any(step.op in self.missing for step in program.steps)


class RankedProgram(NamedTuple):
    """A program of a plan's ranked list: its 1-based rank (None: not ranked) and predicted seconds (None: unknown)."""

    program: Program
    rank: int | None = None
    cost_s: float | None = None


@dataclass(frozen=True)
class Choice:
    """The program an export runs, out of a list of `listed` candidates (0: a program given alone)."""

    chosen: RankedProgram
    listed: int
    skipped: bool  # better-ranked programs were passed over because the framework cannot express them
    fmt: ExportFormat

    def describe(self) -> str:
        """Where the program comes from and its predicted time: ``#3 of the plan's 5 programs (...), predicted 17.6 ms``."""
        rank, cost = self.chosen.rank, self.chosen.cost_s
        if rank is None:
            where = "a program the plan does not rank" if self.listed else "a program given alone (no ranked list)"
        else:
            where = f"#{rank} of the plan's {self.listed} program{'s' if self.listed != 1 else ''}"
            if self.skipped:
                where += f" (the best program {self.fmt.title} can express)"
        return f"{where}, predicted {'time unknown' if cost is None else f'{cost * 1e3:.4g} ms'}"


def choose(program: Program, ranked: tuple[RankedProgram, ...], fmt: ExportFormat) -> Choice | None:
    """The first program of `ranked` (or `program` alone when it is empty) that `fmt` can express; None if none."""
    candidates = ranked or (RankedProgram(program),)
    for i, candidate in enumerate(candidates):
        if fmt.can_run(candidate.program):
            return Choice(candidate, len(ranked), i > 0, fmt)
    return None
