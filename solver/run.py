"""``python -m solver.run SPEC``: placements, proved-best programs, predicted times.

Exit codes: 0 success; 1 internal error; 2 bad spec or arguments (one line per
problem on stderr); 3 no program exists within the bound; 4 the time budget
ran out before everything was proved (what was proved is still printed and
written).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import solver  # noqa: F401  (makes our encodings/ importable)
from encodings.programs import Deadline
from hierarchies.placement import Matrix
from solver.report import render_single
from solver.result import single_request_result, write_json_atomic
from solver.search import Solution, TooManyPrograms, VerificationError, solve
from solver.spec import MAX_STEPS_LIMIT, Problem, Spec, SpecError, load_problem

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE, EXIT_NO_PROGRAM, EXIT_TIMEOUT = 0, 1, 2, 3, 4


class UsageError(Exception):
    """Bad command-line arguments."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, as for a bad spec
        raise UsageError(message)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line arguments of ``python -m solver.run``."""
    p = _Parser(prog="python -m solver.run", description=__doc__.split("\n")[0])
    p.add_argument("spec", nargs="?", help="spec JSON file (see --print-schema)")
    p.add_argument("--out", help="write the full result as JSON to this file")
    p.add_argument("--top", default="5", help="programs to list per placement: a number, or 'all' (default 5)")
    p.add_argument("--max-steps", type=int, help=f"longest program considered (overrides the spec; 1..{MAX_STEPS_LIMIT})")
    p.add_argument("--timeout", type=float, default=600.0, help="time budget in seconds for all Z3 calls together (default 600)")
    p.add_argument("--print-schema", action="store_true", help="print the spec's JSON schema and exit")
    p.add_argument("--quiet", action="store_true", help="no table, no progress")
    args = p.parse_args(argv)
    if not args.print_schema and not args.spec:
        raise UsageError("the following arguments are required: spec")
    if args.top != "all":
        try:
            args.top = int(args.top)
        except ValueError:
            raise UsageError(f"argument --top: expected a positive number or 'all', got {args.top!r}") from None
        if args.top < 1:
            raise UsageError("argument --top: must be at least 1")
    if args.max_steps is not None and not 1 <= args.max_steps <= MAX_STEPS_LIMIT:
        raise UsageError(f"argument --max-steps: must be between 1 and {MAX_STEPS_LIMIT}")
    if args.timeout <= 0:
        raise UsageError("argument --timeout: must be a positive number of seconds")
    return args


@dataclass(frozen=True)
class Sweep:
    """The outcome of solving every placement: solutions (best first) and what was left unsolved."""

    solutions: list[Solution]
    unsolved: list[Matrix]

    @property
    def complete(self) -> bool:
        """True when every placement was solved and every best program proved."""
        return not self.unsolved and all(s.optimal and not s.timed_out for s in self.solutions)


def sweep(problem: Problem, max_steps: int, top: int | None, deadline: Deadline, console: Console | None) -> Sweep:
    """Solve the single request on every placement, best placement first."""
    named = problem.requests[0]
    solutions, unsolved = [], []
    with _progress(console, len(problem.matrices)) as progress:
        task = progress.add_task("placements", total=len(problem.matrices))
        for matrix in problem.matrices:
            if deadline.end is not None and time.monotonic() >= deadline.end:
                unsolved.append(matrix)
            else:
                solutions.append(solve(problem.placement(matrix), named.request, named.message_bytes, max_steps, top, deadline))
            progress.advance(task)
    solutions.sort(key=lambda s: (s.best.cost_s if s.best else float("inf"), s.placement.matrix))
    return Sweep(solutions, unsolved)


def _progress(console: Console | None, total: int) -> Progress:
    show = console is not None and console.is_terminal and total > 1
    return Progress(
        TextColumn("[bold]solving[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=True, disable=not show,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (an unexpected failure is one line and exit 1)."""
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        return _main(argv, err)
    except Exception as e:  # a bug: one line unless P2SYNTH_DEBUG asks for the traceback
        if os.environ.get("P2SYNTH_DEBUG"):
            raise
        err.print(f"internal error: {type(e).__name__}: {e} (set P2SYNTH_DEBUG=1 for a traceback)", markup=False)
        return EXIT_INTERNAL


def _main(argv: list[str] | None, err: Console) -> int:
    try:
        args = parse_args(argv)
        if args.print_schema:
            print(json.dumps(Spec.model_json_schema(), indent=2))
            return EXIT_OK
        problem = load_problem(args.spec)
    except UsageError as e:
        err.print(f"error: {e}", markup=False)
        return EXIT_USAGE
    except SpecError as e:
        for line in e.lines:
            err.print(f"spec error: {line}", markup=False)
        return EXIT_USAGE
    max_steps = args.max_steps or problem.spec.max_steps
    top = None if args.top == "all" else args.top
    out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    try:
        result = sweep(problem, max_steps, top, Deadline(args.timeout), None if args.quiet else err)
    except TooManyPrograms as e:
        err.print(f"error: --top all: {e} per placement is too many to list; use --top N or a smaller max_steps", markup=False)
        return EXIT_USAGE
    except VerificationError as e:
        err.print(f"internal error: a synthesized program failed the concrete checker: {e}", markup=False)
        return EXIT_INTERNAL
    if not args.quiet:
        render_single(out, problem, result.solutions, max_steps)
    if args.out:
        write_json_atomic(single_request_result(problem, result.solutions, result.complete), args.out)
    if not result.complete:
        err.print(
            f"timeout: Z3 did not finish within --timeout {args.timeout:g} s "
            f"({len(result.unsolved)} placement(s) unsolved, best programs not all proved); raise --timeout or lower max_steps",
            markup=False,
        )
        return EXIT_TIMEOUT
    if any(not s.programs for s in result.solutions):
        err.print(f"no program exists within max_steps = {max_steps}; raise max_steps", markup=False)
        return EXIT_NO_PROGRAM
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
