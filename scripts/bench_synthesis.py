"""Synthesis benchmark: our Z3 synthesis vs a brute-force enumerator, side by side in one run.

The brute force is the paper's style: generate every candidate program of at
most K steps (each step any of the 5 collectives on any non-empty subset of the
reduced cells) and run each through the concrete per-device semantics, keeping
the valid ones and the cheapest. Ours: Z3 lists the valid programs (each then
checked concretely) and separately proves the 5 cheapest. Both must find the
same program set and the same optimum; when they do not, the script prints what
differs and exits 1 (checks that stay under ``python -O``).

Then our synthesis alone on systems up to 65,536 devices: the proved-cheapest
program (verified on a miniature) on the `--sample` placements of each system
with the most reduced cells.

    python -m scripts.bench_synthesis [--repeats 3] [--brute-limit 120]
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
import time
from typing import NoReturn

from rich.console import Console
from rich.table import Table

from p2synth_encodings.placements import enumerate_placements
from p2synth_encodings.deadline import Deadline
from hierarchies import Axis, Collective, Hierarchy, Level, Placement, Request, load_system
from hierarchies.program import Program, Step
from hierarchies.concrete import ConcreteChecker
from solver.cost import program_seconds
from solver.models import cost_model
from solver.search import solve


def brute_force(placement: Placement, request: Request, max_steps: int, budget_s: float):
    """Check every candidate program concretely; (valid programs, best cost) or None past the budget."""
    cells = request.reduced_cells(placement)
    subsets = [s for r in range(1, len(cells) + 1) for s in itertools.combinations(cells, r)]
    steps = [Step(op, s) for op in Collective for s in subsets]
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


def ours_all(placement: Placement, request: Request, max_steps: int):
    """Every valid program via Z3 (each verified concretely inside solve)."""
    sol = solve(placement, request, 1 << 30, max_steps, top=None)
    return [r.program for r in sol.programs], sol.best.cost_s


def ours_top(placement: Placement, request: Request, max_steps: int, top: int = 5):
    """The `top` cheapest programs, proved and verified."""
    return solve(placement, request, 1 << 30, max_steps, top=top)


def two_level(outer: int, inner: int, bw_outer=10.0, bw_inner=100.0) -> Hierarchy:
    return Hierarchy(name=f"{outer}x{inner}", levels=(
        Level(name="node", count=outer, bandwidth_GBps=bw_outer, latency_us=10),
        Level(name="gpu", count=inner, bandwidth_GBps=bw_inner, latency_us=1),
    ))


def small_cases():
    """(name, placement, request, max_steps) on 8..64 devices."""
    data = lambda n: (Axis(name="data", size=n),)
    three = Hierarchy(name="2x2x4", levels=(
        Level(name="rack", count=2, bandwidth_GBps=2, latency_us=20),
        Level(name="node", count=2, bandwidth_GBps=10, latency_us=10),
        Level(name="gpu", count=4, bandwidth_GBps=100, latency_us=1),
    ))
    three64 = three.model_copy(update={"name": "2x4x8", "levels": (
        three.levels[0], three.levels[1].model_copy(update={"count": 4}), three.levels[2].model_copy(update={"count": 8}))})
    return [
        ("8 dev, data=8, C=2", Placement(two_level(2, 4), data(8), ((2, 4),)), Request(frozenset({0})), 4),
        ("16 dev, data=16, C=3", Placement(three, data(16), ((2, 2, 4),)), Request(frozenset({0})), 3),
        ("32 dev, data=16 x model=2, C=2", Placement(two_level(4, 8), (Axis(name="data", size=16), Axis(name="model", size=2)), ((4, 4), (1, 2))), Request(frozenset({0})), 4),
        ("64 dev, data=64, C=3", Placement(three64, data(64), ((2, 4, 8),)), Request(frozenset({0})), 3),
        ("64 dev, data x model both, C=5", Placement(three64, (Axis(name="data", size=16), Axis(name="model", size=4)), ((2, 2, 4), (1, 2, 2))), Request(frozenset({0, 1}), Collective.REDUCE_SCATTER), 3),
    ]


def large_cases():
    """(name, hierarchy, axes, request axes) up to 65,536 devices."""
    pod = lambda pods, racks, nodes: Hierarchy(name=f"pod{pods}", levels=(
        Level(name="pod", count=pods, bandwidth_GBps=3, latency_us=30, uplink_GBps=100),
        Level(name="rack", count=racks, bandwidth_GBps=12.5, latency_us=20, uplink_GBps=400),
        Level(name="node", count=nodes, bandwidth_GBps=25, latency_us=14, uplink_GBps=200),
        Level(name="gpu", count=8, bandwidth_GBps=240, latency_us=3.4),
    ))
    return [
        ("dgx-a100 x 64 (512)", load_system("dgx-a100", nodes=64), (Axis(name="data", size=64), Axis(name="tensor", size=8)), {0}),
        ("dgx-h100 x 512 (4096)", load_system("dgx-h100", nodes=512), (Axis(name="data", size=256), Axis(name="pipe", size=2), Axis(name="tensor", size=8)), {0}),
        ("4 pods x 16 racks x 32 nodes (16384)", pod(4, 16, 32), (Axis(name="data", size=512), Axis(name="pipe", size=4), Axis(name="tensor", size=8)), {0}),
        ("16 pods x 16 racks x 32 nodes (65536)", pod(16, 16, 32), (Axis(name="data", size=2048), Axis(name="pipe", size=4), Axis(name="tensor", size=8)), {0}),
        ("16 pods x 16 racks x 32 nodes, data+pipe", pod(16, 16, 32), (Axis(name="data", size=2048), Axis(name="pipe", size=4), Axis(name="tensor", size=8)), {0, 1}),
    ]


def fail(message: str) -> NoReturn:
    """Stop the benchmark: a disagreement between two searches is a bug, never a figure."""
    print(f"check failed: {message}", file=sys.stderr)
    raise SystemExit(1)


def timed(fn, repeats: int):
    """(median seconds, last result) of `repeats` calls."""
    times, result = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats per case (median reported)")
    ap.add_argument("--brute-limit", type=float, default=120.0, help="seconds allowed to one brute-force run")
    ap.add_argument("--sample", type=int, default=3, help="placements per large system (those with the most reduced cells)")
    ap.add_argument("--skip-small", action="store_true", help="only the large systems")
    args = ap.parse_args()
    console = Console(width=160)

    t1 = Table(title="All valid programs and the optimum: brute force (concrete semantics on every candidate) vs ours (Z3)", title_justify="left")
    for c in ["system", "K", "candidates", "valid", "brute force", "ours: all (Z3 list + check)", "ratio", "ours: top-5 proved", "ratio"]:
        t1.add_column(c, justify="right" if c not in ("system",) else "left")
    for name, p, req, k in ([] if args.skip_small else small_cases()):
        n = len(req.reduced_cells(p))
        candidates = sum((5 * (2**n - 1)) ** i for i in range(1, k + 1))
        t_brute, brute = timed(lambda: brute_force(p, req, k, args.brute_limit), 1)
        t_all, (ours, best) = timed(lambda: ours_all(p, req, k), args.repeats)
        t_top, top = timed(lambda: ours_top(p, req, k), args.repeats)
        if brute is not None:
            if set(brute[0]) != set(ours):
                fail(f"{name}: brute force finds {len(brute[0])} valid programs, Z3 lists {len(ours)}")
            if not (math.isclose(brute[1], best, rel_tol=1e-9) and math.isclose(top.best.cost_s, best, rel_tol=1e-9)):
                fail(f"{name}: optimum differs: brute force {brute[1]}, Z3 listing {best}, Z3 proved top {top.best.cost_s}")
            bt, r1, r2 = f"{t_brute:.2f} s", f"{t_brute / t_all:.0f}x", f"{t_brute / t_top:.0f}x"
        else:
            bt, r1, r2 = f"> {args.brute_limit:.0f} s", f"> {args.brute_limit / t_all:.0f}x", f"> {args.brute_limit / t_top:.0f}x"
        t1.add_row(name, str(k), f"{candidates:,}", f"{len(ours):,}", bt, f"{t_all:.3f} s", r1, f"{t_top:.3f} s", r2)
        console.print(f"  done: {name}", style="dim")
    if not args.skip_small:
        console.print(t1)

    t2 = Table(title=f"Ours alone: proved-cheapest program (K=4, verified on a miniature) on {args.sample} placements per system with the most reduced cells", title_justify="left")
    for c in ["system", "devices", "placements", "cells", "enumerate placements", "per placement (median)", "max", "all proved"]:
        t2.add_column(c, justify="right" if c != "system" else "left")
    for name, h, axes, red in large_cases():
        req = Request(frozenset(red))
        t = time.perf_counter()
        matrices = list(enumerate_placements(tuple(a.size for a in axes), h.counts))
        t_enum = time.perf_counter() - t
        placements = sorted((Placement(h, axes, m) for m in matrices), key=lambda p: (-len(req.reduced_cells(p)), p.matrix))
        per, proved = [], True
        for p in placements[: args.sample]:
            t = time.perf_counter()
            sol = solve(p, req, 1 << 30, 4, top=1, deadline=Deadline(600))
            per.append(time.perf_counter() - t)
            if not all(r.verified for r in sol.programs):
                fail(f"{name}: a reported program is not verified")
            proved &= sol.optimal
        cells = len(req.reduced_cells(placements[0]))
        t2.add_row(name, f"{h.num_devices:,}", str(len(matrices)), str(cells), f"{t_enum:.2f} s",
                   f"{statistics.median(per):.2f} s", f"{max(per):.2f} s", "yes" if proved else "no")
        console.print(f"  done: {name}", style="dim")
    console.print(t2)


if __name__ == "__main__":
    main()
