"""The tables the scripts print: rich tables, one row a line even when the output is piped or logged."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

PIPED_WIDTH = 200  # columns when the output is not a terminal (rich's default, 80, would wrap the rows)


def ms(seconds: float | None) -> str:
    """Seconds as a table's milliseconds with one decimal; ``-`` for none."""
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def table(columns: Sequence[str], rows: Iterable[Sequence[object]], title: str | None = None, text_columns: int = 1) -> Table:
    """A table of `rows` under `columns`: the first `text_columns` columns left-aligned (names), the rest
    right-aligned (figures); every cell printed as ``str(cell)``, as plain text (no rich markup: a placement's
    ``[node 2, core 2]`` stays)."""
    t = Table(title=title, title_justify="left")
    for i, name in enumerate(columns):
        t.add_column(name, justify="left" if i < text_columns else "right")
    for row in rows:
        t.add_row(*(Text(str(cell)) for cell in row))
    return t


def console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr): the terminal's width, or :data:`PIPED_WIDTH` columns when not a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, highlight=False, width=None if stream.isatty() else PIPED_WIDTH)


def markdown(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """The same table as Markdown (for docs/measurements), one line per row, no trailing newline."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def printed_rows(text: str) -> list[list[str]]:
    """The body rows of the tables in printed `text`, as their cells' text (a row wrapped over lines is not joined)."""
    return [[c.strip() for c in line.strip().strip("│").split("│")] for line in text.splitlines() if line.startswith("│")]
