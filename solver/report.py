"""Human tables for the terminal (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from p2synth.hierarchies.bound import of_bound_text
from p2synth.solver.planner import SweepResult
from p2synth.solver.spec import Problem


def fmt_time(seconds: float) -> str:
    """Seconds as a short human figure: 812 us, 3.41 ms, 1.20 s."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def fmt_bytes(n: int) -> str:
    """Bytes with a binary unit: 1 MiB, 64 KiB."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def matrix_text(matrix: tuple[tuple[int, ...], ...]) -> str:
    """A matrix as ``[[2,4],[1,2]]``."""
    return "[" + ",".join("[" + ",".join(map(str, row)) + "]" for row in matrix) + "]"


def render_single(console: Console, problem: Problem, plan: SweepResult, max_steps: int) -> None:
    """One row per placement: default and best program with predicted times, count, proof."""
    named = problem.requests[0]
    solutions = [p.requests[0].solution for p in plan.placements]
    axes = ", ".join(problem.axes[a].name for a in sorted(named.request.axes))
    title = (
        f"{named.request.collective.value} over {axes} on {problem.hierarchy.name} ({problem.hierarchy.describe()}), "
        f"{fmt_bytes(named.message_bytes)}, programs of <= {max_steps} steps"
    )
    table = Table(title=title, title_justify="left")
    for col, kw in [("#", {"justify": "right"}), ("placement", {}), ("default", {"justify": "right"}),
                    ("best program", {}), ("best", {"justify": "right"}), ("speedup", {"justify": "right"}),
                    ("of bound", {"justify": "right"}), ("programs", {"justify": "right"}), ("optimal", {})]:
        table.add_column(col, **kw)
    for i, s in enumerate(solutions):
        best = s.best
        table.add_row(*map(Text, [
            str(i),
            f"{matrix_text(s.placement.matrix)}\n{s.placement.describe()}",
            fmt_time(s.default.cost_s),
            best.program.text(s.placement) if best else "-",
            fmt_time(best.cost_s) if best else "-",
            f"{s.speedup:.2f}x",
            of_bound_text(s.of_bound),
            "-" if s.program_count is None else f"{s.program_count:,}",
            "proved" if s.optimal else ("timeout" if s.timed_out else "no"),
        ]))
    console.print(table)


def _proof(ok: bool, timed_out: bool) -> str:
    return "proved" if ok else ("timeout" if timed_out else "no")


def render_workload(console: Console, problem: Problem, plan: SweepResult, max_steps: int, rows: int = 10) -> None:
    """The top placements with per-request step times (the trade-off), then the best placement's programs."""
    title = (f"workload of {len(problem.requests)} requests on {problem.hierarchy.name} ({problem.hierarchy.describe()}), "
             f"{len(plan.placements)} placements, programs of <= {max_steps} steps; times per training step (count x best)")
    if problem.spec.step is not None:
        render_step(console, problem, plan, rows)
        title += "; placements in step-time order"
    table = Table(title=title, title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("placement")
    for named in problem.requests:
        table.add_column(f"{named.name}\n{named.count} x {fmt_bytes(named.message_bytes)}", justify="right")
    for col in ("total", "all defaults", "speedup", "bound", "of bound", "optimal"):
        table.add_column(col, justify="right")
    for i, p in enumerate(plan.placements[:rows]):
        cells = [str(i), f"{matrix_text(p.placement.matrix)}\n{p.placement.describe()}"]
        cells += [fmt_time(r.step_s) for r in p.requests]
        speedup = p.default_total_s / p.total_s if p.total_s > 0 else 1.0
        bound = p.bound_total_s
        cells += [fmt_time(p.total_s), fmt_time(p.default_total_s), f"{speedup:.2f}x", fmt_time(bound),
                  of_bound_text(p.total_s / bound if bound > 0 else None), _proof(p.optimal, not p.optimal)]
        table.add_row(*map(Text, cells))
    console.print(table)
    if len(plan.placements) > rows:
        console.print(f"({len(plan.placements) - rows} more placements in the JSON result)")
    if plan.placements:
        best = plan.placements[0]
        detail = Table(title="placement 0: best program of each request", title_justify="left")
        for col in ("request", "collective", "best program", "time", "default", "bound", "of bound", "programs"):
            detail.add_column(col)
        for r in best.requests:
            sol = r.solution
            axes = ", ".join(problem.axes[a].name for a in sorted(r.named.request.axes))
            detail.add_row(*map(Text, [
                r.named.name, f"{r.named.request.collective.value}({axes})",
                sol.best.program.text(best.placement) if sol.best else "-",
                fmt_time(r.best_s), fmt_time(sol.default.cost_s), fmt_time(sol.bound_s), of_bound_text(sol.of_bound),
                "-" if sol.program_count is None else f"{sol.program_count:,}",
            ]))
        console.print(detail)


def render_step(console: Console, problem: Problem, plan: SweepResult, rows: int = 10) -> None:
    """The step-time model's figures per placement, best first: step time and its parts, beside the summed communication."""
    step = problem.spec.step
    assert step is not None
    title = (f"training step ({step.schedule} schedule, {step.microbatches} microbatches, {step.layers} layers): "
             f"predicted time of one step, best first")
    table = Table(title=title, title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("placement")
    for col in ("step", "compute", "exposed comm", "bubble", "layer comm", "pipeline sends", "gradient exposed",
                "after", "comm sum", "sum rank"):
        table.add_column(col, justify="right")
    by_sum = sorted(range(len(plan.placements)), key=lambda i: (plan.placements[i].total_s, plan.placements[i].placement.matrix))
    sum_rank = {i: rank for rank, i in enumerate(by_sum)}
    for i, p in enumerate(plan.placements[:rows]):
        t = p.step
        assert t is not None
        table.add_row(*map(Text, [
            str(i), f"{matrix_text(p.placement.matrix)}\n{p.placement.describe()}",
            *(fmt_time(v) for v in (t.step_s, t.compute_s, t.exposed_comm_s, t.bubble_s, t.layer_comm_s,
                                     t.pipeline_comm_s, t.gradient_exposed_s, t.after_s, p.total_s)),
            str(sum_rank[i]),
        ]))
    console.print(table)
