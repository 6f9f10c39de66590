"""What ``runtime.step`` reports: the rounds of each variant, the --out and --trace documents, the table and the
lines under it."""

from __future__ import annotations

import argparse
import socket
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from mpi4py import MPI
from rich.table import Table
from rich.text import Text

from p2synth.hierarchies.step import Part
from p2synth.runtime.backends import Backend, BackendKind
from p2synth.runtime.job import mpi_version
from p2synth.runtime.stats import median_interval
from p2synth.runtime.step_job import StepJob, Variant
from p2synth.runtime.step_rank import COMPONENTS, Figures

THREAD_LEVELS = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled", MPI.THREAD_SERIALIZED: "serialized",
                 MPI.THREAD_MULTIPLE: "multiple"}


@dataclass
class VariantRounds:
    """The rounds of one variant: per round the slowest rank's step time and components."""

    rounds: list[list[float]] = field(default_factory=list)  # [step_s, *COMPONENTS] per round

    def summary(self) -> dict:
        """Median and 95% interval of the step time; medians of the components; the rounds."""
        columns = list(zip(*self.rounds))
        interval = median_interval(columns[0])
        out = {"step_s": interval.median, "step_ci_s": interval.to_json(), "coverage": interval.coverage}
        out |= {c: float(np.median(col)) for c, col in zip(COMPONENTS, columns[1:])}
        out["rounds"] = [dict(zip(("step_s", *COMPONENTS), r)) for r in self.rounds]
        return out


def slowest(figures: Figures, world: MPI.Intracomm) -> list[float]:
    """The figures of the rank whose step took longest (collective)."""
    everyone = np.empty((world.Get_size(), 1 + len(COMPONENTS)), dtype=np.float64)
    world.Allgather(np.array(figures.vector(), dtype=np.float64), everyone)
    return [float(x) for x in everyone[int(np.argmax(everyone[:, 0]))]]


def clock_id() -> str:
    """What names this rank's perf_counter clock: the kernel's boot id (one per host, shared by every process and
    network namespace on it), or the host name where there is none."""
    try:
        return "boot:" + Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "host:" + socket.gethostname()


def trace_document(job: StepJob, traces: list[tuple[str, list[dict]]], poll_sleep_us: int = 0) -> dict:
    """The --trace document: the layer requests (index, name, axes); how the pipeline's waits waited
    (`poll_sleep_us`, 0: inside MPI); per rank its clock, axis coordinates, stage and steps (warm-ups first, then the
    rounds in the order they ran), each with its passes, layer runs, receive waits and buckets (perf_counter seconds:
    they compare across ranks with the same clock)."""
    ranks = []
    for rank, (clock, steps) in enumerate(traces):
        coords = job.planned.placement.axis_coords(rank)
        stage = 0 if job.pipeline_axis is None else coords[job.pipeline_axis]
        ranks.append({"rank": rank, "clock": clock, "coords": list(coords), "stage": stage, "steps": steps})
    layers = [{"request": i, "name": r.name, "axes": sorted(job.planned.requests[i].named.request.axes),
               "message_bytes": r.message_bytes}
              for i, r in enumerate(job.requests) if r.part is Part.LAYER]
    return {"axes": [a.name for a in job.plan.axes], "pipeline_axis": job.pipeline_axis, "layers": layers,
            "poll_sleep_us": poll_sleep_us, "ranks": ranks}


