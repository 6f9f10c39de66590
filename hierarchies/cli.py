"""What every command-line tool of the project shares: usage errors, sizes, quoting input, atomic JSON files.

It sits in the lowest layer so that the solver, the runtime and the scripts
can all use it without importing one another.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any

EXIT_USAGE = 2  # every tool: bad arguments or input, one line on stderr

SIZE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
QUOTE_LIMIT = 60


class UsageError(ValueError):
    """A bad command line or input file: one line for the user, exit status 2."""


# The name the running tool was invoked as, when not its ``python -m`` form (set by the ``p2synth`` command).
_invoked_as: str | None = None


def invoked_as(name: str) -> None:
    """Make every parser built from now on call its program `name` (e.g. ``p2synth solve``) in usage and help."""
    global _invoked_as
    _invoked_as = name


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` (one line, exit 2) instead of printing usage and exiting."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if _invoked_as is not None:
            kwargs["prog"] = _invoked_as
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:
        """Raise UsageError with argparse's message."""
        raise UsageError(message)


def one_line(e: Exception) -> str:
    """The first line of an exception's message (its type's name when it has none), for a one-line error."""
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def quote(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """``repr`` of user input, shortened to about `limit` characters so an error line stays one line."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 12]}...({len(text)} chars)"


def parse_size(text: str) -> int:
    """Bytes in ``text``: a positive integer with an optional K, M or G suffix (powers of 2, as nccl-tests)."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(I?B)?\s*", text.upper())
    if not match or int(match.group(1)) == 0:
        raise ValueError(f"bad size {quote(text)}: expected e.g. 4096, 64K, 1M or 2G")
    return int(match.group(1)) * SIZE_UNITS[match.group(2)]


def parse_sizes(text: str) -> tuple[int, ...]:
    """Sizes in ``SIZE`` or ``MIN:MAX[:FACTOR]`` (from MIN, times FACTOR (default 2) while <= MAX)."""
    parts = text.split(":")
    if len(parts) > 3 or (len(parts) == 3 and not parts[2].strip().isdigit()):
        raise ValueError(f"bad size range {quote(text)}: expected SIZE or MIN:MAX[:FACTOR]")
    low = parse_size(parts[0])
    high = parse_size(parts[1]) if len(parts) > 1 else low
    factor = int(parts[2]) if len(parts) == 3 else 2
    if high < low or factor < 2:
        raise ValueError(f"bad size range {quote(text)}: need MIN <= MAX and an integer FACTOR >= 2")
    sizes = [low]
    while sizes[-1] * factor <= high:
        sizes.append(sizes[-1] * factor)
    return tuple(sizes)


def size_argument(text: str) -> int:
    """An argparse ``type=`` for one size (see :func:`parse_size`)."""
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def sizes_argument(text: str) -> tuple[int, ...]:
    """An argparse ``type=`` for a size or a range (see :func:`parse_sizes`)."""
    try:
        return parse_sizes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def count_argument(minimum: int) -> Callable[[str], int]:
    """An argparse ``type=`` for a whole number of at least `minimum`, with a one-line error naming the bound."""

    def convert(text: str) -> int:
        if not text.isdigit() or int(text) < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return int(text)

    return convert


def fraction_argument(text: str) -> float:
    """An argparse ``type=`` for a fraction in [0, 1), with a one-line error."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {text!r}")
    return value


def enum_argument(kind: type[Enum]) -> Callable[[str], Enum]:
    """An argparse ``type=`` for the values of the string enum `kind`, with argparse's one-line "invalid choice" error."""

    def convert(text: str) -> Enum:
        try:
            return kind(text)
        except ValueError:
            choices = ", ".join(str(m.value) for m in kind)
            raise argparse.ArgumentTypeError(f"invalid choice: {quote(text)} (choose from {choices})") from None

    convert.__name__ = kind.__name__
    return convert


def write_text_atomic(text: str, path: str | Path) -> None:
    """Write `text` to `path` via a temporary file beside it, so no half-written file is ever left.

    The file gets the permissions an ordinary ``open(path, "w")`` would give (0666 less the umask),
    not the temporary file's private 0600.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or Path("."))
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process's umask (reading it means setting it; it is put back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json_atomic(data: Any, path: str | Path) -> None:
    """Write `data` as JSON to `path` atomically (see :func:`write_text_atomic`)."""
    write_text_atomic(json.dumps(data, indent=1) + "\n", path)
