"""Synthesis regression guard: two sweeps' wall time as a ratio to a fixed reference workload, against a committed baseline.

Run before a merge that touches the search (docs/measurements/synthesis.md, "Before a merge"). Each sweep is a real
``python -m solver.run SPEC --jobs 1 --top 10 --quiet`` (start-up and placement enumeration included, one worker):

- ``dp``: the README's dp-only sweep, the one of ``scripts/bench_synthesis.py`` (dp 64 x tp 8 x pp 8 on pod 4 x
  rack 8 x node 16 x gpu 8 with the POD link figures, all_reduce over dp at 1 GiB, ``max_steps`` 6, 253 placements);
- ``dp+tp, no link figures``: the sweep of issue 30, the same job's all_reduce over dp and tp (up to 7 reduced cells)
  on the same levels without link figures (the defaults). It became 6-16x slower once and nothing caught it; the
  regression showed only without figures.

Every run must end within ``--timeout`` with every placement proved, else exit 1. Each sweep runs beside the
**reference workload**, alternating (reference, dp, reference, dp+tp, ...) for ``--repeats`` rounds, so that load
from other work hits both alike. A sweep's ratio is the median of its wall times over the median of the reference
runs just before it: a figure of the code, roughly independent of the machine's speed and its load. The guard exits 1
naming each sweep whose ratio exceeds the committed baseline's (``scripts/bench_guard_baseline.json``) by more than
``--margin`` (ratio > baseline x (1 + margin)); ``--write-baseline`` rewrites the baseline from this run instead, with
the commit (``git describe --dirty``), the date, the machine's core count and its load average. Exit 2: bad arguments
or no usable baseline, one line, before anything runs.

The reference workload (:func:`reference_work`) is a fixed amount of the search's kind of work, in a fresh process
of the same interpreter (``python -c``, start-up and the numpy import included): a best-first search over the
2^17 subsets of 17 cells (heapq, a dict, tuples, pure Python, as the explicit search) and 120 rounds of a numpy
cost-to-go (take, add, min and minimum over 2^17 x 17 arrays, as the cost tables), about 2 s on one core. It uses
nothing from this project on purpose: a ``solver.run`` of a small spec as the reference would move with the very
code the guard watches (a slowdown of every search would cancel in the ratio, and a speed-up of the small case
would read as a regression of the others). It is single-threaded, like ``--jobs 1`` (numpy's elementwise operations
use one thread; nothing calls BLAS). What it does not model is Z3 (placement enumeration, C++): a machine much
faster or slower at Z3 than at Python shifts the ratios, so a baseline holds for the machine it was measured on,
which the baseline records.

    python -m scripts.bench_guard [--repeats 3] [--margin 0.25] [--timeout 600] [--baseline PATH] [--write-baseline]
"""

from __future__ import annotations

import argparse
import datetime
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from p2synth.hierarchies.cli import EXIT_USAGE, ArgumentParser, UsageError, write_json_atomic
from scripts import tables
from scripts.bench_synthesis import DPTP_NO_FIGURES, ROOT, fail, proved_result, run_cli, run_python, spec

BASELINE = Path(__file__).with_name("bench_guard_baseline.json")
SWEEPS = {  # name (in the table, the baseline and the failure lines) -> spec
    "dp": spec(["dp"]),
    "dp+tp, no link figures": DPTP_NO_FIGURES,
}
SWEEP_FLAGS = ["--jobs", "1", "--top", "10", "--quiet"]
REFERENCE_SIZE = (17, 120)  # reference_work's (cells, rounds): about 2 s on one core
REFERENCE_LIMIT_S = 120.0


