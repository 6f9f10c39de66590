"""Measure a suite on the emulated testbed: up, calibrate, bench every combo's programs, down.

Writes the raw JSON (everything the report needs) after every combo, so an
interrupted run keeps what it measured.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from hierarchies.model import Hierarchy
from hierarchies.program import default_program
from scripts.accuracy.programs import (
    all_programs,
    choose,
    make_request,
    placements,
    requests,
)
from scripts.accuracy.suite import Suite, Testbed

INSTANCE = "acc"


def _env() -> dict:
    env = dict(os.environ)
    env["P2S_TESTBED_INSTANCE"] = env.get("P2S_ACCURACY_INSTANCE", INSTANCE)
    return env


def _testbed(*args: str, timeout: float | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "scripts.testbed", *args]
    r = subprocess.run(cmd, check=False, env=_env(), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


def _bytes_spec(sizes: tuple[int, ...]) -> str:
    if len(sizes) == 1:
        return str(sizes[0])
    f = sizes[1] // sizes[0]
    assert all(b == a * f for a, b in itertools.pairwise(sizes)), "sizes must be geometric"
    return f"{sizes[0]}:{sizes[-1]}:{f}"


def measure_suite(suite: Suite, workdir: Path, raw_path: Path, log=print) -> dict:
    """Run the whole suite; returns (and keeps writing) the raw document."""
    workdir.mkdir(parents=True, exist_ok=True)
    raw = {"suite": suite.to_json(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "testbeds": []}
    for tb in suite.testbeds:
        measure_testbed(suite, tb, workdir, raw, raw_path, log)
        _write(raw, raw_path)
    raw["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    _write(raw, raw_path)
    return raw


def _write(raw: dict, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(raw, indent=1) + "\n")
    tmp.replace(path)


def measure_testbed(suite: Suite, tb: Testbed, workdir: Path, raw: dict, raw_path: Path, log) -> dict:
    nominal = workdir / f"{tb.name}.json"
    fitted = workdir / f"{tb.name}-fitted.json"
    up = ["up", "--nodes", str(tb.nodes), "--ranks-per-node", str(tb.ranks_per_node), "--inter-node", tb.inter_node,
          "--hierarchy-out", str(nominal)]
    if tb.racks > 1:
        up += ["--racks", str(tb.racks), "--inter-rack", str(tb.inter_rack)]
    _testbed("down", check=False)
    entry: dict = {"testbed": tb.__dict__, "combos": []}
    raw["testbeds"].append(entry)  # visible in partial writes
    try:
        _testbed(*up, timeout=120)
        log(f"[{tb.name}] up; calibrating")
        _testbed("run", "--timeout", "300", "--", "python", "-m", "scripts.calibrate", "--hierarchy", str(nominal),
                 "--out", str(fitted), "--max-bytes", str(suite.calibrate_max_bytes), timeout=330)
        h = Hierarchy.model_validate_json(fitted.read_text())
        entry["hierarchy"] = h.model_dump(mode="json", exclude_none=True)
        entry["nominal"] = json.loads(nominal.read_text())
        cal_raw = fitted.with_suffix(".calibration.json")
        if cal_raw.exists():
            entry["calibration"] = _calibration_summary(json.loads(cal_raw.read_text()))
        log(f"[{tb.name}] fitted: {h.model_dump_json(exclude_none=True)}")
        index = 0
        for axes in suite.axes_sets:
            for pl in placements(h, axes):
                for names, col in requests(axes, suite.collectives):
                    req = make_request(pl, names, col)
                    if not req.reduced_cells(pl):
                        continue
                    combo = _measure_combo(suite, tb, workdir, h, pl, req, names, col, index, log)
                    index += 1
                    if combo is None:
                        continue
                    entry["combos"].append(combo)
                    _write(raw, raw_path)
    finally:
        _testbed("down", check=False)
    return entry


def _calibration_summary(cal: dict) -> dict:
    """The calibration sidecar without its per-sample lists (kept small)."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("samples", "samples_s")}
        if isinstance(x, list) and len(x) > 50:
            return x[:0]
        return [strip(v) for v in x] if isinstance(x, list) else x
    return strip(cal)


def _measure_combo(suite, tb, workdir, h, pl, req, names, col, index, log) -> dict | None:
    programs = all_programs(pl, req, suite.max_steps)
    if len(programs) <= suite.only_over:
        return None
    chosen = choose(pl, req, programs, suite.sizes, top_sim=suite.top_sim, top_ab=suite.top_ab,
                    sample=suite.sample, cap=suite.cap, seed=suite.seed + index)
    default = default_program(pl, req)
    plan = {
        "hierarchy": h.model_dump(mode="json", exclude_none=True),
        "axes": [{"name": a.name, "size": a.size} for a in pl.axes],
        "request": {"axes": list(names), "collective": col},
        "message_bytes": suite.sizes[0], "max_steps": suite.max_steps, "cost_model": "simulator",
        "placements": [{"matrix": [list(r) for r in pl.matrix],
                        "default": default.to_json(pl),
                        "programs": [p.to_json(pl) for p in chosen]}],
    }
    tag = f"{tb.name}-{index:03d}"
    plan_path = workdir / f"plan-{tag}.json"
    plan_path.write_text(json.dumps(plan))
    combo = {"index": index, "axes": [[a.name, a.size] for a in pl.axes], "matrix": [list(r) for r in pl.matrix],
             "request": {"axes": list(names), "collective": col}, "program_count": len(programs),
             "measured_programs": len(chosen) + 1, "results": []}
    t0 = time.monotonic()
    small = tuple(s for s in suite.sizes if s < suite.small_below)
    large = tuple(s for s in suite.sizes if s >= suite.small_below)
    for part, (sizes, iters) in enumerate(((small, suite.iters_small), (large, suite.iters))):
        if not sizes:
            continue
        bench_path = workdir / f"bench-{tag}-{part}.json"
        bench_path.unlink(missing_ok=True)
        r = _testbed("run", "--timeout", "600", "--", "python", "-m", "runtime.bench", str(plan_path), "--placement", "0",
                     "--top", "all", "--bytes", _bytes_spec(sizes), "--warmup", str(suite.warmup),
                     "--iters", str(iters), "--repeats", str(suite.repeats), "--out", str(bench_path),
                     timeout=660, check=False)
        if r.returncode != 0 or not bench_path.exists():
            combo["error"] = f"exit {r.returncode}: " + (r.stdout[-1500:] + r.stderr[-1500:])
            log(f"[{tb.name}] combo {index} {pl.describe()} {col}({','.join(names)}): FAILED exit {r.returncode}")
            continue
        bench = json.loads(bench_path.read_text())
        combo["results"] += [{"program": x["program"], "default": x["is_default"], "nbytes": x["bytes"],
                              "time_s": x["time_s"], "repeats_s": x["repeats_s"], "transposes": x["transposes"],
                              "wrong": x["wrong"], "iters": iters} for x in bench["results"]]
    wall = time.monotonic() - t0
    combo["wall_s"] = round(wall, 2)
    log(f"[{tb.name}] combo {index} {pl.describe()} {col}({','.join(names)}): {len(chosen) + 1}/{len(programs)} programs, {wall:.1f} s")
    return combo
