"""The best measured program against the lower bound at the configured and at the calibrated line rates (issue 24, 32).

    sudo env PATH="$PATH" python -m scripts.bench_limit --out limit.raw.json --markdown limit.md
    python -m scripts.bench_limit --from-raw docs/measurements/limit/limit.raw.json      # the table again, no testbed

Measuring, per testbed (``--testbeds``: 4 nodes x 2 ranks on 1 Gbit/s links,
and 2 racks x 2 nodes x 2 ranks with 400 Mbit/s between racks), on its own
testbed instance (``--instance``, default ``lim``): bring it up, calibrate it
(``scripts/calibrate.py``), then for every case (collective x size, over one
axis ``data`` of all the ranks) solve the request with the calibrated
hierarchy and the simulator cost model (``solver.run --top K``), and measure
the default and the top K programs with ``runtime.tune`` (each checked exactly,
then timed in interleaved rounds: median and 95% interval). The testbed goes
down in a ``finally``. The raw JSON is written after every case.

Per case it records every measured program (measured and predicted times), two
lower bounds of measured time (``bound_s``: the cut of ``hierarchies/bound.py``,
docs/model.md "Lower bound", on the request's placement) and one estimate:

* ``configured``: the cut on the hierarchy ``testbed up`` writes, the shaped
  rates (``tc tbf``) as the links' one-way line rates;
* ``calibrated``: the cut on the calibrated hierarchy, as the solver prints it:
  the one-way rates a link delivered in calibration. The tables' "bound";
* ``duplex_estimate_s``: the same cut with each level's rates times its
  measured ``duplex_efficiency`` (:func:`duplex_hierarchy`). An estimate of
  what a program gets with data both ways at once, **not a bound**: measured
  times lie below it (docs/measurements/limit.md). Raw files written before
  issue 32 carry it as ``bound_s["calibrated_duplex"]``.

Why the two bounds bound measured time (:func:`beaten` checks every committed
measurement against them): each shaped link is a ``tbf`` on each end's egress,
so each direction of it passes at most ``burst + rate x T`` bytes in ``T``
seconds, counted with their headers, whatever the other direction carries (full
duplex). A level-``l`` unit must send the cut's bytes out, through its shaped
links, and the cut's rate (``G x R_l``) is at least those links' rate. So the
measured time is at least the configured cut less the burst's time
(``scripts/testbed/config.py`` ``tbf_args``: 2 ms of traffic) and the latency
floor (configured figures, not measured ones). The calibrated rates are what the
payload got, 0.942-0.964 of the tbf rate in the committed sessions, where TCP's
headers leave at most 1448/1514 = 0.956 of it to the payload: the calibrated cut
is the line's cut up to that fit (1.5%), the burst (2 ms, 2% of the smallest
cut measured, 100.7 ms) and its fitted latency floor (under 0.2 ms), within
:data:`ONE_WAY_TOLERANCE`. Nothing like this holds for the duplex estimate: a
full-duplex link gives each direction its whole rate, so the only duplex bound
is the one-way one.

The tables: per case the best measured program (smallest median), its median
and interval, the default's median, the simulator's prediction of the best,
the two bounds and the duplex estimate, and the best (with its interval) and
the default over the calibrated one-way bound. A second table lists each
testbed's configured and calibrated level figures; a third the verdict against
the target of issue 24 and 32 (:data:`TARGET`): every collective's best at
64 MiB on ``4x2-1gbit`` within 1.3x of the one-way bound, one row per session
(each a best-of-many: the fastest of the session's measured programs), with
the programs measured and the session's commit and start (raw files record
them since issue 47; ``checkout``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from p2synth.hierarchies.bound import lower_bound
from p2synth.hierarchies.cli import ArgumentParser, UsageError, size_argument, write_json_atomic, write_text_atomic
from p2synth.hierarchies.model import Hierarchy
from p2synth.hierarchies.placement import Placement
from p2synth.hierarchies.plan_file import PlanFileError, parse_plan_file
from p2synth.hierarchies.program import Program
from scripts.accuracy.suite import Testbed
from scripts.bench_alltoall import size_text
from scripts.campaign import campaign_input, now, testbed_session
from p2synth.runtime.provenance import checkout_state
from scripts.tables import console, markdown, ms, table

MiB = 1 << 20
TESTBEDS = {tb.name: tb for tb in (Testbed("4x2-1gbit", nodes=4, ranks_per_node=2, inter_node="1gbit"),
                                    Testbed("2x2x2-1gbit-400mbit", nodes=4, ranks_per_node=2, inter_node="1gbit",
                                            racks=2, inter_rack="400mbit"))}
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")
SIZES = (16 * MiB, 64 * MiB)
BOUNDS = ("configured", "calibrated")  # lower bounds of measured time (module docstring); "bound" alone: "calibrated"
ONE_WAY_TOLERANCE = 0.05  # the calibrated one-way bound's slack against measured time (module docstring)
TARGET = 1.3  # best / one-way bound, every collective at VERDICT_BYTES on VERDICT_TESTBED (issues 24 and 32)
VERDICT_TESTBED, VERDICT_BYTES = "4x2-1gbit", 64 * MiB


def _names(known: tuple[str, ...], what: str):
    def convert(text: str) -> tuple[str, ...]:
        names = tuple(n for n in text.split(",") if n)
        unknown = [n for n in names if n not in known]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"unknown {what} {unknown[0] if unknown else text!r} (choose from {', '.join(known)})")
        return names
    return convert


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; UsageError on a bad one."""
    p = ArgumentParser(prog="python -m scripts.bench_limit", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, help="measure (root, testbed) and write the raw JSON here, after every case")
    p.add_argument("--from-raw", type=Path, nargs="+", help="print the tables from these raw files (their testbeds in order), no testbed")
    p.add_argument("--markdown", type=Path, help="also write the tables as Markdown here")
    p.add_argument("--testbeds", type=_names(tuple(TESTBEDS), "testbed"), default=tuple(TESTBEDS),
                   help=f"comma-separated, of {', '.join(TESTBEDS)} (default both)")
    p.add_argument("--collectives", type=_names(COLLECTIVES, "collective"), default=COLLECTIVES, help="comma-separated (default the four)")
    p.add_argument("--sizes", type=lambda t: tuple(size_argument(s) for s in t.split(",")), default=SIZES, help="comma-separated (default 16M,64M)")
    p.add_argument("--top", type=int, default=5, help="the solver's best K programs measured beside the default (default 5)")
    p.add_argument("--repeats", type=int, default=9, help="interleaved rounds per program (default 9)")
    p.add_argument("--iters", type=int, default=3, help="timed runs per round below --large-from (default 3)")
    p.add_argument("--large-iters", type=int, default=1, help="timed runs per round from --large-from on (default 1)")
    p.add_argument("--large-from", type=size_argument, default=64 * MiB, help="(default 64M)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs per program before the rounds (default 1)")
    p.add_argument("--calibrate-bytes", type=size_argument, default=16 * MiB, help="calibration's largest message (default 16M)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="set in the jobs' environment, e.g. OMPI_MCA_coll_libnbc_iallreduce_algorithm=1 (repeatable; recorded)")
    p.add_argument("--note", default="", help="a short text recorded with each testbed and added to its name in the tables, "
                   "e.g. what changed in the code since another raw file of the same testbed")
    p.add_argument("--instance", default="lim", help="the testbed instance (default lim), apart from any other testbed")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/p2synth-limit"), help="specs, plans, tuned plans, hierarchies")
    args = p.parse_args(argv)
    if (args.out is None) == (args.from_raw is None):
        raise UsageError("give --out (to measure) or --from-raw (to print a measured table), not both")
    bad = [e for e in args.env if "=" not in e or not e.split("=", 1)[0]]
    if bad:
        raise UsageError(f"--env {bad[0]!r}: expected NAME=VALUE")
    args.env = dict(e.split("=", 1) for e in args.env)
    if args.top < 1 or args.repeats < 2 or args.iters < 1 or args.large_iters < 1 or args.warmup < 0:
        raise UsageError("--top and --iters/--large-iters must be at least 1, --repeats at least 2, --warmup at least 0")
    return args


# ---- bounds and records (pure) --------------------------------------------------------------------------------
def duplex_hierarchy(h: Hierarchy) -> Hierarchy:
    """`h` with every level that has a ``duplex_efficiency`` ``e`` running its bandwidth and uplink at
    ``max(e, 1/2)`` of them (and no duplex figure left): the duplex estimate's hierarchy, the rates each direction
    would keep while data crosses the level both ways at once *if* calibration's ``e`` held for every program.

    An estimate, not a bound: each collective measured here moves as many bytes into a unit as out of it, so a
    schedule either overlaps the two directions (each at ``e`` of the rate, as calibration saw it) or runs them one
    after the other (the whole rate, twice the time), the better being ``max(e, 1/2)``. But ``e`` is one
    calibration's figure (0.55-0.74 on one testbed), not a property of the full-duplex links, and programs get more
    (docs/measurements/limit.md), so the cut on this hierarchy is no floor of measured time.
    """
    levels = []
    for lv in h.levels:
        if lv.duplex_efficiency is None:
            levels.append(lv)
            continue
        k = max(lv.duplex_efficiency, 0.5)
        levels.append(lv.model_copy(update={
            "bandwidth_GBps": None if lv.bandwidth_GBps is None else lv.bandwidth_GBps * k,
            "uplink_GBps": None if lv.uplink_GBps is None else lv.uplink_GBps * k, "duplex_efficiency": None}))
    return Hierarchy.model_validate_json(h.model_copy(update={"name": f"{h.name}-duplex", "levels": tuple(levels)}).model_dump_json())


def _cut(plan: dict, h: Hierarchy) -> float:
    """The lower bound of ``hierarchies/bound.py`` in seconds on `h`, for the plan's first placement and request."""
    parsed = parse_plan_file(plan)
    placed = parsed.placement(0).placement
    request, nbytes = parsed.requests[0].request, parsed.requests[0].message_bytes
    return lower_bound(Placement(h, placed.axes, placed.matrix), request, nbytes).seconds


def bounds(plan: dict, nominal: Hierarchy, fitted: Hierarchy) -> dict[str, float]:
    """The request's :data:`BOUNDS` in seconds on the plan's first placement, at the plan's message size: the one-way
    cut at the configured (`nominal`) and at the calibrated (`fitted`) rates."""
    return {"configured": _cut(plan, nominal), "calibrated": _cut(plan, fitted)}


def duplex_estimate(plan: dict, fitted: Hierarchy) -> float:
    """The duplex estimate in seconds: the cut on :func:`duplex_hierarchy` of `fitted` (not a bound)."""
    return _cut(plan, duplex_hierarchy(fitted))


def duplex_estimate_of(case: dict) -> float:
    """A raw case's duplex estimate: ``duplex_estimate_s``, or ``bound_s["calibrated_duplex"]`` in the raw files
    written before issue 32 (the same figure under the name it had then)."""
    return case["duplex_estimate_s"] if "duplex_estimate_s" in case else case["bound_s"]["calibrated_duplex"]


def burst_s(nominal: Hierarchy) -> float:
    """The longest a shaped level's token bucket lets traffic through beyond its rate: its burst over its rate
    (``scripts/testbed/config.py`` ``tbf_args``; the levels with an uplink are the shaped ones)."""
    from scripts.testbed.config import tbf_args

    out = 0.0
    for lv in nominal.levels:
        if lv.uplink_GBps is not None:
            rate_bps = round(lv.uplink_GBps * 8e9)
            args = tbf_args(rate_bps)
            out = max(out, int(args[args.index("burst") + 1]) * 8 / rate_bps)
    return out


def beaten(raw: dict) -> list[str]:
    """Every measurement of `raw` (any round of any measured program, its median and its interval's low end) that
    lies below a bound beyond what the module docstring allows: under the configured bound less the burst's time
    (:func:`burst_s`) and the configured latency floor's most, or under ``1 - ONE_WAY_TOLERANCE`` of the calibrated
    one-way bound. Empty when every bound holds."""
    out = []
    for tb in raw["testbeds"]:
        if "nominal" not in tb:
            continue
        nominal = Hierarchy.model_validate(tb["nominal"])
        slack = burst_s(nominal) + math.fsum(lv.latency_us for lv in nominal.levels) * 1e-6
        for case in tb.get("cases", []):
            if "bound_s" not in case:
                continue
            b = case["bound_s"]
            floors = {"configured": b["configured"] - slack, "calibrated one-way": b["calibrated"] * (1 - ONE_WAY_TOLERANCE)}
            for p in case.get("programs", []):
                fastest = min([p["measured_s"], p["ci_s"][0], *p["repeats_s"]])
                out += [f"{label(tb)} {case['collective']} {size_text(case['message_bytes'])} {p['text']}: "
                        f"{ms(fastest)} ms under the {name} bound's floor {ms(floor)} ms"
                        for name, floor in floors.items() if fastest < floor]
    return out


def measured_programs(tuned: dict) -> list[dict]:
    """The measured programs of a tuned single-request plan (its first placement): the default first, each program
    once, with its text, predicted cost and measured figures."""
    parsed = parse_plan_file(tuned)
    placement = parsed.placement(0).placement
    body = tuned["placements"][0]
    key = lambda e: (json.dumps(e["steps"]), e.get("pipeline", 1))  # noqa: E731
    seen, out = set(), []
    for is_default, e in [(True, body["default"])] + [(False, e) for e in body["programs"] if "measured_s" in e]:
        if key(e) in seen:
            continue
        seen.add(key(e))
        out.append({"text": Program.from_json(e, placement).text(placement), "steps": e["steps"], "pipeline": e.get("pipeline", 1),
                    "default": is_default, "predicted_s": e.get("cost_s"), "measured_s": e["measured_s"],
                    "ci_s": e["measured_ci_s"], "repeats_s": e["measured_repeats_s"], "wrong": e["wrong"]})
    return out


def best_of(case: dict) -> dict | None:
    """The case's measured program with the smallest median among the exact ones (None if there is none)."""
    exact = [p for p in case.get("programs", []) if p["wrong"] == 0]
    return min(exact, key=lambda p: p["measured_s"]) if exact else None


def label(tb: dict) -> str:
    """A raw testbed entry's name in the tables, with the environment it was measured under (``OMPI_MCA_`` left out)
    and its note (``--note``)."""
    env = tb.get("env") or {}
    note = [tb["note"]] if tb.get("note") else []
    return " ".join([tb["testbed"]["name"], *(f"{k.removeprefix('OMPI_MCA_')}={v}" for k, v in env.items()), *note])


def rows(raw: dict) -> list[dict]:
    """One row per measured case: the best program and the default against the bounds and the duplex estimate
    (failed cases: ``error``). ``of_bound``: over the calibrated one-way bound, ``of_bound_ci`` its 95% interval."""
    out = []
    for tb in raw["testbeds"]:
        for case in tb.get("cases", []):
            row = {"testbed": label(tb), "testbed_name": tb["testbed"]["name"], "collective": case["collective"],
                   "bytes": case["message_bytes"], "session": session_text(tb)}
            best = best_of(case)
            if best is None:
                out.append({**row, "error": case.get("error", "no exact program")})
                continue
            default = next(p for p in case["programs"] if p["default"])
            b, estimate = case["bound_s"], duplex_estimate_of(case)
            bound, (lo, hi) = b["calibrated"], best["ci_s"]
            out.append({**row, "program": best["text"], "pick_is_default": best["default"], "best_s": best["measured_s"],
                        "programs": sum(p["wrong"] == 0 for p in case["programs"]),
                        "best_ci_s": best["ci_s"], "default_s": default["measured_s"], "predicted_s": best["predicted_s"],
                        "bound_configured_s": b["configured"], "bound_s": bound, "duplex_estimate_s": estimate,
                        "of_configured": best["measured_s"] / b["configured"],
                        "of_bound": best["measured_s"] / bound, "of_bound_ci": (lo / bound, hi / bound),
                        "default_of_bound": default["measured_s"] / bound,
                        "of_duplex_estimate": best["measured_s"] / estimate})
    return out


COLUMNS = ("testbed", "request", "size", "best measured program", "best ms [95%]", "default ms", "predicted ms",
           "bound configured ms", "bound calibrated one-way ms", "best / configured", "best / one-way [95%]",
           "default / one-way", "duplex estimate ms (not a bound)", "best / duplex estimate")


def _ratio(r: float) -> str:
    return f"{r:.2f}x"


def _ratio_ci(r: dict, digits: int = 2) -> str:
    lo, hi = r["of_bound_ci"]
    return f"{r['of_bound']:.{digits}f}x [{lo:.{digits}f}, {hi:.{digits}f}]"


def cells(rows_: list[dict]) -> list[tuple[str, ...]]:
    """The rows' cells under :data:`COLUMNS` (milliseconds; ratios as ``1.23x``): "one-way" is the calibrated one-way
    bound (as the solver prints it), "configured" the one at the tbf rates; the duplex estimate is no bound."""
    out = []
    for r in rows_:
        head = (r["testbed"], f"{r['collective']}(data)", size_text(r["bytes"]))
        if "error" in r:
            out.append((*head, f"failed: {r['error'].splitlines()[0][:60]}", *("-",) * (len(COLUMNS) - 4)))
            continue
        lo, hi = r["best_ci_s"]
        out.append((*head, ("default " if r["pick_is_default"] else "") + r["program"],
                    f"{ms(r['best_s'])} [{ms(lo)}, {ms(hi)}]", ms(r["default_s"]), ms(r["predicted_s"]),
                    ms(r["bound_configured_s"]), ms(r["bound_s"]), _ratio(r["of_configured"]), _ratio_ci(r),
                    _ratio(r["default_of_bound"]), ms(r["duplex_estimate_s"]), _ratio(r["of_duplex_estimate"])))
    return out


VERDICT_COLUMNS = ("request", "session", "programs measured", "best of them (a best-of-many)", "best ms [95%]",
                   "bound calibrated one-way ms", "best / one-way [95%]", "best / configured", f"within {TARGET}x",
                   "commit, measured")


def within(r: dict) -> str:
    """Whether a row's best is within :data:`TARGET` of the one-way bound: ``yes`` (its whole 95% interval),
    ``median only`` (the median, not the interval's high end) or ``no`` (not the median)."""
    if r["of_bound"] > TARGET:
        return "no"
    return "yes" if r["of_bound_ci"][1] <= TARGET else "median only"


def session_text(tb: dict) -> str:
    """Where and when a raw testbed entry was measured, as the target's table says it: the commit (12 digits, "dirty"
    where the checkout was) and the start, or that the raw file recorded no commit (those before issue 47)."""
    doc = tb.get("document") or {}
    checkout = doc.get("checkout") or {}
    commit = checkout.get("commit") or doc.get("commit")
    started = (doc.get("started") or "")[:16].replace("T", " ")
    said = f"{commit[:12]}{' (dirty)' if checkout.get('dirty') else ''}" if commit else "no commit recorded"
    return ", ".join(x for x in (said, started) if x)


def verdict_cells(rows_: list[dict]) -> list[tuple[str, ...]]:
    """The target's table: every session's row of :data:`VERDICT_TESTBED` at :data:`VERDICT_BYTES`, by collective
    (:data:`COLLECTIVES` order), then in the raw files' order, the ratio to three places (the target sits at 1.3);
    a failed case says so. Each row's best is the fastest of that session's measured programs (the default and the
    solver's top K), a best-of-many: its median is biased low by the choice; each session's figure is its own row."""
    chosen = [r for r in rows_ if r["testbed_name"] == VERDICT_TESTBED and r["bytes"] == VERDICT_BYTES]
    chosen.sort(key=lambda r: COLLECTIVES.index(r["collective"]) if r["collective"] in COLLECTIVES else len(COLLECTIVES))
    out = []
    for r in chosen:
        if "error" in r:
            out.append((r["collective"], r["testbed"], "-", "failed", *("-",) * (len(VERDICT_COLUMNS) - 6), "no",
                        r["session"]))
            continue
        lo, hi = r["best_ci_s"]
        out.append((r["collective"], r["testbed"], str(r["programs"]), ("default " if r["pick_is_default"] else "") + r["program"],
                    f"{ms(r['best_s'])} [{ms(lo)}, {ms(hi)}]", ms(r["bound_s"]), _ratio_ci(r, 3), _ratio(r["of_configured"]),
                    within(r), r["session"]))
    return out


RATE_COLUMNS = ("testbed", "level", "configured GB/s", "calibrated GB/s", "calibrated uplink GB/s", "duplex efficiency",
                "calibrated latency us", "calibrated / configured")


def rate_cells(raw: dict) -> list[tuple[str, ...]]:
    """Per testbed and level with two or more children: the configured and the calibrated figures."""
    out = []
    for tb in raw["testbeds"]:
        if "hierarchy" not in tb:
            continue
        nominal, fitted = Hierarchy.model_validate(tb["nominal"]), Hierarchy.model_validate(tb["hierarchy"])
        for n, f in zip(nominal.levels, fitted.levels):
            if n.count < 2:
                continue
            configured = n.uplink_GBps if n.uplink_GBps is not None else n.bandwidth_GBps
            rate = f.uplink_GBps if f.uplink_GBps is not None else f.bandwidth_GBps
            shaped = n.uplink_GBps is not None
            out.append((label(tb), n.name, f"{configured:.4g}" + ("" if shaped else " (guess)"), f"{f.bandwidth_GBps:.4g}",
                        "-" if f.uplink_GBps is None else f"{f.uplink_GBps:.4g}",
                        "-" if f.duplex_efficiency is None else f"{f.duplex_efficiency:.3g}", f"{f.latency_us:.3g}",
                        f"{rate / configured:.3f}" if shaped else "-"))
    return out


# ---- measuring (root, testbed) --------------------------------------------------------------------------------
def spec_for(h: Hierarchy, collective: str, nbytes: int) -> dict:
    """The solver spec of one case: `collective` over one axis ``data`` of every device, simulator cost model."""
    return {"hierarchy": h.model_dump(mode="json", exclude_none=True), "axes": [{"name": "data", "size": h.num_devices}],
            "request": {"axes": ["data"], "collective": collective}, "message_bytes": nbytes, "cost_model": "simulator"}


def measure_case(args: argparse.Namespace, tb: Testbed, nominal: Hierarchy, fitted: Hierarchy, collective: str,
                 nbytes: int, log) -> dict:
    """Solve, tune and record one case (``error`` set, with the output's tail, when solving or tuning failed)."""
    from scripts.accuracy.measure import testbed

    tag = f"{tb.name}-{collective}-{size_text(nbytes)}"
    iters = args.large_iters if nbytes >= args.large_from else args.iters
    case: dict = {"collective": collective, "message_bytes": nbytes, "iters": iters, "warmup": args.warmup,
                  "repeats": args.repeats, "top": args.top}
    t0 = time.monotonic()
    spec, plan, tuned = (args.workdir / f"{kind}-{tag}.json" for kind in ("spec", "plan", "tuned"))
    write_json_atomic(spec_for(fitted, collective, nbytes), spec)
    r = subprocess.run([sys.executable, "-m", "solver.run", str(spec), "--out", str(plan), "--top", str(args.top),
                        "--quiet", "--jobs", "1"], capture_output=True, text=True, timeout=900, check=False)
    if r.returncode != 0:
        return {**case, "error": f"solver exit {r.returncode}: {(r.stdout + r.stderr)[-1500:]}"}
    plan_doc = json.loads(plan.read_text())
    case["program_count"] = plan_doc["placements"][0]["program_count"]
    case["bound_s"] = bounds(plan_doc, nominal, fitted)
    case["duplex_estimate_s"] = duplex_estimate(plan_doc, fitted)
    tuned.unlink(missing_ok=True)
    r = testbed("run", "--timeout", "3000", "--", "python", "-m", "runtime.tune", str(plan), "--out", str(tuned),
                "--top", str(args.top), "--placements", "1", "--no-refit", "--warmup", str(args.warmup), "--iters", str(iters),
                "--repeats", str(args.repeats), timeout=3060, check=False, instance=args.instance)
    if r.returncode != 0 or not tuned.exists():
        return {**case, "error": f"tune exit {r.returncode}: {(r.stdout + r.stderr)[-1500:]}"}
    case["programs"] = measured_programs(json.loads(tuned.read_text()))
    case["wall_s"] = round(time.monotonic() - t0, 1)
    best = best_of(case)
    log(f"[{tb.name}] {collective} {size_text(nbytes)}: best {best['text'] if best else '-'} "
        f"{ms(best and best['measured_s'])} ms, one-way bound {ms(case['bound_s']['calibrated'])} ms, {case['wall_s']} s")
    return case


def measure(args: argparse.Namespace, log) -> dict:
    """Every testbed and case of the command line; the raw document (written to ``--out`` after every case)."""
    args.workdir.mkdir(parents=True, exist_ok=True)
    os.environ.update(args.env)  # every job (calibration, tuning) inherits it through scripts.testbed run
    raw = {"started": now(), "command": sys.argv, "checkout": checkout_state(),
           "settings": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items()
                        if k in ("collectives", "sizes", "top", "repeats", "iters", "large_iters", "large_from", "warmup",
                                 "calibrate_bytes", "env")},
           "testbeds": []}
    for name in args.testbeds:
        tb = TESTBEDS[name]
        entry: dict = {"testbed": tb.__dict__, "env": args.env, **({"note": args.note} if args.note else {}), "cases": []}
        raw["testbeds"].append(entry)
        with testbed_session(tb, entry, raw, args.out, args.workdir, args.calibrate_bytes, args.instance, log) as fitted:
            nominal = Hierarchy.model_validate(entry["nominal"]) if fitted is not None else None
            for nbytes in args.sizes if fitted is not None else ():
                for collective in args.collectives:
                    entry["cases"].append(measure_case(args, tb, nominal, fitted, collective, nbytes, log))
                    write_json_atomic(raw, args.out)
    raw["finished"] = now()
    write_json_atomic(raw, args.out)
    return raw


def main(argv: list[str] | None = None) -> int:
    """Measure (root, testbed) or read raw measurements, then print the tables; 2 on bad usage."""
    got = campaign_input(argv, parse_args, rows, measure, (UsageError, PlanFileError))
    if got is None:
        return 2
    args, raw = got
    found = cells(rows(raw))
    rates = rate_cells(raw)
    verdict = verdict_cells(rows(raw))
    out = console()
    out.print(table(COLUMNS, found, title="best measured program against the lower bound", text_columns=4))
    out.print(table(RATE_COLUMNS, rates, title="configured and calibrated level figures", text_columns=2))
    out.print(table(VERDICT_COLUMNS, verdict, title=f"the target: best within {TARGET}x of the one-way bound, "
                    f"{size_text(VERDICT_BYTES)} on {VERDICT_TESTBED}", text_columns=3))
    for line in beaten(raw):
        print(f"below a bound: {line}", file=sys.stderr)
    if args.markdown is not None:
        write_text_atomic("\n\n".join(markdown(c, r) for c, r in ((COLUMNS, found), (RATE_COLUMNS, rates),
                                                                  (VERDICT_COLUMNS, verdict))) + "\n", args.markdown)
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
