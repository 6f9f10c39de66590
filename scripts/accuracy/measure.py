"""Measure a suite on the emulated testbed: up, calibrate, tune every combo's sampled programs, down.

Per combo the programs to measure come from programs.sample_programs (no cost
model involved); they go into a workload plan with one request per size and run
under ``python -m runtime.tune --top all-of-them``: every program checked exactly,
all of a size timed in interleaved rounds, a median and a 95% interval each
(runtime/measure.py, runtime/stats.py: the tuner's own code). Writes the raw
JSON (everything the report needs) after every combo, so an interrupted run
keeps what it measured.

A ``validate`` suite re-measures each tuned request in a separate job
(``python -m runtime.validate``: new processes, new rounds in the reverse
order): the tuner's pick, the default and the runner-up, recorded under the
combo's ``validation``. A ``frozen`` suite refuses to start with uncommitted
changes to the model's code, records the commit (``model``), and records each
measured program's predictions (``predicted_at_start_s``, both models, on the
calibrated hierarchy) before the program's first timed run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from p2synth.hierarchies.model import Hierarchy
from p2synth.runtime.provenance import checkout_state
from p2synth.solver.models import CostModelKind
from p2synth.hierarchies.program import default_program
from scripts.accuracy.programs import (
    all_programs,
    make_request,
    predict,
    pipelined_variants,
    placements,
    requests,
    sample_programs,
)
from scripts.accuracy.suite import Suite, Testbed

INSTANCE = "acc"
MODEL_CODE = ("solver", "hierarchies", "encodings", "scripts/accuracy/fit.py", "scripts/accuracy/programs.py")  # the code predictions come from
REPO = Path(__file__).resolve().parents[2]


def _env(instance: str | None = None) -> dict:
    env = dict(os.environ)
    env["P2S_TESTBED_INSTANCE"] = instance or env.get("P2S_ACCURACY_INSTANCE", INSTANCE)
    return env


def testbed(*args: str, timeout: float | None = None, check: bool = True, instance: str | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m scripts.testbed ARGS`` on testbed `instance` (default: the accuracy runs' own, ``acc`` or
    ``P2S_ACCURACY_INSTANCE``); RuntimeError with its output's tail when it fails and `check`."""
    cmd = [sys.executable, "-m", "scripts.testbed", *args]
    r = subprocess.run(cmd, check=False, env=_env(instance), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


def measure_suite(suite: Suite, workdir: Path, raw_path: Path, log=print, only: tuple[str, ...] = (),
                  resume: dict | None = None) -> dict:
    """Run the whole suite (or only its testbeds named in `only`); returns (and keeps writing) the raw document.

    `resume`: an earlier raw document of the same suite. Its testbeds not
    measured now are kept as they are; a testbed measured now keeps its
    combos and measures only those missing (or failed) there (:func:`measure_testbed`).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    raw = {"suite": suite.to_json(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "checkout": checkout_state(), "testbeds": []}  # the commit, frozen or not (issue 47)
    if suite.frozen:
        raw["model"] = model_freeze()
    if resume is not None and not measured_with(resume, suite):
        raise ValueError(f"the raw document to resume was measured with another suite than {suite.name}")
    earlier = {tb["testbed"]["name"]: tb for tb in (resume or {}).get("testbeds", [])}
    for tb in suite.testbeds:
        if only and tb.name not in only:
            if tb.name in earlier:
                raw["testbeds"].append(earlier[tb.name])
            continue
        measure_testbed(suite, tb, workdir, raw, raw_path, log, earlier.get(tb.name))
        _write(raw, raw_path)
    raw["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    _write(raw, raw_path)
    return raw


def _git(*args: str) -> str:
    r = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {r.stderr.strip() or 'failed'} (a frozen suite runs from a git checkout)")
    return r.stdout.strip()


def model_freeze() -> dict:
    """The commit the model comes from; RuntimeError when the model's code (:data:`MODEL_CODE`) has uncommitted
    changes, since then no commit holds the model that predicted."""
    dirty = _git("status", "--porcelain", "--", *MODEL_CODE)
    if dirty:
        raise RuntimeError(f"a frozen suite needs the model committed; uncommitted changes:\n{dirty}")
    return {"commit": _git("rev-parse", "HEAD"), "commit_time": _git("show", "-s", "--format=%cI", "HEAD"),
            "frozen_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "rule": "every program's predictions (predicted_at_start_s) were computed from this commit's code on the "
                    "calibrated hierarchy before the program's first timed run; nothing in the model changed after"}


def measured_with(raw: dict, suite: Suite) -> bool:
    """Whether the raw document `raw` was measured with `suite` (its suite reads back equal; a field added to Suite
    since takes its default, which is what the older code measured with)."""
    try:
        return Suite.from_json(raw["suite"]) == suite
    except (AttributeError, KeyError, TypeError, ValueError):
        return False


def _write(raw: dict, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(raw, indent=1) + "\n")
    tmp.replace(path)


def measure_testbed(suite: Suite, tb: Testbed, workdir: Path, raw: dict, raw_path: Path, log,
                    earlier: dict | None = None) -> dict:
    """Bring the testbed up, calibrate, measure every combo, bring it down; the testbed's raw entry.

    With `earlier` (this testbed's entry of an earlier run) the entry starts
    as that one: its combos are kept and not measured again (failed ones are),
    its calibrated hierarchy stays the one the report fits from, and this
    run's calibration is recorded under ``resumed`` beside the combos it
    measured, so the two calibrations can be compared.
    """
    testbed("down", check=False)
    entry: dict = json.loads(json.dumps(earlier)) if earlier else {"testbed": tb.__dict__, "combos": []}
    entry["combos"] = [c for c in entry["combos"] if "error" not in c]
    done = {c["index"] for c in entry["combos"]}
    raw["testbeds"].append(entry)  # visible in partial writes
    try:
        # calibrate up to 4x the largest size measured here (at least 4 MiB), at most the suite's bound
        cal_bytes = min(suite.calibrate_max_bytes, max(4 << 20, 4 * max(suite.sizes_of(tb))))
        h, record = up_and_calibrate(tb, workdir, cal_bytes, log)
        if earlier:
            run = {**record, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "combos": []}
            entry.setdefault("resumed", []).append(run)
            h = Hierarchy.model_validate(entry["hierarchy"])
        else:
            entry.update(record)
        index = 0
        for axes in suite.axes_of(tb):
            for pl in placements(h, axes):
                for names, col in requests(axes, suite.collectives):
                    req = make_request(pl, names, col)
                    if not req.reduced_cells(pl):
                        continue
                    index += 1
                    if index - 1 in done:
                        continue
                    combo = _measure_combo(suite, tb, workdir, h, pl, req, names, col, index - 1, log)
                    if combo is None:
                        continue
                    entry["combos"].append(combo)
                    if earlier:
                        entry["resumed"][-1]["combos"].append(combo["index"])
                    _write(raw, raw_path)
        entry["combos"].sort(key=lambda c: c["index"])
    finally:
        testbed("down", check=False)
    return entry


def up_and_calibrate(tb: Testbed, workdir: Path, cal_bytes: int, log=print, instance: str | None = None) -> tuple[Hierarchy, dict]:
    """Bring testbed `tb` up (instance `instance`) and calibrate it with messages up to `cal_bytes`: the fitted
    hierarchy, and its raw record (``hierarchy``, the ``nominal`` one ``up`` wrote, the ``calibration`` summary).

    The nominal and fitted hierarchies stay in `workdir` (``NAME.json``, ``NAME-fitted.json``); the caller brings
    the testbed down, also when this raises."""
    nominal = workdir / f"{tb.name}.json"
    fitted = workdir / f"{tb.name}-fitted.json"
    up = ["up", "--nodes", str(tb.nodes), "--ranks-per-node", str(tb.ranks_per_node), "--inter-node", tb.inter_node,
          "--hierarchy-out", str(nominal)]
    if tb.racks > 1:
        up += ["--racks", str(tb.racks), "--inter-rack", str(tb.inter_rack)]
    testbed(*up, timeout=120, instance=instance)
    log(f"[{tb.name}] up; calibrating")
    testbed("run", "--timeout", "900", "--", "python", "-m", "scripts.calibrate", "--hierarchy", str(nominal),
            "--out", str(fitted), "--max-bytes", str(cal_bytes), timeout=930, instance=instance)
    h = Hierarchy.model_validate_json(fitted.read_text())
    cal_raw = fitted.with_suffix(".calibration.json")
    record = {"hierarchy": h.model_dump(mode="json", exclude_none=True), "nominal": json.loads(nominal.read_text())}
    if cal_raw.exists():
        record["calibration"] = calibration_summary(json.loads(cal_raw.read_text()))
    log(f"[{tb.name}] fitted: {h.model_dump_json(exclude_none=True)}")
    return h, record


def calibration_summary(cal: dict) -> dict:
    """The calibration sidecar without its per-sample lists (kept small)."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("samples", "samples_s")}
        if isinstance(x, list) and len(x) > 50:
            return x[:0]
        return [strip(v) for v in x] if isinstance(x, list) else x
    return strip(cal)


def size_groups(suite: Suite, sampled: int, sizes: tuple[int, ...] | None = None) -> list[tuple[tuple[int, ...], int, int]]:
    """The tuner runs of one combo: (sizes, programs measured besides the default, iters per repeat) per run.

    `sizes`: the testbed's sizes (default: the suite's)."""
    groups: dict[tuple[int, int], list[int]] = {}
    for size in suite.sizes if sizes is None else sizes:
        count = suite.measured_count(size, sampled)
        iters = suite.iters_small if size < suite.small_below else suite.iters
        groups.setdefault((count, iters), []).append(size)
    return [(tuple(sizes), count, iters) for (count, iters), sizes in groups.items()]


def combo_plan(h: Hierarchy, pl, names, col, default, programs, sizes) -> dict:
    """A workload plan whose requests are the combo's request at each size, each listing `programs` (model-free order)."""
    body = {"default": default.to_json(pl), "programs": [p.to_json(pl) for p in programs]}
    return {
        "hierarchy": h.model_dump(mode="json", exclude_none=True),
        "axes": [{"name": a.name, "size": a.size} for a in pl.axes],
        "workload": [{"name": f"s{size}", "axes": list(names), "collective": col, "message_bytes": size, "count": 1} for size in sizes],
        "placements": [{"matrix": [list(r) for r in pl.matrix], "requests": [body for _ in sizes]}],
    }


def tuned_results(tuned: dict, iters: int) -> list[dict]:
    """The raw result entries of a tuned combo plan: one per (program, size), the default flagged."""
    out = []
    for w, body in zip(tuned["workload"], tuned["placements"][0]["requests"]):
        entries = [(True, body["default"])]
        entries += [(False, e) for e in body["programs"]
                    if "measured_s" in e and (e["steps"], e.get("pipeline", 1)) != (body["default"]["steps"], 1)]
        out += [{"program": {"steps": e["steps"], "pipeline": e.get("pipeline", 1)}, "default": is_default, "nbytes": w["message_bytes"], "time_s": e["measured_s"],
                 "ci_s": e["measured_ci_s"], "repeats_s": e["measured_repeats_s"], "wrong": e["wrong"], "iters": iters}
                for is_default, e in entries]
    return out


def frozen_predictions(pl, req, programs, sizes) -> dict[tuple[str, int], dict]:
    """Each program's predicted seconds at each size under both models on the calibrated placement `pl`, keyed by
    (its steps as JSON, its size); what a frozen suite records before measuring."""
    out = {}
    for program in programs:
        key = json.dumps(program.to_json(pl))
        for size in sizes:
            out[(key, size)] = {kind: predict(pl, req, program, size, kind) for kind in (CostModelKind.SIMULATOR.value, CostModelKind.ALPHA_BETA.value)}
    return out


def validation_results(validated: dict) -> list[dict]:
    """The raw validation entries of a validated combo plan (runtime.validate --out): one per size."""
    out = []
    for w, body in zip(validated["workload"], validated["placements"][0]["requests"]):
        if "validation" not in body:
            continue
        v = body["validation"]
        picked = body["picked"]
        out.append({"nbytes": w["message_bytes"], "pick": {"steps": picked["steps"], "pipeline": picked.get("pipeline", 1)},
                    "pick_is_default": picked["is_default"], "in_sample_speedup": picked["speedup_over_default"],
                    "programs": [{k: e[k] for k in ("role", "program", "measured_s", "measured_ci_s", "measured_repeats_s", "wrong")}
                                 for e in v["programs"]],
                    **{k: v[k] for k in ("pick_over_default", "loss_5pct", "regret", "confirmed")}})
    return out


def _measure_combo(suite, tb, workdir, h, pl, req, names, col, index, log) -> dict | None:
    programs = all_programs(pl, req, suite.max_steps)
    if len(programs) <= suite.only_over:
        return None
    default = default_program(pl, req)
    chosen = sample_programs(programs, default, limit=suite.limit, sample=suite.sample, seed=suite.seed + index)
    pipelined = pipelined_variants(chosen, suite.pieces, suite.seed + index)
    tag = f"{tb.name}-{index:03d}"
    combo = {"index": index, "axes": [[a.name, a.size] for a in pl.axes], "matrix": [list(r) for r in pl.matrix],
             "request": {"axes": list(names), "collective": col}, "program_count": len(programs),
             "measured_programs": len(chosen) + 1 + len(pipelined), "sampled": len(programs) - 1 > suite.limit, "results": []}
    t0 = time.monotonic()
    for part, (sizes, count, iters) in enumerate(size_groups(suite, len(chosen), suite.sizes_of(tb))):
        plan_path = workdir / f"plan-{tag}-{part}.json"
        measured = chosen[:count] + pipelined_variants(chosen[:count], suite.pieces, suite.seed + index)
        plan = combo_plan(h, pl, names, col, default, measured, sizes)
        if suite.frozen:
            predicted = frozen_predictions(pl, req, [default, *measured], sizes)
        plan_path.write_text(json.dumps(plan))
        tuned_path = workdir / f"tuned-{tag}-{part}.json"
        tuned_path.unlink(missing_ok=True)
        r = testbed("run", "--timeout", "3000", "--", "python", "-m", "runtime.tune", str(plan_path), "--out", str(tuned_path),
                     "--top", str(len(measured)), "--no-refit", "--warmup", str(suite.warmup), "--iters", str(iters),
                    "--repeats", str(suite.repeats), timeout=3060, check=False)
        if r.returncode != 0 or not tuned_path.exists():
            combo["error"] = f"exit {r.returncode}: " + (r.stdout[-1500:] + r.stderr[-1500:])
            log(f"[{tb.name}] combo {index} {pl.describe()} {col}({','.join(names)}): FAILED exit {r.returncode}")
            continue
        results = tuned_results(json.loads(tuned_path.read_text()), iters)
        if suite.frozen:
            for r in results:
                r["predicted_at_start_s"] = predicted[(json.dumps(r["program"]), r["nbytes"])]
        combo["results"] += results
        if suite.validate:
            combo.setdefault("validation", []).extend(_validate(tuned_path, suite, tb, iters, combo, log))
    wall = time.monotonic() - t0
    combo["wall_s"] = round(wall, 2)
    variants = f" (+{len(pipelined)} pipelined)" if pipelined else ""
    log(f"[{tb.name}] combo {index} {pl.describe()} {col}({','.join(names)}): {len(chosen) + 1}/{len(programs)} programs{variants}, {wall:.1f} s")
    return combo


def _validate(tuned_path: Path, suite: Suite, tb: Testbed, iters: int, combo: dict, log) -> list[dict]:
    """Re-measure a tuned combo plan's picks in a separate job (runtime.validate); its raw validation entries."""
    out_path = tuned_path.with_name(tuned_path.name.replace("tuned-", "validated-"))
    out_path.unlink(missing_ok=True)
    r = testbed("run", "--timeout", "3000", "--", "python", "-m", "runtime.validate", str(tuned_path), "--out", str(out_path),
                 "--warmup", str(suite.warmup), "--iters", str(iters), "--repeats", str(suite.repeats), timeout=3060, check=False)
    if r.returncode != 0 or not out_path.exists():
        combo.setdefault("validation_errors", []).append(f"exit {r.returncode}: " + (r.stdout[-1500:] + r.stderr[-1500:]))
        log(f"[{tb.name}] combo {combo['index']}: validation FAILED exit {r.returncode}")
        return []
    return validation_results(json.loads(out_path.read_text()))
