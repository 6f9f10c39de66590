"""The consoles ``solver.run`` writes to: ANSI codes and the terminal's width only on a terminal of its own.

Under ``mpirun`` Open MPI hands every rank a pseudo-terminal of 80 columns for stdout and stderr, whatever
mpirun's own output is (a file, a pipe, a wider terminal), so a rank cannot know what it is printing on. There the
consoles write as into a file: plain text, ``COLUMNS`` columns if set, else 80; the same bytes as a serial run
into a file.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

PLAIN_WIDTH = 80  # columns when the output is not a terminal and COLUMNS does not say


def on_terminal(stream, mpi: bool) -> bool:
    """Whether `stream` is this process's own terminal: a tty, and not a rank's pseudo-terminal under mpirun."""
    try:
        return not mpi and stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


def plain_width() -> int:
    """The width for output that is not a terminal: ``COLUMNS`` where it is a positive number, else 80."""
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else PLAIN_WIDTH


def console(stderr: bool = False, mpi: bool = False, quiet: bool = False) -> Console:
    """A console on stdout (or stderr): styles and the terminal's width on this process's terminal, else plain
    text :func:`plain_width` wide (`mpi`: a rank under mpirun, never on a terminal of its own). Lines are never
    wrapped by the console: the tables fold their own text (``solver/textgrid.py``)."""
    terminal = on_terminal(sys.stderr if stderr else sys.stdout, mpi)
    return Console(stderr=stderr, highlight=False, soft_wrap=True, quiet=quiet, force_terminal=terminal,
                   width=None if terminal else plain_width())
