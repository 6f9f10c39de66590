"""The step-time model: one training step of a placement, from its requests' proved-best programs and the step section.

docs/workloads.md ("The step-time model") derives it with a worked example.
Per placement, with ``p`` pipeline stages, ``t`` the tensor axis size and
``m`` microbatches:

* **compute**: a pass through one stage costs ``layers / p`` layers of the
  step section's per-layer time, divided by ``t``.
* **layer communication** (requests over the tensor or expert axis): on the
  critical path, ``count / (2 m)`` occurrences in every forward and every
  backward pass. The stages' passes run at once, so their groups share the
  links they have in common: a pass that ``k`` stages' passes overlap
  (itself included, :func:`concurrency`, read off the schedule priced
  one stage at a time) pays each occurrence at its best program's time on
  the machine of one stage (:func:`stage_view`) plus ``(k - 1) / (p - 1)`` of
  the way to its time with every stage's groups at once (:func:`layer_seconds`).
* **pipeline sends** (a ``send_recv`` over the pipeline axis): a pass on
  stage ``s`` waits for the previous stage's pass of the same microbatch plus
  one transfer (the ``send_recv``'s time one way, :func:`one_way`: a pipeline
  send goes from one stage to the next), the transfers between two stages in
  one direction one at a time (:func:`timeline`, which runs the schedule of ``hierarchies/step.py``
  event by event).
* **the bubble**: the idle time of the schedule without transfers, beside
  the compute and layer communication of the stage whose passes pay most
  (``layer_comm_s``): ``(p - 1)`` forward-and-backward passes for 1F1B and
  GPipe alike when every pass has one price.
* **gradient buckets** (requests over the data axis): each occurrence is a
  bucket (a request marked ``"gradient": true`` arrives as its buckets,
  ``solver/gradients.py``, so the full ones then the last), ready when the share of the stage's last backward pass done equals
  the share of the bucket bytes up to it; buckets are reduced one after the
  other, overlapping that pass, each at its planned time (every stage's
  groups at once). Only what runs past the pass is exposed.
  Requests that run at once share a level's links: when a bucket's program and
  a layer request's program use a common level, the backward pass's layer
  communication and the buckets cannot overlap each other, so the buckets end
  no earlier than the pass's start plus both.
* **after**: any other request runs once per step after the pipeline.

The parts add up: ``step = compute + layer + bubble + pipeline + gradient + after``
(each term is a difference of two schedules, so none is negative).
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass

from p2synth.hierarchies.model import Hierarchy
from p2synth.hierarchies.placement import Placement
from p2synth.hierarchies.plan_file import PlanFile
from p2synth.hierarchies.program import NamedRequest, Program
from p2synth.hierarchies.step import Part, Pass, Role, Schedule, StepSpec, request_part, stage_ops
from p2synth.solver.models import CostModelKind, program_cost


@dataclass(frozen=True)
class StepTime:
    """The predicted time of one training step and its parts (seconds); they add up to `step_s`."""

    step_s: float
    compute_s: float
    layer_comm_s: float
    bubble_s: float
    pipeline_comm_s: float
    gradient_exposed_s: float
    after_s: float

    @property
    def exposed_comm_s(self) -> float:
        """Communication on the critical path: layer requests, pipeline sends, the exposed gradient and the rest."""
        return self.layer_comm_s + self.pipeline_comm_s + self.gradient_exposed_s + self.after_s

    def to_json(self) -> dict:
        """The figures as in the result JSON's per-placement ``step``."""
        return {"step_s": self.step_s, "compute_s": self.compute_s, "exposed_comm_s": self.exposed_comm_s,
                "layer_comm_s": self.layer_comm_s, "bubble_s": self.bubble_s, "pipeline_comm_s": self.pipeline_comm_s,
                "gradient_exposed_s": self.gradient_exposed_s, "after_s": self.after_s}


