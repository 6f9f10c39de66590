"""The accuracy suite: testbed layouts, axes, requests and message sizes.

One *combo* is (testbed, placement, request); one *case* is a combo at one size.
The default suite has 2 testbeds, 46 combos, 4 sizes: 184 cases.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

KiB, MiB = 1 << 10, 1 << 20


@dataclass(frozen=True)
class Testbed:
    """One emulated cluster (arguments of ``python -m scripts.testbed up``)."""

    name: str
    nodes: int
    ranks_per_node: int
    inter_node: str
    racks: int = 1
    inter_rack: str | None = None


@dataclass(frozen=True)
class Suite:
    """What to measure; `fit_every` designates the fit subset (every n-th combo, see split.py)."""

    name: str
    testbeds: tuple[Testbed, ...]
    axes_sets: tuple[tuple[tuple[str, int], ...], ...]
    collectives: tuple[str, ...]
    sizes: tuple[int, ...]
    max_steps: int = 4
    top_sim: int = 5          # simulator's best per size, unioned over sizes
    top_ab: int = 2           # alpha-beta's best per size (so its top-k is measured too)
    sample: int = 3           # plus this many random others
    cap: int = 10             # programs per combo at most (the default comes on top)
    warmup: int = 1
    iters: int = 2            # timed runs per repeat at sizes >= small_below
    iters_small: int = 10     # ... and below it (cheap, and the noisiest)
    small_below: int = 1 << 20
    repeats: int = 5
    calibrate_max_bytes: int = 4 * MiB
    fit_every: int = 4
    seed: int = 7
    only_over: int = 0        # measure only combos with more valid programs than this
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(d: dict) -> Suite:
        d = dict(d)
        d["testbeds"] = tuple(Testbed(**t) for t in d["testbeds"])
        d["axes_sets"] = tuple(tuple((a, int(s)) for a, s in axes) for axes in d["axes_sets"])
        d["collectives"] = tuple(d["collectives"])
        d["sizes"] = tuple(d["sizes"])
        return Suite(**d)


DEFAULT = Suite(
    name="default",
    testbeds=(
        Testbed("4x2-1gbit", nodes=4, ranks_per_node=2, inter_node="1gbit"),
        Testbed("2x2x2-1gbit-400mbit", nodes=4, ranks_per_node=2, inter_node="1gbit", racks=2, inter_rack="400mbit"),
    ),
    axes_sets=((("data", 8),), (("data", 4), ("model", 2)), (("data", 2), ("model", 4))),
    collectives=("all_reduce", "reduce_scatter"),
    sizes=(64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB),
)

# Two combos, two sizes, a few programs: the end-to-end test's suite.
TINY = Suite(
    name="tiny",
    testbeds=(Testbed("2x2-1gbit", nodes=2, ranks_per_node=2, inter_node="1gbit"),),
    axes_sets=((("data", 4),),),
    collectives=("all_reduce", "reduce_scatter"),
    sizes=(64 * KiB, 1 * MiB),
    max_steps=3, top_sim=2, top_ab=1, sample=1, cap=4, warmup=1, iters=1, iters_small=2, repeats=2,
    calibrate_max_bytes=1 * MiB, fit_every=2,
)

# More programs per combo where there are many (so top-10 is not trivially met): the 4 x 2 testbed's
# combos with more than 10 valid programs, the simulator's best 12 at each size plus 4 random others.
WIDE = Suite(
    name="wide",
    testbeds=(Testbed("4x2-1gbit-wide", nodes=4, ranks_per_node=2, inter_node="1gbit"),),
    axes_sets=DEFAULT.axes_sets,
    collectives=DEFAULT.collectives,
    sizes=DEFAULT.sizes,
    top_sim=12, top_ab=3, sample=4, cap=16, only_over=10, seed=11,
)

# All-to-all (issue 12): every program (flat = MPI's own Alltoall over the whole group, and the hierarchical
# ones) on both testbeds, 4 KiB to 16 MiB; scripts/bench_alltoall.py prints it as a table beside the predictions.
ALLTOALL = Suite(
    name="alltoall",
    testbeds=DEFAULT.testbeds,
    axes_sets=((("data", 8),), (("data", 4), ("model", 2))),
    collectives=("all_to_all",),
    sizes=tuple(4 * KiB * 4**i for i in range(7)),  # 4 KiB .. 16 MiB
    cap=16,  # at most 13 programs per combo (3 cells): measure them all
)

# One testbed, one combo, two sizes: the smoke run of scripts/bench_alltoall.py.
ALLTOALL_TINY = Suite(
    name="alltoall-tiny",
    testbeds=(Testbed("2x2-1gbit", nodes=2, ranks_per_node=2, inter_node="1gbit"),),
    axes_sets=((("data", 4),),),
    collectives=("all_to_all",),
    sizes=(4 * KiB, 64 * KiB),
    max_steps=2, cap=4, warmup=1, iters=1, iters_small=2, repeats=2, calibrate_max_bytes=1 * MiB, fit_every=2,
)

SUITES = {"default": DEFAULT, "tiny": TINY, "wide": WIDE, "alltoall": ALLTOALL, "alltoall-tiny": ALLTOALL_TINY}


def load_suite(name_or_path: str) -> Suite:
    """A named suite, or one from a JSON file (Suite.to_json's shape)."""
    if name_or_path in SUITES:
        return SUITES[name_or_path]
    return Suite.from_json(json.loads(Path(name_or_path).read_text()))
