"""The step's guard (``runtime.step --guard``): a step never slower than its defaults, request by request (issue 47).

Inside the job, before the step is timed, every request that the plan runs with a program other than its default
collective is measured against that default: ``rounds`` interleaved rounds (the order alternating per round), each
timing ``runs`` back-to-back runs of the program and of the default (the slowest rank's time, after a barrier; one
untimed run of each first). The step keeps the default unless the one-sided paired test of
``runtime.stats.paired_verdict`` shows the program faster, as the DDP hook's guard keeps DDP's all-reduce; a
program shown slower, within noise or inconclusive is dropped. A request whose plan program is its default is not
measured. The decisions go into the step's ``--out`` document and, with ``--guard-out``, into a copy of the plan
(``step_guard`` in the placement's entry), which a later ``runtime.step`` without ``--guard`` runs as recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from p2synth.runtime.backends import Backend
from p2synth.runtime.stats import FASTER, paired_verdict, verdict_text
from p2synth.runtime.step_job import Variant
from p2synth.runtime.step_rank import StepRank

PROGRAM, DEFAULT = "program", "default"
MAX_RUNS = 8  # runs per round: the request's count per step, at most this many


@dataclass(frozen=True)
class Decision:
    """What the step runs for one request: the plan's ``program`` or the ``default``, with the paired verdict that
    decided it (None: not measured, the plan's program is the default) and the runs each round timed."""

    request: str
    kept: str
    verdict: dict | None
    runs_per_round: int = 0

    def to_json(self) -> dict:
        """The decision as the documents record it."""
        return {"request": self.request, "kept": self.kept, "verdict": self.verdict, "runs_per_round": self.runs_per_round}


def timed(run: Callable[[], None], backend: Backend, world: MPI.Intracomm, runs: int) -> float:
    """Seconds of `runs` back-to-back runs of `run` after a barrier, the slowest rank's (collective)."""
    world.Barrier()
    t0 = time.perf_counter()
    for _ in range(runs):
        run()
    backend.synchronize()
    mine = np.array([time.perf_counter() - t0])
    worst = np.empty(1)
    world.Allreduce(mine, worst, op=MPI.MAX)
    return float(worst[0])


def paired_rounds(program: Callable[[], None], default: Callable[[], None], backend: Backend, world: MPI.Intracomm,
                  rounds: int, runs: int) -> tuple[list[float], list[float]]:
    """The program's and the default's times in `rounds` interleaved rounds (program first in even rounds), after
    one untimed run of each (collective)."""
    program()
    default()
    backend.synchronize()
    times: dict[str, list[float]] = {PROGRAM: [], DEFAULT: []}
    for r in range(rounds):
        order = ((PROGRAM, program), (DEFAULT, default)) if r % 2 == 0 else ((DEFAULT, default), (PROGRAM, program))
        for name, run in order:
            times[name].append(timed(run, backend, world, runs))
    return times[PROGRAM], times[DEFAULT]


def decide(ranker: StepRank, rounds: int) -> list[Decision | None]:
    """Measure every request's plan program against its default in this job and decide (collective; every rank
    decides the same, from the same slowest-rank times); None for a request that runs no collective (the pipeline's
    sends)."""
    out: list[Decision | None] = []
    for request, armed, program, default in zip(ranker.job.requests, ranker.armed, ranker.runs[Variant.BEST],
                                                ranker.runs[Variant.DEFAULT]):
        if armed is None:
            out.append(None)
        elif len(armed.compiled) == 1:  # the plan's program is the default
            out.append(Decision(request.name, DEFAULT, None))
        else:
            runs = max(1, min(request.count, MAX_RUNS))
            verdict = paired_verdict(*paired_rounds(program, default, ranker.backend, ranker.world, rounds, runs))
            out.append(Decision(request.name, PROGRAM if verdict.verdict == FASTER else DEFAULT, verdict.to_json(), runs))
    return out


def recorded(entry: dict, names: list[str]) -> list[Decision | None] | None:
    """The decisions a plan's placement entry recorded (``step_guard``, written by ``--guard-out``), in the order of
    the requests `names` (None for a request it does not name); None where it recorded none."""
    saved = entry.get("step_guard")
    if not saved:
        return None
    by_name = {d["request"]: d for d in saved["decisions"] if d is not None}
    return [None if n not in by_name else Decision(n, by_name[n]["kept"], by_name[n]["verdict"], by_name[n]["runs_per_round"])
            for n in names]


def apply(ranker: StepRank, decisions: list[Decision | None]) -> None:
    """Make the step's ``best`` variant run the default of every request whose decision kept it."""
    best, default = ranker.runs[Variant.BEST], ranker.runs[Variant.DEFAULT]
    for i, d in enumerate(decisions):
        if d is not None and d.kept == DEFAULT:
            best[i] = default[i]


def document(decisions: list[Decision | None], rounds: int | None, source: str) -> dict:
    """The ``guard`` entry of the step's documents: where the decisions come from (``measured`` in this job, or
    ``recorded`` in the plan), the rounds, the test, and each request's decision."""
    return {"source": source, "rounds": rounds,
            "test": "runtime.stats.paired_verdict: the program is kept only where it is faster by a one-sided exact "
                    "sign test at 5% over the interleaved rounds",
            "decisions": [None if d is None else d.to_json() for d in decisions]}


def slowed(run: Callable[[], None], seconds: float) -> Callable[[], None]:
    """`run`, then a sleep of `seconds`: a program made slower on purpose (the tests' fault)."""
    def slow() -> None:
        run()
        time.sleep(seconds)
    return slow


def lines(guard: dict | None) -> list[str]:
    """The '#' lines the step prints under its table: each request's decision."""
    if guard is None:
        return []
    out = [f"# guard ({guard['source']}): the default kept unless the program is faster by the paired test"]
    for d in guard["decisions"]:
        if d is not None:
            said = "plan's program is the default" if d["verdict"] is None else verdict_text(d["verdict"])
            out.append(f"# {d['request']}: runs the {d['kept']} ({said})")
    return out
