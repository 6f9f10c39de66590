"""``python -m solver.run SPEC``: placements, proved-best programs, predicted times.

Exit codes: 0 success; 1 internal error; 2 bad spec or arguments (one line per
problem on stderr), or more placements than --max-placements; 4 the time
budget (--timeout, which covers placement enumeration and every Z3 call) ran
out before everything was enumerated, proved or listed (what was done is still
printed and written, with "complete": false; --out is written before --export
prints); 130 interrupted. Z3 answering unknown for any reason but the budget
(encodings/deadline.py) is an internal error, its line naming Z3's reason.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from p2synth.hierarchies.cli import EXIT_USAGE, ArgumentParser, UsageError, write_json_atomic
from p2synth.hierarchies.plan_file import parse_plan_file
from p2synth.hierarchies.verify import CheckTooLarge, verifier
from p2synth.encodings.deadline import Deadline
from p2synth.solver.exports.formats import ExportFormat, export_placement
from p2synth.solver.exports.planning import NotExportable
from p2synth.hierarchies.abstract import count_programs
from p2synth.solver.planner import SweepResult
from p2synth.solver.report import render_single, render_workload
from p2synth.solver.result import is_complete, result_json
from p2synth.solver.ranking import LIST_ALL_LIMIT, Proof, VerificationError
from p2synth.solver.sweep import RankFailed, SweepTask, default_jobs, mpi_sweep, quiet_one_host_windows, sweep, under_mpi
from p2synth.solver.terminal import console
from p2synth.solver.timeline import draw
from p2synth.solver.spec import MAX_PLACEMENTS, MAX_STEPS_LIMIT, Problem, Spec, SpecError, load_problem

EXIT_OK, EXIT_INTERNAL, EXIT_TIMEOUT, EXIT_INTERRUPTED = 0, 1, 4, 130
EXIT_CODES = (EXIT_OK, EXIT_INTERNAL, EXIT_USAGE, EXIT_TIMEOUT, EXIT_INTERRUPTED)  # every code main() returns
MAX_TIMEOUT_S = 1e6  # Z3 takes its timeout in milliseconds as a 32-bit number


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line arguments of ``python -m solver.run``."""
    p = ArgumentParser(prog="python -m solver.run", description=__doc__.split("\n")[0])
    p.add_argument("spec", nargs="?", help="spec JSON file (see --print-schema)")
    p.add_argument("--out", help="write the full result as JSON to this file")
    p.add_argument("--top", default="5", help="programs to list per placement: a number, or 'all' (default 5)")
    p.add_argument("--max-steps", type=int, help=f"longest program considered (overrides the spec; 1..{MAX_STEPS_LIMIT})")
    p.add_argument("--timeout", type=float, default=600.0, help="time budget in seconds for the whole run: placement enumeration and every Z3 call (default 600)")
    p.add_argument("--max-placements", type=int, default=MAX_PLACEMENTS, help=f'refuse "placements": "all" beyond this many placements (default {MAX_PLACEMENTS})')
    p.add_argument("--print-schema", action="store_true", help="print the spec's JSON schema and exit")
    p.add_argument("--quiet", action="store_true", help="no table, no progress")
    p.add_argument("--export", choices=[f.value for f in ExportFormat], help="print a PyTorch or JAX module running the chosen placement's programs, instead of the table")
    p.add_argument("--placement", type=int, default=0, help="with --export or --timeline: index of the placement in the ranked list (default 0, the best)")
    p.add_argument("--timeline", metavar="PNG", help="draw the chosen placement's best programs step by step per level, sequential above pipelined (matplotlib)")
    p.add_argument("--jobs", type=int, default=default_jobs(), help="worker processes for the placements (default: this machine's cores; under mpirun the ranks share the work instead)")
    p.add_argument("--proof", choices=[k.value for k in Proof], default=Proof.CERTIFICATE.value,
                   help="what backs 'optimal': the checked certificate of the explicit search (default), or z3: Z3's own unsat over the whole sketch as well (much slower)")
    p.add_argument("--no-reuse", action="store_true", help="solve every placement from scratch instead of sharing searches between placements with the same cost signature (same result, slower)")
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
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= MAX_TIMEOUT_S):
        raise UsageError(f"argument --timeout: must be a positive number of seconds, at most {MAX_TIMEOUT_S:.0f}")
    if args.max_placements < 1:
        raise UsageError("argument --max-placements: must be at least 1")
    if args.jobs < 1:
        raise UsageError("argument --jobs: must be at least 1")
    return args


