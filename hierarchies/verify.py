"""Independent verification of synthesized programs with the concrete semantics.

Validity depends only on which cells exist, not on their sizes (the
shrinking lemma, proved in docs/semantics.md section 5), so a program for a large system is checked on a *miniature*: the
same reduced cells, each shrunk to factor 2 (other axes' cells dropped when
the system is too large to simulate device by device).
"""

from __future__ import annotations

import math
from functools import lru_cache

from p2synth.hierarchies.model import Hierarchy, Level
from p2synth.hierarchies.placement import Axis, Cell, Placement
from p2synth.hierarchies.program import Collective, Program, Request
from p2synth.hierarchies.concrete import WORD_BITS, CheckResult, ConcreteChecker
from p2synth.hierarchies.fingerprint import FINGERPRINTS, FingerprintChecker

# Largest devices x chunks simulated directly; beyond it, a miniature.
DIRECT_LIMIT = 1 << 14
# A miniature keeps the other axes' cells (several reduction groups side by side) only while its devices x chunks
# stay within this; beyond it, one reduction group. Every reduction group runs the same steps on its own devices
# (the digit bijection), so one group checks a program's validity and result; the limit keeps a check of a
# miniature under a few milliseconds (a 1,024-device miniature took up to 0.2 s a program).
MINIATURE_LIMIT = 1 << 8


def miniature(placement: Placement, request: Request) -> Placement:
    """A small placement with the same reduced cells, each of factor 2.

    Non-reduced cells keep factor 2 while the miniature's devices x chunks
    stay within MINIATURE_LIMIT, else they shrink to 1 (one reduction group).
    """
    reduced = set(request.reduced_cells(placement))
    others = [c for c in placement.cells if c not in reduced]
    keep_others = 2 ** (len(reduced) * 2 + len(others)) <= MINIATURE_LIMIT
    kept = reduced | (set(others) if keep_others else set())
    matrix = tuple(
        tuple(2 if Cell(a, l) in kept else 1 for l in range(len(placement.hierarchy.levels)))
        for a in range(len(placement.axes))
    )
    levels = tuple(
        Level(**{**lv.model_dump(), "count": math.prod(row[l] for row in matrix)})
        for l, lv in enumerate(placement.hierarchy.levels)
    )
    axes = tuple(Axis(name=ax.name, size=math.prod(row)) for ax, row in zip(placement.axes, matrix))
    return Placement(Hierarchy(name=f"{placement.hierarchy.name}-miniature", levels=levels), axes, matrix)


# The exact checker's matrix (devices x chunks x devices/32 words of 8 bytes) up to this size; beyond, fingerprints
# (hierarchies.fingerprint.FingerprintChecker: devices x chunks x 2 words of 4 bytes) up to CHECK_BYTES; beyond, refused.
EXACT_BYTES = 1 << 29
CHECK_BYTES = 1 << 30


class CheckTooLarge(ValueError):
    """The concrete check of a placement's miniature would hold more than CHECK_BYTES."""


def check_bytes(target: Placement, request: Request) -> tuple[int, bool]:
    """The bytes the concrete check of `target` holds per matrix, and whether it uses fingerprints (the exact
    matrix would exceed EXACT_BYTES; never for all_to_all, whose chunks are addressed)."""
    n = target.num_devices
    chunks = target.group_size(request.reduced_cells(target))
    if request.collective is Collective.ALL_TO_ALL:
        return n * chunks * chunks * 4, False
    exact = n * chunks * -(-n // WORD_BITS) * 8
    return (exact, False) if exact <= EXACT_BYTES else (n * chunks * FINGERPRINTS * 4, True)


class Verifier:
    """Checks programs for one request on one placement, directly or on its miniature (CheckTooLarge where even the
    miniature is too large to check)."""

    def __init__(self, placement: Placement, request: Request):
        g = placement.group_size(request.reduced_cells(placement))
        self.on_miniature = placement.num_devices * g > DIRECT_LIMIT
        self.target = miniature(placement, request) if self.on_miniature else placement
        self.request = request
        size, self.fingerprints = check_bytes(self.target, request)
        if size > CHECK_BYTES:
            cells = len(request.reduced_cells(placement))
            raise CheckTooLarge(f"{cells} reduced cells: the concrete check of this placement's "
                                f"{self.target.num_devices:,}-device miniature would hold {size / 2 ** 30:.1f} GiB, "
                                f"more than {CHECK_BYTES / 2 ** 30:g} GiB; reduce over fewer cells (at most 13 of "
                                "factor 2 for a reduction, 9 for all_to_all)")

    def check(self, program: Program) -> CheckResult:
        """Run `program` through the concrete per-device semantics (once per target, request and program)."""
        # a cell keeps its (axis, level) identity in the miniature, so steps carry over as they are
        return _check(self.target, self.request, program)


@lru_cache(maxsize=256)
def _checker(target: Placement, request: Request) -> ConcreteChecker:
    return (FingerprintChecker if check_bytes(target, request)[1] else ConcreteChecker)(target, request)


@lru_cache(maxsize=1 << 16)
def _check(target: Placement, request: Request, program: Program) -> CheckResult:
    return _checker(target, request).check(program)


@lru_cache(maxsize=256)
def verifier(placement: Placement, request: Request) -> Verifier:
    """A cached verifier for `placement` and `request`; placements with equal miniatures share their checks."""
    return Verifier(placement, request)


def clear_checks() -> None:
    """Forget every cached verifier and concrete check (a benchmark that times a placement from scratch needs this)."""
    for cached in (_check, _checker, verifier):
        cached.cache_clear()
