"""The accuracy suite: testbed layouts, axes, requests, message sizes and the model-independent protocol's knobs.

One *combo* is (testbed, placement, request); one *case* is a combo at one size.
What is measured per combo never depends on a cost model (programs.sample_programs):
every valid program within `max_steps` where there are at most `limit` besides the
default, else a uniform random sample of `sample`; plus the default. Sizes from
`large_from` on measure only the first `large_sample` programs of that sample (a
smaller uniform sample: each such run takes seconds on a shaped link). All programs
of a case are timed together in `repeats` interleaved rounds (runtime.tune).

The default suite: 4 testbeds (a 4x2 and a 2x2x2 layout, each with slow links for 64 and 256 KiB and 1 gbit/s
node links for 1 MiB and up), per layout 26 / 38 combos (20 / 32 of them with two or more programs, 9 / 20 with
more than 12), sizes 64 KiB .. 64 MiB: 332 cases with two or more programs, about 3/4 of them held out.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

KiB, MiB = 1 << 10, 1 << 20
PROTOCOL = "model-independent"


@dataclass(frozen=True)
class Testbed:
    """One emulated cluster (arguments of ``python -m scripts.testbed up``)."""

    name: str
    nodes: int
    ranks_per_node: int
    inter_node: str
    racks: int = 1
    inter_rack: str | None = None
    sizes: tuple[int, ...] | None = None  # this testbed's message sizes (None: the suite's)
    axes_sets: tuple[tuple[tuple[str, int], ...], ...] | None = None  # this testbed's axes sets (None: the suite's)


@dataclass(frozen=True)
class Suite:
    """What to measure; `fit_every` designates the fit subset (every n-th combo per testbed)."""

    name: str
    testbeds: tuple[Testbed, ...]
    axes_sets: tuple[tuple[tuple[str, int], ...], ...]
    collectives: tuple[str, ...]
    sizes: tuple[int, ...]
    max_steps: int = 4
    limit: int = 40           # measure every program where there are at most this many besides the default
    sample: int = 30          # ... else a uniform random sample of this many
    large_from: int = 16 * MiB  # from this size on ...
    large_sample: int = 12    # ... only the sample's first this many
    huge_from: int | None = None  # from this size on (None: no such tier) ...
    huge_sample: int = 6      # ... only the sample's first this many
    warmup: int = 1
    iters: int = 1            # timed runs per repeat at sizes >= small_below
    iters_small: int = 5      # ... and below it (cheap, and the noisiest)
    small_below: int = 1 << 20
    repeats: int = 9          # interleaved rounds: 9 gives a 96% interval (2nd to 8th fastest)
    calibrate_max_bytes: int = 16 * MiB
    fit_every: int = 4
    seed: int = 7
    only_over: int = 0        # measure only combos with more valid programs than this
    pieces: tuple[int, ...] = ()  # each measured program of 2+ steps also pipelined on one of these (drawn uniformly)
    validate: bool = False    # re-measure the tuner's pick, the default and the runner-up in a separate job (runtime.validate)
    frozen: bool = False      # the model is frozen: record its commit and its predictions before measuring; refuse a dirty tree
    protocol: str = PROTOCOL
    extra: dict = field(default_factory=dict)

    def sizes_of(self, tb: Testbed) -> tuple[int, ...]:
        """The message sizes measured on testbed `tb`."""
        return tb.sizes if tb.sizes is not None else self.sizes

    def axes_of(self, tb: Testbed) -> tuple[tuple[tuple[str, int], ...], ...]:
        """The axes sets measured on testbed `tb`."""
        return tb.axes_sets if tb.axes_sets is not None else self.axes_sets

    def measured_count(self, size: int, sampled: int) -> int:
        """How many of the `sampled` programs (besides the default) are measured at `size`: a prefix of the sample."""
        if self.huge_from is not None and size >= self.huge_from:
            return min(sampled, self.huge_sample)
        if size >= self.large_from:
            return min(sampled, self.large_sample)
        return sampled

    def to_json(self) -> dict:
        """The suite as JSON (kept in the raw document)."""
        return asdict(self)

    @staticmethod
    def from_json(d: dict) -> Suite:
        """A suite from :meth:`to_json`'s shape (unknown keys of older suites are ignored)."""
        known = {f.name for f in fields(Suite)}
        d = {k: v for k, v in d.items() if k in known}
        axes_sets = lambda sets: tuple(tuple((a, int(s)) for a, s in axes) for axes in sets)
        d["testbeds"] = tuple(Testbed(**{**t, "sizes": tuple(t["sizes"]) if t.get("sizes") else None,
                                         "axes_sets": axes_sets(t["axes_sets"]) if t.get("axes_sets") else None})
                              for t in d["testbeds"])
        d["axes_sets"] = axes_sets(d["axes_sets"])
        d["collectives"] = tuple(d["collectives"])
        d["sizes"] = tuple(d["sizes"])
        d["pieces"] = tuple(d.get("pieces", ()))
        return Suite(**d)


