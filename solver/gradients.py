"""Gradient buckets: a workload request marked ``"gradient": true`` is priced as DDP reduces it, in buckets.

PyTorch DDP does not reduce a gradient as one message. It groups the
parameters into buckets of ``bucket_cap_mb`` (25 MiB by default) and starts a
bucket's all-reduce as soon as the backward pass has produced all of its
gradients, so the reduction overlaps the backward pass. A gradient of ``S``
bytes is thus ``ceil(S / b)`` collectives of ``b`` bytes, the last one the
remainder ``S - (ceil(S / b) - 1) b``. :class:`Buckets` is that split; the
spec (:mod:`solver.spec`) plans each bucket size as a request, so the same
gradient costs the same however the spec gives it: one request of ``S``
bytes marked as a gradient, or its buckets as a request of ``b`` bytes with
a count.

What "overlaps the backward pass" means depends on the spec
(docs/workloads.md, "Gradient buckets"): with a ``step`` section the buckets
are the step model's gradient part, reduced one after the other during the
last backward pass, each as soon as its share of the pass is done
(:mod:`solver.steptime`); without one there is no pass to hide them behind
and each bucket counts in the summed communication.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from p2synth.hierarchies.program import Collective

DDP_BUCKET_BYTES = 25 * 2**20  # torch DistributedDataParallel's default bucket_cap_mb (25 MiB)
# the collectives that reduce a gradient: DDP's all-reduce, a sharded optimizer's reduce-scatter (ZeRO, FSDP)
GRADIENT_COLLECTIVES = (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER)


@dataclass(frozen=True)
class Buckets:
    """A gradient of `total_bytes` reduced `count` times a step in buckets of `bucket_bytes` (the last: the rest)."""

    total_bytes: int
    bucket_bytes: int
    count: int = 1

    @property
    def full(self) -> int:
        """Buckets of exactly `bucket_bytes` in one reduction of the gradient."""
        return self.total_bytes // self.bucket_bytes

    @property
    def last_bytes(self) -> int:
        """The size of the last, partial bucket (0: the gradient splits into full buckets)."""
        return self.total_bytes % self.bucket_bytes

    @property
    def per_gradient(self) -> int:
        """Buckets in one reduction of the gradient: ``ceil(total_bytes / bucket_bytes)``."""
        return self.full + (self.last_bytes > 0)

    def sizes(self) -> list[tuple[int, int]]:
        """The (bucket bytes, buckets per step) the gradient is priced as: the full buckets, then the partial one."""
        out = [(self.bucket_bytes, self.count * self.full)] if self.full else []
        return out + ([(self.last_bytes, self.count)] if self.last_bytes else [])

    def to_json(self) -> dict:
        """The split as the result JSON's ``gradients`` entries carry it."""
        return {"message_bytes": self.total_bytes, "bucket_bytes": self.bucket_bytes, "count": self.count,
                "buckets": self.count * self.per_gradient, "last_bucket_bytes": self.last_bytes or self.bucket_bytes}


def bucket_notes(workload: Sequence[Any], in_step: bool) -> list[str]:
    """One line per workload item marked as a gradient: the buckets it was priced as, and where they run
    (`in_step`: the spec has a step section, so they overlap the last backward pass; else they are summed)."""
    from p2synth.solver.report import fmt_bytes  # the tables' byte units (report imports this module's users)

    lines = []
    for w in workload:
        b = w.buckets()
        if b is None:
            continue
        last = f" (the last {fmt_bytes(b.last_bytes)})" if b.full and b.last_bytes else ""
        size = fmt_bytes(b.bucket_bytes if b.full else b.last_bytes)
        times = f", {b.count} times a step" if b.count > 1 else ""
        where = ("each reduced as the last backward pass produces it" if in_step
                 else "summed (no step section: no backward pass to overlap)")
        lines.append(f"{w.name}: gradient of {fmt_bytes(b.total_bytes)}{times} priced as "
                     f"{b.count * b.per_gradient} buckets of {size}{last}, {where}")
    return lines
