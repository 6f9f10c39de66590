"""``--timeline out.png``: where a placement's time goes, step by step and level by level (matplotlib).

For each request of the chosen placement, two panels share one time axis: the
best program's steps run one after the other on the whole buffer (above), and
the same steps pipelined (below) on the piece count the search chose (or, when
the best program is sequential, on its cheapest pipeline among the spec's
piece counts, to show why pipelining does not pay there). Rows are the
hierarchy's levels, outermost on top; a step is drawn on every level its group
spans. Pipelined pieces follow the cost model's schedule: piece ``p`` starts
``p`` periods after the first, and within a piece the steps run back to back,
so the picture's length is the predicted time (where the busiest level's whole traffic
outlasts the periods, the pieces are spaced evenly over it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from p2synth.hierarchies.placement import Placement
from p2synth.hierarchies.program import NamedRequest, Program, to_raw
from p2synth.solver.algebra import PY
from p2synth.solver.cost import program_stages, raw_program_cost
from p2synth.solver.pipeline_time import pipeline_period
from p2synth.solver.models import CostModelKind, cost_model


class TimelineUnavailable(Exception):
    """matplotlib is not installed."""


@dataclass(frozen=True)
class Bar:
    """One step of one piece on one level: start and length in seconds."""

    level: int
    start: float
    length: float
    step: int
    piece: int


def bars(placement: Placement, named: NamedRequest, program: Program, pieces: int, kind: CostModelKind) -> tuple[list[Bar], float]:
    """The bars of `program` run on `pieces` pieces (1: sequential), and the predicted total."""
    request = named.request
    cells = request.reduced_cells(placement)
    raw = to_raw(program, cells)
    models = lambda p: cost_model(placement, request, named.message_bytes, kind, p)
    total, stages = raw_program_cost(models, request.collective, len(cells), raw, pieces)
    period = 0.0
    if pieces > 1:
        _, traffic = program_stages(models(pieces), request.collective, len(cells), raw)
        # the level floor (solver.pipeline_time.level_floor) may stretch the run past the periods: the pieces then start
        # evenly over the extra time, so the picture stays as long as the prediction
        period = max(float(pipeline_period(PY, stages, traffic, pieces)), (total - math.fsum(stages)) / (pieces - 1))
    out = []
    for p in range(pieces):
        t = p * period
        for k, (step, length) in enumerate(zip(program.steps, stages)):
            for level in sorted({c.level for c in step.slice}):
                out.append(Bar(level, t, length, k, p))
            t += length
    return out, total


def draw(placement: Placement, requests: list[tuple[NamedRequest, Program]], pieces_allowed: list[int],
         kind: CostModelKind, path: str | Path) -> None:
    """Write the timeline PNG of `requests` (each with its best program) on `placement` to `path`."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise TimelineUnavailable("--timeline needs matplotlib: pip install -e '.[plot]'") from None
    levels = [lv.name for lv in placement.hierarchy.levels]
    groups = []  # per request: its panels (label, bars, total)
    for named, program in requests:
        pieces = program.pipeline if program.pipeline > 1 else _best_pipeline(placement, named, program, pieces_allowed, kind)
        panels = [(program.sequential(), 1, "sequential")]
        if pieces > 1:
            note = "" if program.pipeline > 1 else " (the search's pick is sequential: this is its cheapest pipeline)"
            panels.append((Program(program.steps, pieces), pieces, f"pipelined, {pieces} pieces{note}"))
        groups.append([(f"{named.name}: {label}: {program.sequential().text(placement)}", *bars(placement, named, prog, p, kind))
                       for prog, p, label in panels])
    count = sum(len(g) for g in groups)
    fig, axes = plt.subplots(count, 1, figsize=(11, 2.2 * count + 0.6), squeeze=False)
    colors = plt.get_cmap("tab10")
    row = 0
    for group in groups:
        end = max(total for _, _, total in group)
        for title, these, total in group:
            ax = axes[row, 0]
            row += 1
            for b in these:
                ax.broken_barh([(b.start * 1e3, b.length * 1e3)], (len(levels) - 1 - b.level - 0.4, 0.8),
                               facecolors=colors(b.step % 10), edgecolors="none", alpha=1.0 if b.piece % 2 == 0 else 0.55)
            ax.set_yticks(range(len(levels)), list(reversed(levels)))
            ax.set_xlim(0, end * 1e3 * 1.02)
            ax.set_title(f"{title}  (predicted {total * 1e3:.3g} ms)", fontsize=8, loc="left")
        ax.set_xlabel("time (ms); colour = step, light and dark = alternate pieces")
    fig.suptitle(f"{placement.describe()} on {placement.hierarchy.describe()}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _best_pipeline(placement: Placement, named: NamedRequest, program: Program, pieces_allowed: list[int],
                   kind: CostModelKind) -> int:
    """The cheapest piece count above 1 for `program` (it must have two or more steps; else 1)."""
    options = [p for p in pieces_allowed if p > 1] if len(program) > 1 else []
    if not options:
        return 1
    return min(options, key=lambda p: bars(placement, named, program, p, kind)[1])