@dataclass(frozen=True)
class Occurrence:
    """A request of the step as the model needs it: its part, bytes, count, best program and its predicted time.

    For a layer request `seconds` is its time on one stage's machine and
    `shared_seconds` its time with every stage's groups at once (None: the same).
    """

    part: Part
    message_bytes: int
    count: int
    program: Program
    seconds: float
    shared_seconds: float | None = None


@dataclass(frozen=True)
class PassTimes:
    """When one stage ran one pass: start and end (seconds from the step's start)."""

    start: float
    end: float


PassKey = tuple[int, Pass, int]  # (stage, pass, microbatch)


def timeline(schedule: Schedule, stages: int, microbatches: int, forward_s: float, backward_s: float,
             send_s: float, extra_s: dict[PassKey, float] | None = None) -> list[dict[tuple[Pass, int], PassTimes]]:
    """Per stage, when each of its passes runs: each stage runs :func:`stage_ops` in order, as soon as it can.

    A pass takes `forward_s` or `backward_s`, plus ``extra_s[(stage, pass, microbatch)]`` where given.

    The forward pass of microbatch ``j`` on stage ``s > 0`` starts no earlier
    than the transfer of stage ``s - 1``'s output has arrived; a backward pass
    on stage ``s < stages - 1`` likewise from stage ``s + 1``. A transfer takes
    `send_s` and starts when the pass that makes it ends, or when the previous
    transfer between the same two stages in the same direction has arrived,
    whichever is later: one direction of a link carries one transfer at a time.
    """
    orders = [stage_ops(schedule, s, stages, microbatches) for s in range(stages)]
    done: list[dict[tuple[Pass, int], PassTimes]] = [{} for _ in range(stages)]
    position, free = [0] * stages, [0.0] * stages
    channel: dict[tuple[int, int], float] = {}  # (from, to) stage: when its last transfer arrived
    remaining = stages * 2 * microbatches
    while remaining:
        moved = False
        for s in range(stages):
            if position[s] == len(orders[s]):
                continue
            kind, j = orders[s][position[s]]
            source = s - 1 if kind is Pass.FORWARD else s + 1
            ready = 0.0
            if 0 <= source < stages:
                if (kind, j) not in done[source]:
                    continue
                ready = max(done[source][kind, j].end, channel.get((source, s), 0.0)) + send_s
                channel[source, s] = ready
            start = max(free[s], ready)
            free[s] = start + (forward_s if kind is Pass.FORWARD else backward_s) + (extra_s or {}).get((s, kind, j), 0.0)
            done[s][kind, j] = PassTimes(start, free[s])
            position[s] += 1
            remaining -= 1
            moved = True
        if not moved:
            raise RuntimeError("the pipeline schedule deadlocked")  # stage_ops' orders never do
    return done


def buckets_end(last: PassTimes, buckets: list[Occurrence], layer_share_s: float) -> float:
    """When the last gradient bucket is reduced, the buckets running one after the other during the pass `last`.

    Bucket ``k`` is ready when the share of the pass done equals the share
    of the bucket bytes through ``k``. `layer_share_s` is the layer
    communication of that pass that shares a level with the buckets: the
    buckets cannot end before the pass's start plus it plus their own time.
    """
    total = sum(b.message_bytes for b in buckets)
    end, through = last.start, 0
    for b in buckets:
        through += b.message_bytes
        end = max(end, last.start + (last.end - last.start) * through / total) + b.seconds
    return max(end, last.start + layer_share_s + math.fsum(b.seconds for b in buckets))


def concurrency(passes: list[dict[tuple[Pass, int], PassTimes]]) -> dict[PassKey, float]:
    """Per pass of a :func:`timeline`, how many stages run a pass at once with it, on average over its duration:
    1 (itself) plus, for every other stage, the share of the pass that stage's passes overlap."""
    busy = [_busy_before(stage) for stage in passes]
    out = {}
    for s, stage in enumerate(passes):
        for (kind, j), t in stage.items():
            length = t.end - t.start
            overlap = math.fsum(before(t.end) - before(t.start) for r, before in enumerate(busy) if r != s)
            out[s, kind, j] = 1.0 + (overlap / length if length > 0 else 0.0)
    return out


