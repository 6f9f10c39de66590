"""Programs of a combo, their predictions under either cost model, and which ones to measure."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

from p2synth.hierarchies.model import Hierarchy
from p2synth.hierarchies.placement import Axis, Placement, enumerate_matrices
from p2synth.hierarchies.program import Collective, Program, Request
from p2synth.hierarchies.abstract import enumerate_programs
from p2synth.hierarchies.program import to_program
from p2synth.solver.models import program_cost


def placements(h: Hierarchy, axes: tuple[tuple[str, int], ...]) -> list[Placement]:
    """Every placement of `axes` on `h` (the plain enumerator)."""
    ax = tuple(Axis(name=n, size=s) for n, s in axes)
    return [Placement(h, ax, m) for m in enumerate_matrices(tuple(s for _, s in axes), h.counts)]


def requests(axes: tuple[tuple[str, int], ...], collectives: tuple[str, ...]) -> list[tuple[tuple[str, ...], str]]:
    """(axis names, collective) for every non-empty subset of the axes (one and two axes)."""
    names = [n for n, _ in axes]
    subsets = [c for r in (1, 2) for c in itertools.combinations(names, r)]
    return [(s, col) for col in collectives for s in subsets]


def make_request(placement: Placement, names: tuple[str, ...], collective: str) -> Request:
    index = [a.name for a in placement.axes]
    return Request(frozenset(index.index(n) for n in names), Collective(collective))


def all_programs(placement: Placement, request: Request, max_steps: int) -> list[Program]:
    """Every valid program within `max_steps` (the abstract enumerator; same set Z3 lists with --top all)."""
    n = len(request.reduced_cells(placement))
    return [to_program(raw, placement, request) for raw in enumerate_programs(request.collective, n, max_steps)]


def predict(placement: Placement, request: Request, program: Program, nbytes: float, kind: str) -> float:
    """Predicted seconds of `program` at `nbytes` under cost model `kind`."""
    return program_cost(placement, request, program, nbytes, kind)


def sample_programs(programs: list[Program], default: Program, *, limit: int, sample: int, seed: int) -> list[Program]:
    """What to measure besides the default, chosen without any cost model: every other valid program when there are at
    most `limit`, else a uniform random sample of `sample` of them (``random.Random(seed).sample``), in sampled order.

    The order matters for the largest sizes, which measure only a prefix of the sample (still uniform).
    """
    others = [p for p in programs if p != default]
    if len(others) <= limit:
        return others
    return random.Random(seed).sample(others, sample)


def pipelined_variants(chosen: list[Program], pieces: tuple[int, ...], seed: int) -> list[Program]:
    """Each program of `chosen` with two or more steps once more, pipelined on a piece count drawn uniformly from
    `pieces` (``random.Random(f"pieces-{seed}")``, one draw per program of `chosen` in order, so a prefix of `chosen` gets a
    prefix of the variants); no cost model involved. Single steps gain nothing by pipelining and get none."""
    if not pieces:
        return []
    rng = random.Random(f"pieces-{seed}")
    draws = [rng.choice(pieces) for _ in chosen]
    return [replace(p, pipeline=k) for p, k in zip(chosen, draws) if len(p.steps) >= 2]
