"""A training step as the user describes it: axis roles, the pipeline schedule, compute, and what each request is.

The spec's optional ``step`` section (docs/workloads.md, "The step-time
model") is read here, below the solver and the runtime, so that the planner
(``solver/steptime.py``) models the same step that ``runtime.step`` runs.

* Roles: which axis plays data, tensor, pipeline or expert parallelism is
  named, never guessed from an axis name.
* The schedule: the order in which each pipeline stage runs the forward and
  backward passes of its microbatches (:func:`stage_ops`): 1F1B (PipeDream's
  one-forward-one-backward, as Megatron-LM runs it) or GPipe (all forwards,
  then all backwards).
* Compute: one layer's forward and backward time for one microbatch on one
  device holding the whole layer, as a measured time or as FLOPs at a peak
  rate and an efficiency. A stage holds ``layers / pipeline`` layers; the
  tensor axis divides each layer's compute.
* Each workload request gets a part (:func:`part_of`): a request over the
  tensor or expert axis runs inside every layer (on the critical path, half
  of its occurrences in the forward passes, half in the backward ones); one
  over the data axis is a gradient bucket, reduced while the last
  microbatch's backward pass runs; a ``send_recv`` over the pipeline axis
  carries the activations (forward) and their gradients (backward) between
  adjacent stages; anything else runs once per step, after the pipeline.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from p2synth.hierarchies.placement import Axis
from p2synth.hierarchies.program import Collective, Request

MAX_MICROBATCHES = 4096
MAX_LAYERS = 100_000


class Role(str, Enum):
    """What an axis does in a training step."""

    DATA = "data"
    TENSOR = "tensor"
    PIPELINE = "pipeline"
    EXPERT = "expert"

    def __str__(self) -> str:
        return self.value


class Schedule(str, Enum):
    """The pipeline schedule: the order of forward and backward passes on each stage."""

    ONE_F_ONE_B = "1f1b"
    GPIPE = "gpipe"

    def __str__(self) -> str:
        return self.value


class Pass(str, Enum):
    """A forward or a backward pass of one microbatch through one stage."""

    FORWARD = "F"
    BACKWARD = "B"

    def __str__(self) -> str:
        return self.value


class Part(str, Enum):
    """The part a workload request plays in the step (see the module docstring)."""

    LAYER = "layer"          # tensor or expert axis: inside every layer, on the critical path
    GRADIENT = "gradient"    # data axis: a gradient bucket, overlapped with the last backward pass
    PIPELINE = "pipeline"    # send_recv over the pipeline axis: activations between stages
    AFTER = "after"          # anything else: once per step, after the pipeline

    def __str__(self) -> str:
        return self.value


class Compute(BaseModel):
    """One layer's compute for one microbatch on a device holding the whole layer: times, or FLOPs at a rate.

    Either ``forward_ms`` (and ``backward_ms``, default twice the forward),
    or ``forward_gflop`` (and ``backward_gflop``, default twice the forward)
    with ``peak_tflops`` and ``efficiency`` (the fraction of peak reached).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    forward_ms: float | None = Field(default=None, gt=0, le=1e7, allow_inf_nan=False,
                                     description="forward time of one layer for one microbatch, milliseconds")
    backward_ms: float | None = Field(default=None, gt=0, le=1e7, allow_inf_nan=False,
                                      description="backward time of one layer for one microbatch (default 2x forward)")
    forward_gflop: float | None = Field(default=None, gt=0, le=1e12, allow_inf_nan=False,
                                        description="forward GFLOP of one layer for one microbatch")
    backward_gflop: float | None = Field(default=None, gt=0, le=1e12, allow_inf_nan=False,
                                         description="backward GFLOP of one layer for one microbatch (default 2x forward)")
    peak_tflops: float | None = Field(default=None, gt=0, le=1e9, allow_inf_nan=False,
                                      description="the device's peak rate, TFLOP/s")
    efficiency: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False,
                                     description="fraction of the peak the layer reaches")

    @model_validator(mode="after")
    def _one_form(self) -> "Compute":
        timed = self.forward_ms is not None
        counted = self.forward_gflop is not None
        if timed == counted:
            raise ValueError("give forward_ms, or forward_gflop with peak_tflops and efficiency")
        if timed and any(v is not None for v in (self.backward_gflop, self.peak_tflops, self.efficiency)):
            raise ValueError("forward_ms is a time: drop backward_gflop, peak_tflops and efficiency")
        if counted and (self.peak_tflops is None or self.efficiency is None or self.backward_ms is not None):
            raise ValueError("forward_gflop needs peak_tflops and efficiency (and backward_gflop, not backward_ms)")
        return self

    def layer_seconds(self) -> tuple[float, float]:
        """(forward, backward) seconds of one whole layer for one microbatch."""
        if self.forward_ms is not None:
            backward = self.backward_ms if self.backward_ms is not None else 2 * self.forward_ms
            return self.forward_ms / 1e3, backward / 1e3
        assert self.forward_gflop is not None and self.peak_tflops is not None and self.efficiency is not None
        backward = self.backward_gflop if self.backward_gflop is not None else 2 * self.forward_gflop
        rate = self.peak_tflops * 1e3 * self.efficiency  # GFLOP/s
        return self.forward_gflop / rate, backward / rate


