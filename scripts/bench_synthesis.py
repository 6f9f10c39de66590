"""Synthesis benchmark: what `python -m solver.run` costs at the scale users plan, side by side in one run.

1. **Program sets**: brute force (the paper's style: every candidate program of
   at most K steps through the concrete semantics) against ours (Z3 lists the
   valid programs, each then checked concretely; the explicit search finds the
   5 cheapest with a checked certificate). Both must find the same program set
   and optimum; where they do not, the script says what differs and exits 1.
2. **Sweeps**, each a real ``python -m solver.run`` (start-up and placement
   enumeration included), wall-clock median over ``--repeats``: a 3D-parallel
   job on 4,096 GPUs (pod 4 x rack 8 x node 16 x gpu 8; dp 64 x tp 8 x pp 8;
   all_reduce over dp at 1 GiB, ``max_steps`` 6, ``--top 10``, every placement
   proved) solved serially without reuse (``--no-reuse``, cut at
   ``--no-reuse-limit`` s), with reuse, with ``--jobs 2`` and under
   ``mpirun -n 2``; the same job's all_reduce over dp and tp (up to 7 reduced
   cells); a 65,536-device job. The dp and dp+tp sweeps also run with
   ``"pipeline": [1]`` (sequential programs only), for the cost of pipelining. Peak memory is the largest resident set of any
   process of the run, sampled from /proc every 50 ms (Linux).
3. **One placement** at 4, 6, 7 and 8 reduced cells (``max_steps`` 6, top 10
   proved, every program at its cheapest piece count of the spec's default
   ``pipeline``, as the sweeps), in this process, beside the same search with sequential programs only,
   alternating, ``--placement-repeats`` times each: median and max over the placements with that many
   cells (at most ``--sample`` of them) of each placement's median time and of its ratio.
4. **Issue 30's sweep**: the dp+tp all-reduce without link figures (``DPTP_NO_FIGURES``), serially, with
   ``--jobs 2`` and under ``mpirun -n 2`` (part of 2.); and **one placement of 8, 9 and 10 cells**
   (``scripts/synthesis_cells/``, 8, 9, 10 and 12 cells), serial, each cut at ``--cells-limit`` s, with its peak memory.

Every sweep's JSON must be complete and every placement proved; the four ways of
running the first sweep, and the three of issue 30's, must write the same JSON byte for byte. Otherwise exit 1. Before a merge, run the
regression guard instead (``python -m scripts.bench_guard``: two sweeps' time against a committed baseline).

    python -m scripts.bench_synthesis [--repeats 3] [--brute-limit 60] [--no-reuse-limit 300] [--sample 10]
        [--placement-repeats 3] [--skip-small] [--skip-sweeps] [--cells-limit 300] [--skip-cells]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NoReturn

from rich.console import Console

from p2synth.hierarchies import Axis, Collective, Hierarchy, Level, Placement, Request
from p2synth.hierarchies.cli import EXIT_USAGE, ArgumentParser, UsageError
from p2synth.hierarchies.concrete import ConcreteChecker
from p2synth.hierarchies.program import STEP_OPS, Program, Step
from p2synth.hierarchies.verify import clear_checks
from p2synth.solver.cost import program_seconds
from p2synth.solver.models import cost_model
from p2synth.solver.search import solve
from p2synth.solver.spec import load_problem
from scripts import tables

ROOT = Path(__file__).resolve().parent.parent
POD = [
    {"name": "pod", "count": 4, "bandwidth_GBps": 3, "latency_us": 30, "uplink_GBps": 100},
    {"name": "rack", "count": 8, "bandwidth_GBps": 12.5, "latency_us": 20, "uplink_GBps": 400},
    {"name": "node", "count": 16, "bandwidth_GBps": 25, "latency_us": 14, "uplink_GBps": 200},
    {"name": "gpu", "count": 8, "bandwidth_GBps": 240, "latency_us": 3.4},
]
AXES_3D = [{"name": "dp", "size": 64}, {"name": "tp", "size": 8}, {"name": "pp", "size": 8}]


def spec(axes: list[str], levels=POD, job_axes=AXES_3D, steps: int = 6) -> dict:
    """A sweep spec over every placement of `job_axes` on `levels`, all_reduce over `axes` at 1 GiB."""
    return {"hierarchy": {"name": "pods", "levels": levels}, "axes": job_axes,
            "request": {"axes": axes, "collective": "all_reduce"}, "message_bytes": 1 << 30, "max_steps": steps}


# The sweep of issue 30: the dp+tp all-reduce on the POD levels without link figures (the defaults), the form that
# became 6-16x slower unnoticed (docs/measurements/synthesis.md).
DPTP_NO_FIGURES = spec(["dp", "tp"], levels=[{"name": level["name"], "count": level["count"]} for level in POD])
# One placement each of 8, 9 and 10 reduced cells on a 5-level hierarchy (pod, rack, node, socket, gpu), dp and tp
# spread over several levels, with issue 30's target. The 12-cell spec beside them (dp, tp and cp) is not run: its
# reduction group is all 4,096 devices, whose concrete check would need 16 GiB (docs/measurements/synthesis.md).
CELLS = {8: "", 9: "", 10: "< 60 s, < 4 GiB", 12: "< 300 s, < 4 GiB"}
CELLS_DIR = Path(__file__).resolve().parent / "synthesis_cells"

BIG_65K = spec(["data"], levels=[dict(POD[0], count=16), dict(POD[1], count=16), dict(POD[2], count=32), POD[3]],
               job_axes=[{"name": "data", "size": 2048}, {"name": "pipe", "size": 4}, {"name": "tensor", "size": 8}])


def fail(message: str) -> NoReturn:
    """Stop the benchmark: a disagreement or an unproved result is a bug, never a figure."""
    print(f"check failed: {message}", file=sys.stderr)
    raise SystemExit(1)


# ---- 1. program sets against brute force ------------------------------------------------------------
def brute_force(placement: Placement, request: Request, max_steps: int, budget_s: float):
    """Check every candidate program concretely; (valid programs, best cost) or None past the budget."""
    cells = request.reduced_cells(placement)
    subsets = [s for r in range(1, len(cells) + 1) for s in itertools.combinations(cells, r)]
    steps = [Step(op, s) for op in STEP_OPS for s in subsets]
    checker = ConcreteChecker(placement, request)
    model = cost_model(placement, request, 1 << 30)
    end = time.monotonic() + budget_s
    valid, best = [], math.inf
    for k in range(1, max_steps + 1):
        for combo in itertools.product(steps, repeat=k):
            if time.monotonic() > end:
                return None
            program = Program(combo)
            if checker.check(program).ok:
                valid.append(program)
                best = min(best, sum(program_seconds(model, placement, request, program)))
    return valid, best


def small_cases():
    """(name, placement, request, max_steps) on 8..64 devices."""
    two = lambda outer, inner: Hierarchy(name=f"{outer}x{inner}", levels=(
        Level(name="node", count=outer, bandwidth_GBps=10.0, latency_us=10),
        Level(name="gpu", count=inner, bandwidth_GBps=100.0, latency_us=1)))
    three = lambda n, g: Hierarchy(name=f"2x{n}x{g}", levels=(
        Level(name="rack", count=2, bandwidth_GBps=2, latency_us=20), Level(name="node", count=n, bandwidth_GBps=10, latency_us=10),
        Level(name="gpu", count=g, bandwidth_GBps=100, latency_us=1)))
    data = lambda n: (Axis(name="data", size=n),)
    return [
        ("8 dev, data=8, C=2", Placement(two(2, 4), data(8), ((2, 4),)), Request(frozenset({0})), 4),
        ("16 dev, data=16, C=3", Placement(three(2, 4), data(16), ((2, 2, 4),)), Request(frozenset({0})), 3),
        ("32 dev, data=16 x model=2, C=2", Placement(two(4, 8), (Axis(name="data", size=16), Axis(name="model", size=2)), ((4, 4), (1, 2))), Request(frozenset({0})), 4),
        ("64 dev, data=64, C=3", Placement(three(4, 8), data(64), ((2, 4, 8),)), Request(frozenset({0})), 3),
        ("64 dev, data x model both, C=5", Placement(three(4, 8), (Axis(name="data", size=16), Axis(name="model", size=4)), ((2, 2, 4), (1, 2, 2))), Request(frozenset({0, 1}), Collective.REDUCE_SCATTER), 3),
    ]


def timed(fn, repeats: int):
    """(median seconds, last result) of `repeats` calls."""
    times, result = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def program_sets(console: Console, repeats: int, brute_limit: float) -> None:
    rows = []
    for name, p, req, k in small_cases():
        n = len(req.reduced_cells(p))
        candidates = sum((5 * (2 ** n - 1)) ** i for i in range(1, k + 1))
        t_brute, brute = timed(lambda: brute_force(p, req, k, brute_limit), 1)
        t_all, everything = timed(lambda: solve(p, req, 1 << 30, k, top=None), repeats)
        t_top, top = timed(lambda: solve(p, req, 1 << 30, k, top=5), repeats)
        ours = [r.program for r in everything.programs]
        if not (top.optimal and math.isclose(top.best.cost_s, everything.best.cost_s, rel_tol=1e-9)):
            fail(f"{name}: the proved top 5 does not start with the cheapest listed program")
        if brute is not None:
            if set(brute[0]) != set(ours):
                fail(f"{name}: brute force finds {len(brute[0])} valid programs, Z3 lists {len(ours)}")
            if not math.isclose(brute[1], everything.best.cost_s, rel_tol=1e-9):
                fail(f"{name}: optimum differs: brute force {brute[1]}, ours {everything.best.cost_s}")
            bt, r1, r2 = f"{t_brute:.2f} s", f"{t_brute / t_all:.0f}x", f"{t_brute / t_top:.0f}x"
        else:
            bt, r1, r2 = f"> {brute_limit:.0f} s", f"> {brute_limit / t_all:.0f}x", f"> {brute_limit / t_top:.0f}x"
        rows.append((name, k, f"{candidates:,}", f"{len(ours):,}", bt, f"{t_all:.3f} s", r1, f"{t_top:.3f} s", r2))
        console.print(f"  done: {name}", style="dim")
    console.print(tables.table(("system", "K", "candidates", "valid", "brute force", "ours: all (Z3 list + check)", "ratio",
                                "ours: top 5 proved", "ratio"), rows,
                               title="All valid programs and the optimum: brute force (concrete semantics on every "
                                     "candidate) vs ours"))


# ---- 2. sweeps as real runs ---------------------------------------------------------------------------
def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree(root: int) -> list[int]:
    """`root` and its descendants, from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(parents.get(pid, []))
    return out


