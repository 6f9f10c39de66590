"""Run one training step of a plan's placement for real: timed compute, the plan's programs, the pipeline sends.

    mpirun -n N python -m runtime.step plan.json --placement I [--rounds 9] [--warmup 1] [--out step.json]

The plan must have a ``step`` section (hierarchies/step.py; docs/runtime.md,
"Running a step"). Every rank runs the passes of its pipeline stage (its
coordinate on the pipeline-role axis, one stage without one) in the order of
``stage_ops``; each request plays the part ``part_of`` gives it:

* compute: a timed sleep, ``layers / p x layer_seconds / t`` per pass (``p``
  stages, ``t`` the tensor axis's size), since on shared cores a busy loop would
  measure the CPU, not the schedule;
* LAYER (tensor or expert axis): ``count / (2 x microbatches)`` blocking runs
  per pass of every such request, evenly between equal slices of the pass's compute;
* PIPELINE (send_recv over the pipeline axis): a forward pass waits for its
  activation from the previous stage (posted early with ``Irecv``) and sends its
  own to the next (``Isend``); backward passes go the other way; every received
  buffer is checked exactly after each round;
* GRADIENT (data axis): ``count`` buckets per request, in workload order, ready
  during the stage's last backward pass when its compute has reached the
  buckets' share of the bytes, reduced one after the other by a communication
  thread while the compute goes on (MPI_THREAD_MULTIPLE; without it, or on
  cupy, after the pass); what is left after the pass is the exposed time;
* AFTER (anything else): ``count`` blocking runs per request, once the pipeline is done.

Each program is checked once on tagged data first (runtime/tune.py's ``arm``).
With ``--guard`` (runtime/step_guard.py), every request whose plan program is
not its default is then measured against the default in ``--guard-rounds``
paired, interleaved rounds, and ``best`` keeps the default unless the
one-sided paired test shows the program faster; ``--guard-out PLAN`` writes
the plan with the decisions (``step_guard``), which a run without ``--guard``
follows. Then ``--warmup`` untimed steps of each variant, and ``--rounds`` rounds, each
timing both variants (``best``: the plan's best programs; ``default``: every
request as its default collective; with a guard also ``plan``, the plan's
programs as planned, unguarded), in an order that alternates per round. A
step starts after a barrier; its time is the slowest rank's, and its parts
(compute slept, layer communication, pipeline waits, exposed gradient, after)
are that rank's.

Exit status: 0 every result exact; 1 a wrong element (check run, activation,
or a timed run's output), or a rank crashed; 2 bad arguments, a plan without a
step section, a bad placement index, a job size that is not the placement's
device count, or a bad backend (one line).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mpi4py import MPI
from rich.console import Console

from p2synth.hierarchies.cli import count_argument, enum_argument, write_json_atomic
from p2synth.runtime.backends import Backend, BackendKind
from p2synth.runtime.job import EXIT_OK, EXIT_WRONG, RankZeroParser, run_command
from p2synth.runtime.provenance import RunStart
from p2synth.runtime import step_guard
from p2synth.runtime.report import out_of_bounds_line
from p2synth.runtime.step_job import StepJob, Variant, prepare
from p2synth.runtime.step_rank import StepRank, Trace
from p2synth.runtime.step_report import (VariantRounds, clock_id, preamble, slowest, step_document, step_table,
                                         trace_document)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; UsageError on a bad one."""
    p = RankZeroParser(prog="python -m runtime.step", description=__doc__.split("\n")[0])
    p.add_argument("plan", help="the solver's result JSON of a spec with a step section")
    p.add_argument("--placement", type=count_argument(0), default=0, help="index of the placement in the plan (default 0)")
    p.add_argument("--rounds", type=count_argument(1), default=9, help="timed rounds, each one step of both variants (default 9)")
    p.add_argument("--warmup", type=count_argument(0), default=1, help="untimed steps of each variant first (default 1)")
    p.add_argument("--backend", type=enum_argument(BackendKind), default=BackendKind.NUMPY, metavar="{numpy,cupy}",
                   help="numpy over MPI (default) or cupy over NCCL")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here (rank 0)")
    p.add_argument("--poll-sleep-us", type=count_argument(0), default=0, metavar="US",
                   help="wait for the pipeline's receives and sends by testing them every US microseconds, asleep in "
                        "between, instead of inside MPI (default 0: inside MPI)")
    p.add_argument("--trace", type=Path, default=None, help="write every rank's passes, layer runs, receive waits and buckets here (rank 0)")
    p.add_argument("--guard", action="store_true",
                   help="measure each request's plan program against its default in this job first, and run the "
                        "default unless the program is faster by the paired test (runtime/step_guard.py)")
    p.add_argument("--guard-rounds", type=count_argument(6), default=9,
                   help="the guard's interleaved rounds per request (default 9; at least 6, the fewest a 5%% one-sided "
                        "sign test can decide)")
    p.add_argument("--guard-out", type=Path, default=None, metavar="PLAN",
                   help="with --guard: write the plan with the guard's decisions here (rank 0)")
    p.add_argument("--corrupt", type=int, default=None, help=argparse.SUPPRESS)  # tests: this rank sends wrong activations
    p.add_argument("--slow", default=None, help=argparse.SUPPRESS)  # tests: "program:MS" or "default:MS", slowed runs
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point: returns the exit status (every rank returns the same)."""
    return run_command(argv, parse_args, prepare, _step)


def _step(args: argparse.Namespace, job: StepJob, backend: Backend, world: MPI.Intracomm) -> int:
    level = MPI.Query_thread()
    overlap = level == MPI.THREAD_MULTIPLE and backend.kind is BackendKind.NUMPY
    rank0 = world.Get_rank() == 0
    start = RunStart.now() if rank0 else None  # git runs once, on the rank that writes
    ranker = StepRank(job, backend, world, overlap, args.corrupt == world.Get_rank(), args.poll_sleep_us * 1e-6)
    if ranker.check_wrong:
        if rank0:
            print(f"error: {ranker.check_wrong} wrong element(s) in the check runs on tagged data; nothing timed",
                  file=sys.stderr, flush=True)
        ranker.close()
        return EXIT_WRONG
    guard = guard_step(args, job, ranker)
    traces: list[Trace] = []
    variants = [Variant.BEST, Variant.DEFAULT] + ([Variant.PLAN] if guard is not None else [])
    measured = {v: VariantRounds() for v in variants}
    wrong_activations = wrong_outputs = 0
    plan = [(v, -1) for _ in range(args.warmup) for v in variants]
    plan += [(v, r) for r in range(args.rounds) for v in (variants if r % 2 == 0 else variants[::-1])]
    for variant, round_ in plan:
        trace = Trace(str(variant), round_) if args.trace is not None else None
        ranker.poison()
        figures = ranker.run(variant, trace)
        worst = slowest(figures, world)
        if round_ >= 0:
            measured[variant].rounds.append(worst)
        wrong_activations += ranker.wrong_activations()
        wrong_outputs += ranker.wrong_outputs()
        if trace is not None:
            traces.append(trace)
    ranker.close()
    wrong = wrong_activations + wrong_outputs
    all_traces = world.gather((clock_id(), [t.__dict__ for t in traces]), root=0) if args.trace is not None else None
    if rank0:
        doc = step_document(job, args, backend, world, level, overlap, measured,
                            {"check": 0, "activations": wrong_activations, "outputs": wrong_outputs})
        doc["guard"] = guard
        doc["run"] = start.record()
        if guard is not None and args.guard_out is not None:
            write_json_atomic(guarded_plan(args.plan, job.planned.index, guard), args.guard_out)
        if args.out is not None:
            write_json_atomic(doc, args.out)
        if all_traces is not None:
            write_json_atomic(trace_document(job, all_traces, args.poll_sleep_us), args.trace)
        Console(width=160).print(step_table(doc))
        for line in preamble(doc) + step_guard.lines(guard):
            print(line, flush=True)
        print(out_of_bounds_line(wrong), flush=True)
    return EXIT_WRONG if wrong else EXIT_OK


def guard_step(args: argparse.Namespace, job: StepJob, ranker: StepRank) -> dict | None:
    """Slow what ``--slow`` names (tests), then decide each request's program (``--guard``: measured now; else what the
    plan recorded, if anything) and make ``best`` run it; the ``guard`` entry of the documents, None without one."""
    if args.slow is not None:
        which, ms = args.slow.split(":")
        for v in (Variant.BEST, Variant.PLAN) if which == step_guard.PROGRAM else (Variant.DEFAULT,):
            runs = ranker.runs[v]
            for i, a in enumerate(ranker.armed):
                if a is not None and len(a.compiled) > 1:
                    runs[i] = step_guard.slowed(runs[i], float(ms) * 1e-3)
    if args.guard:
        decisions, source, rounds = step_guard.decide(ranker, args.guard_rounds), "measured", args.guard_rounds
    else:
        entry = job.plan.entries[job.planned.index]
        decisions, source = step_guard.recorded(entry, [r.name for r in job.requests]), "recorded"
        rounds = entry.get("step_guard", {}).get("rounds")
    if decisions is None:
        return None
    step_guard.apply(ranker, decisions)
    return step_guard.document(decisions, rounds, source)


def guarded_plan(plan: str, index: int, guard: dict) -> dict:
    """The plan file `plan` with the guard's decisions in placement `index`'s entry (``step_guard``)."""
    doc = json.loads(Path(plan).read_text())
    doc["placements"][index]["step_guard"] = guard
    return doc


if __name__ == "__main__":
    sys.exit(main())
