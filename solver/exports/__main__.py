"""``python -m solver.exports PLAN --placement I --format torch|jax``: print a framework module from a plan file.

The plan file is the solver's result JSON (``python -m solver.run SPEC --out
plan.json``); nothing is solved again, and neither Z3 nor the cost model is
needed. Exit codes: 0 the module was printed (or written with ``--out``); 1
internal error (a bug), one line on stderr; 2 bad arguments or plan file, a
program of the placement that does not perform its request, or a placement of
one device (no mesh), one line on stderr.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from p2synth.hierarchies.cli import EXIT_USAGE, ArgumentParser, UsageError, quote, write_text_atomic
from p2synth.hierarchies.plan_file import PlanFileError, load_plan_file
from p2synth.solver.exports.formats import ExportFormat, export_placement
from p2synth.solver.exports.planning import NotExportable

EXIT_OK, EXIT_INTERNAL = 0, 1


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns its exit code (an unexpected failure is one line and exit 1)."""
    try:
        return _main(argv)
    except Exception as e:  # a bug: one line unless P2SYNTH_DEBUG asks for the traceback
        if os.environ.get("P2SYNTH_DEBUG"):
            raise
        print(f"internal error: {type(e).__name__}: {e} (set P2SYNTH_DEBUG=1 for a traceback)", file=sys.stderr)
        return EXIT_INTERNAL


def _main(argv: list[str] | None) -> int:
    p = ArgumentParser(prog="python -m solver.exports", description=__doc__.split("\n")[0])
    p.add_argument("plan", help="the solver's result JSON (python -m solver.run SPEC --out plan.json)")
    p.add_argument("--placement", type=int, default=0, help="index of the placement in the plan (default 0, the best)")
    p.add_argument("--format", choices=[f.value for f in ExportFormat], required=True, help="torch or jax")
    p.add_argument("--out", type=Path, help="write the module here instead of printing it")
    try:
        args = p.parse_args(argv)
        source = export_placement(load_plan_file(args.plan), args.placement, args.format)
    except (UsageError, PlanFileError, NotExportable) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.out is not None:
            write_text_atomic(source, args.out)
        else:
            sys.stdout.write(source)
    except OSError as e:
        print(f"error: cannot write {quote(str(args.out))}: {e.strerror}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