class StepSpec(BaseModel):
    """The spec's ``step`` section: roles of the axes, the schedule, microbatches, layers and compute."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    roles: dict[Role, str] = Field(min_length=1, description='the axis playing each role, e.g. {"data": "dp", "tensor": "tp"}')
    schedule: Schedule = Field(default=Schedule.ONE_F_ONE_B, description="pipeline schedule: 1f1b or gpipe")
    microbatches: int = Field(default=1, ge=1, le=MAX_MICROBATCHES, description="microbatches per step")
    layers: int = Field(ge=1, le=MAX_LAYERS, description="layers of the model, split evenly over the pipeline stages")
    compute: Compute = Field(description="one layer's compute for one microbatch")

    def axis(self, role: Role) -> str | None:
        """The name of the axis playing `role` (None: no axis does)."""
        return self.roles.get(role)

    def pass_seconds(self, stages: int, tensor: int) -> tuple[float, float]:
        """(forward, backward) compute of one microbatch's pass through one of `stages` stages: the stage's
        ``layers / stages`` layers, each layer's compute split over `tensor` devices."""
        forward, backward = self.compute.layer_seconds()
        share = self.layers / stages / tensor
        return forward * share, backward * share

    def axis_index(self, role: Role, axes: Sequence[Axis]) -> int | None:
        """The index in `axes` of the axis playing `role` (None: no axis does); ValueError if `axes` lacks it."""
        name = self.roles.get(role)
        if name is None:
            return None
        names = [a.name for a in axes]
        if name not in names:
            raise ValueError(f"the {role} role names axis {name!r}, which the plan does not have")
        return names.index(name)

    def axis_size(self, role: Role, axes: Sequence[Axis]) -> int:
        """The size of the axis in `axes` playing `role` (1: no axis does)."""
        index = self.axis_index(role, axes)
        return 1 if index is None else axes[index].size


def part_of(step: StepSpec, axes: tuple[str, ...], collective: Collective) -> Part:
    """The part a request over the axes named `axes` plays in the step (module docstring)."""
    if len(axes) == 1:
        role = next((r for r, name in step.roles.items() if name == axes[0]), None)
        if collective is Collective.SEND_RECV:
            return Part.PIPELINE if role is Role.PIPELINE else Part.AFTER
        if role in (Role.TENSOR, Role.EXPERT):
            return Part.LAYER
        if role is Role.DATA:
            return Part.GRADIENT
    return Part.AFTER


def request_part(step: StepSpec, axes: Sequence[Axis], request: Request) -> Part:
    """The part `request` (over indices into `axes`) plays in the step: :func:`part_of` of its axes' names."""
    return part_of(step, tuple(axes[a].name for a in sorted(request.axes)), request.collective)


def stage_ops(schedule: Schedule, stage: int, stages: int, microbatches: int) -> tuple[tuple[Pass, int], ...]:
    """The passes stage `stage` of `stages` runs, in order: ``(Pass, microbatch)`` pairs.

    GPipe: every forward, then every backward (microbatches in order). 1F1B:
    ``w = min(stages - stage - 1, microbatches)`` warm-up forwards, then
    alternately one forward and one backward, then the last ``w`` backwards.
    """
    if schedule is Schedule.GPIPE:
        return tuple((Pass.FORWARD, j) for j in range(microbatches)) + tuple((Pass.BACKWARD, j) for j in range(microbatches))
    warmup = min(stages - stage - 1, microbatches)
    return tuple(_one_f_one_b(warmup, microbatches))


def _one_f_one_b(warmup: int, microbatches: int) -> Iterator[tuple[Pass, int]]:
    for j in range(warmup):
        yield Pass.FORWARD, j
    for j in range(microbatches - warmup):
        yield Pass.FORWARD, warmup + j
        yield Pass.BACKWARD, j
    for j in range(microbatches - warmup, microbatches):
        yield Pass.BACKWARD, j