def reference_work(cells: int, rounds: int) -> tuple[float, float]:
    """The reference workload: the cheapest way from no cell done to all `cells` done, each step doing one more cell
    at a fixed pseudo-random cost, twice: by best-first search in pure Python and by `rounds` rounds of cost-to-go
    in numpy. Both give the same cost once `rounds` >= `cells` (a check that the work is what it says). Self-contained
    (its imports inside): it runs as the source of a ``python -c``."""
    import heapq

    import numpy as np

    full = (1 << cells) - 1
    dist, heap = {0: 0.0}, [(0.0, 0)]
    while heap:
        d, s = heapq.heappop(heap)
        if d > dist[s]:
            continue
        for c in range(cells):
            t = s | (1 << c)
            if t != s:
                cost = d + 1.0 + (s * 2654435761 + c * 40503) % 1009 / 1009
                if cost < dist.get(t, float("inf")):
                    dist[t] = cost
                    heapq.heappush(heap, (cost, t))
    states, moves = np.arange(full + 1, dtype=np.int64)[:, None], np.arange(cells, dtype=np.int64)[None, :]
    succ = states | (1 << moves)
    step = np.where(succ != states, 1.0 + (states * 2654435761 + moves * 40503) % 1009 / 1009, np.inf)
    togo = np.where(np.arange(full + 1) == full, 0.0, np.inf)
    for _ in range(rounds):
        togo = np.minimum(togo, (np.take(togo, succ) + step).min(axis=1))
    return dist[full], float(togo[0])


REFERENCE_CODE = (f"{inspect.getsource(reference_work)}\nsearched, swept = reference_work{REFERENCE_SIZE}\n"
                  "assert abs(searched - swept) <= 1e-9 * searched, (searched, swept)\n")


def reference_wall() -> float:
    """Wall seconds of one reference run (:data:`REFERENCE_CODE` in a fresh interpreter, as the sweeps)."""
    return run_python(["-c", REFERENCE_CODE], REFERENCE_LIMIT_S, label="the reference workload")[0]


@dataclass(frozen=True)
class Measured:
    """One sweep's runs: its wall times and those of the reference run just before each, in seconds."""

    name: str
    placements: int
    walls: tuple[float, ...]
    references: tuple[float, ...]

    @property
    def ratio(self) -> float:
        """Median wall time over median reference time."""
        return statistics.median(self.walls) / statistics.median(self.references)

    @property
    def round_ratios(self) -> tuple[float, ...]:
        """Each round's wall time over the reference's of the same round: their spread is the guard's noise."""
        return tuple(w / r for w, r in zip(self.walls, self.references))


def measure(console: Console, repeats: int, timeout: float, folder: Path) -> list[Measured]:
    """`repeats` rounds of (reference, sweep) for every sweep; exit 1 (fail) when a run is cut or not every placement
    is proved."""
    paths = {}
    for i, (name, s) in enumerate(SWEEPS.items()):
        paths[name] = folder / f"sweep{i}.json"
        paths[name].write_text(json.dumps(s))
    walls: dict[str, list[float]] = {name: [] for name in SWEEPS}
    refs: dict[str, list[float]] = {name: [] for name in SWEEPS}
    placements = {}
    for r in range(repeats):
        for name, path in paths.items():
            refs[name].append(reference_wall())
            out = path.with_suffix(".out.json")
            wall, code, _ = run_cli([str(path), *SWEEP_FLAGS, "--timeout", f"{timeout:g}", "--out", str(out)], timeout)
            if code != 0:
                fail(f"{name}: cut by --timeout {timeout:g} s")
            placements[name] = proved_result(name, out)["placement_count"]
            walls[name].append(wall)
            console.print(f"  round {r + 1} of {repeats}: reference {refs[name][-1]:.2f} s, {name} {wall:.2f} s", style="dim")
    return [Measured(name, placements[name], tuple(walls[name]), tuple(refs[name])) for name in SWEEPS]


def verdict(ratio: float, base: float, margin: float) -> str:
    """``slower`` past base x (1 + margin) (the guard fails), ``faster`` below base / (1 + margin), else ``ok``."""
    if ratio > base * (1 + margin):
        return "slower"
    return "faster" if ratio < base / (1 + margin) else "ok"


def read_baseline(path: Path) -> dict[str, dict]:
    """The baseline's entry for every sweep, each with a positive ``ratio``; UsageError when there is none or it is bad."""
    try:
        entries = json.loads(path.read_text())["sweeps"]
    except FileNotFoundError:
        raise UsageError(f"no baseline {path}: measure one with --write-baseline") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"baseline {path} unreadable ({type(e).__name__}: {e}): rewrite it with --write-baseline") from None
    for name in SWEEPS:
        ratio = entries.get(name, {}).get("ratio") if isinstance(entries, dict) else None
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not ratio > 0:
            raise UsageError(f"baseline {path} has no positive ratio for sweep {name!r}: rewrite it with --write-baseline")
    return entries


