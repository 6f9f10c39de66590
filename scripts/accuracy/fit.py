"""The constants every cost model gets fitted on the fit subset, and the models' predictions.

The ping-pong microbenchmarks of calibration cannot give three constants per testbed: what collectives
get of the network's bandwidth (network efficiency), a factor on the network's latency and the per-step
overhead. Each is chosen on a grid, by ``scipy.optimize.brute`` over the grid's indices, minimising the
median |log(predicted / measured)| over the fit subset's programs; the first grid point (in the grids'
order: efficiency, shared-memory efficiency, latency, overhead) wins a tie.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from scipy import optimize

from p2synth.hierarchies.model import Hierarchy
from p2synth.hierarchies.placement import Placement
from p2synth.hierarchies.program import Program
from scripts.accuracy.cases import Case
from scripts.accuracy.programs import predict

EFFICIENCY_GRID = [round(0.3 + 0.1 * i, 2) for i in range(8)]  # 0.3 .. 1.0
INNER_GRID = [0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0]
LATENCY_GRID = [1.0, 4.0, 8.0, 16.0, 32.0, 64.0]
OVERHEAD_GRID_US = [0.0] + [round(10 ** (i / 8), 1) for i in range(33)]  # the per-step overhead: 1 us .. 10 ms
TRIAL = "trial"  # the key of a trial point's predictions in Case.predicted


def overhead_calls(program: Program) -> int:
    """How many per-step overheads a program's time holds, as the solver's pipeline formula counts them: one per step
    run sequentially; on P pieces, one per step to fill and drain plus one per further piece on the slowest stage
    (``steps + P - 1``)."""
    steps = len(program.steps)
    return steps + program.pipeline - 1 if program.pipeline > 1 and steps > 1 else steps


def predict_all(cases: list[Case], hierarchies: dict[str, Hierarchy], kind: str, key: str | None = None) -> None:
    """Predict every program of `cases` under model `kind` into ``predicted[key or kind]``; the hierarchy's
    ``step_overhead_us`` is charged per step here, outside the model, so that every model gets it alike (alpha-beta
    has no such term of its own)."""
    key = key or kind
    for c in cases:
        h = hierarchies[c.testbed]
        overhead = (h.step_overhead_us or 0.0) * 1e-6
        pl = Placement(h.model_copy(update={"step_overhead_us": None}), c.placement.axes, c.placement.matrix)
        c.predicted[key] = [predict(pl, c.request, p, c.nbytes, kind) + overhead_calls(p) * overhead for p in c.programs]


def scaled(h: Hierarchy, efficiency: float, overhead_us: float | None, inner: float = 1.0, latency: float = 1.0) -> Hierarchy:
    """`h` with every network level's bandwidth and uplink times `efficiency` and latency times `latency`,
    the innermost level's (shared memory) bandwidth times `inner`, and the per-step overhead set."""
    levels = list(h.levels)
    if levels[-1].bandwidth_GBps is not None:
        levels[-1] = levels[-1].model_copy(update={"bandwidth_GBps": levels[-1].bandwidth_GBps * inner})
    for i, lv in enumerate(levels[:-1]):
        upd = {}
        if lv.bandwidth_GBps is not None:
            upd["bandwidth_GBps"] = lv.bandwidth_GBps * efficiency
        if lv.uplink_GBps is not None:
            upd["uplink_GBps"] = lv.uplink_GBps * efficiency
        if lv.latency_us is not None:
            upd["latency_us"] = lv.latency_us * latency
        levels[i] = lv.model_copy(update=upd)
    return h.model_copy(update={"levels": tuple(levels), "step_overhead_us": overhead_us})


@dataclass(frozen=True)
class GridFit:
    """The best grid point of a fit: its median |log(predicted / measured)| over `programs` fitted programs."""

    error: float
    efficiency: float
    inner: float
    latency: float
    overhead_us: float
    programs: int


