"""The cases of an accuracy run, read from its raw document.

A case is one (testbed, placement, request, size) with at least two measured programs, the default
among them. The measured time of a program is the median of its interleaved repeats, with the
distribution-free 95% interval of runtime/stats.py; the programs that do not differ significantly
from the measured-fastest on their paired rounds (``metrics.paired_ties``) are the case's right answers
(ties). A combo is in the fit subset by a hash of its description (:func:`in_fit_subset`), never by its
position in the suite.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property

from p2synth.hierarchies.model import (CollectiveLibrary, HanAllGather, HanBroadcast, Hierarchy, ReduceScatterRun,
                                       TunedAllReduce, TunedTrees)
from p2synth.hierarchies.placement import Axis, Placement
from p2synth.hierarchies.program import Program, Request
from p2synth.runtime.calibration import library_of
from p2synth.hierarchies.layout import plan_layout
from p2synth.runtime.stats import Interval, fastest, median_interval, relative_spread
from scripts.accuracy.metrics import differ, paired_ties
from scripts.accuracy.programs import make_request


def measured_interval(r: dict) -> Interval:
    """A raw result's median over its repeats and 95% interval (the tuner's own figures)."""
    return median_interval(r["repeats_s"]) if r.get("repeats_s") else median_interval([r["time_s"]])


def measured_time(r: dict) -> float:
    """The measured time of a raw result: the median over its repeats."""
    return measured_interval(r).median


def halves(r: dict) -> tuple[float, float] | None:
    """A raw result's two independent half-measurements: the medians of its even and of its odd rounds (None with
    fewer than two rounds). How well one half predicts the other is the measurement's own repeatability."""
    rounds = r.get("repeats_s") or []
    return (statistics.median(rounds[0::2]), statistics.median(rounds[1::2])) if len(rounds) >= 2 else None


@dataclass
class Case:
    """One (testbed, placement, request, size) with every measured program; ``predicted`` maps a model's name to
    its prediction of each program (filled in by the fitting)."""

    testbed: str
    combo: int
    fit: bool
    placement: Placement
    request: object
    axes_key: str
    request_key: str
    nbytes: int
    programs: list[Program]
    lengths: list[int]
    measured: list[float]
    default_index: int
    transposes: list[int]
    intervals: list[Interval] = field(default_factory=list)
    spreads: list[float] = field(default_factory=list)
    halves: list[tuple[float, float] | None] = field(default_factory=list)
    rounds: list[tuple[float, ...]] = field(default_factory=list)  # each program's time per interleaved round
    _differs: dict = field(default_factory=dict, repr=False, compare=False)
    predicted: dict = field(default_factory=dict)

    @cached_property
    def right(self) -> list[int]:
        """The measured-fastest and the programs that do not differ from it significantly on the paired rounds
        (any of them is a right pick; ``metrics.paired_ties``)."""
        return paired_ties(self.rounds, self.measured)

    def differs(self, i: int, j: int) -> bool:
        """Whether programs i and j differ significantly on their paired rounds (``metrics.differ``; remembered)."""
        key = (min(i, j), max(i, j))
        if key not in self._differs:
            self._differs[key] = differ(self.rounds[key[0]], self.rounds[key[1]])
        return self._differs[key]

    @property
    def best(self) -> int:
        """The measured-fastest program (the smallest median; the first on equal medians)."""
        return fastest(self.measured)


def load_cases(raw: dict) -> tuple[list[Case], dict[str, Hierarchy]]:
    """Cases and each testbed's calibrated hierarchy from a raw document."""
    fit_every = int(raw["suite"].get("fit_every", 4))
    cases, hierarchies = [], {}
    for tb in raw["testbeds"]:
        if "hierarchy" not in tb:
            continue
        name = tb["testbed"]["name"]
        h = measured_hierarchy(tb)
        hierarchies[name] = h
        for combo in tb["combos"]:
            if "results" in combo:
                cases += combo_cases(name, h, combo, fit_every)
    return cases, hierarchies


# Under Open MPI, each pricing field a hierarchy recorded before calibration wrote it reads as this price.
OPEN_MPI_PRICES_BEFORE = {"reduce_scatter": ReduceScatterRun.LIBRARY, "han_broadcast": HanBroadcast.ONE_COPY,
                          "tuned_all_reduce": TunedAllReduce.FASTEST, "han_all_gather": HanAllGather.FLAT,
                          "tuned_trees": TunedTrees.FASTEST}


def as_measured(h: Hierarchy, mpi: str) -> Hierarchy:
    """A recorded hierarchy as what ran its measurements, priced as when it was recorded: without a library (recorded
    before calibration wrote it), the one its calibration's MPI string `mpi` names; under Open MPI without
    ``reduce_scatter`` (recorded before calibration wrote it, when the runtime called ``MPI_Reduce_scatter_block``),
    ``library``; without ``han_broadcast`` (recorded before calibration wrote it), ``one-copy``, the price of coll/han's
    broadcast that the campaigns recorded then were judged under; without ``tuned_all_reduce``, ``fastest``, and
    without ``han_all_gather``, ``flat``, and without ``tuned_trees``, ``fastest``: the prices of coll/tuned's
    all_reduce, coll/han's all_gather and coll/tuned's broadcast and reduce they were judged under."""
    if h.library is None:
        h = h.model_copy(update={"library": library_of(mpi)})
    if h.library is CollectiveLibrary.OPEN_MPI:
        h = h.model_copy(update={field: old for field, old in OPEN_MPI_PRICES_BEFORE.items() if getattr(h, field) is None})
    return h


