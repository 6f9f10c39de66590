"""Human tables for the terminal (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from solver.search import Solution
from solver.spec import Problem


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


def render_single(console: Console, problem: Problem, solutions: list[Solution], max_steps: int) -> None:
    """One row per placement: default and best program with predicted times, count, proof."""
    named = problem.requests[0]
    axes = ", ".join(problem.axes[a].name for a in sorted(named.request.axes))
    title = (
        f"{named.request.collective.value} over {axes} on {problem.hierarchy.name} ({problem.hierarchy.describe()}), "
        f"{fmt_bytes(named.message_bytes)}, programs of <= {max_steps} steps"
    )
    table = Table(title=title, title_justify="left")
    for col, kw in [("#", {"justify": "right"}), ("placement", {}), ("default", {"justify": "right"}),
                    ("best program", {}), ("best", {"justify": "right"}), ("speedup", {"justify": "right"}),
                    ("programs", {"justify": "right"}), ("optimal", {})]:
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
            "-" if s.program_count is None else f"{s.program_count:,}",
            "proved" if s.optimal else ("timeout" if s.timed_out else "no"),
        ]))
    console.print(table)