def step_document(job: StepJob, args: argparse.Namespace, backend: Backend, world: MPI.Intracomm, level: int,
                  overlap: bool, measured: dict[Variant, VariantRounds], wrong: dict[str, int]) -> dict:
    """The --out document (docs/runtime.md, "Running a step")."""
    placement = job.planned.placement
    entry = job.plan.entries[job.planned.index]
    predicted = entry.get("step")
    requests = []
    for r in job.requests:
        item = {"name": r.name, "part": str(r.part), "count": r.count, "message_bytes": r.message_bytes}
        if r.selection is not None:
            cands = r.selection.candidates
            item |= {"default": cands[0].program.text(placement), "best": cands[-1].program.text(placement)}
        requests.append(item)
    return {
        "placement": job.planned.index,
        "matrix": [list(row) for row in placement.matrix],
        "description": placement.describe(),
        "ranks": world.Get_size(),
        "backend": str(backend.kind),
        "mpi": mpi_version(),
        "mpi_thread_level": THREAD_LEVELS.get(level, str(level)),
        "gradient_overlap": overlap,
        "gradient_overlap_note": None if overlap else (
            "cupy: buckets run after the last backward pass" if backend.kind is BackendKind.CUPY
            else "MPI is not THREAD_MULTIPLE: buckets run after the last backward pass"),
        "step": job.step.model_dump(mode="json", exclude_none=True),
        "stages": job.stages,
        "tensor": job.tensor,
        "activation_bytes": job.activation_bytes,
        "requests": requests,
        "timing": {"warmup": args.warmup, "rounds": args.rounds, "order": "interleaved, alternating per round",
                   "poll_sleep_us": args.poll_sleep_us},
        "variants": {str(v): rounds.summary() for v, rounds in measured.items()},
        "predicted": predicted if isinstance(predicted, dict) else None,
        "wrong": wrong,
    }


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def step_table(doc: dict) -> Table:
    """Per variant the measured step (median and interval) and its parts; the plan's prediction beside them."""
    table = Table(title=Text(f"placement {doc['placement']}: {doc['description']} (ms; median of {doc['timing']['rounds']} "
                             "rounds, parts of the slowest rank)"), title_justify="left")
    for col in ("variant", "step", "95% interval", "compute", "layer comm", "pipeline wait", "gradient exposed", "after"):
        table.add_column(col, justify="left" if col == "variant" else "right")
    for name, v in doc["variants"].items():
        low, high = v["step_ci_s"]
        table.add_row(name, _ms(v["step_s"]), Text(f"[{_ms(low)}, {_ms(high)}]"), *(_ms(v[c]) for c in COMPONENTS))
    p = doc["predicted"]
    if p:
        wait = None if p.get("pipeline_comm_s") is None else p["pipeline_comm_s"] + p.get("bubble_s", 0.0)
        table.add_row("predicted", _ms(p.get("step_s")), "", _ms(p.get("compute_s")), _ms(p.get("layer_comm_s")),
                      _ms(wait), _ms(p.get("gradient_exposed_s")), _ms(p.get("after_s")))
    return table


def preamble(doc: dict) -> list[str]:
    """The '#' lines under the table: the job, the step, what ran."""
    step = doc["step"]
    lines = [
        f"# p2synth step: {doc['ranks']} ranks, backend {doc['backend']}, {doc['mpi']}, MPI thread level {doc['mpi_thread_level']}",
        f"# {step['schedule']}, {doc['stages']} stage(s), {step['microbatches']} microbatches, {step['layers']} layers, "
        f"tensor {doc['tensor']}; " + (f"activations {doc['activation_bytes']} B a send" if doc["stages"] > 1 else "no pipeline sends"),
        "# pipeline wait = blocked on pipeline receives and sends (bubble and exposed sends); predicted: pipeline_comm_s + bubble_s",
    ]
    if doc["timing"].get("poll_sleep_us"):
        lines.append(f"# pipeline waits: tested every {doc['timing']['poll_sleep_us']} us, asleep in between")
    if not doc["gradient_overlap"]:
        lines.append(f"# gradient buckets not overlapped: {doc['gradient_overlap_note']}")
    for r in doc["requests"]:
        programs = f"best {r['best']}, default {r['default']}" if "best" in r else "point-to-point sends"
        lines.append(f"# {r['name']}: {r['part']}, {r['count']} x {r['message_bytes']} B: {programs}")
    return lines