def provenance() -> dict:
    """What a baseline entry records of where it was measured: commit, date, core count, load average."""
    try:
        described = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True,
                                   timeout=30)
        commit = described.stdout.strip() if described.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    return {"commit": commit, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cores": os.cpu_count(), "load_average": round(os.getloadavg()[0], 2)}


def write_baseline(path: Path, measured: list[Measured], where: dict) -> None:
    """Rewrite the baseline at `path` from this run's measurements, each entry with `where` (:func:`provenance`)."""
    write_json_atomic({"about": "scripts/bench_guard.py: per sweep, median wall time over the reference workload's "
                                "median; rewrite with python -m scripts.bench_guard --write-baseline",
                       "sweeps": {m.name: {"ratio": round(m.ratio, 4), "round_ratios": [round(r, 4) for r in m.round_ratios],
                                           "sweep_s": round(statistics.median(m.walls), 3),
                                           "reference_s": round(statistics.median(m.references), 3),
                                           "placements": m.placements, **where}
                                  for m in measured}}, path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; UsageError on a bad one."""
    ap = ArgumentParser(prog="python -m scripts.bench_guard", description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="rounds, each the reference then a sweep, for every sweep")
    ap.add_argument("--margin", type=float, default=0.25, help="fail when a ratio exceeds the baseline's x (1 + margin)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds allowed to one sweep run (solver.run --timeout)")
    ap.add_argument("--baseline", type=Path, default=BASELINE, help="the baseline file (default: the committed one)")
    ap.add_argument("--write-baseline", action="store_true", help="rewrite the baseline from this run, compare nothing")
    args = ap.parse_args(argv)
    if args.repeats < 1 or not args.margin >= 0 or not args.timeout > 0:
        raise UsageError("--repeats must be at least 1, --margin at least 0 and --timeout positive")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the guard; exit 1 when a sweep is slower than its baseline allows or a check fails, 2 on bad arguments."""
    try:
        args = parse_args(argv)
        baseline = read_baseline(args.baseline) if not args.write_baseline else {}
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    console = tables.console()
    console.print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start", style="dim")
    with tempfile.TemporaryDirectory() as tmp:
        measured = measure(console, args.repeats, args.timeout, Path(tmp))
    rows, failures = [], []
    for m in measured:
        base = baseline.get(m.name, {}).get("ratio")
        shown = "new baseline" if base is None else verdict(m.ratio, base, args.margin)
        if shown == "slower":
            limit = base * (1 + args.margin)
            failures.append(f"{m.name}: ratio {m.ratio:.3f} > baseline {base:.3f} x (1 + {args.margin:g}) = {limit:.3f} "
                            f"({m.ratio / base:.2f}x the baseline)")
        rows.append((m.name, m.placements, f"{statistics.median(m.walls):.2f} s", f"{statistics.median(m.references):.2f} s",
                     f"{m.ratio:.3f}", f"{min(m.round_ratios):.3f}-{max(m.round_ratios):.3f}",
                     "-" if base is None else f"{base:.3f}", shown))
    console.print(tables.table(("sweep", "placements", "median wall", "reference median", "ratio", "round ratios",
                                "baseline ratio", "verdict"), rows,
                               title=f"Synthesis guard: solver.run {' '.join(SWEEP_FLAGS)} over the reference workload "
                                     f"(medians of {args.repeats} alternating rounds; margin {args.margin:g})"))
    cores = {e.get("cores") for e in baseline.values() if isinstance(e, dict)} - {os.cpu_count()}
    if cores:
        console.print(f"note: the baseline was measured on {', '.join(map(str, sorted(cores, key=str)))} cores, this "
                      f"machine has {os.cpu_count()}: the ratios compare only roughly", style="dim")
    noisy = [m.name for m in measured if max(m.round_ratios) > min(m.round_ratios) * (1 + args.margin)]
    if noisy:
        console.print(f"warning: the round ratios of {', '.join(noisy)} spread wider than the margin: the machine's load "
                      f"changed during the run, and a verdict this noisy can be chance; rerun on a quieter machine",
                      soft_wrap=True)
    console.print(f"load average {os.getloadavg()[0]:.1f} at the end", style="dim")
    if args.write_baseline:
        write_baseline(args.baseline, measured, provenance())
        console.print(f"wrote {args.baseline}")
        return 0
    for line in failures:
        print(f"guard failed: {line}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
