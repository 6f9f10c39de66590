"""Where a traced step's layer communication went: waiting for the group's last member, or the call itself.

    python -m scripts.layer_waits TRACE... [--variant best|default] [--json OUT]

TRACE is `runtime.step --trace`'s document (or it gzipped, `.gz`). A layer collective (a tensor or
expert all-reduce, one of `runtime.step`'s LAYER runs) cannot finish on any
member before the last member of its group has entered it. So each run's time
on a rank splits exactly in two, from the trace alone:

* **waiting**: from the rank's entry to the last member's entry (the group's
  arrival), time the rank spends because a member is late: still in its compute
  sleep, its pipeline receive or its previous call;
* **after arrival**: from the arrival to the rank's exit, what the collective
  takes once every member is in it.

The k-th run of a request on one member is matched with the k-th on the others
of its group (the ranks whose coordinates differ only on the request's axes):
they run the same pass order. The split needs one clock, so every rank of the
trace must report the same one (one host, as on the emulated testbed);
otherwise the command refuses.

Per trace, request and variant it prints the medians over the timed rounds of: the
runs a rank makes in a step, the layer communication a step (mean over ranks),
its two parts, and the median run's time after arrival. Beside them, how many
of the job's ranks were inside a traced MPI call (a layer run, a pipeline
receive wait, a gradient bucket) at the middle of each run's time after
arrival (median over runs): on shared cores each of them polls for CPU time.
Untraced MPI time (the sends' final wait, the barrier) is not counted, so it is
a lower bound. Receive waits count only where the trace says they waited inside
MPI (`poll_sleep_us` 0 or absent): with `runtime.step --poll-sleep-us` they sleep.

Exit status: 0; 2 a trace that cannot be split (no layer runs, ranks on
different clocks, mismatched runs), in one line.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from p2synth.hierarchies.cli import EXIT_USAGE, write_json_atomic


class TraceError(ValueError):
    """A trace that cannot be split, in one line."""


@dataclass(frozen=True)
class RunSplit:
    """One rank's layer runs of one request in one step, in order: each run's two parts (seconds)."""

    waiting_each_s: tuple[float, ...]
    after_arrival_each_s: tuple[float, ...]
    in_mpi_each: tuple[int, ...]  # per run: ranks of the job inside a traced MPI call midway through its time after arrival

    @property
    def runs(self) -> int:
        """The runs this rank made in the step."""
        return len(self.waiting_each_s)

    @property
    def waiting_s(self) -> float:
        """The step's time waiting for the group's last member."""
        return float(sum(self.waiting_each_s))

    @property
    def after_arrival_s(self) -> float:
        """The step's time in runs after their group's arrival."""
        return float(sum(self.after_arrival_each_s))

    @property
    def in_call_s(self) -> float:
        """The step's layer communication: both parts."""
        return self.waiting_s + self.after_arrival_s


@dataclass(frozen=True)
class LayerWaits:
    """One request under one variant: medians over the timed rounds (seconds; a step's sums are means over ranks)."""

    request: str
    variant: str
    rounds: int
    runs_per_rank: int
    in_call_s: float
    waiting_s: float
    after_arrival_s: float
    after_arrival_run_s: float  # median over every run of every rank and round
    ranks_in_mpi: float  # median over every run: ranks inside a traced MPI call midway after arrival
    ranks: int

    @property
    def waiting_share(self) -> float:
        """The part of the layer communication spent waiting for the group's last member."""
        return self.waiting_s / self.in_call_s if self.in_call_s > 0 else 0.0


def groups(coords: list[list[int]], axes: list[int]) -> list[tuple[int, ...]]:
    """Per rank, the ranks of its group for a request over `axes`: those whose coordinates agree off those axes."""
    def key(c: list[int]) -> tuple[int, ...]:
        return tuple(x for a, x in enumerate(c) if a not in axes)
    members: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for rank, c in enumerate(coords):
        members[key(c)].append(rank)
    return [tuple(members[key(c)]) for c in coords]


def _runs(step: dict, request: int) -> list[dict]:
    return [e for e in step["events"] if e["kind"] == "layer" and e["request"] == request]


def in_mpi(steps: list[dict], receives_poll: bool = True) -> list[list[tuple[float, float]]]:
    """Per rank, the step's traced intervals inside MPI: layer runs, gradient buckets and, where they poll inside
    MPI (`receives_poll`), pipeline receive waits."""
    kinds = ("layer", "bucket", "recv") if receives_poll else ("layer", "bucket")
    return [[(e["start"], e["end"]) for e in s["events"] if e["kind"] in kinds] for s in steps]


