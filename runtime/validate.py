"""Judge a tuned plan's picks on measurements they were not made from: a fresh job re-measures each pick.

    mpirun -n N python -m runtime.validate tuned.json --out validated.json
    sudo python -m scripts.testbed run -- python -m runtime.validate tuned.json --out validated.json

``runtime.tune`` picks a program from the same rounds that measured it, so the
pick's measured gain is optimistic: the fastest of K programs looks faster than
it is. This job takes the tuned plan (``runtime.tune --out``) and, for every
request it tuned, measures again in new processes, in new interleaved rounds
and in the reverse order of the tuning run: the **pick**, the **default** and
the **runner-up** (the tuned plan's next program, the fastest other one it
measured). Every program is checked exactly first and its timed output too, as
in ``runtime.tune``.

``validated.json`` is the tuned plan with, per tuned request, ``validation``:

* ``programs``: per program (``role`` pick / default / runner-up, its text)
  ``measured_s``, ``measured_ci_s``, ``measured_repeats_s``, ``wrong``;
* ``pick_over_default``: the pick's median over the default's in this job
  (1.0 when the pick is the default);
* ``loss_5pct``: the pick measured more than 5% slower than the default;
* ``regret``: the pick's median over the smallest median of this job;
* ``confirmed``: the pick is not the default and beats it here by the tuning
  run's minimum gain under the same paired sign test (``runtime.stats.paired_faster``);
* ``paired``: the pick against the default on this job's paired rounds, the
  verdict every measurement prints (``runtime.stats.paired_verdict``: faster,
  slower, within noise or inconclusive), or null where the pick is the default
  (a kept default is no evidence either way);

and at the top ``validated`` (job, timing, and the counts: requests, picks that
left the default, confirmed, losses, those the paired test found slower, the
median regret). A loss can only be a pick that left the default: the last line
counts the losses among those picks, and the kept defaults apart.

Exit status: 0 validated and every result exact (whatever the verdicts); 1 a
wrong result, or a rank crashed; 2 bad arguments, a plan that is not tuned, or
a bad backend (one line).
"""

from __future__ import annotations

import copy
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from mpi4py import MPI

from p2synth.hierarchies.cli import count_argument, enum_argument, write_json_atomic
from p2synth.hierarchies.plan_file import PlanFile, PlanFileError, load_plan_file
from p2synth.runtime.backends import BackendKind
from p2synth.runtime.job import (EXIT_OK, EXIT_USAGE, EXIT_WRONG, RankZeroParser, mpi_version, require_out_folder,
                                 run_guarded, start_job)
from p2synth.runtime.plan import select
from p2synth.runtime.provenance import RunStart
from p2synth.runtime.stats import MIN_GAIN, SLOWER, paired_faster, paired_verdict
from p2synth.runtime.timing import TimingConfig
from p2synth.runtime.tune import Outcome, Task, measured_figures, tune_request

LOSS = 1.05  # a pick more than 5% slower than the default is a loss


def parse_args(argv: list[str] | None):
    """The command line; UsageError on a bad one."""
    p = RankZeroParser(prog="python -m runtime.validate", description=__doc__.split("\n")[0])
    p.add_argument("plan", help="a tuned plan (python -m runtime.tune ... --out tuned.json)")
    p.add_argument("--out", type=Path, required=True, help="write the validated plan here (rank 0)")
    p.add_argument("--warmup", type=count_argument(0), default=2, help="untimed runs per program before the repeats (default 2)")
    p.add_argument("--iters", type=count_argument(1), default=None, help="timed runs per repeat (default: the tuning run's)")
    p.add_argument("--repeats", type=count_argument(2), default=None, help="interleaved repeats per program (default: the tuning run's)")
    p.add_argument("--backend", type=enum_argument(BackendKind), default=BackendKind.NUMPY, metavar="{numpy,cupy}",
                   help="numpy over MPI (default) or cupy over NCCL")
    return p.parse_args(argv)


@dataclass(frozen=True)
class Tuned:
    """One tuned request to re-measure: its task (default, pick and runner-up as candidates) and where it sits."""

    task: Task
    path: tuple[int, ...]  # (placement,) or (placement, request): where its entry sits in the document
    pick: int              # index of the pick among the task's candidates


def tuned_requests(plan: PlanFile, world_size: int) -> list[Tuned]:
    """Every request the tuned plan measured, with the candidates to re-measure; PlanFileError if none was tuned."""
    doc = plan.document
    info = doc.get("tuned")
    if not isinstance(info, dict):
        raise PlanFileError("the plan is not tuned (no \"tuned\" field): run python -m runtime.tune on it first and "
                            "validate its --out file")
    min_gain = float(info.get("min_gain", MIN_GAIN))
    out = []
    for index, entry in enumerate(doc["placements"]):
        if "measured_total_s" not in entry:
            continue
        planned = plan.placement(index)
        if world_size != planned.placement.num_devices:
            raise PlanFileError(f"the plan's hierarchy has {planned.placement.num_devices} devices but the job has "
                                f"{world_size} ranks; run with -n {planned.placement.num_devices}")
        names = plan.request_names() if plan.is_workload else (None,)
        for j, name in enumerate(names):
            path = (index, j) if plan.is_workload else (index,)
            body = _at(doc, path)
            if "picked" not in body:
                continue
            sel = select(plan, index, 2, name)  # the default, the pick (first, unless it is the default), the runner-up
            pick = 0 if body["picked"]["is_default"] else 1
            sel.check_size(sel.message_bytes, world_size)
            out.append(Tuned(Task(sel, sel.message_bytes, 1, 2, min_gain), path, pick))
    if not out:
        raise PlanFileError("the tuned plan has no measured request to validate")
    return out