def measured_hierarchy(tb: dict) -> Hierarchy:
    """A raw document's testbed entry's recorded hierarchy, as what ran its measurements (:func:`as_measured`, with
    the MPI string its calibration recorded)."""
    return as_measured(Hierarchy.model_validate(tb["hierarchy"]), tb.get("calibration", {}).get("mpi", ""))


def ran_library_reduce_scatter(raw: dict) -> bool:
    """Whether the raw document `raw` was measured while the runtime called ``MPI_Reduce_scatter_block``: some
    testbed's hierarchy, read as what ran (:func:`measured_hierarchy`), says ``reduce_scatter: library``."""
    return any(measured_hierarchy(tb).reduce_scatter is ReduceScatterRun.LIBRARY
               for tb in raw.get("testbeds", []) if "hierarchy" in tb)


def in_fit_subset(testbed: str, combo: dict, fit_every: int) -> bool:
    """Whether a raw combo is in the fit subset: the SHA-256 of its description (testbed, axes, placement matrix,
    request) is a multiple of `fit_every`. The split depends on what the combo is, not on where the suite lists it."""
    text = json.dumps([testbed, combo["axes"], combo["matrix"], combo["request"]], sort_keys=True)
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % fit_every == 0


def combo_request(h: Hierarchy, combo: dict) -> tuple[Placement, Request]:
    """A raw combo's placement on hierarchy `h` and its request."""
    axes = tuple(Axis(name=a, size=s) for a, s in combo["axes"])
    pl = Placement(h, axes, tuple(tuple(r) for r in combo["matrix"]))
    return pl, make_request(pl, tuple(combo["request"]["axes"]), combo["request"]["collective"])


def combo_cases(testbed: str, h: Hierarchy, combo: dict, fit_every: int) -> list[Case]:
    """The cases of one raw combo of `testbed` (calibrated hierarchy `h`), one per size with two or more programs
    measured right and the default among them; the combo's place in the split is :func:`in_fit_subset`'s."""
    pl, req = combo_request(h, combo)
    names = tuple(combo["request"]["axes"])
    by_size = defaultdict(list)
    for r in combo["results"]:
        if not r.get("wrong"):
            by_size[r["nbytes"]].append(r)
    cases = []
    for nbytes, rs in sorted(by_size.items()):
        progs = [Program.from_json(r["program"], pl) for r in rs]
        dflt = [i for i, r in enumerate(rs) if r["default"]]
        if len(rs) < 2 or not dflt:
            continue
        cases.append(Case(
            testbed=testbed, combo=combo["index"], fit=in_fit_subset(testbed, combo, fit_every), placement=pl, request=req,
            axes_key="x".join(f"{a}={s}" for a, s in combo["axes"]),
            request_key=f"{combo['request']['collective']}({','.join(names)})", nbytes=nbytes, programs=progs,
            lengths=[len(p.steps) for p in progs], measured=[measured_time(r) for r in rs], default_index=dflt[0],
            transposes=[r["transposes"] if "transposes" in r else plan_layout(pl, req, p).transposes for r, p in zip(rs, progs)],
            intervals=[measured_interval(r) for r in rs],
            spreads=[relative_spread(r["repeats_s"]) if r.get("repeats_s") else 0.0 for r in rs],
            halves=[halves(r) for r in rs],
            rounds=[tuple(r["repeats_s"]) if r.get("repeats_s") else (r["time_s"],) for r in rs],
            predicted=recorded_predictions(rs)))
    return cases


RECORDED = "recorded"  # the key of the predictions recorded before timing in Case.predicted


def recorded_predictions(results: list[dict]) -> dict[str, list[float]]:
    """``{RECORDED: [...]}``: the simulator's predictions of `results`' programs that a frozen campaign recorded before
    timing them (``predicted_at_start_s``, on the calibrated hierarchy, no constant fitted after); empty where any
    program lacks one."""
    recorded = [(r.get("predicted_at_start_s") or {}).get("simulator") for r in results]
    return {} if None in recorded else {RECORDED: recorded}


def contention_ratios(raw: dict) -> dict[str, float]:
    """Per testbed: calibration's summing rate per rank with all ranks at once over one rank alone."""
    out = {}
    for tb in raw["testbeds"]:
        red = (tb.get("calibration") or {}).get("reduce") or {}
        if red.get("rank0_alone_GBps") and red.get("all_at_once_median_GBps"):
            out[tb["testbed"]["name"]] = min(1.0, red["all_at_once_median_GBps"] / red["rank0_alone_GBps"])
    return out
