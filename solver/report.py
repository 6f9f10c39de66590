"""The tables ``solver.run`` prints: figures in columns, each placement and program whole on a line of its own.

Every table is a :class:`~p2synth.solver.textgrid.Grid` laid out for the console's width (``solver/terminal.py``
says which width, and whether styles are written). A table's times share one unit, named in its title, so that
the figures fit 80 columns; a line under a table (``Grid.notes``) says what it assumed or what to run next.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console
from rich.text import Text

from p2synth.hierarchies.bound import of_bound_text
from p2synth.hierarchies.model import CollectiveLibrary
from p2synth.hierarchies.placement import Placement
from p2synth.solver.gradients import bucket_notes
from p2synth.solver.models import step_schedules
from p2synth.solver.planner import SweepResult
from p2synth.solver.spec import Problem
from p2synth.solver.textgrid import NO_BREAK, Column, Grid, Row

Unit = tuple[str, float, int]  # name, seconds to the unit, decimals


def _unsigned_zero(text: str) -> str:
    """``-0.0`` (a difference that rounds to nothing) as ``0.0``."""
    return text[1:] if text.startswith("-") and float(text.split()[0]) == 0 else text


def fmt_time(seconds: float) -> str:
    """Seconds as a short human figure: 812.0 us, 3.41 ms, 1.20 s."""
    if abs(seconds) < 1e-3:
        return _unsigned_zero(f"{seconds * 1e6:.1f} us")
    if abs(seconds) < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def time_unit(seconds: Iterable[float]) -> Unit:
    """The one unit a column of times is printed in: the largest one's (s, ms or us), as :func:`fmt_time` picks it."""
    top = max((abs(s) for s in seconds), default=0.0)
    if top >= 1:
        return "s", 1.0, 3
    if top >= 1e-3:
        return "ms", 1e3, 2
    return "us", 1e6, 1


def in_unit(seconds: float, unit: Unit) -> str:
    """`seconds` as a figure in `unit`, without the unit's name; never ``-0.00``."""
    _, scale, decimals = unit
    return _unsigned_zero(f"{seconds * scale:.{decimals}f}")


def fmt_bytes(n: int) -> str:
    """Bytes with a binary unit: 1 MiB, 64 KiB."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def matrix_text(matrix: tuple[tuple[int, ...], ...]) -> str:
    """A matrix as ``[[2,4],[1,2]]``."""
    return "[" + ",".join("[" + ",".join(map(str, row)) + "]" for row in matrix) + "]"


def placement_line(placement: Placement) -> tuple[str, ...]:
    """A placement's line under its row: its description, then its matrix (the form a spec's ``placements`` takes)."""
    return placement.describe(), matrix_text(placement.matrix)


def _program_text(ranked, solution) -> str:
    """A ranked program's text (``RS(data@gpu) -> ...``), ``-`` where there is none; ``x16 pieces`` never folded.
    Under ``library: nccl`` it ends with the algorithm and protocol NCCL runs each step with, as the model prices
    them (``NCCL: Ring/Simple, NVLS/Simple``)."""
    if not ranked:
        return "-"
    text = ranked.program.text(solution.placement).replace(" pieces", NO_BREAK + "pieces")
    if _nccl(solution) and ranked.program.steps:
        schedules = step_schedules(solution.placement, solution.request, ranked.program, solution.message_bytes)
        text += f"  (NCCL: {', '.join(schedules)})"
    return text


def _nccl(solution) -> bool:
    """Whether `solution`'s hierarchy runs NCCL (the tables then name NCCL's algorithm per step)."""
    return solution.placement.hierarchy.library is CollectiveLibrary.NCCL


def _proof(ok: bool, timed_out: bool) -> str:
    return "proved" if ok else ("timeout" if timed_out else "no")


def show(console: Console, grid: Grid) -> None:
    """Print `grid` at the console's width, its header bold and title italic where the console writes styles."""
    for style, line in grid.render(console.width):
        console.print(Text(line, style=style or ""), crop=False)


def single_grid(problem: Problem, plan: SweepResult, max_steps: int) -> Grid:
    """One row per placement: default and best program's predicted times, speedup, count, proof; under it the
    placement and the best program."""
    named = problem.requests[0]
    solutions = [p.requests[0].solution for p in plan.placements]
    unit = time_unit(t for s in solutions for t in (s.default.cost_s, s.best.cost_s if s.best else 0.0))
    axes = ", ".join(problem.axes[a].name for a in sorted(named.request.axes))
    title = (f"{named.request.collective.value} over {axes} on {problem.hierarchy.name} ({problem.hierarchy.describe()}), "
             f"{fmt_bytes(named.message_bytes)}, programs of <= {max_steps} steps; predicted times in {unit[0]}")
    grid = Grid(title, [Column("#"), Column("default"), Column("best"), Column("speedup"), Column("of bound"),
                        Column("programs"), Column("optimal", left=True)])
    for i, s in enumerate(solutions):
        best = s.best
        grid.rows.append(Row(
            (str(i), in_unit(s.default.cost_s, unit), in_unit(best.cost_s, unit) if best else "-", f"{s.speedup:.2f}x",
             of_bound_text(s.of_bound), "-" if s.program_count is None else f"{s.program_count:,}",
             _proof(s.optimal, s.timed_out)),
            (placement_line(s.placement), (f"best: {_program_text(best, s)}",))
            + (((f"default: {_program_text(s.default, s)}",),) if _nccl(s) else ())))
    return grid


def render_single(console: Console, problem: Problem, plan: SweepResult, max_steps: int, hint: str | None = None) -> None:
    """Print the table of a one-request spec, `hint` (the next command) under it."""
    grid = single_grid(problem, plan, max_steps)
    grid.notes += [hint] if hint else []
    show(console, grid)