def _busy_before(stage: dict[tuple[Pass, int], PassTimes]):
    """For one stage of a timeline (passes one at a time), the function: time `x` -> how long the stage ran passes
    before `x` (a binary search over its passes and their running total)."""
    spans = sorted((t.start, t.end) for t in stage.values())
    starts = [a for a, _ in spans]
    total = [0.0, *itertools.accumulate(b - a for a, b in spans)]

    def before(x: float) -> float:
        i = bisect.bisect_right(starts, x)
        return 0.0 if i == 0 else total[i - 1] + min(spans[i - 1][1], x) - spans[i - 1][0]
    return before


def layer_seconds(layer: list[Occurrence], stages: int, microbatches: int, k: float) -> float:
    """The layer communication of one pass that `k` of the `stages` stages run at once (:func:`concurrency`).

    Each occurrence costs its one-stage time plus ``(k - 1) / (stages - 1)`` of
    the way to its time with every stage's groups at once: the links the
    stages share carry ``k`` stages' traffic instead of one stage's.
    """
    share = (k - 1) / (stages - 1) if stages > 1 else 0.0
    return math.fsum(o.count / (2 * microbatches) * (o.seconds + share * (_shared(o) - o.seconds)) for o in layer)


def _shared(o: Occurrence) -> float:
    """An occurrence's time with every stage's groups at once (its one-stage time when it has none)."""
    return o.seconds if o.shared_seconds is None else o.shared_seconds


def step_time(step: StepSpec, placement: Placement, occurrences: list[Occurrence]) -> StepTime:
    """The step-time model (module docstring) for `placement`, its requests given as `occurrences` in workload order."""
    stages, tensor = step.axis_size(Role.PIPELINE, placement.axes), step.axis_size(Role.TENSOR, placement.axes)
    m = step.microbatches
    forward, backward = step.pass_seconds(stages, tensor)
    by_part = {part: [o for o in occurrences if o.part is part] for part in Part}
    alone = layer_seconds(by_part[Part.LAYER], stages, m, 1.0)
    send = max((o.seconds for o in by_part[Part.PIPELINE]), default=0.0) if stages > 1 else 0.0
    priced_alone = timeline(step.schedule, stages, m, forward + alone, backward + alone, 0.0)
    layer = {key: layer_seconds(by_part[Part.LAYER], stages, m, k) for key, k in concurrency(priced_alone).items()}
    still = timeline(step.schedule, stages, m, forward, backward, 0.0, layer)
    moving = timeline(step.schedule, stages, m, forward, backward, send, layer)
    still_end, pipe_end = _end(still), _end(moving)
    buckets = [o for o in by_part[Part.GRADIENT] for _ in range(o.count)]
    grad_end = pipe_end
    if buckets:
        shared = any(_levels(o.program) & _levels(b.program) for o in by_part[Part.LAYER] for b in buckets)
        grad_end = max(buckets_end(stage[Pass.BACKWARD, m - 1], buckets, layer[s, Pass.BACKWARD, m - 1] if shared else 0.0)
                       for s, stage in enumerate(moving))
        grad_end = max(grad_end, pipe_end)
    after = math.fsum(o.count * o.seconds for o in by_part[Part.AFTER])
    compute = m * (forward + backward)
    layer_comm = max(math.fsum(v for (s, _, _), v in layer.items() if s == stage) for stage in range(stages))
    return StepTime(step_s=grad_end + after, compute_s=compute, layer_comm_s=layer_comm,
                    bubble_s=still_end - compute - layer_comm, pipeline_comm_s=pipe_end - still_end,
                    gradient_exposed_s=grad_end - pipe_end, after_s=after)


def _end(passes: list[dict[tuple[Pass, int], PassTimes]]) -> float:
    """When the last pass of a :func:`timeline` ends."""
    return max(t.end for stage in passes for t in stage.values())


def _levels(program: Program) -> set[int]:
    """The levels whose links a program's steps use."""
    return {cell.level for step in program.steps for cell in step.slice}