# Each size is measured where the network, not the 2 shared cores, dominates: 64 KiB and 256 KiB on slow links
# (there a 64 KiB all-reduce takes milliseconds on the wire, against tens of microseconds of CPU per step), 1 MiB
# and up on the 1 gbit/s testbeds; 1 MiB runs on both 4x2 testbeds, a cross-check of the two link rates.
# The largest sizes measure a smaller prefix of the uniform sample (each run takes seconds there).
FAST_4X2 = Testbed("4x2-1gbit", nodes=4, ranks_per_node=2, inter_node="1gbit")
FAST_2X2X2 = Testbed("2x2x2-1gbit-400mbit", nodes=4, ranks_per_node=2, inter_node="1gbit", racks=2, inter_rack="400mbit")
DEFAULT = Suite(
    name="default",
    testbeds=(
        Testbed("4x2-200mbit", nodes=4, ranks_per_node=2, inter_node="200mbit", sizes=(64 * KiB, 256 * KiB, 1 * MiB)),
        Testbed("2x2x2-250mbit-100mbit", nodes=4, ranks_per_node=2, inter_node="250mbit", racks=2, inter_rack="100mbit",
                sizes=(64 * KiB, 256 * KiB)),
        replace(FAST_4X2, sizes=(1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB)),
        replace(FAST_2X2X2, sizes=(1 * MiB, 4 * MiB, 16 * MiB)),
    ),
    axes_sets=((("data", 8),), (("data", 4), ("model", 2)), (("data", 2), ("model", 4))),
    collectives=("all_reduce", "reduce_scatter"),
    sizes=(64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB),
    large_sample=8,
    huge_from=64 * MiB,
)

# Pipelined programs (issue 11) under the same protocol: the 2-level 1 gbit/s testbed, where pipelining pays, at
# 4 and 16 MiB; every measured program of two or more steps is measured once more on 2, 4, 8 or 16 pieces (drawn
# uniformly, no model involved), beside the sequential programs and the default. About 25 minutes.
PIPELINED = Suite(
    name="pipelined",
    testbeds=(replace(FAST_4X2, sizes=(4 * MiB, 16 * MiB)),),
    axes_sets=((("data", 8),), (("data", 4), ("model", 2))),
    collectives=("all_reduce", "reduce_scatter"),
    sizes=(4 * MiB, 16 * MiB),
    limit=12, sample=12, large_sample=6, pieces=(2, 4, 8, 16),
)

# Two combos, two sizes, a few programs: the end-to-end test's suite and the smoke run.
TINY = Suite(
    name="tiny",
    testbeds=(Testbed("2x2-1gbit", nodes=2, ranks_per_node=2, inter_node="1gbit"),),
    axes_sets=((("data", 4),),),
    collectives=("all_reduce", "reduce_scatter"),
    sizes=(64 * KiB, 1 * MiB),
    max_steps=3, limit=6, sample=4, large_from=1 * MiB, large_sample=3, warmup=1, iters=1, iters_small=2, repeats=6,
    calibrate_max_bytes=1 * MiB, fit_every=2,
)

# The default suite's protocol on a few combos (one testbed, one axes set, three sizes up to 16 MiB): a smoke run of
# the whole campaign in about 5-10 minutes. Its figures are not the report's.
SMOKE = Suite(
    name="smoke",
    testbeds=(FAST_4X2,),
    axes_sets=((("data", 8),), (("data", 4), ("model", 2))),
    collectives=("all_reduce",),
    sizes=(64 * KiB, 1 * MiB, 16 * MiB),
    fit_every=3, calibrate_max_bytes=4 * MiB,
)

# All-to-all (issue 12): every program (flat = MPI's own Alltoall over the whole group, and the hierarchical
# ones; at most 13 per combo, all measured) on both testbeds, 4 KiB to 16 MiB; scripts/bench_alltoall.py
# prints it as a table beside the predictions.
ALLTOALL = Suite(
    name="alltoall",
    testbeds=(FAST_4X2, FAST_2X2X2),
    axes_sets=((("data", 8),), (("data", 4), ("model", 2))),
    collectives=("all_to_all",),
    sizes=tuple(4 * KiB * 4**i for i in range(7)),  # 4 KiB .. 16 MiB
    large_from=64 * MiB,  # every program at every size
)

