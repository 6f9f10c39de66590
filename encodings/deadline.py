"""A wall-clock budget shared by a sequence of Z3 calls, and what Z3's ``unknown`` means under it."""

from __future__ import annotations

import time
from collections.abc import Callable

import z3

from p2synth.encodings.errors import SolverTimeout

# Z3's reason_unknown() when the "timeout" we set from the budget stopped it (the timer cancels the search)
BUDGET_REASONS = frozenset({"timeout", "canceled"})


class SolverGaveUp(RuntimeError):
    """Z3 answered ``unknown`` for a reason other than our budget (incompleteness, a resource limit...): a bug here."""

    def __init__(self, what: str, reason: str):
        super().__init__(what, reason)  # args round-trip through pickle (worker processes)
        self.what = what
        self.reason = reason

    def __str__(self) -> str:
        return f"Z3 answered unknown during {self.what} (reason: {self.reason}), not for lack of time"


class Deadline:
    """A wall-clock budget shared by a sequence of Z3 calls.

    `clock` gives the time in seconds (``time.monotonic`` by default); a test
    may pass its own to make the budget run out at a chosen point.
    """

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.end = None if seconds is None else clock() + seconds

    def remaining(self) -> float | None:
        """Seconds left (at least 0), or None without a limit."""
        return None if self.end is None else max(0.0, self.end - self.clock())

    def expired(self) -> bool:
        """True once the budget has run out."""
        return self.end is not None and self.clock() >= self.end

    def check(self, solver: z3.Solver | z3.Optimize, what: str) -> z3.CheckSatResult:
        """`solver.check()` within the remaining budget (Z3's "timeout", in ms).

        SolverTimeout when the budget runs out: before the call, or when Z3
        stops with reason "timeout" or "canceled" under it. Any other
        ``unknown`` is SolverGaveUp, naming Z3's ``reason_unknown()``.
        """
        if self.end is not None:
            left = self.end - self.clock()
            if left <= 0:
                raise SolverTimeout(what)
            solver.set("timeout", max(1, int(left * 1000)))
        result = solver.check()
        if result == z3.unknown:
            reason = solver.reason_unknown()
            if self.end is not None and reason in BUDGET_REASONS:
                raise SolverTimeout(what)
            raise SolverGaveUp(what, reason)
        return result