def split_step(steps: list[dict], group: list[tuple[int, ...]], request: int,
               receives_poll: bool = True) -> list[RunSplit]:
    """Per rank, its runs of `request` in one step split at each run's group arrival (`steps`: every rank's step;
    `receives_poll`: whether its pipeline receive waits polled inside MPI)."""
    runs = [_runs(s, request) for s in steps]
    busy = in_mpi(steps, receives_poll)
    out = []
    for rank, mine in enumerate(runs):
        members = group[rank]
        if any(len(runs[m]) != len(mine) for m in members):
            raise TraceError(f"rank {rank}: {len(mine)} runs of layer request {request} in a step, but its group "
                             f"{list(members)} ran {[len(runs[m]) for m in members]}: not one step's trace")
        waiting, after, meanwhile = [], [], []
        for k, run in enumerate(mine):
            arrival = max(runs[m][k]["start"] for m in members)
            if run["end"] < arrival:  # impossible on one clock: each rank stamps its entry before it calls
                raise TraceError(f"rank {rank} left run {k} of layer request {request} {arrival - run['end']:.6f} s "
                                 "before its last member entered it: the ranks' clocks do not compare")
            waiting.append(arrival - run["start"])
            after.append(run["end"] - arrival)
            middle = (arrival + run["end"]) / 2
            meanwhile.append(sum(any(a <= middle <= b for a, b in intervals) for intervals in busy))
        out.append(RunSplit(tuple(waiting), tuple(after), tuple(meanwhile)))
    return out


def layer_waits(trace: dict) -> list[LayerWaits]:
    """Every layer request's split, per variant, over the trace's timed rounds (warm-ups left out)."""
    ranks = trace["ranks"]
    layers = trace.get("layers")
    if not layers:
        raise TraceError("the trace has no layer requests: trace a step whose plan has a tensor or expert request, "
                         "with this checkout's runtime.step")
    clocks = {r.get("clock") for r in ranks}
    if len(clocks) != 1 or None in clocks:
        raise TraceError(f"the ranks report {len(clocks)} clocks ({', '.join(sorted(map(str, clocks)))}): the split "
                         "compares entry times across ranks and needs every rank on one host")
    coords = [r["coords"] for r in ranks]
    receives_poll = not trace.get("poll_sleep_us")
    out = []
    for layer in layers:
        group = groups(coords, layer["axes"])
        by_variant: dict[str, list[list[RunSplit]]] = defaultdict(list)
        for k, step in enumerate(ranks[0]["steps"]):
            if step["round"] >= 0:
                steps = [r["steps"][k] for r in ranks]
                by_variant[step["variant"]].append(split_step(steps, group, layer["request"], receives_poll))
        for variant, rounds in by_variant.items():
            def median_mean(field: str) -> float:
                return float(np.median([np.mean([getattr(s, field) for s in splits]) for splits in rounds]))
            each = [t for splits in rounds for s in splits for t in s.after_arrival_each_s]
            meanwhile = [n for splits in rounds for s in splits for n in s.in_mpi_each]
            out.append(LayerWaits(layer["name"], variant, len(rounds),
                                  int(np.median([s.runs for splits in rounds for s in splits])),
                                  median_mean("in_call_s"), median_mean("waiting_s"), median_mean("after_arrival_s"),
                                  float(np.median(each)) if each else 0.0,
                                  float(np.median(meanwhile)) if meanwhile else 0.0, len(ranks)))
    return out


def trace_name(path: Path) -> str:
    """A trace file's name in the table: without `.gz`, `.json` and `.trace`."""
    name = path.name
    for suffix in (".gz", ".json", ".trace"):
        name = name.removesuffix(suffix)
    return name


def load_trace(path: Path) -> dict:
    """A trace document, gzipped or not."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def table(rows: list[tuple[str, LayerWaits]]) -> list[str]:
    """The splits of named traces as a markdown table (ms)."""
    lines = ["| trace | request | variant | rounds | runs a step (per rank) | layer comm ms a step | waiting for the last "
             "member ms | after arrival ms | waiting share | a run after arrival ms (median) | ranks inside MPI meanwhile "
             "(median) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in rows:
        lines.append(f"| {name} | {r.request} | {r.variant} | {r.rounds} | {r.runs_per_rank} | {r.in_call_s * 1e3:.1f} | "
                     f"{r.waiting_s * 1e3:.1f} | {r.after_arrival_s * 1e3:.1f} | {r.waiting_share:.0%} | "
                     f"{r.after_arrival_run_s * 1e3:.3f} | {r.ranks_in_mpi:g} of {r.ranks} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Entry point: print the splits (and write them as JSON); the exit status."""
    p = argparse.ArgumentParser(prog="python -m scripts.layer_waits", description=__doc__.split("\n")[0])
    p.add_argument("traces", type=Path, nargs="+", metavar="TRACE", help="runtime.step --trace's documents (.gz too)")
    p.add_argument("--variant", choices=("best", "default"), default=None, help="only this variant's rows (default: both)")
    p.add_argument("--json", type=Path, default=None, help="write the splits here as JSON")
    args = p.parse_args(argv)
    rows = []
    for path in args.traces:
        try:
            rows += [(trace_name(path), r) for r in layer_waits(load_trace(path))
                     if args.variant in (None, r.variant)]
        except (OSError, EOFError, json.JSONDecodeError, KeyError, TraceError) as e:
            why = e if isinstance(e, TraceError) else f"not a runtime.step --trace document: {e}"
            print(f"error: {path}: {why}", file=sys.stderr)
            return EXIT_USAGE
    print("\n".join(table(rows)))
    if args.json is not None:
        write_json_atomic([{"trace": name, **asdict(r), "waiting_share": r.waiting_share} for name, r in rows], args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
