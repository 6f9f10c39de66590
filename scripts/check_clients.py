"""The clients check: the PyTorch and JAX tests run for real, in an environment of their own, with one summary line.

    .venv/bin/python -m scripts.check_clients [--venv PATH] [--pip-arg ARG]... [--timeout S] [--log-dir DIR]

From the root of a checkout where the README's first command has run (a fresh clone and that command are enough;
without p2synth installed it says so in one line and exits 2), it:

1. makes a virtual environment OUTSIDE the repository (``--venv``, default
   ``~/.cache/p2synth/clients-venv``) with the interpreter running this command,
   unless one is there already;
2. installs into it, from the package index, everything ``pyproject.toml``
   names for p2synth and its ``test``, ``torch`` and ``jax`` extras, and this
   checkout editable: ``pip install -e '.[test,torch,jax]'``. An environment
   that already has all of those, with p2synth installed from this checkout, is
   reused as it is (no pip call). ``--pip-arg`` passes an argument to that pip
   call (repeatable), e.g. ``--pip-arg=--extra-index-url=https://download.pytorch.org/whl/cpu``;
3. runs, with that environment's Python from the repository root,
   ``pytest -q -m torch tests`` and then ``pytest -q -m jax tests``: every test
   marked ``torch`` or ``jax`` in any test file (tests/test_exports.py, the DDP
   hook tests ...), each framework's output to ``--log-dir`` (default
   ``<venv>/logs``), ``--timeout`` seconds each (default 1800);
4. prints one line, e.g.
   ``clients: torch 2.14.1 ok (139 passed), jax 0.10.2 ok (139 passed)``.

A framework is ok when its pytest run exits 0 with at least one test passed and
none failed, errored or skipped (a skip here means a test did not run for real).
Exit status: 0 both ok; 1 one or both not ok (the line says which, with the log
path); 2 bad arguments (``--venv`` inside the repository, say), one line
``error: ...`` on stderr; 3 the environment could not be made (venv or pip
failed), one line ``error: ...`` on stderr.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

try:
    from p2synth.hierarchies.cli import EXIT_USAGE, ArgumentParser, UsageError
except ImportError:  # run with a Python that lacks p2synth: say which one to use, in one line
    print("error: p2synth is not installed in this Python; run the README's first command, then "
          ".venv/bin/python -m scripts.check_clients", file=sys.stderr)
    sys.exit(2)

CHECKOUT = Path(__file__).resolve().parents[1]
DEFAULT_VENV = Path.home() / ".cache" / "p2synth" / "clients-venv"
EXTRAS = ("test", "torch", "jax")
EXIT_ENVIRONMENT = 3
COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed|warnings?)\b")
SUMMARY = re.compile(r"^=*\s*(.*\bin [\d.]+s\b.*?)\s*=*$")

# Run by the environment's own Python: which of the distributions named in argv are installed (their versions),
# and where the package p2synth.hierarchies comes from. Nothing is imported but the namespace p2synth.
INSPECT = """
import importlib.metadata as m, importlib.util as u, json, sys
versions = {}
for name in sys.argv[1:]:
    try:
        versions[name] = m.version(name)
    except m.PackageNotFoundError:
        versions[name] = None
try:
    spec = u.find_spec("p2synth.hierarchies")
except ImportError:
    spec = None
print(json.dumps({"versions": versions, "p2synth": list(spec.submodule_search_locations) if spec else []}))
"""


class Framework(str, Enum):
    """A client framework: its pytest marker and its distribution name are both this value."""

    TORCH = "torch"
    JAX = "jax"


class EnvironmentFailed(RuntimeError):
    """The virtual environment could not be made or completed; the message is one line."""


@dataclass(frozen=True)
class Outcome:
    """How one framework's tests went: its version, pytest's counts and exit status, and the log."""

    framework: Framework
    version: str | None
    counts: dict[str, int]
    returncode: int
    log: Path
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        """Every selected test ran for real and passed: exit 0, some passed, none failed, errored or skipped."""
        bad = sum(self.counts.get(k, 0) for k in ("failed", "errors", "skipped", "xpassed"))
        return not self.timed_out and self.returncode == 0 and self.counts.get("passed", 0) > 0 and bad == 0


def parse_args(argv: list[str] | None):
    """The command line; UsageError on a bad one (or a --venv inside the repository)."""
    p = ArgumentParser(prog="python -m scripts.check_clients", description=__doc__.split("\n")[0])
    p.add_argument("--venv", type=Path, default=DEFAULT_VENV, help=f"the environment (default {DEFAULT_VENV})")
    p.add_argument("--pip-arg", action="append", default=[], metavar="ARG",
                   help="an extra argument for pip install (repeatable), e.g. --pip-arg=--extra-index-url=URL")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds for each framework's tests (default 1800)")
    p.add_argument("--log-dir", type=Path, help="where pytest's output goes (default <venv>/logs)")
    args = p.parse_args(argv)
    args.venv = args.venv.expanduser().absolute()
    if args.venv.resolve().is_relative_to(CHECKOUT):
        raise UsageError(f"--venv {args.venv} is inside the repository; give a path outside {CHECKOUT}")
    if args.timeout <= 0:
        raise UsageError(f"--timeout must be positive, not {args.timeout:g}")
    args.log_dir = (args.log_dir or args.venv / "logs").expanduser().absolute()
    return args


def required_distributions(pyproject: Path = CHECKOUT / "pyproject.toml") -> list[str]:
    """The distributions p2synth and its extras :data:`EXTRAS` name in `pyproject` (names only, in file order)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    specs = list(project["dependencies"])
    for extra in EXTRAS:
        specs += project["optional-dependencies"][extra]
    names = [re.match(r"[A-Za-z0-9._-]+", s.strip()).group(0).lower() for s in specs]
    return list(dict.fromkeys(names))


