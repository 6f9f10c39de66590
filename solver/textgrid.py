"""Plain-text tables laid out for a given width: figures in columns, long texts on lines of their own.

A placement such as ``data=[node 2, gpu 2] pipeline=[node 2] tensor=[gpu 4]`` or a program such as
``RS(data@gpu) -> RS(data@node) -> AG(data@node) -> AG(data@gpu) x16 pieces`` is what a reader came for, and no
column is wide enough for it at 80 columns. So each :class:`Row` has short cells in columns and, under them, lines
of its own for its long texts, each folded only where it does not fit the width, and then only between its
segments or at a space outside brackets. Headers fold onto several lines when the columns would not fit otherwise.
The renderer returns styled lines; it writes nothing and knows nothing of terminals (``solver/terminal.py`` does).
"""

from __future__ import annotations

from dataclasses import dataclass, field

GAPS = (2, 1)  # spaces between columns: two where they fit, else one
NO_BREAK = "\u00a0"  # a no-break space in a row's text: printed as a space, never folded at


@dataclass(frozen=True)
class Column:
    """One column: its header (``\\n`` starts a new header line), figures right-aligned unless `left`."""

    header: str
    left: bool = False


@dataclass(frozen=True)
class Row:
    """One row: a cell per column, then its long texts, one line each, each given as segments (kept whole where
    they fit the width, as a placement and its matrix)."""

    cells: tuple[str, ...]
    lines: tuple[tuple[str, ...], ...] = ()


@dataclass
class Grid:
    """A titled table; `notes` are lines printed under it (what it assumed, the next command), each folded as a
    row's text is where it is longer than the width."""

    title: str
    columns: list[Column]
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def fits(self, width: int) -> bool:
        """Whether the rows' cells fit `width` columns, headers folded as far as they go."""
        widths, gap = _layout(self.columns, self.rows, width)
        return _span(widths, gap) <= width

    def render(self, width: int) -> list[tuple[str, str]]:
        """The table as ``(style, text)`` lines for `width` columns: style ``"bold"`` for the header, ``"italic"`` for
        the title, ``""`` otherwise. Only a row's cells can be wider than `width`, where no gap and header folding fit."""
        widths, gap = _layout(self.columns, self.rows, width)
        indent = min(widths[0] + gap, 4) if self.columns else 0
        out = [("italic", line) for line in fold((self.title,), width)]
        headers = [_fold_header(c.header, w) for c, w in zip(self.columns, widths)]
        height = max((len(h) for h in headers), default=0)
        for i in range(height):
            cells = [h[i - height + len(h)] if i >= height - len(h) else "" for h in headers]  # bottom-aligned
            out.append(("bold", _join(self.columns, cells, widths, gap)))
        out.append(("", "-" * min(width, _span(widths, gap))))
        for row in self.rows:
            out.append(("", _join(self.columns, row.cells, widths, gap)))
            for segments in row.lines:
                out += [("", (" " * indent + text).rstrip()) for text in fold(segments, width - indent)]
        out += [("", line) for note in self.notes for line in fold((note,), width)]
        return out


def fold(segments: tuple[str, ...], width: int, hang: int = 2) -> list[str]:
    """`segments` joined by two spaces on as few lines of at most `width` characters as they need: a segment moves
    whole to the next line where it does not fit on this one, and is itself folded (at spaces outside brackets) only
    where it is longer than a line; continuation lines are indented by `hang`."""
    lines: list[str] = []
    room = lambda i: width if i == 0 else width - hang  # characters line i may hold
    for segment in segments:
        if lines and len(lines[-1]) + 2 + len(segment) <= room(len(lines) - 1):
            lines[-1] += "  " + segment
        elif len(segment) <= room(len(lines)):
            lines.append(segment)
        else:
            for k, word in enumerate(_words(segment)):
                if k and len(lines[-1]) + 1 + len(word) <= room(len(lines) - 1):
                    lines[-1] += " " + word
                else:
                    lines.append(word)
    return [(line if i == 0 else " " * hang + line).replace(NO_BREAK, " ") for i, line in enumerate(lines)]


def _words(text: str) -> list[str]:
    """`text` split at its spaces outside brackets and parentheses: ``data=[node 2, gpu 2]`` stays one word."""
    words, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == " " and depth == 0:
            words.append(text[start:i])
            start = i + 1
    words.append(text[start:])
    return [w for w in words if w]


def _pieces(header: str, split_names: bool) -> list[str]:
    """The unbreakable pieces of a header: its words, and with `split_names` a name's parts after each ``_``."""
    words = header.split()
    if not split_names:
        return words
    return [p for w in words for p in w.replace("_", "_\0").split("\0") if p]


def _layout(columns: list[Column], rows: list[Row], width: int) -> tuple[list[int], int]:
    """Column widths and gap: headers on their own lines where that fits, else folded (names split at ``_`` as
    needed) with the gap, two spaces or one, that leaves the header fewest lines once the room left widens the
    tallest headers; the last try where none fits."""
    cells = [max((len(r.cells[i]) for r in rows), default=0) for i in range(len(columns))]
    for mode in ("whole", "words", "names"):
        fits = []
        for gap in GAPS:
            widths = [max(cell, *(len(p) for line in c.header.split("\n") for p in _header_units(line, mode)))
                      for c, cell in zip(columns, cells)]
            spare = width - _span(widths, gap)
            if spare >= 0:
                widths = _widen(columns, widths, spare)
                fits.append((max(len(_fold_header(c.header, w)) for c, w in zip(columns, widths)), -gap, widths))
        if fits:
            _, gap, widths = min(fits)
            return widths, -gap
    return widths, gap


def _span(widths: list[int], gap: int) -> int:
    """The characters a row of columns `widths` wide takes, gaps included."""
    return sum(widths) + gap * (len(widths) - 1)


def _widen(columns: list[Column], widths: list[int], spare: int) -> list[int]:
    """`widths` given up to `spare` columns more, to make the header fewer lines while the room lasts: each round
    widens every tallest header just enough to lose a line, or stops where that takes more than is left."""
    widths = list(widths)
    height = lambda i, w: len(_fold_header(columns[i].header, w))
    while True:
        tallest = max((height(i, w) for i, w in enumerate(widths)), default=1)
        if tallest <= 1:
            return widths
        grow = {}
        for i, w in enumerate(widths):
            if height(i, w) == tallest:
                more = next((k for k in range(1, spare + 1) if height(i, w + k) < tallest), None)
                if more is None:
                    return widths
                grow[i] = more
        if sum(grow.values()) > spare:
            return widths
        for i, more in grow.items():
            widths[i] += more
        spare -= sum(grow.values())


def _header_units(line: str, mode: str) -> list[str]:
    return [line] if mode == "whole" else _pieces(line, mode == "names")


def _fold_header(header: str, width: int) -> list[str]:
    """A header's lines within `width`: each ``\\n`` line folded greedily at spaces (and after ``_`` where needed)."""
    out: list[str] = []
    for line in header.split("\n"):
        pieces = _pieces(line, any(len(w) > width for w in line.split()))
        current = ""
        for p in pieces:
            joined = current + p if current.endswith("_") or not current else f"{current} {p}"
            if current and len(joined) > width:
                out.append(current)
                current = p
            else:
                current = joined
        out.append(current)
    return out


def _join(columns: list[Column], cells, widths: list[int], gap: int) -> str:
    text = (" " * gap).join(c.ljust(w) if col.left else c.rjust(w) for col, c, w in zip(columns, cells, widths))
    return text.rstrip()