def workload_grid(problem: Problem, plan: SweepResult, max_steps: int, rows: int = 10, width: int = 80) -> Grid:
    """The top placements with per-request step times (the trade-off), placement under each row. Where a column per
    request does not fit `width`, each request's time goes on a line of its own under the placement instead."""
    shown = plan.placements[:rows]
    unit = time_unit(t for p in shown for t in (p.default_total_s, *(r.step_s for r in p.requests)))
    title = (f"workload of {len(problem.requests)} requests on {problem.hierarchy.name} ({problem.hierarchy.describe()}), "
             f"{len(plan.placements)} placements, programs of <= {max_steps} steps; times per training step "
             f"(count x best) in {unit[0]}")
    if problem.spec.step is not None:
        title += "; placements in step-time order"
    sizes = [f"{n.count} x {fmt_bytes(n.message_bytes)}" for n in problem.requests]
    totals = [Column(c) for c in ("total", "all defaults", "speedup", "bound", "of bound")] + [Column("optimal", left=True)]
    wide = Grid(title, [Column("#")] + [Column(f"{n.name}\n{size}") for n, size in zip(problem.requests, sizes)] + totals)
    narrow = Grid(title, [Column("#")] + totals)
    for i, p in enumerate(shown):
        speedup = p.default_total_s / p.total_s if p.total_s > 0 else 1.0
        bound = p.bound_total_s
        cells = (in_unit(p.total_s, unit), in_unit(p.default_total_s, unit), f"{speedup:.2f}x", in_unit(bound, unit),
                 of_bound_text(p.total_s / bound if bound > 0 else None), _proof(p.optimal, not p.optimal))
        times = tuple(in_unit(r.step_s, unit) for r in p.requests)
        wide.rows.append(Row((str(i), *times, *cells), (placement_line(p.placement),)))
        narrow.rows.append(Row((str(i), *cells), (placement_line(p.placement),
                                                   tuple(f"{n.name} {t}" for n, t in zip(problem.requests, times)))))
    grid = wide if wide.fits(width) else narrow
    if grid is narrow:
        grid.notes.append("under each placement, every request's time: " + ", ".join(
            f"{n.name} {size}".replace(" ", NO_BREAK) for n, size in zip(problem.requests, sizes)))
    grid.notes += _more(plan, rows)
    return grid


def _more(plan: SweepResult, rows: int) -> list[str]:
    left = len(plan.placements) - rows
    return [f"({left} more placements in the JSON result)"] if left > 0 else []


def programs_grid(problem: Problem, plan: SweepResult) -> Grid:
    """Placement 0's best program of each request, with its time, the default's and the bound."""
    best = plan.placements[0]
    grid = Grid("placement 0: best program of each request",
                [Column("request", left=True), Column("time"), Column("default"), Column("bound"), Column("of bound"),
                 Column("programs")])
    for r in best.requests:
        sol = r.solution
        axes = ", ".join(problem.axes[a].name for a in sorted(r.named.request.axes))
        grid.rows.append(Row(
            (r.named.name, fmt_time(r.best_s), fmt_time(sol.default.cost_s), fmt_time(sol.bound_s), of_bound_text(sol.of_bound),
             "-" if sol.program_count is None else f"{sol.program_count:,}"),
            ((f"{r.named.request.collective.value}({axes}): {_program_text(sol.best, sol)}",),)))
    return grid


def render_workload(console: Console, problem: Problem, plan: SweepResult, max_steps: int, rows: int = 10,
                    hint: str | None = None) -> None:
    """Print a workload's tables: the step-time table first where the spec has a ``step``, then the per-request
    trade-off, then placement 0's programs; `hint` (the next command) under the first table."""
    grids = [step_grid(problem, plan, rows)] if problem.spec.step is not None else []
    grids.append(workload_grid(problem, plan, max_steps, rows, console.width))
    if plan.placements:
        grids.append(programs_grid(problem, plan))
    grids[0].notes += bucket_notes(problem.spec.workload or [], problem.spec.step is not None)
    grids[0].notes += [hint] if hint else []
    for grid in grids:
        show(console, grid)


def step_grid(problem: Problem, plan: SweepResult, rows: int = 10) -> Grid:
    """The step-time model's figures per placement, best first: step time and its parts, beside the summed
    communication and its rank (docs/workloads.md, "The step-time model")."""
    step = problem.spec.step
    assert step is not None
    shown = plan.placements[:rows]
    unit = time_unit(p.step.step_s for p in shown if p.step is not None)
    title = (f"training step ({step.schedule} schedule, {step.microbatches} microbatches, {step.layers} layers): "
             f"predicted time of one step in {unit[0]}, best first")
    grid = Grid(title, [Column(c) for c in ("#", "step", "compute", "exposed comm", "bubble", "layer comm",
                                            "pipeline sends", "gradient exposed", "after", "comm sum", "sum rank")])
    by_sum = sorted(range(len(plan.placements)), key=lambda i: (plan.placements[i].total_s, plan.placements[i].placement.matrix))
    sum_rank = {i: rank for rank, i in enumerate(by_sum)}
    for i, p in enumerate(shown):
        t = p.step
        assert t is not None
        figures = (t.step_s, t.compute_s, t.exposed_comm_s, t.bubble_s, t.layer_comm_s, t.pipeline_comm_s,
                   t.gradient_exposed_s, t.after_s, p.total_s)
        grid.rows.append(Row((str(i), *(in_unit(v, unit) for v in figures), str(sum_rank[i])),
                             (placement_line(p.placement),)))
    grid.notes += _more(plan, rows)
    return grid