def verdict(outcome: Outcome, pick: int, min_gain: float) -> dict:
    """The ``validation`` entry of one request: its programs' figures and the verdict on the pick."""
    sel = outcome.task.selection
    medians = [m.median_s for m in outcome.measured]
    roles = ["default"] + ["pick" if i == pick else "runner-up" for i in range(1, len(medians))]
    programs = [{"role": role, "program": c.program.text(sel.placement), **measured_figures(m, w)}
                for role, c, m, w in zip(roles, sel.candidates, outcome.measured, outcome.wrong)]
    ratio = medians[pick] / medians[0]
    return {"programs": programs, "pick_over_default": ratio, "loss_5pct": ratio > LOSS,
            "regret": medians[pick] / min(medians),
            "confirmed": pick != 0 and paired_faster(outcome.measured[pick].repeats_s, outcome.measured[0].repeats_s, min_gain),
            "paired": None if pick == 0 else paired_verdict(outcome.measured[pick].repeats_s,
                                                            outcome.measured[0].repeats_s).to_json()}


def main(argv: list[str] | None = None) -> int:
    """Entry point: returns the exit status (every rank returns the same)."""
    world = MPI.COMM_WORLD
    return run_guarded(world, lambda: _main(argv, world))


def _main(argv: list[str] | None, world: MPI.Intracomm) -> int:
    def load():
        args = parse_args(argv)
        plan = load_plan_file(args.plan)
        require_out_folder(args.out)
        return args, plan, tuned_requests(plan, world.Get_size())

    started = start_job(world, load, lambda loaded: loaded[0].backend)
    if started is None:
        return EXIT_USAGE
    (args, plan, tuned), backend = started
    start = RunStart.now() if world.Get_rank() == 0 else None  # git runs once, on the rank that writes
    timing = plan.document["tuned"].get("timing", {})
    config = TimingConfig(warmup=args.warmup, iters=args.iters or int(timing.get("iters", 5)),
                          repeats=args.repeats or int(timing.get("repeats", 9)))
    outcomes = [tune_request(t.task, backend, world, config, lambda _r: None, reverse=True) for t in tuned]
    status = EXIT_WRONG if any(any(o.wrong) for o in outcomes) else EXIT_OK
    if world.Get_rank() == 0:
        doc = copy.deepcopy(plan.document)
        verdicts = [verdict(o, t.pick, t.task.min_gain) for o, t in zip(outcomes, tuned)]
        for t, v in zip(tuned, verdicts):
            _at(doc, t.path)["validation"] = v
        doc["validated"] = {
            "ranks": world.Get_size(), "backend": str(backend.kind), "mpi": mpi_version(),
            "timing": {"warmup": config.warmup, "iters": config.iters, "repeats": config.repeats, "order": "interleaved, reversed"},
            "requests": len(verdicts), "left_default": sum(t.pick != 0 for t in tuned),
            "confirmed": sum(v["confirmed"] for v in verdicts), "losses_5pct": sum(v["loss_5pct"] for v in verdicts),
            "slower_paired": sum(v["paired"] is not None and v["paired"]["verdict"] == SLOWER for v in verdicts),
            "regret_median": statistics.median(v["regret"] for v in verdicts),
            **start.record(),
        }
        write_json_atomic(doc, args.out)
        for line in summary_lines(tuned, verdicts):
            print(line, flush=True)
    return status


def _at(doc: dict, path: tuple[int, ...]) -> dict:
    """The request entry at `path` of a plan document."""
    entry = doc["placements"][path[0]]
    return entry if len(path) == 1 else entry["requests"][path[1]]


def summary_lines(tuned: list[Tuned], verdicts: list[dict]) -> list[str]:
    """One line per validated request, and a total."""
    lines = []
    for t, v in zip(tuned, verdicts):
        sel = t.task.selection
        kind = "default kept" if t.pick == 0 else ("confirmed" if v["confirmed"] else "not confirmed")
        lines.append(f"# placement {sel.index} {sel.request_name} ({t.task.nbytes} B): pick/default "
                     f"{v['pick_over_default']:.3f}  regret {v['regret']:.3f}  {kind}{'  LOSS' if v['loss_5pct'] else ''}")
    losses = sum(v["loss_5pct"] for v in verdicts)
    left = sum(t.pick != 0 for t in tuned)
    lines.append(f"# picks more than 5% slower than the default: {losses} of the {left} that left it "
                 f"({len(verdicts) - left} kept the default) {'OK' if losses == 0 else 'LOSS'}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