def venv_python(venv: Path) -> Path:
    """The environment's interpreter."""
    return venv / "bin" / "python"


def inspect_venv(python: Path, names: list[str]) -> dict:
    """``{"versions": {name: version or None}, "p2synth": [folders of p2synth.hierarchies]}`` in `python`'s environment."""
    run = subprocess.run([str(python), "-c", INSPECT, *names], capture_output=True, text=True, env=_clean_env())
    if run.returncode != 0:
        raise EnvironmentFailed(f"{python} cannot run: {_last_line(run.stderr)}")
    return json.loads(run.stdout)


def is_complete(state: dict) -> bool:
    """Whether the environment has every required distribution and p2synth from this checkout."""
    here = str(CHECKOUT / "hierarchies")
    return all(state["versions"].values()) and any(os.path.realpath(p) == here for p in state["p2synth"])


def ensure_venv(venv: Path, pip_args: list[str]) -> dict:
    """Make or complete the environment (see the module's steps 1-2); its final :func:`inspect_venv` state."""
    python, names = venv_python(venv), required_distributions()
    if not python.exists():
        _call([sys.executable, "-m", "venv", str(venv)], f"python -m venv {venv}")
    state = inspect_venv(python, names)
    if is_complete(state):
        return state
    _call([str(python), "-m", "pip", "install", "-q", *pip_args, "-e", f"{CHECKOUT}[{','.join(EXTRAS)}]"],
          "pip install", cwd=CHECKOUT)
    state = inspect_venv(python, names)
    if not is_complete(state):
        missing = [n for n, v in state["versions"].items() if not v] or ["p2synth from this checkout"]
        raise EnvironmentFailed(f"{venv} still lacks {', '.join(missing)} after pip install")
    return state


def run_tests(venv: Path, framework: Framework, version: str | None, log_dir: Path, timeout: float) -> Outcome:
    """Run the tests marked `framework` with the environment's pytest from the repository root, output to a log."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{framework.value}.log"
    argv = [str(venv_python(venv)), "-m", "pytest", "-q", "-m", framework.value, "tests"]
    env = _clean_env() | {"VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    with log.open("w") as out:
        try:
            run = subprocess.run(argv, cwd=CHECKOUT, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
            code, timed_out = run.returncode, False
        except subprocess.TimeoutExpired:
            code, timed_out = 124, True
    return Outcome(framework, version, pytest_counts(log.read_text()), code, log, timed_out)


def pytest_counts(output: str) -> dict[str, int]:
    """The counts on pytest's final summary line (``3 failed, 136 passed, 2 skipped in 9.1s``): {} when there is none.

    ``error``/``errors`` both count as ``errors`` and ``warning(s)`` as ``warnings``.
    """
    for line in reversed(output.strip().splitlines()):
        found = SUMMARY.match(line.strip())
        if found:
            counts = {}
            for n, word in COUNT.findall(found.group(1)):
                key = {"error": "errors", "warning": "warnings"}.get(word, word)
                counts[key] = counts.get(key, 0) + int(n)
            return counts
    return {}


def describe(outcome: Outcome) -> str:
    """One framework's part of the summary line, e.g. ``torch 2.14.1 ok (139 passed)``."""
    shown = ", ".join(f"{n} {k}" for k, n in outcome.counts.items() if k not in ("deselected", "warnings"))
    if outcome.timed_out:
        shown = f"timed out; {shown}" if shown else "timed out"
    elif not shown:
        shown = f"no test ran, exit {outcome.returncode}"
    name = f"{outcome.framework.value} {outcome.version}" if outcome.version else outcome.framework.value
    return f"{name} ok ({shown})" if outcome.ok else f"{name} FAILED ({shown}; log: {outcome.log})"


def summary_line(outcomes: list[Outcome]) -> str:
    """The one line the command prints."""
    return "clients: " + ", ".join(describe(o) for o in outcomes)


def main(argv: list[str] | None = None) -> int:
    """Run the check; the exit status (module docstring)."""
    try:
        args = parse_args(argv)
        state = ensure_venv(args.venv, args.pip_arg)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except EnvironmentFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    outcomes = [run_tests(args.venv, f, state["versions"].get(f.value), args.log_dir, args.timeout) for f in Framework]
    print(summary_line(outcomes))
    return 0 if all(o.ok for o in outcomes) else 1


def _call(argv: list[str], what: str, cwd: Path | None = None) -> None:
    """Run a set-up command quietly; EnvironmentFailed with its last line of output if it fails."""
    run = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=_clean_env())
    if run.returncode != 0:
        raise EnvironmentFailed(f"{what} failed (exit {run.returncode}): {_last_line(run.stderr or run.stdout)}")


def _clean_env() -> dict[str, str]:
    """This process's environment without PYTHONPATH (the environment's own packages only) or PYTHONHOME."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _last_line(text: str) -> str:
    """The last non-empty line of `text` (or a placeholder)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


if __name__ == "__main__":
    sys.exit(main())