def run_sweep(problem: Problem, args: argparse.Namespace, deadline: Deadline, console: Console | None, comm=None) -> SweepResult | None:
    """Solve every request on every placement (placements ranked best first); under MPI only rank 0 gets the result."""
    max_steps = args.max_steps or problem.spec.max_steps
    top = None if args.top == "all" else args.top
    task = SweepTask(problem, max_steps, top, Proof(args.proof), not args.no_reuse, deadline.remaining())
    with _progress(console, len(problem.matrices)) as progress:
        bar = progress.add_task("placements", total=len(problem.matrices))
        advance = lambda n: progress.advance(bar, n)
        if comm is not None:
            return mpi_sweep(comm, task, deadline, advance)
        return sweep(task, deadline, args.jobs, advance)


def _progress(console: Console | None, total: int) -> Progress:
    show = console is not None and console.is_terminal and total > 1
    return Progress(
        TextColumn("[bold]solving[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=True, disable=not show,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (an unexpected failure is one line and exit 1).

    Under ``mpirun`` with several ranks the placements are split over the
    ranks; rank 0 prints and writes, and every rank returns rank 0's code.
    """
    comm = _world() if under_mpi() else None
    rank0 = comm is None or comm.Get_rank() == 0
    err = console(stderr=True, mpi=comm is not None, quiet=not rank0)
    try:
        code = _main(argv, err, comm)
    except KeyboardInterrupt:
        err.print("interrupted", markup=False)
        if comm is not None:
            comm.Abort(EXIT_INTERRUPTED)  # the other ranks would go on solving, and this one wait for them
        return EXIT_INTERRUPTED
    except Exception as e:  # a bug: one line unless P2SYNTH_DEBUG asks for the traceback
        if os.environ.get("P2SYNTH_DEBUG"):
            raise
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"internal error{_on_rank(comm)}: {type(e).__name__}: {e} (set P2SYNTH_DEBUG=1 for a traceback)", markup=False)
        if comm is not None:
            comm.Abort(EXIT_INTERNAL)  # the other ranks may be waiting on this one
        return EXIT_INTERNAL
    return code if comm is None else comm.bcast(code, root=0)


def _world():
    quiet_one_host_windows()  # before MPI starts
    from mpi4py import MPI  # only under mpirun: importing it initialises MPI

    return MPI.COMM_WORLD


def _on_rank(comm) -> str:
    return "" if comm is None else f" on rank {comm.Get_rank()}"


def _main(argv: list[str] | None, err: Console, comm=None) -> int:
    try:
        args = parse_args(argv)
        if args.print_schema:
            if comm is None or comm.Get_rank() == 0:
                print(json.dumps(Spec.model_json_schema(), indent=2))
            return EXIT_OK
        if args.timeline:
            _can_draw()
        deadline = Deadline(args.timeout)  # the budget starts before the placements are enumerated
        problem = load_problem(args.spec, deadline, args.max_placements)
        _refuse_listing_too_many(problem, args)
        _refuse_unchecked(problem)
    except UsageError as e:
        err.print(f"error: {e}", markup=False)
        return EXIT_USAGE
    except SpecError as e:
        for line in e.lines:
            err.print(f"spec error: {line}", markup=False)
        return EXIT_USAGE
    if (args.export or args.timeline) and not 0 <= args.placement < problem.placement_count:
        err.print(f"error: argument --placement: {args.placement} is out of range; this spec has {problem.placement_count} placement(s), 0..{problem.placement_count - 1}", markup=False)
        return EXIT_USAGE
    max_steps = args.max_steps or problem.spec.max_steps
    out = console(mpi=comm is not None)  # plain text into a file and under mpirun: the same bytes either way
    try:
        result = run_sweep(problem, args, deadline, None if args.quiet else err, comm)
    except (VerificationError, RankFailed) as e:
        # any rank may fail in an MPI sweep: this one prints, though `err` is quiet on ranks other than 0
        Console(stderr=True, highlight=False, soft_wrap=True).print(f"internal error: {e}", markup=False)
        if comm is not None:
            comm.Abort(EXIT_INTERNAL)
        return EXIT_INTERNAL
    if result is None:  # an MPI rank other than 0: rank 0 reports
        return EXIT_OK
    if args.out:  # first: whatever follows may stop on a timeout, and what was done must still be written
        write_json_atomic(result_json(problem, result, max_steps, args.proof), args.out)
    if args.export:
        if args.placement >= len(result.placements):
            err.print(f"timeout: placement {args.placement} was not reached within --timeout {args.timeout:g} s; raise --timeout", markup=False)
            return EXIT_TIMEOUT
        # the same code as `python -m solver.exports plan.json`, on the result document this run would write
        try:
            source = export_placement(parse_plan_file(result_json(problem, result, max_steps, args.proof)),
                                      args.placement, args.export)
        except NotExportable as e:  # the spec's placement has no mesh (a single device)
            err.print(f"error: --export: {e}", markup=False)
            return EXIT_USAGE
        print(source, end="")
    elif not args.quiet:
        render = render_workload if problem.is_workload else render_single
        render(out, problem, result, max_steps, hint=next_hint(args.out))
    if args.timeline:
        if args.placement >= len(result.placements):
            err.print(f"timeout: placement {args.placement} was not reached within --timeout {args.timeout:g} s; raise --timeout", markup=False)
            return EXIT_TIMEOUT
        chosen = result.placements[args.placement]
        draw(chosen.placement, [(r.named, r.solution.best.program) for r in chosen.requests if r.solution.best],
             problem.spec.pipeline, problem.spec.cost_model, args.timeline)
    if not is_complete(problem, result):
        err.print(_timeout_line(args.timeout, problem, result), markup=False)
        return EXIT_TIMEOUT
    return EXIT_OK


def next_hint(out: str | None) -> str:
    """The line under the first table: the next command, to save the plan or, once saved, to export it."""
    if out is None:
        return "next: save the plan with --out plan.json, then export it (docs/exports.md)"
    return f"next: python -m solver.exports {out} --placement 0 --format torch"


def _can_draw() -> None:
    """UsageError, before anything is solved, when --timeline cannot draw (no matplotlib)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("--timeline needs matplotlib: pip install -e '.[plot]'") from None


def _refuse_listing_too_many(problem: Problem, args: argparse.Namespace) -> None:
    """--top all on a space too large to list: UsageError before anything is solved."""
    if args.top != "all":
        return
    max_steps = args.max_steps or problem.spec.max_steps
    for matrix in problem.matrices:
        placement = problem.placement(matrix)
        for named in problem.requests:
            cells = len(named.request.reduced_cells(placement))
            count = count_programs(named.request.collective, cells, max_steps) if cells else 1
            if count > LIST_ALL_LIMIT:
                raise UsageError(f"--top all: {count} programs within {max_steps} steps per placement is too many to list; "
                                 "use --top N or a smaller max_steps")


def _refuse_unchecked(problem: Problem) -> None:
    """A placement whose programs are too large to check concretely (``hierarchies.verify.CheckTooLarge``):
    UsageError before anything is solved, naming the placement."""
    for i, matrix in enumerate(problem.matrices):
        placement = problem.placement(matrix)
        for named in problem.requests:
            if named.request.reduced_cells(placement):
                try:
                    verifier(placement, named.request)
                except CheckTooLarge as e:
                    raise UsageError(f"placement {i} ({placement.describe()}): {e}") from None


def _timeout_line(timeout: float, problem: Problem, result: SweepResult) -> str:
    """The one line that says what the budget did not cover, and the fix."""
    if not problem.placements_complete:
        return (f"timeout: placement enumeration did not finish within --timeout {timeout:g} s "
                f"({len(problem.matrices):,} of {problem.placement_count:,} found, none solved); "
                'raise --timeout or list the placements to consider in "placements"')
    unproved = sum(not p.optimal for p in result.placements)
    return (f"timeout: --timeout {timeout:g} s ran out with {len(result.placements)} of {problem.placement_count} "
            f"placement(s) reached, {unproved} of them not fully proved or listed; raise --timeout or lower max_steps")


if __name__ == "__main__":
    sys.exit(main())
