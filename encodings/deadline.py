"""A wall-clock budget shared by a sequence of Z3 calls."""

from __future__ import annotations

import time

import z3

from p2synth.encodings.errors import SolverTimeout


class Deadline:
    """A wall-clock budget shared by a sequence of Z3 calls."""

    def __init__(self, seconds: float | None):
        self.end = None if seconds is None else time.monotonic() + seconds

    def remaining(self) -> float | None:
        """Seconds left (at least 0), or None without a limit."""
        return None if self.end is None else max(0.0, self.end - time.monotonic())

    def expired(self) -> bool:
        """True once the budget has run out."""
        return self.end is not None and time.monotonic() >= self.end

    def check(self, solver: z3.Solver | z3.Optimize, what: str) -> z3.CheckSatResult:
        """`solver.check()` within the remaining budget; SolverTimeout when it runs out."""
        if self.end is not None:
            left = self.end - time.monotonic()
            if left <= 0:
                raise SolverTimeout(what)
            solver.set("timeout", max(1, int(left * 1000)))
        result = solver.check()
        if result == z3.unknown:
            raise SolverTimeout(what)
        return result