def run_python(args: list[str], timeout: float, mpi_ranks: int = 0, label: str | None = None) -> tuple[float, int, int]:
    """(wall seconds, exit status, peak RSS in MiB of the largest process) of one ``python ARGS`` run in the repository
    (under ``mpiexec -n mpi_ranks`` when given), this interpreter, stdout discarded; exit 1 (:func:`fail`, naming
    `label`, by default the arguments) unless it exits 0 or 4 (solver.run's time budget) within `timeout` + 60 s."""
    cmd = [sys.executable, *args]
    label = label or " ".join(args)
    env = dict(os.environ)
    if mpi_ranks:
        cmd = [str(Path(sys.executable).parent / "mpiexec"), "--oversubscribe", "-n", str(mpi_ranks), *cmd]
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,sm",
                   OMPI_MCA_mpi_yield_when_idle="1")
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak, stop = [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max([peak[0]] + [_rss_kib(p) for p in _tree(proc.pid)])
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        _, err = proc.communicate(timeout=timeout + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        fail(f"{label} still ran after {timeout + 60:.0f} s: killed")
    finally:
        stop.set()
        sampler.join()
    if proc.returncode not in (0, 4):
        fail(f"{label} exited {proc.returncode}: {err.strip()[-500:]}")
    return time.perf_counter() - t, proc.returncode, peak[0] // 1024


def run_cli(args: list[str], timeout: float, mpi_ranks: int = 0) -> tuple[float, int, int]:
    """:func:`run_python` of ``python -m solver.run ARGS``."""
    return run_python(["-m", "solver.run", *args], timeout, mpi_ranks, label=f"solver.run {' '.join(args)}")


def proved_result(label: str, out: Path) -> dict:
    """The result JSON a sweep wrote to `out`; exit 1 (:func:`fail`) unless it is complete and every placement proved."""
    doc = json.loads(out.read_text())
    if not (doc["complete"] and all(p["optimal"] for p in doc["placements"])):
        fail(f"{label}: not every placement proved")
    return doc


def sweep_rows(console: Console, repeats: int, no_reuse_limit: float, folder: Path) -> list[tuple]:
    """The sweep rows: (what, placements, wall, target, peak MiB)."""
    rows = []
    specs = {"dp": spec(["dp"]), "dp+tp": spec(["dp", "tp"]), "dp+tp-nofig": DPTP_NO_FIGURES, "65k": BIG_65K,
             "dp-seq": dict(spec(["dp"]), pipeline=[1]), "dp+tp-seq": dict(spec(["dp", "tp"]), pipeline=[1])}
    for name, s in specs.items():
        (folder / f"{name}.json").write_text(json.dumps(s))

    def runs(label, spec_name, flags, reps, target, mpi=0, limit=1800.0):
        out = folder / f"{label.replace(' ', '_').replace('/', '')}.out.json"
        walls, peaks, code = [], [], 0
        for _ in range(reps):
            wall, code, peak = run_cli([str(folder / f"{spec_name}.json"), "--quiet", "--top", "10", "--out", str(out),
                                        "--timeout", str(limit), *flags], limit, mpi)
            walls.append(wall)
            peaks.append(peak)
        doc = proved_result(label, out) if code == 0 else json.loads(out.read_text())
        reached = len(doc["placements"])
        wall = statistics.median(walls)
        shown = f"{wall:.1f} s" if code == 0 else f"> {limit:.0f} s (cut; {reached} of {doc['placement_count']} placements)"
        rows.append((label, doc["placement_count"], shown, target, max(peaks)))
        console.print(f"  done: {label}: {shown}", style="dim")
        return out.read_bytes() if code == 0 else None

    same = [
        runs("dp sweep, serial, no reuse", "dp", ["--jobs", "1", "--no-reuse"], 1, "", limit=no_reuse_limit),
        runs("dp sweep, serial, reuse", "dp", ["--jobs", "1"], repeats, "< 30 s"),
        runs("dp sweep, --jobs 2", "dp", ["--jobs", "2"], repeats, "< 30 s"),
        runs("dp sweep, mpirun -n 2", "dp", [], repeats, "< 30 s", mpi=2),
    ]
    if len({b for b in same if b is not None}) != 1:
        fail("the dp sweep wrote different JSON serially, with reuse, with --jobs 2 and under mpirun -n 2")
    runs("dp sweep, serial, reuse, sequential only", "dp-seq", ["--jobs", "1"], repeats, "")
    runs("dp+tp sweep (up to 7 cells), --jobs 2", "dp+tp", ["--jobs", "2"], 1, "< 5 min")
    three = [runs("dp+tp, no link figures, serial", "dp+tp-nofig", ["--jobs", "1"], repeats, "<= 46 s (6d24559's)"),
             runs("dp+tp, no link figures, --jobs 2", "dp+tp-nofig", ["--jobs", "2"], repeats, ""),
             runs("dp+tp, no link figures, mpirun -n 2", "dp+tp-nofig", [], repeats, "<= 0.6x serial", mpi=2)]
    if len({b for b in three if b is not None}) != 1:
        fail("the dp+tp sweep without link figures wrote different JSON serially, with --jobs 2 and under mpirun -n 2")
    runs("dp+tp sweep, --jobs 2, sequential only", "dp+tp-seq", ["--jobs", "2"], 1, "")
    runs("65,536 devices, data sweep, --jobs 2", "65k", ["--jobs", "2"], repeats, "")
    return rows


def cell_rows(console: Console, limit: float) -> list[tuple]:
    """One placement of each cell count of CELLS (its spec in ``scripts/synthesis_cells/``), a real serial
    ``solver.run``, cut at `limit` seconds: (cells, wall, proved, target, peak MiB)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cells.json"
        for cells, target in CELLS.items():
            wall, code, peak = run_cli([str(CELLS_DIR / f"cells-{cells}.json"), "--quiet", "--top", "10", "--jobs", "1",
                                        "--timeout", str(limit), "--out", str(out)], limit)
            doc = json.loads(out.read_text())
            proved = code == 0 and all(p["optimal"] for p in doc["placements"])
            rows.append((cells, f"{wall:.1f} s" if proved else f"> {limit:.0f} s", "proved" if proved else "not proved",
                         target, peak))
            console.print(f"  done: {cells} cells", style="dim")
    return rows


# ---- 3. one placement at 4, 6, 8 cells --------------------------------------------------------------------
def per_placement(console: Console, sample: int, repeats: int, folder: Path) -> list[tuple]:
    """(cells, placements timed, median s, max s, target, median sequential-only s, median and max ratio) for one-placement
    searches, each from scratch (no concrete check cached from the other run; the state space of the cell count,
    shared by every placement of a sweep, is built once beforehand): with the spec's piece counts and sequential
    only, alternating, so load hits both, `repeats` times each. A placement's time is its median over the repeats
    and its ratio the ratio of those medians; the table gives the median and the largest over the placements."""
    out = []
    for cells, axes, target in ((4, ["dp"], ""), (6, ["dp", "tp"], "median < 2 s"), (7, ["dp", "tp"], ""),
                                (8, ["dp", "tp", "pp"], "< 30 s")):
        path = folder / f"cells{cells}.json"
        path.write_text(json.dumps(spec(axes)))
        problem = load_problem(path)
        named = problem.requests[0]
        chosen = [m for m in problem.matrices if len(named.request.reduced_cells(problem.placement(m))) == cells][:sample]
        times, alone = [], []
        solve(problem.placement(chosen[0]), named.request, named.message_bytes, 6, top=10, pieces=tuple(problem.spec.pipeline))
        for m in chosen:
            runs: dict[tuple, list[float]] = {}
            for _ in range(repeats):
                for pieces in (tuple(problem.spec.pipeline), (1,)):
                    clear_checks()
                    t = time.perf_counter()
                    sol = solve(problem.placement(m), named.request, named.message_bytes, 6, top=10, pieces=pieces)
                    runs.setdefault(pieces, []).append(time.perf_counter() - t)
                    if not sol.optimal or len(sol.programs) != 10 or not all(r.verified for r in sol.programs):
                        fail(f"{cells} cells: placement {m} (pieces {pieces}) not proved with 10 verified programs")
            times.append(statistics.median(runs[tuple(problem.spec.pipeline)]))
            alone.append(statistics.median(runs[(1,)]))
        ratios = [a / b for a, b in zip(times, alone)]
        out.append((cells, len(times), statistics.median(times), max(times), target, statistics.median(alone),
                    statistics.median(ratios), max(ratios)))
        console.print(f"  done: {cells} cells", style="dim")
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; UsageError on a bad one."""
    ap = ArgumentParser(prog="python -m scripts.bench_synthesis", description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats per sweep and small case (median reported)")
    ap.add_argument("--brute-limit", type=float, default=60.0, help="seconds allowed to one brute-force run")
    ap.add_argument("--no-reuse-limit", type=float, default=300.0, help="seconds allowed to the sweep without reuse")
    ap.add_argument("--sample", type=int, default=10, help="placements timed per cell count")
    ap.add_argument("--placement-repeats", type=int, default=3, help="timed runs of each placement, each way (median used)")
    ap.add_argument("--skip-small", action="store_true", help="leave out the brute-force comparison")
    ap.add_argument("--skip-sweeps", action="store_true", help="leave out the sweeps (only the one-placement table)")
    ap.add_argument("--cells-limit", type=float, default=300.0, help="seconds allowed to each of the 8-12 cell placements")
    ap.add_argument("--skip-cells", action="store_true", help="leave out the 8-12 cell placements")
    args = ap.parse_args(argv)
    if min(args.repeats, args.sample, args.placement_repeats) < 1 or min(args.brute_limit, args.no_reuse_limit) <= 0:
        raise UsageError("--repeats, --sample and --placement-repeats must be at least 1, the limits positive")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its tables; exit 1 when a check fails, 2 on bad arguments."""
    try:
        args = parse_args(argv)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    console = tables.console()
    console.print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start", style="dim")
    if not args.skip_small:
        program_sets(console, args.repeats, args.brute_limit)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows = [] if args.skip_sweeps else sweep_rows(console, args.repeats, args.no_reuse_limit, folder)
        cells = per_placement(console, args.sample, args.placement_repeats, folder)
    scale = [] if args.skip_cells else cell_rows(console, args.cells_limit)
    console.print(tables.table(("run", "placements", "wall", "target", "peak RSS (largest process)"),
                        [(label, n, wall, target, f"{peak} MiB") for label, n, wall, target, peak in rows],
                        title=f"Sweeps: real `python -m solver.run` runs, --top 10, every placement proved "
                              f"(median of {args.repeats}; single runs where marked)"))
    console.print(tables.table(("reduced cells", "placements", "median", "max", "target", "sequential only, median",
                         "ratio (median)", "ratio (max)"),
                        [(c, n, f"{med:.2f} s", f"{worst:.2f} s", target, f"{seq:.2f} s", f"{ratio:.2f}x", f"{worst_ratio:.2f}x")
                         for c, n, med, worst, target, seq, ratio, worst_ratio in cells],
                        title=f"One placement from scratch, max_steps 6, top 10 proved and verified (pieces 1,2,4,8,16; "
                              f"sequential only beside it; each placement the median of {args.placement_repeats} runs)",
                        text_columns=0))
    if scale:
        console.print(tables.table(("reduced cells", "wall", "proof", "target", "peak RSS"),
                                   [(c, wall, proved, target, f"{peak} MiB") for c, wall, proved, target, peak in scale],
                                   title="One placement of 8-12 cells (scripts/synthesis_cells/), serial, max_steps 6, top 10",
                                   text_columns=0))
    console.print(f"load average {os.getloadavg()[0]:.1f} at the end", style="dim")
    return 0


if __name__ == "__main__":
    sys.exit(main())