# One testbed, one combo, two sizes: the smoke run of scripts/bench_alltoall.py.
ALLTOALL_TINY = Suite(
    name="alltoall-tiny",
    testbeds=(Testbed("2x2-1gbit", nodes=2, ranks_per_node=2, inter_node="1gbit"),),
    axes_sets=((("data", 4),),),
    collectives=("all_to_all",),
    sizes=(4 * KiB, 64 * KiB),
    max_steps=2, limit=4, sample=4, warmup=1, iters=1, iters_small=2, repeats=6,
    calibrate_max_bytes=1 * MiB, fit_every=2,
)

# The frozen-model held-out campaign (issue 23): a testbed shape (3 levels, 12 ranks, 3 nodes per rack) and three
# collectives (all_gather, reduce, broadcast) that none of the simulator's terms were built on. The model is frozen
# first: the raw file records the commit and every program's prediction made before the first measurement
# (``frozen``), and each combo's tuner pick is re-measured in a separate job (``validate``): the tuner judged out of
# sample. Sized to run in about an hour on 2 shared cores (12 ranks): 1 and 4 MiB, at most 12 programs a combo
# besides the default (every one where there are at most 12, else a uniform sample of 12).
FROZEN = Suite(
    name="frozen",
    testbeds=(Testbed("2x3x2-1gbit-400mbit", nodes=6, ranks_per_node=2, inter_node="1gbit", racks=2, inter_rack="400mbit"),),
    axes_sets=((("data", 12),), (("data", 6), ("model", 2)), (("data", 4), ("model", 3))),
    collectives=("all_gather", "reduce", "broadcast"),
    sizes=(1 * MiB, 4 * MiB),
    limit=12, sample=12, validate=True, frozen=True, calibrate_max_bytes=16 * MiB,
)

# The second frozen-model campaign (issue 32, item 4), after the simulator priced coll/han's broadcast between more
# than 4 host leaders as libnbc's binomial tree: a shape no campaign measured (3 racks of 2 nodes of 2 ranks, so that a
# flat call over all 12 ranks has 6 host leaders, 2 per rack) with all_reduce (coll/han's reduce and broadcast) and
# reduce_scatter (the runtime's exchange), under the frozen suite's rules.
FROZEN_3X2X2 = replace(
    FROZEN, name="frozen-3x2x2",
    testbeds=(Testbed("3x2x2-1gbit-400mbit", nodes=6, ranks_per_node=2, inter_node="1gbit", racks=3, inter_rack="400mbit"),),
    collectives=("all_reduce", "reduce_scatter"),
)

# The third frozen-model campaign (issue 32, item 4), after the simulator priced coll/tuned's all_reduce by Open MPI 5's
# fixed rules (Rabenseifner, folding a group that is not a power of two): a shape no campaign measured (6 nodes of 2
# ranks on one switch, so that groups of one member per host have 3 or 6 members) with all_reduce and all_gather,
# a collective set no campaign measured together, under the frozen suite's rules; a fourth axes set so that the tuner
# is judged on at least 40 re-measured cases.
FROZEN_6X2 = replace(
    FROZEN, name="frozen-6x2",
    testbeds=(Testbed("6x2-1gbit", nodes=6, ranks_per_node=2, inter_node="1gbit"),),
    axes_sets=(*FROZEN.axes_sets, (("data", 3), ("model", 4))),
    collectives=("all_reduce", "all_gather"),
)

# The fourth frozen-model campaign (issue 32, item 4), after calibration began measuring the two-way efficiency in
# 512 KiB rounds: a shape no campaign measured (4 nodes of 3 ranks, so that coll/han's intra-host stage has 3 members)
# with reduce_scatter and all_gather, both exchanging schedules and a set no campaign measured together, under the
# frozen suite's rules, the third campaign's four axes sets and a fifth, so that the tuner is judged on at least 40
# re-measured cases.
FROZEN_4X3 = replace(
    FROZEN_6X2, name="frozen-4x3",
    testbeds=(Testbed("4x3-1gbit", nodes=4, ranks_per_node=3, inter_node="1gbit"),),
    axes_sets=(*FROZEN_6X2.axes_sets, (("data", 2), ("model", 6))),
    collectives=("reduce_scatter", "all_gather"),
)

# The fifth frozen-model campaign (issue 32, item 4), after the simulator priced coll/han's all_gather as HAN runs it:
# a shape no campaign measured (2 racks of 2 nodes of 3 ranks) with all_gather and broadcast, a set no campaign
# measured together, under the frozen suite's rules and the fourth campaign's five axes sets.
FROZEN_2X2X3 = replace(
    FROZEN_4X3, name="frozen-2x2x3",
    testbeds=(Testbed("2x2x3-1gbit-400mbit", nodes=4, ranks_per_node=3, inter_node="1gbit", racks=2, inter_rack="400mbit"),),
    collectives=("all_gather", "broadcast"),
)

