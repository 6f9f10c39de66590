"""The step-time model against real steps on the emulated clusters (issue 25): every placement of each job.

    sudo env PATH="$PATH" python -m scripts.bench_step --out step.raw.json --markdown step.md --summary step-summary.json
    python -m scripts.bench_step --from-raw docs/measurements/step/step.raw.json     # the tables again, no testbed
    # the third campaign (issue 32, item 3): 16 ranks, the model frozen first
    sudo env PATH="$PATH" python -m scripts.bench_step --frozen --testbeds 2x2x4-1gbit-400mbit --out step16.raw.json \
        --jobs dp4-pp2-tp2,dp2-pp2-tp4,dp2-pp4-tp2
    # the fourth: other jobs on another 16-rank testbed, the model frozen after the third campaign's change
    sudo env PATH="$PATH" python -m scripts.bench_step --frozen --testbeds 2x4x2-1gbit-400mbit --out step16b.raw.json \
        --jobs dp4-pp2-tp2-t128k,dp2-pp2-tp4-t128k,dp2-pp4-tp2-t128k
    # post hoc: the recorded measurements against this checkout's predictions (each job planned again)
    python -m scripts.bench_step --from-raw docs/measurements/step/step16.raw.json --repredict
    # post hoc: the programs that ran, priced on another hierarchy of the testbed's shape (other latencies, say)
    python -m scripts.bench_step --from-raw docs/measurements/step/step16b.raw.json \
        --reprice docs/measurements/step/reprice/2x4x2-latency-every-pair.json

``--frozen`` refuses to start unless the model's code is committed and records
its commit (``model``); each job's plan, with every placement's prediction, is
written to the raw file (``planned_at``) before its first step runs
(``started_at``). Each testbed runs the jobs of its rank count.

Per testbed (``--testbeds``: by default 4 nodes x 2 ranks on 1 Gbit/s links and 2 racks x 2
nodes x 2 ranks with 400 Mbit/s between racks; 2 racks x 2 nodes x 4 ranks, or 2 racks x 4 nodes x 2 ranks,
for 16), on its own instance
(``--instance``, default ``step``): bring it up and calibrate it
(``scripts/calibrate.py``); then for every job of :data:`JOBS` (fixed here,
before any measurement; those of the testbed's rank count) plan every placement
with the calibrated hierarchy and the simulator cost model (``solver.run``:
each request's proved-best program, and the step-time model's prediction),
and run each placement's step for real with ``runtime.step`` (its programs
checked exactly first; compute as timed sleeps; ``--rounds`` interleaved
rounds of the plan's programs and of the defaults). The testbed goes down in a
``finally``; the raw JSON is written after every placement.

Figures per job and per testbed (:func:`summary`). A ranking is judged within a
job, where the placements run the same compute: the per-job figures are the
ones that count, and a testbed's figure is their **median over its jobs**,
never a figure pooled over the placements of different jobs (whose step times
differ several-fold, so a pooled Spearman stays high even if every job's
placements were ranked exactly backwards):

* ``median_rel_error``: median over jobs of each job's median |predicted -
  measured| / measured step time (``median_rel_error_by_job``);
* ``spearman``: median over jobs of the rank correlation of predicted and
  measured step times within a job (``spearman_by_job``), over the
  ``spearman_jobs`` jobs with at least :data:`MIN_SPEARMAN_PLACEMENTS`
  placements (over 2 points a Spearman is +-1 by construction: such a job has
  ``None``); ``None`` when no job has enough;
* ``best_regret``: per job, the measured step time of the placement the step
  model ranks first over the measured-fastest placement, the plan's programs
  on both sides (``best_regret_by_job``); the median over jobs, and the worst
  job (``best_regret_worst_job``). It leaves the defaults out, so it says how
  well the model ranks placements, not what a user loses;
* ``regret_with_defaults``: per job, the measured step time of what a user of
  the plan runs (the placement the step model ranks first, with the plan's
  programs) over the best configuration measured, defaults included: the
  fastest of every placement run with the plan's programs or with the default
  collectives (``regret_with_defaults_by_job``; median over jobs, and the worst
  job) (issue 47);
* with ``--guard`` (``runtime.step --guard``: each request's program kept only
  where the paired test shows it faster than its default, in the job), the
  step's ``best`` is the guarded step, and the plan as planned runs beside it:
  ``guarded_regret_by_job`` (the guarded pick over the best configuration,
  defaults and the unguarded plan included) and ``guard_vs_plan_by_job`` (the
  placements whose guarded step is faster / slower than the plan as planned, by
  the paired test); ``defaults_faster_*`` then counts the placements where the
  guarded step lost to its defaults (issue 47's target: none);
* ``defaults_faster_by_job``: per job, the placements whose default
  collectives beat the plan's programs: by the paired test of
  ``runtime.stats.paired_verdict`` on their interleaved rounds (``paired``),
  and by the median alone (``median``); the testbed's sums
  (``defaults_faster_paired``, ``defaults_faster_median``);
* ``sum_model_regret``: the same for the placement the summed communication
  (today's ranking without a step section) puts first;
* ``disagreements_by_job``: the pairs of placements the two rankings order
  differently, and in how many of them the measurement sides with the step model;
* ``spearman_pooled_across_jobs``, ``median_rel_error_pooled_across_jobs``:
  the same over all the testbed's placements together, kept for comparison
  with earlier reports and **not** the headline.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

from scipy.stats import spearmanr

from p2synth.hierarchies.cli import ArgumentParser, UsageError, count_argument, write_json_atomic, write_text_atomic
from p2synth.hierarchies.model import Hierarchy
from p2synth.hierarchies.step import StepSpec
from p2synth.runtime.provenance import checkout_state
from p2synth.runtime.stats import FASTER, SLOWER, paired_verdict
from scripts.accuracy.suite import Testbed
from scripts.bench_limit import TESTBEDS as LIMIT_TESTBEDS, _names
from scripts.campaign import campaign_input, now, testbed_session
from scripts.tables import console, markdown, ms, table

KiB, MiB = 1 << 10, 1 << 20
MICROBATCHES = 4
STEP = {"schedule": "1f1b", "microbatches": MICROBATCHES, "layers": 4, "compute": {"forward_ms": 8, "backward_ms": 16}}
PASSES = 2 * MICROBATCHES


def job_3d(data: int, pipeline: int, tensor: int, tensor_bytes: int, send_bytes: int, bucket_bytes: int) -> dict:
    """A data x pipeline x tensor job: a tensor all-reduce twice a pass, a pipeline send a pass, two gradient buckets."""
    return {
        "axes": [{"name": "data", "size": data}, {"name": "pipeline", "size": pipeline}, {"name": "tensor", "size": tensor}],
        "roles": {"data": "data", "pipeline": "pipeline", "tensor": "tensor"},
        "workload": [
            {"name": "tp_allreduce", "axes": ["tensor"], "collective": "all_reduce", "message_bytes": tensor_bytes, "count": 2 * PASSES},
            {"name": "pp_send", "axes": ["pipeline"], "collective": "send_recv", "message_bytes": send_bytes, "count": PASSES},
            {"name": "grad_bucket", "axes": ["data"], "collective": "all_reduce", "message_bytes": bucket_bytes, "count": 2},
        ],
    }


# The jobs, fixed before measuring, on 8 ranks: a 3D-parallel one, a data x pipeline one (both in the first
# campaign, docs/measurements/step.md), and a pipeline x tensor one added for the second, held-out campaign.
JOBS = {
    "dp2-pp2-tp2": {
        "axes": [{"name": "data", "size": 2}, {"name": "pipeline", "size": 2}, {"name": "tensor", "size": 2}],
        "roles": {"data": "data", "pipeline": "pipeline", "tensor": "tensor"},
        "workload": [
            {"name": "tp_allreduce", "axes": ["tensor"], "collective": "all_reduce", "message_bytes": 256 * KiB, "count": 2 * PASSES},
            {"name": "pp_send", "axes": ["pipeline"], "collective": "send_recv", "message_bytes": 512 * KiB, "count": PASSES},
            {"name": "grad_bucket", "axes": ["data"], "collective": "all_reduce", "message_bytes": 2 * MiB, "count": 2},
        ],
    },
    "dp4-pp2": {
        "axes": [{"name": "data", "size": 4}, {"name": "pipeline", "size": 2}],
        "roles": {"data": "data", "pipeline": "pipeline"},
        "workload": [
            {"name": "pp_send", "axes": ["pipeline"], "collective": "send_recv", "message_bytes": 1 * MiB, "count": PASSES},
            {"name": "grad_bucket", "axes": ["data"], "collective": "all_reduce", "message_bytes": 4 * MiB, "count": 2},
        ],
    },
    "pp4-tp2": {
        "axes": [{"name": "pipeline", "size": 4}, {"name": "tensor", "size": 2}],
        "roles": {"pipeline": "pipeline", "tensor": "tensor"},
        "workload": [
            {"name": "tp_allreduce", "axes": ["tensor"], "collective": "all_reduce", "message_bytes": 256 * KiB, "count": 2 * PASSES},
            {"name": "pp_send", "axes": ["pipeline"], "collective": "send_recv", "message_bytes": 512 * KiB, "count": PASSES},
        ],
    },
    # The third campaign's (issue 32, item 3): 16 ranks, three 3D-parallel jobs with 7 placements each on a 3-level
    # testbed, none of them a job any model change was tried on; measured with the model frozen first (--frozen).
    **{f"dp{d}-pp{pp}-tp{t}": job_3d(d, pp, t, tensor_bytes=256 * KiB, send_bytes=512 * KiB, bucket_bytes=2 * MiB)
       for d, pp, t in ((4, 2, 2), (2, 2, 4), (2, 4, 2))},
    # The fourth campaign's (issue 32, item 3): the same axis sizes with another balance of work (tensor all-reduces
    # of 128 KiB, pipeline sends of 1 MiB, gradient buckets of 4 MiB) on another 16-rank testbed (2 racks x 4 nodes
    # x 2 ranks), measured with the model frozen after the change the third campaign led to (stages that share links).
    **{f"dp{d}-pp{pp}-tp{t}-t128k": job_3d(d, pp, t, tensor_bytes=128 * KiB, send_bytes=1 * MiB, bucket_bytes=4 * MiB)
       for d, pp, t in ((4, 2, 2), (2, 2, 4), (2, 4, 2))},
}
# The testbeds: bench_limit's two 8-rank ones (the default), and 16-rank ones for the third and fourth campaigns.
TESTBEDS = {**LIMIT_TESTBEDS,
            "2x2x4-1gbit-400mbit": Testbed("2x2x4-1gbit-400mbit", nodes=4, ranks_per_node=4, inter_node="1gbit",
                                           racks=2, inter_rack="400mbit"),
            "2x4x2-1gbit-400mbit": Testbed("2x4x2-1gbit-400mbit", nodes=8, ranks_per_node=2, inter_node="1gbit",
                                           racks=2, inter_rack="400mbit")}
DEFAULT_TESTBEDS = tuple(LIMIT_TESTBEDS)


PARTS = ("compute_s", "layer_comm_s", "bubble_s", "pipeline_comm_s", "gradient_exposed_s", "after_s")


def job_ranks(job: str) -> int:
    """How many ranks `job` runs on (the product of its axes' sizes)."""
    return math.prod(a["size"] for a in JOBS[job]["axes"])


def jobs_on(tb: Testbed, jobs: tuple[str, ...]) -> list[str]:
    """The jobs of `jobs` that run on testbed `tb`: those of its rank count."""
    return [j for j in jobs if job_ranks(j) == tb.nodes * tb.ranks_per_node]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; UsageError on a bad one."""
    p = ArgumentParser(prog="python -m scripts.bench_step", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, help="measure (root, testbed) and write the raw JSON here, after every placement")
    p.add_argument("--from-raw", type=Path, nargs="+", help="print the tables from these raw files, no testbed")
    p.add_argument("--markdown", type=Path, help="also write the tables as Markdown here")
    p.add_argument("--summary", type=Path, help="also write the per-testbed figures as JSON here")
    p.add_argument("--repredict", action="store_true",
                   help="with --from-raw: replace every prediction with this checkout's (each job planned again on its "
                        "recorded calibrated hierarchy) and score those against the recorded measurements; post hoc")
    p.add_argument("--reprice", type=Path, metavar="HIERARCHY",
                   help="with --from-raw: price every placement's recorded programs (those that ran) again on this "
                        "hierarchy instead of the recorded calibrated one (same levels), with this checkout's step "
                        "model, and score those predictions against the recorded measurements; post hoc")
    p.add_argument("--testbeds", type=_names(tuple(TESTBEDS), "testbed"), default=DEFAULT_TESTBEDS,
                   help=f"comma-separated, of {', '.join(TESTBEDS)} (default {', '.join(DEFAULT_TESTBEDS)})")
    p.add_argument("--jobs", type=_names(tuple(JOBS), "job"), default=tuple(JOBS),
                   help="comma-separated (default all); each testbed runs those of its rank count")
    p.add_argument("--frozen", action="store_true",
                   help="refuse to start unless the model's code is committed, and record its commit (a held-out campaign)")
    p.add_argument("--rounds", type=int, default=11, help="interleaved rounds per placement (default 11)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first (default 1)")
    p.add_argument("--poll-sleep-us", type=count_argument(0), default=0, metavar="US",
                   help="runtime.step's --poll-sleep-us: the pipeline's waits test their requests every US microseconds "
                        "and sleep in between (default 0: they wait inside MPI, as every committed campaign ran)")
    p.add_argument("--guard", action="store_true",
                   help="run each placement with runtime.step --guard: each request's program against its default in "
                        "paired rounds inside the job, the default kept unless the program is faster; the plan as "
                        "planned runs beside it (variant plan) (issue 47)")
    p.add_argument("--calibrate-bytes", type=int, default=4 * MiB, help="calibration's largest message (default 4 MiB)")
    p.add_argument("--instance", default="step", help="the testbed instance (default step)")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/p2synth-step"), help="specs, plans, step results")
    args = p.parse_args(argv)
    if (args.out is None) == (args.from_raw is None):
        raise UsageError("give --out (to measure) or --from-raw (to print measured tables), not both")
    if args.repredict and args.from_raw is None:
        raise UsageError("--repredict needs --from-raw: it re-plans recorded jobs; drop it when measuring")
    if args.reprice is not None and (args.from_raw is None or args.repredict):
        raise UsageError("--reprice needs --from-raw and not --repredict: it prices recorded programs again")
    if args.rounds < 3 or args.warmup < 0:
        raise UsageError("--rounds must be at least 3 and --warmup at least 0")
    for name in args.testbeds if args.out is not None else ():
        if not jobs_on(TESTBEDS[name], args.jobs):
            ranks = TESTBEDS[name].nodes * TESTBEDS[name].ranks_per_node
            raise UsageError(f"--testbeds {name} has {ranks} ranks and no job of --jobs runs on {ranks}: add one of "
                             f"{', '.join(j for j in JOBS if job_ranks(j) == ranks)}")
    args.model = None
    if args.frozen and args.out is not None:
        from scripts.accuracy.measure import model_freeze
        try:
            args.model = model_freeze()
        except RuntimeError as e:
            raise UsageError(f"--frozen: {' '.join(str(e).split())}; commit the model first") from None
    return args


# ---- figures (pure) -------------------------------------------------------------------------------------------
def spec_for(h: Hierarchy, job: str) -> dict:
    """The solver spec of `job` on hierarchy `h`: every placement, the simulator cost model, the step section."""
    j = JOBS[job]
    return {"hierarchy": h.model_dump(mode="json", exclude_none=True), "axes": j["axes"], "workload": j["workload"],
            "step": {**STEP, "roles": j["roles"]}, "cost_model": "simulator", "placements": "all"}


def spec_of_plan(plan: dict) -> dict:
    """The solver spec a recorded plan was made from: its hierarchy, axes, workload, step section and cost model, every
    placement; the hierarchy and the step section as their models write them (:func:`spec_for`'s form)."""
    dump = lambda model, data: model.model_validate(data).model_dump(mode="json", exclude_none=True)
    return {"hierarchy": dump(Hierarchy, plan["hierarchy"]), "axes": plan["axes"], "workload": plan["workload"],
            "step": dump(StepSpec, plan["step"]), "cost_model": plan["cost_model"], "placements": "all"}


def plan_job(spec: dict, workdir: Path) -> tuple[dict | None, str]:
    """Plan `spec` with ``solver.run`` in a subprocess (files in `workdir`): the plan, or None and the error."""
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        spec_path, plan_path = workdir / "spec.json", workdir / "plan.json"
        write_json_atomic(spec, spec_path)
        plan_path.unlink(missing_ok=True)
        r = subprocess.run([sys.executable, "-m", "solver.run", str(spec_path), "--out", str(plan_path), "--quiet"],
                           capture_output=True, text=True, timeout=900, check=False)
        if r.returncode != 0:
            return None, f"solver exit {r.returncode}: {(r.stdout + r.stderr)[-1500:]}"
        return json.loads(plan_path.read_text()), ""
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        return None, f"{type(e).__name__}: {' '.join(str(e).split())} (choose a writable --workdir)"


def repredicted(raw: dict, workdir: Path) -> dict:
    """`raw` with every placement's prediction replaced by this checkout's: each job planned again from its recorded
    plan's spec (:func:`spec_of_plan`: the testbed's calibrated hierarchy, the job, the step section). The
    measurements stay as recorded: a post hoc look at a model change on data it may have been designed on, never a
    held-out figure. A job recorded without a plan (it failed to plan) is left as it is. UsageError when a job does
    not plan again, or its new plan lacks a recorded placement."""
    out = json.loads(json.dumps(raw))
    for where, job in planned_jobs(out, "--repredict"):
        plan, error = plan_job(spec_of_plan(job["plan"]), workdir)
        if plan is None:
            raise UsageError(f"{where}: {error}")
        by_matrix = {json.dumps(p["matrix"]): p for p in plan["placements"]}
        for p in job["placements"]:
            new = by_matrix.get(json.dumps(p["matrix"]))
            if new is None:
                raise UsageError(f"{where}: placement {p['description']} is not in the new plan")
            p["predicted"], p["sum_s"] = new["step"], new["total_s"]
    return out


def planned_jobs(raw: dict, option: str):
    """Every recorded job of `raw` that has a plan (a job that failed to plan has none), with the label its errors
    start with: `option`, the testbed and the job."""
    for tb in raw["testbeds"]:
        for job in tb.get("jobs", []):
            if "plan" in job:
                yield f"{option}: {tb['testbed']['name']} {job['job']}", job


def load_hierarchy(path: Path) -> Hierarchy:
    """The hierarchy file at `path`; UsageError, one line, when it does not load."""
    try:
        return Hierarchy.model_validate_json(path.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"--reprice: cannot load hierarchy {path}: {' '.join(str(e).split())[:300]}") from None


def repriced(raw: dict, hierarchy: Hierarchy) -> dict:
    """`raw` with every placement's prediction replaced by what this checkout's step model predicts for the programs
    that ran (the recorded plan's, :func:`p2synth.solver.steptime.planned_step_time`) on `hierarchy` instead of the
    recorded one. The measurements stay as recorded: post hoc, never a held-out figure. UsageError when `hierarchy`'s
    levels (names and counts) differ from a recorded plan's."""
    from p2synth.hierarchies.plan_file import PlanFileError, parse_plan_file
    from p2synth.solver.steptime import planned_step_time

    shape = lambda h: [(lv["name"], lv["count"]) for lv in h["levels"]]
    new = hierarchy.model_dump(mode="json", exclude_none=True)
    out = json.loads(json.dumps(raw))
    for where, job in planned_jobs(out, "--reprice"):
        if shape(job["plan"]["hierarchy"]) != shape(new):
            raise UsageError(f"{where}: the hierarchy's levels {shape(new)} are not the recorded "
                             f"{shape(job['plan']['hierarchy'])}; give one of the testbed's shape")
        try:
            plan = parse_plan_file({**job["plan"], "hierarchy": new})
        except PlanFileError as e:
            raise UsageError(f"{where}: {e}") from None
        if plan.step is None:
            raise UsageError(f"{where}: the recorded plan has no step section to price")
        by_matrix = {json.dumps(e["matrix"]): i for i, e in enumerate(plan.entries)}
        for p in job["placements"]:
            index = by_matrix.get(json.dumps(p["matrix"]))
            if index is None:
                raise UsageError(f"{where}: placement {p['description']} is not in the recorded plan")
            step, total = planned_step_time(plan, index)
            p["predicted"], p["sum_s"] = step.to_json(), total
    return out


def rows(raw: dict) -> list[dict]:
    """One row per measured placement: predicted and measured step time and parts, the sum model's figure, ranks."""
    out = []
    for tb in raw["testbeds"]:
        for job in tb.get("jobs", []):
            for p in job.get("placements", []):
                row = {"testbed": tb["testbed"]["name"], "job": job["job"], "index": p["index"],
                       "placement": p["description"], "predicted": p["predicted"], "sum_s": p["sum_s"]}
                if "error" in p:
                    out.append({**row, "error": p["error"]})
                    continue
                out.append({**row, "measured": p["measured"], "default": p["default"], "wrong": p["wrong"],
                            **({"plan": p["plan"]} if "plan" in p else {})})
    return out


def _rel_error(r: dict) -> float:
    return abs(r["predicted"]["step_s"] - r["measured"]["step_s"]) / r["measured"]["step_s"]


def _regret(group: list[dict], key) -> float:
    """Measured step time of the placement `key` ranks first over the measured-fastest one (the plan's programs)."""
    chosen = min(group, key=lambda r: (key(r), r["index"]))
    return chosen["measured"]["step_s"] / min(r["measured"]["step_s"] for r in group)


def _regret_with_defaults(group: list[dict]) -> float:
    """The placement the step model ranks first, run with the plan's programs, over the fastest configuration
    measured: any placement of `group`, with the plan's programs or with the default collectives."""
    chosen = min(group, key=lambda r: (r["predicted"]["step_s"], r["index"]))
    best = min(min(r["measured"]["step_s"], r["default"]["step_s"]) for r in group)
    return chosen["measured"]["step_s"] / best


def plan_vs_defaults(r: dict):
    """A placement's plan programs against its default collectives on their interleaved rounds
    (``runtime.stats.paired_verdict``; "slower": the defaults were faster)."""
    return paired_verdict(r["measured"]["rounds_s"], r["default"]["rounds_s"])


def defaults_faster(group: list[dict]) -> dict:
    """How many placements of `group` ran faster with the default collectives than with the plan's programs: by the
    paired test (``paired``), by the median alone (``median``), of ``placements``."""
    return {"paired": sum(plan_vs_defaults(r).verdict == SLOWER for r in group),
            "median": sum(r["default"]["step_s"] < r["measured"]["step_s"] for r in group), "placements": len(group)}


MIN_SPEARMAN_PLACEMENTS = 3  # over 2 points a rank correlation is +-1 by construction


def _spearman(group: list[dict]) -> float | None:
    """Rank correlation of predicted and measured step times over `group`; None under
    :data:`MIN_SPEARMAN_PLACEMENTS` placements or when a side is constant."""
    if len(group) < MIN_SPEARMAN_PLACEMENTS:
        return None
    rho = spearmanr([r["predicted"]["step_s"] for r in group], [r["measured"]["step_s"] for r in group]).statistic
    return None if math.isnan(rho) else float(rho)


def _median(values) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def disagreements(group: list[dict]) -> dict:
    """Where the step model and the summed communication order two placements of one job differently: how many such
    pairs, and in how many the measured step times side with the step model."""
    pairs = [(a, b) for i, a in enumerate(group) for b in group[i + 1:]
             if (a["predicted"]["step_s"] < b["predicted"]["step_s"]) != (a["sum_s"] < b["sum_s"])]
    right = sum(1 for a, b in pairs
                if (a["predicted"]["step_s"] < b["predicted"]["step_s"]) == (a["measured"]["step_s"] < b["measured"]["step_s"]))
    return {"pairs": len(pairs), "step_model_right": right}


def guarded(jobs: dict[str, list[dict]]) -> dict:
    """A campaign run with ``--guard`` (every placement has the plan as planned, ``plan``, beside the guarded step,
    ``measured``): per job the guarded pick's regret against the best configuration, defaults and the unguarded plan
    included (``guarded_regret_by_job``, and the median), and per job how many placements' guarded steps the paired
    test found faster and slower than the plan as planned (``guard_vs_plan_by_job``). Empty for a campaign without."""
    if not jobs or not all("plan" in r for g in jobs.values() for r in g):
        return {}
    regret = {}
    for j, g in jobs.items():
        chosen = min(g, key=lambda r: (r["predicted"]["step_s"], r["index"]))
        best = min(min(r["measured"]["step_s"], r["default"]["step_s"], r["plan"]["step_s"]) for r in g)
        regret[j] = chosen["measured"]["step_s"] / best
    versus = {j: [paired_verdict(r["measured"]["rounds_s"], r["plan"]["rounds_s"]).verdict for r in g] for j, g in jobs.items()}
    return {"guarded_regret": _median(regret.values()), "guarded_regret_by_job": regret,
            "guard_vs_plan_by_job": {j: {"faster": v.count(FASTER), "slower": v.count(SLOWER), "placements": len(v)}
                                     for j, v in versus.items()}}


def summary(rows_: list[dict]) -> dict:
    """Per testbed: the figures of the module docstring, per job and as the median over jobs."""
    out = {}
    for name in dict.fromkeys(r["testbed"] for r in rows_):
        done = [r for r in rows_ if r["testbed"] == name and "error" not in r]
        jobs = {j: [r for r in done if r["job"] == j] for j in dict.fromkeys(r["job"] for r in done)}
        errors = {j: statistics.median(_rel_error(r) for r in g) for j, g in jobs.items()}
        rho = {j: _spearman(g) for j, g in jobs.items()}
        best = {j: _regret(g, lambda r: r["predicted"]["step_s"]) for j, g in jobs.items()}
        by_sum = {j: _regret(g, lambda r: r["sum_s"]) for j, g in jobs.items()}
        with_defaults = {j: _regret_with_defaults(g) for j, g in jobs.items()}
        beaten = {j: defaults_faster(g) for j, g in jobs.items()}
        out[name] = {
            "placements": len(done),
            "failed": sum(1 for r in rows_ if r["testbed"] == name and "error" in r),
            "jobs": len(jobs),
            "placements_by_job": {j: len(g) for j, g in jobs.items()},
            "median_rel_error": _median(errors.values()),
            "median_rel_error_by_job": errors,
            "spearman": _median(rho.values()),
            "spearman_jobs": sum(1 for x in rho.values() if x is not None),
            "spearman_by_job": rho,
            "best_regret": _median(best.values()),
            "best_regret_worst_job": max(best.values(), default=None),
            "best_regret_by_job": best,
            "regret_with_defaults": _median(with_defaults.values()),
            "regret_with_defaults_worst_job": max(with_defaults.values(), default=None),
            "regret_with_defaults_by_job": with_defaults,
            "defaults_faster_by_job": beaten,
            "defaults_faster_paired": sum(x["paired"] for x in beaten.values()),
            "defaults_faster_median": sum(x["median"] for x in beaten.values()),
            **guarded(jobs),
            "sum_model_regret": _median(by_sum.values()),
            "sum_model_regret_worst_job": max(by_sum.values(), default=None),
            "sum_model_regret_by_job": by_sum,
            "disagreements_by_job": {j: disagreements(g) for j, g in jobs.items()},
            "spearman_pooled_across_jobs": _spearman(done),
            "median_rel_error_pooled_across_jobs": statistics.median(_rel_error(r) for r in done) if done else None,
            "wrong_elements": sum(sum(r["wrong"].values()) for r in done),
        }
    return out


COLUMNS = ("testbed", "job", "#", "placement", "predicted ms", "measured ms [95%]", "error", "defaults measured ms",
           "plan vs defaults (paired rounds)",
           "compute", "layer comm pred / meas", "bubble + sends pred / pipeline waits meas", "gradient exposed pred / meas", "sum ms", "sum rank")


def cells(rows_: list[dict]) -> list[tuple[str, ...]]:
    """The rows' cells under :data:`COLUMNS`: times in milliseconds."""
    out = []
    for r in rows_:
        group = [x for x in rows_ if x["testbed"] == r["testbed"] and x["job"] == r["job"]]
        sum_rank = sorted(group, key=lambda x: (x["sum_s"], x["index"])).index(r)
        head = (r["testbed"], r["job"], str(r["index"]), r["placement"], ms(r["predicted"]["step_s"]))
        if "error" in r:
            out.append((*head, f"failed: {r['error'][:60]}", *("-",) * (len(COLUMNS) - 6)))
            continue
        m, p = r["measured"], r["predicted"]
        lo, hi = m["step_ci_s"]
        out.append((*head, f"{ms(m['step_s'])} [{ms(lo)}, {ms(hi)}]", f"{_rel_error(r):+.0%}".replace("+", ""),
                    ms(r["default"]["step_s"]), plan_vs_defaults(r).text(), ms(p["compute_s"]), f"{ms(p['layer_comm_s'])} / {ms(m['layer_comm_s'])}",
                    f"{ms(p['bubble_s'] + p['pipeline_comm_s'])} / {ms(m['pipeline_wait_s'])}",
                    f"{ms(p['gradient_exposed_s'])} / {ms(m['gradient_exposed_s'])}", ms(r["sum_s"]), str(sum_rank)))
    return out


JOB_COLUMNS = ("testbed", "job", "placements", "median_rel_error", "spearman", "best_regret (plan programs only)",
               "regret against the best, defaults included", "defaults faster: paired test (by median)",
               "sum_model_regret", "pairs ordered differently: step model right")


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _rho(x: float | None, placements: int) -> str:
    """A job's Spearman, or why it has none."""
    if x is not None:
        return _f(x)
    return f"n/a: {placements} placements" if placements < MIN_SPEARMAN_PLACEMENTS else "n/a: a constant ranking"


def _beaten(x: dict) -> str:
    """How many placements the defaults beat, as the tables say it: ``13 of 21 (14)``."""
    return f"{x['paired']} of {x['placements']} ({x['median']})"


def job_cells(s: dict) -> list[tuple[str, ...]]:
    """One row per testbed and job of :func:`summary`: the figures that count."""
    return [(name, j, str(n), _f(v["median_rel_error_by_job"][j]), _rho(v["spearman_by_job"][j], n),
             _f(v["best_regret_by_job"][j]), _f(v["regret_with_defaults_by_job"][j]),
             _beaten(v["defaults_faster_by_job"][j]), _f(v["sum_model_regret_by_job"][j]),
             f"{v['disagreements_by_job'][j]['step_model_right']} of {v['disagreements_by_job'][j]['pairs']}")
            for name, v in s.items() for j, n in v["placements_by_job"].items()]


SUMMARY_COLUMNS = ("testbed", "placements", "jobs", "median_rel_error (median over jobs)",
                   "spearman (median over jobs)", "best_regret, plan programs only (median over jobs; worst job)",
                   "regret against the best, defaults included (median over jobs; worst job)",
                   "defaults faster: paired test (by median)",
                   "sum_model_regret (median over jobs; worst job)", "spearman pooled across jobs (not the headline)")


def summary_cells(s: dict) -> list[tuple[str, ...]]:
    """One row per testbed of :func:`summary`: the medians over its jobs."""
    out = []
    for name, v in s.items():
        k = v["spearman_jobs"]  # the jobs with a Spearman (at least MIN_SPEARMAN_PLACEMENTS placements)
        rho = f"{_f(v['spearman']) if k else 'n/a'} ({k} of {v['jobs']} jobs)"
        out.append((name, str(v["placements"]), str(v["jobs"]), _f(v["median_rel_error"]), rho,
                    f"{_f(v['best_regret'])}; {_f(v['best_regret_worst_job'])}",
                    f"{_f(v['regret_with_defaults'])}; {_f(v['regret_with_defaults_worst_job'])}",
                    _beaten({"paired": v["defaults_faster_paired"], "median": v["defaults_faster_median"],
                             "placements": v["placements"]}),
                    f"{_f(v['sum_model_regret'])}; {_f(v['sum_model_regret_worst_job'])}",
                    _f(v["spearman_pooled_across_jobs"])))
    return out


# ---- measuring (root, testbed) --------------------------------------------------------------------------------
def measured_figures(result: dict, variant: str) -> dict:
    """A ``runtime.step --out`` document's figures of `variant` (``best`` or ``default``): the median step time, its
    interval, and the medians of the parts the rank that finished last spent."""
    v = result["variants"][variant]
    return {"step_s": v["step_s"], "step_ci_s": v["step_ci_s"], "rounds_s": [r["step_s"] for r in v["rounds"]],
            **{k: v[k] for k in ("compute_s", "layer_comm_s", "pipeline_wait_s", "gradient_exposed_s", "after_s")}}


def measure_placement(args: argparse.Namespace, tag: str, plan_path: Path, plan: dict, index: int, log) -> dict:
    """Run placement `index` of `plan` with ``runtime.step``; its record (``error`` set when the run failed)."""
    from scripts.accuracy.measure import testbed

    entry = plan["placements"][index]
    record = {"index": index, "matrix": entry["matrix"], "description": entry["description"],
              "predicted": entry["step"], "sum_s": entry["total_s"], "started_at": now()}
    out = args.workdir / f"step-{tag}-{index}.json"
    out.unlink(missing_ok=True)
    r = testbed("run", "--timeout", "900", "--", "python", "-m", "runtime.step", str(plan_path), "--placement", str(index),
                "--rounds", str(args.rounds), "--warmup", str(args.warmup), "--poll-sleep-us", str(args.poll_sleep_us),
                *(["--guard"] if args.guard else []), "--out", str(out),
                timeout=960, check=False, instance=args.instance)
    if r.returncode != 0 or not out.exists():
        return {**record, "error": f"runtime.step exit {r.returncode}: {(r.stdout + r.stderr)[-1500:]}"}
    result = json.loads(out.read_text())
    record.update(measured=measured_figures(result, "best"), default=measured_figures(result, "default"),
                  wrong=result["wrong"], thread_level=result["mpi_thread_level"],
                  gradient_overlap=result["gradient_overlap"])
    if "plan" in result["variants"]:  # --guard: the plan as planned beside the guarded step, and what the guard kept
        record.update(plan=measured_figures(result, "plan"), guard=result["guard"])
    log(f"[{tag}] placement {index} {entry['description']}: predicted {ms(entry['step']['step_s'])} ms, "
        f"measured {ms(record['measured']['step_s'])} ms")
    return record


def measure_job(args: argparse.Namespace, tag: str, job: str, fitted: Hierarchy, entry: dict, raw: dict, log) -> None:
    """Plan `job` on the fitted hierarchy and run every placement's step, into a record appended to ``entry["jobs"]``
    (``error`` set if it could not be planned); `raw` is written to ``--out`` after every placement."""
    record: dict = {"job": job}
    entry["jobs"].append(record)
    plan, error = plan_job(spec_for(fitted, job), args.workdir / tag)
    if plan is None:
        record["error"] = error
        return
    plan_path = args.workdir / tag / "plan.json"
    record.update(plan=plan, planned_at=now(), placements=[])
    write_json_atomic(raw, args.out)  # every placement's prediction on record before the first step runs
    for index in range(len(plan["placements"])):
        record["placements"].append(measure_placement(args, tag, plan_path, plan, index, log))
        write_json_atomic(raw, args.out)


def measure(args: argparse.Namespace, log) -> dict:
    """Every testbed and job of the command line; the raw document (written to ``--out`` after every placement)."""
    args.workdir.mkdir(parents=True, exist_ok=True)
    checkout = checkout_state()
    raw = {"started": now(), "command": sys.argv, "commit": checkout["commit"], "checkout": checkout,
           **({"model": args.model} if args.model else {}),
           "settings": {"rounds": args.rounds, "warmup": args.warmup, "poll_sleep_us": args.poll_sleep_us,
                        "guard": args.guard,
                        "calibrate_bytes": args.calibrate_bytes,
                        "step": STEP, "jobs": JOBS}, "testbeds": []}
    for name in args.testbeds:
        tb: Testbed = TESTBEDS[name]
        entry: dict = {"testbed": tb.__dict__, "jobs": []}
        raw["testbeds"].append(entry)
        with testbed_session(tb, entry, raw, args.out, args.workdir, args.calibrate_bytes, args.instance, log) as fitted:
            for job in jobs_on(tb, args.jobs) if fitted is not None else ():
                measure_job(args, f"{name}-{job}", job, fitted, entry, raw, log)
    raw["finished"] = now()
    write_json_atomic(raw, args.out)
    return raw


def main(argv: list[str] | None = None) -> int:
    """Measure (root, testbed) or read raw measurements, then print the tables; 2 on bad usage."""
    got = campaign_input(argv, parse_args, rows, measure)
    if got is None:
        return 2
    args, raw = got
    if args.repredict or args.reprice is not None:
        try:
            raw = repredicted(raw, args.workdir) if args.repredict else repriced(raw, load_hierarchy(args.reprice))
        except UsageError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    found = rows(raw)
    figures = summary(found)
    out = console()
    out.print(table(COLUMNS, cells(found), title="predicted and measured training steps, every placement", text_columns=4))
    out.print(table(JOB_COLUMNS, job_cells(figures), title="the step model within each job", text_columns=2))
    out.print(table(SUMMARY_COLUMNS, summary_cells(figures), title="per testbed: the median over its jobs",
                    text_columns=1))
    if args.markdown is not None:
        write_text_atomic("\n\n".join((markdown(COLUMNS, cells(found)), markdown(JOB_COLUMNS, job_cells(figures)),
                                        markdown(SUMMARY_COLUMNS, summary_cells(figures)))) + "\n", args.markdown)
    if args.summary is not None:
        write_json_atomic(figures, args.summary)
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
