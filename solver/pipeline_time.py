"""The time of a program run on pieces (a software pipeline), from each step's time and per-level traffic on one piece.

Both cost models and the search evaluate these formulas alike
(docs/model.md, "Pipelined programs").
"""

from __future__ import annotations

from typing import Any, Sequence

from p2synth.solver.algebra import Algebra, slowest


def pipelined_seconds(alg: Algebra, stages: Sequence[Any], traffic: Sequence[Sequence[Any]], pieces: int) -> Any:
    """Seconds of a program run on `pieces` pieces, from each step's time on one piece and its per-level traffic.

    Fill and drain (every step once, the sum of `stages`) plus ``pieces - 1``
    periods (:func:`pipeline_period`), and never less than what the busiest
    level carries in all (:func:`level_floor`: every piece's traffic of every
    step, which the windows of the period can miss when ``pieces`` is below the
    step count). An unused sketch slot has stage 0 and no traffic. With one
    piece this is the sum of the stages.
    """
    total = 0.0
    for t in stages:
        total = total + t
    if pieces == 1:
        return total
    seconds = total + pipeline_period(alg, stages, traffic, pieces) * (pieces - 1)
    floor = level_floor(alg, traffic, pieces)
    return alg.ite(floor > seconds, floor, seconds)


def level_floor(alg: Algebra, traffic: Sequence[Sequence[Any]], pieces: int) -> Any:
    """The busiest level's traffic over a whole pipelined run: ``pieces`` times the sum over the steps of the level's
    traffic on one piece (each level summed from 0 in step order, as the pipelined search carries it).

    A level's links carry every piece of every step, so no schedule of the
    pieces ends sooner. ``T(P)`` is at least this already when ``P`` is at
    least the step count (one window holds every step and each stage is at
    least its own traffic); below it the windows of ``P`` steps can miss
    traffic: ``RS(a) -> RS(b) -> AG(b) -> AG(a)`` with both cells on one level
    would be predicted at 0.75 of it on 2 pieces (docs/model.md, "Pipelined
    programs").
    """
    busiest = 0.0
    for l in range(len(traffic[0]) if traffic else 0):
        load = 0.0
        for loads in traffic:
            load = load + loads[l]
        busiest = alg.ite(load > busiest, load, busiest)
    return busiest * pieces


def pipeline_period(alg: Algebra, stages: Sequence[Any], traffic: Sequence[Sequence[Any]], pieces: int) -> Any:
    """The steady-state period of a software pipeline: the slowest step, or the busiest level, whichever is longer.

    With ``P`` pieces the steps ``k .. k+P-1`` run at once, each on another
    piece, so on every level the traffic of any ``P`` consecutive steps adds up
    (overlapping steps share the level's links; docs/model.md, "Pipelined programs").
    """
    period = slowest(alg, stages)
    for l in range(len(traffic[0]) if traffic else 0):
        for start in range(len(stages)):
            load = 0.0
            for loads in traffic[start:start + pieces]:
                load = load + loads[l]
            period = alg.ite(load > period, load, period)
    return period