# The sixth frozen-model campaign (issue 32, item 4), with the model as it stands after the fifth (its code predicts
# every earlier frozen campaign's programs as their frozen models did): a shape no campaign measured, 4 racks of 2 nodes of 2 ranks (16 ranks; 8 host leaders, 2 per rack, share
# each rack's uplink in coll/han's inter-host stage), with all_reduce and broadcast, a set no campaign measured
# together, under the frozen suite's rules and every axes set of 16 with at most two axes. One size, 4 MiB, so that
# 16 ranks on 2 shared cores finish in about an hour and a half; its 54 combos with two or more programs judge the tuner on more
# than 40 re-measured cases.
FROZEN_4X2X2 = replace(
    FROZEN, name="frozen-4x2x2",
    testbeds=(Testbed("4x2x2-1gbit-400mbit", nodes=8, ranks_per_node=2, inter_node="1gbit", racks=4, inter_rack="400mbit"),),
    axes_sets=((("data", 16),), (("data", 8), ("model", 2)), (("data", 4), ("model", 4)), (("data", 2), ("model", 8))),
    collectives=("all_reduce", "broadcast"),
    sizes=(4 * MiB,),
)

# The seventh frozen-model campaign (issue 47, item 2), after the simulator priced coll/tuned's broadcast and reduce by
# Open MPI 5's fixed decision (an unsegmented chain, linear fan-out or fan-in, binomial tree or scatter-allgather by
# group and message size) and Rabenseifner's rounds in the order its source runs them: two shapes no campaign measured,
# 2 racks x 4 nodes x 2 ranks (16 ranks: coll/han with 8 host leaders, 4 per rack, and groups of one member per
# host over both network levels, which coll/tuned runs) and 2 nodes x 4 ranks (8 ranks: coll/han between two leaders,
# coll/tuned over 4 members inside a host), with all_reduce, broadcast and reduce, a set no campaign measured together,
# under the frozen suite's rules at 4 MiB, the sixth campaign's size. On the 16 ranks only the axes sets data=16 and
# data=8 x model=2, so that the whole campaign takes about an hour on the 2 shared cores.
FROZEN_2X4X2 = replace(
    FROZEN, name="frozen-2x4x2",
    testbeds=(Testbed("2x4x2-1gbit-400mbit", nodes=8, ranks_per_node=2, inter_node="1gbit", racks=2, inter_rack="400mbit",
                      axes_sets=((("data", 16),), (("data", 8), ("model", 2)))),
              Testbed("2x4-1gbit", nodes=2, ranks_per_node=4, inter_node="1gbit",
                      axes_sets=((("data", 8),), (("data", 4), ("model", 2)), (("data", 2), ("model", 4))))),
    axes_sets=(),
    collectives=("all_reduce", "broadcast", "reduce"),
    sizes=(4 * MiB,),
)

# The reduce_scatter combos of the default suite on its two 1 gbit/s testbeds, re-measured after the runtime began
# running reduce_scatter steps as an exchange (issue 32, item 2: a pairwise exchange of the blocks, each added as it
# arrives, not MPI_Reduce_scatter_block), under the frozen suite's rules: the model's commit and every prediction recorded before
# the first timed run, each combo's tuner pick re-measured in a separate job.
EXCHANGE = replace(
    DEFAULT, name="exchange", testbeds=DEFAULT.testbeds[2:], collectives=("reduce_scatter",), validate=True, frozen=True,
)

# The frozen suite's protocol on one small testbed and one combo: the end-to-end test of validation and freezing.
FROZEN_TINY = replace(TINY, name="frozen-tiny", collectives=("reduce",), validate=True, frozen=True)

SUITES = {"exchange": EXCHANGE, "frozen": FROZEN, "frozen-3x2x2": FROZEN_3X2X2, "frozen-6x2": FROZEN_6X2, "frozen-4x3": FROZEN_4X3, "frozen-2x2x3": FROZEN_2X2X3, "frozen-4x2x2": FROZEN_4X2X2, "frozen-2x4x2": FROZEN_2X4X2, "frozen-tiny": FROZEN_TINY, "default": DEFAULT, "pipelined": PIPELINED, "tiny": TINY, "smoke": SMOKE, "alltoall": ALLTOALL, "alltoall-tiny": ALLTOALL_TINY}


def load_suite(name_or_path: str) -> Suite:
    """A named suite, or one from a JSON file (Suite.to_json's shape)."""
    if name_or_path in SUITES:
        return SUITES[name_or_path]
    return Suite.from_json(json.loads(Path(name_or_path).read_text()))