def inner_only(c: Case, i: int) -> bool:
    """Does program `i` of case `c` keep every step inside the innermost level (shared memory)?"""
    inner = len(c.placement.hierarchy.levels) - 1
    return all(cell.level == inner for step in c.programs[i].steps for cell in step.slice)


def grid_fit(h: Hierarchy, name: str, cases: list[Case], effs, inners, keep=None, lats=(1.0,),
             kind: str = "simulator") -> GridFit:
    """The grid point (efficiency, inner, latency, overhead) minimising the median |log(pred/meas)| over the programs of
    `cases` (testbed `name`, calibrated hierarchy `h`) that `keep(case, index)` accepts. The model runs once per
    (efficiency, inner, latency); the overhead enters a program as ``overhead_calls * overhead`` (closed form)."""
    grids = (effs, inners, lats, OVERHEAD_GRID_US)
    trials: dict[tuple[int, int, int], list[tuple[float, float, int]]] = {}

    def trial(e: int, i: int, la: int) -> list[tuple[float, float, int]]:
        if (e, i, la) not in trials:
            predict_all(cases, {name: scaled(h, effs[e], 0.0, inners[i], lats[la])}, kind, TRIAL)
            trials[e, i, la] = [(c.predicted[TRIAL][j], c.measured[j], overhead_calls(c.programs[j])) for c in cases
                                for j in range(len(c.programs)) if keep is None or keep(c, j)]
        return trials[e, i, la]

    def error(point) -> float:
        e, i, la, o = (int(x) for x in point)
        ov = OVERHEAD_GRID_US[o]
        return statistics.median(abs(math.log((p + n * ov * 1e-6) / m)) for p, m, n in trial(e, i, la))

    point, err, _, _ = optimize.brute(error, tuple(slice(0, len(g)) for g in grids), full_output=True, finish=None)
    e, i, la, o = (int(x) for x in point)
    return GridFit(float(err), effs[e], inners[i], lats[la], OVERHEAD_GRID_US[o], len(trial(e, i, la)))


def fit_constants(cases: list[Case], hierarchies: dict[str, Hierarchy], contention: dict[str, float] | None = None,
                  kind: str = "simulator") -> tuple[dict[str, Hierarchy], dict]:
    """Per testbed, the constants the ping-pong microbenchmarks cannot give:

    1. shared-memory efficiency: what one rank gets of the ping-pong bandwidth when every rank is busy
       (8 ranks on 2 cores): calibration's summing rate with all ranks at once over one rank alone
       (`contention`); without it, fitted on the fit programs whose steps stay inside a node;
    2. network efficiency (what collectives get of the ping-pong bandwidth), network latency factor and
    3. the per-step overhead, on the testbed's fit cases only, minimising the median
       |log(predicted / measured)|.
    """
    contention = contention or {}
    fitted, info = {}, {}
    for name, h in hierarchies.items():
        mine = [c for c in cases if c.fit and c.testbed == name]
        if not mine:
            fitted[name], info[name] = h, {"fit_cases": 0}
            continue
        inner = contention.get(name)
        source = "calibration: summing rate all ranks at once / one rank alone"
        if inner is None:
            inner, source = 1.0, "none"
            if any(inner_only(c, i) for c in mine for i in range(len(c.programs))):
                inner = grid_fit(h, name, mine, [1.0], INNER_GRID, inner_only, kind=kind).inner
                source = "fit subset, programs inside a node"
        best = grid_fit(h, name, mine, EFFICIENCY_GRID, [inner], lats=LATENCY_GRID, kind=kind)
        fitted[name] = scaled(h, best.efficiency, best.overhead_us, inner, best.latency)
        info[name] = {"network_efficiency": best.efficiency, "network_latency_factor": best.latency,
                      "shared_memory_efficiency": round(inner, 4), "shared_memory_efficiency_from": source,
                      "step_overhead_us": best.overhead_us, "fit_cases": len(mine), "fit_programs": best.programs,
                      "median_abs_log_error": best.error}
    for c in cases:
        c.predicted.pop(TRIAL, None)
    return fitted, info