def stage_view(placement: Placement, axis: int) -> Placement:
    """The machine one pipeline stage sees: `placement` with the pipeline axis `axis` cut to one stage.

    Each level's count is divided by the axis's factor at that level and the
    axis has size 1, so a level's unit holds only one stage's devices: the
    devices that share its uplink while a stage's requests run.
    """
    h = placement.hierarchy
    factors = placement.matrix[axis]
    levels = [{**lv.model_dump(), "count": lv.count // factors[l]} for l, lv in enumerate(h.levels)]
    hierarchy = Hierarchy.model_validate({**h.model_dump(), "levels": levels})
    axes = tuple(a if i != axis else a.model_copy(update={"size": 1}) for i, a in enumerate(placement.axes))
    matrix = tuple(row if i != axis else (1,) * len(row) for i, row in enumerate(placement.matrix))
    return Placement(hierarchy, axes, matrix)


def one_way(placement: Placement) -> Placement:
    """`placement` on links that carry data one way at a time: every level's duplex efficiency dropped (1)."""
    h = placement.hierarchy
    levels = [{**lv.model_dump(), "duplex_efficiency": None} for lv in h.levels]
    return Placement(Hierarchy.model_validate({**h.model_dump(), "levels": levels}), placement.axes, placement.matrix)


@dataclass(frozen=True)
class Chosen:
    """A request of the step, the program it runs, and that program's predicted seconds on the whole placement (as
    planned: inf for a request the planner found no program for)."""

    named: NamedRequest
    program: Program
    seconds: float


def occurrences_of(step: StepSpec, placement: Placement, chosen: list[Chosen], kind: CostModelKind) -> list[Occurrence]:
    """The `chosen` programs of one placement's requests as the model's occurrences.

    Each is priced (cost model `kind`) where it runs
    in the step: a layer request inside one stage's pass, so on :func:`stage_view`,
    and with every stage's groups at once as planned (``shared_seconds``); a pipeline send one way,
    from one stage to the next, so on :func:`one_way`; the others as planned
    (the gradient buckets of all stages at once: their last backward passes
    end one pass apart, and a bucket's reduction is not short beside a pass).
    """
    pipeline = step.axis_index(Role.PIPELINE, placement.axes)
    out = []
    for c in chosen:
        named, program, seconds, shared = c.named, c.program, c.seconds, None
        part = request_part(step, placement.axes, named.request)
        if pipeline is not None and placement.axes[pipeline].size > 1 and part is Part.LAYER:
            seconds = program_cost(stage_view(placement, pipeline), named.request, program, named.message_bytes, kind)
            shared = program_cost(placement, named.request, program, named.message_bytes, kind)
        elif part is Part.PIPELINE:
            seconds = program_cost(one_way(placement), named.request, program, named.message_bytes, kind)
        out.append(Occurrence(part, named.message_bytes, named.count, program, seconds, shared))
    return out


def planned_step_time(plan: PlanFile, index: int) -> tuple[StepTime, float] | None:
    """The step-time model's prediction for placement `index` of a plan file, each request running the program the
    plan runs (its first), priced on the plan's hierarchy with its cost model; and the summed communication (count x
    seconds, the plan's ``total_s``). None for a plan without a step section. On the hierarchy the plan was made on,
    the planner's own figures (but where the plan holds no program for a request: the planner then predicts inf, this
    prices the default); on another (a plan file whose hierarchy was replaced), what that one predicts for the same
    programs."""
    if plan.step is None:
        return None
    kind = plan.document.get("cost_model", CostModelKind.ALPHA_BETA)  # a spec's default, as the solver's
    planned = plan.placement(index)
    chosen = [Chosen(r.named, r.best.program,
                     program_cost(planned.placement, r.named.request, r.best.program, r.named.message_bytes, kind))
              for r in planned.requests]
    total = math.fsum(c.named.count * c.seconds for c in chosen)
    return step_time(plan.step, planned.placement, occurrences_of(plan.step, planned.placement, chosen, kind)), total
