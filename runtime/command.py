"""The ``p2synth`` console command: one subcommand per tool, each the same program as its ``python -m`` form.

    p2synth solve SPEC ...          python -m solver.run SPEC ...
    p2synth export PLAN ...         python -m solver.exports PLAN ...
    mpiexec -n N p2synth bench PLAN ...   mpiexec -n N python -m runtime.bench PLAN ...
    mpiexec -n N p2synth tune PLAN ...    mpiexec -n N python -m runtime.tune PLAN ...
    mpiexec -n N p2synth tune --client torch PLAN ...   mpiexec -n N python -m runtime.client_tune PLAN ...
    mpiexec -n N p2synth validate TUNED ...   mpiexec -n N python -m runtime.validate TUNED ...
    mpiexec -n N p2synth step PLAN ...    mpiexec -n N python -m runtime.step PLAN ...

The ``python -m`` forms work from a checkout of the repository; the command
works wherever the package is installed. A subcommand's module is imported
only when it is chosen, so ``p2synth bench``, ``tune``, ``validate`` and ``step`` never load
Z3 or the solver (the runtime's rule), and ``p2synth solve`` never loads MPI
unless the sweep runs under ``mpiexec``. Exit codes are the subcommand's; 2
for an unknown or missing subcommand.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from enum import Enum

from p2synth.hierarchies.cli import EXIT_USAGE, ArgumentParser, UsageError, invoked_as


class Subcommand(str, Enum):
    """The tools the command runs, by name; the value is the module whose ``main(argv)`` runs it."""

    SOLVE = "p2synth.solver.run"
    EXPORT = "p2synth.solver.exports.__main__"
    BENCH = "p2synth.runtime.bench"
    TUNE = "p2synth.runtime.tune"
    VALIDATE = "p2synth.runtime.validate"
    STEP = "p2synth.runtime.step"

    @property
    def label(self) -> str:
        """The subcommand as typed: ``solve``, ``export``, ..."""
        return self.name.lower()


CLIENT_TUNE = "p2synth.runtime.client_tune"  # ``p2synth tune --client torch``: runtime/client_tune.py


def parser() -> ArgumentParser:
    """The command line ``p2synth SUBCOMMAND ARGS...``: the subcommand's own options go to its parser."""
    p = ArgumentParser(prog="p2synth", description="Synthesize, export, benchmark and tune hierarchical collective "
                       "programs; p2synth SUBCOMMAND --help gives each one's options.")
    p.add_argument("subcommand", choices=[c.label for c in Subcommand], help="the tool to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run ``p2synth SUBCOMMAND ARGS...``; returns the subcommand's exit code (2 for a bad subcommand)."""
    try:
        args = parser().parse_args(argv)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    chosen = next(c for c in Subcommand if c.label == args.subcommand)
    invoked_as(f"p2synth {chosen.label}")
    module = chosen.value
    if chosen is Subcommand.TUNE and any(a == "--client" or a.startswith("--client=") for a in args.args):
        module = CLIENT_TUNE  # tuning on the training job's own backend (torch.distributed), not over MPI
    return importlib.import_module(module).main(args.args)


if __name__ == "__main__":
    sys.exit(main())
