"""Helpers the library terms of the simulator share (``solver/open_mpi.py``, ``solver/gloo.py``, ``solver/simulator.py``):
the lesser and greater of two terms, the slowest spanned level, and sums and products chosen by booleans, each linear in
the state so Z3 reads them as the report does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from p2synth.hierarchies.placement import Placement
from p2synth.solver.algebra import Algebra
from p2synth.solver.cost import StepShape, level_time


def smaller(alg: Algebra, a: Any, b: Any) -> Any:
    """The lesser of two terms."""
    return alg.ite(a < b, a, b)


def larger(alg: Algebra, a: Any, b: Any) -> Any:
    """The greater of two terms."""
    return alg.ite(a > b, a, b)


def slowest_spanned(alg: Algebra, shape: StepShape, n_levels: int, time_at) -> Any:
    """The largest ``time_at(l)`` over the levels the step's slice spans (0 when it spans none)."""
    worst = 0.0
    for l in range(n_levels):
        if l in shape.levels:
            worst = alg.ite(shape.spans[l], larger(alg, time_at(l), worst), worst)
    return worst


def chosen_product(alg: Algebra, chosen: Sequence[tuple[Any, float]], start: Any, divide: bool = False) -> Any:
    """`start` times (or over, with `divide`) each factor whose boolean holds."""
    out = start
    for flag, p in chosen:
        out = alg.ite(flag, out * (1.0 / p if divide else p), out)
    return out


def chosen_sum(alg: Algebra, chosen: Sequence[tuple[Any, Any]]) -> Any:
    """The sum of the values whose boolean holds (each value a constant or a term linear in the state)."""
    out = 0.0
    for flag, v in chosen:
        out = alg.ite(flag, out + v, out)
    return out


def root_time(alg: Algebra, placement: Placement, shape: StepShape, l: int, volume: Any, S: Sequence[Any],
               Z: Sequence[Any]) -> Any:
    """Seconds for each group's root alone to push `volume` bytes across level `l`: at its own bandwidth, and through
    its unit's uplink shared with the roots of the other groups crossing that unit at once."""
    alone = volume * (1.0 / placement.hierarchy.links[l].bandwidth)
    return larger(alg, level_time(alg, placement, l, volume, S, Z, shape.factors, shape.levels), alone)
