"""The system model: a hierarchy of levels, outermost first, with link figures.

A device is a coordinate vector ``(c_0 .. c_{L-1})``, ``0 <= c_l < count_l``;
its linear rank is the mixed-radix number of that vector with level 0 most
significant, so the devices of one server have consecutive ranks (as
``mpirun`` places them by default).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from p2synth.hierarchies.cli import quote

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_\-]*$"
MAX_LEVELS = 32

# Link figures must be finite and in these ranges, so every predicted time is a finite number.
RATE_GBPS = {"ge": 1e-6, "le": 1e6, "allow_inf_nan": False}
TIME_US = {"ge": 0, "le": 1e9, "allow_inf_nan": False}

# Defaults for a level that gives no link figures. A level `d` steps out from
# the innermost one gets DEFAULT_BANDWIDTH_GBPS / BANDWIDTH_STEP**d and
# DEFAULT_LATENCY_US * LATENCY_STEP**d: each level out is 4x thinner and 3x
# slower to reach, the rough shape of NVLink -> NIC -> rack uplink.
DEFAULT_BANDWIDTH_GBPS = 100.0
BANDWIDTH_STEP = 4.0
DEFAULT_LATENCY_US = 2.0
LATENCY_STEP = 3.0

# Level names that mean "one machine" (shared memory), outermost first wins.
HOST_LEVEL_NAMES = ("node", "host", "server", "machine")


class Fabric(StrEnum):
    """The class of hardware that joins a level's children, as NCCL's tuning model tells them apart (the rows of its
    latency table, ``src/graph/tuning.cc``): NVLink (or AMD's xGMI, which RCCL treats alike), PCIe, or the network."""

    NVLINK = "nvlink"
    PCI = "pci"
    NET = "net"


class SwitchReduction(StrEnum):
    """A switch that reduces data in the network: ``nvls``, NVLink SHARP (NVSwitch multicast and reduce, H100 and
    later), used by NCCL's NVLS and NVLSTree algorithms; ``sharp``, InfiniBand SHARP, used by NCCL's CollNet
    algorithms (direct and chain) when its CollNet plugin is loaded."""

    NVLS = "nvls"
    SHARP = "sharp"


class Level(BaseModel):
    """One level of a hierarchy: `count` children per parent, plus link figures.

    The link figures describe the fabric that joins the `count` children of one
    parent (the network between nodes for a `node` level, NVLink between GPUs
    for a `gpu` level):

    * ``bandwidth_GBps``: unidirectional bandwidth one device gets on this fabric
      (GB/s, 1e9 bytes per second).
    * ``latency_us``: time of one message hop over this fabric, microseconds.
    * ``uplink_GBps``: aggregate bandwidth out of one child unit (e.g. all the
      NICs of a node), shared by that unit's active devices; ``None`` means the
      devices do not share an uplink (each gets ``bandwidth_GBps``).
    * ``duplex_efficiency``: the fraction of those one-way rates each direction
      gets while both directions carry data at once, as in the exchanges of
      ring and recursive-halving schedules (``scripts/calibrate.py`` measures it;
      ``None`` means 1). Only the simulator uses it (docs/simulator.md).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN, description="level name, e.g. node, socket, gpu")
    count: int = Field(gt=0, description="children per parent at this level")
    bandwidth_GBps: float | None = Field(default=None, **RATE_GBPS, description="per-device bandwidth on this level's fabric, GB/s")
    latency_us: float | None = Field(default=None, **TIME_US, description="latency of one hop on this level's fabric, microseconds")
    uplink_GBps: float | None = Field(default=None, **RATE_GBPS, description="aggregate bandwidth out of one unit of this level, shared by its devices, GB/s")
    duplex_efficiency: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False,
                                            description="fraction of the one-way rate each direction gets while both carry data")
    peak_GBps: float | None = Field(default=None, **RATE_GBPS, description="the fabric's datasheet (signalling) rate per device per direction, GB/s, at least bandwidth_GBps: only the lower bound reads it (omitted: bandwidth_GBps), so that no measurement can beat the bound where bandwidth_GBps is an achievable figure below the peak")
    fabric: Fabric | None = Field(default=None, description="under library nccl, the class of hardware that joins this level's children (nvlink, pci or net): the row of NCCL's latency table, and net levels separate NCCL's nodes; omitted: net at and outside the host level, nvlink inside")
    switch_reduce: SwitchReduction | None = Field(default=None, description="the switch of this level's fabric reduces in the network: nvls (NVLink SHARP, NVSwitch on H100 and later) or sharp (InfiniBand SHARP through NCCL's CollNet plugin); under library nccl it enables NCCL's NVLS, NVLSTree or CollNet algorithms")
    switch_reduce_GBps: float | None = Field(default=None, **RATE_GBPS, description="with switch_reduce: the rate one device sends into, and receives from, the reducing switch, per direction, GB/s")
    switch_latency_us: float | None = Field(default=None, **TIME_US, description="with switch_reduce: the latency of one reduction through the switch, microseconds (NCCL's NVLS or CollNet hardware latency)")

    @model_validator(mode="after")
    def _switch_figures(self) -> Level:
        given = [self.switch_reduce_GBps is not None, self.switch_latency_us is not None]
        if self.switch_reduce is not None and not all(given):
            raise ValueError(f"level {quote(self.name, 24)}: switch_reduce needs switch_reduce_GBps and switch_latency_us")
        if self.peak_GBps is not None and self.bandwidth_GBps is not None and self.peak_GBps < self.bandwidth_GBps:
            raise ValueError(f"level {quote(self.name, 24)}: peak_GBps must be at least bandwidth_GBps")
        if self.switch_reduce is None and any(given):
            raise ValueError(f"level {quote(self.name, 24)}: switch_reduce_GBps and switch_latency_us need switch_reduce (nvls or sharp)")
        return self


class CollectiveLibrary(StrEnum):
    """The library that runs the collectives, whose own algorithm choices the simulator follows.

    ``open-mpi``: Open MPI's tuned component (blocking calls) and libnbc
    (non-blocking ones), as the runtime's numpy backend runs them; ``nccl``:
    NCCL's own choice among its algorithms and protocols for every call
    (ring, tree, NVLS, NVLSTree, CollNet, PAT; ``solver/nccl.py``), priced
    in both cost models; ``gloo``: PyTorch's CPU backend
    (ProcessGroupGloo over TCP, loopback inside a node): rings in rank order,
    a binomial broadcast, whatever the size; a reduce_scatter as the exported
    modules run it there (``ReduceScatterRun``). A hierarchy without one gets the ideal schedules (the faster of
    the latency- and bandwidth-optimal one per step).
    """

    OPEN_MPI = "open-mpi"
    NCCL = "nccl"
    GLOO = "gloo"


class ReduceScatterRun(StrEnum):
    """How a reduce_scatter step runs under ``library: open-mpi`` (the runtime's numpy backend) or ``library: gloo``
    (the exported PyTorch module on gloo).

    ``exchange`` (what an omitted field means): the group's blocks exchanged
    and summed: under open-mpi the runtime's pairwise exchange, each block
    added as it arrives; under gloo ``all_to_all_single`` and then the sum of
    the blocks received. ``library``: the backend's own reduce_scatter, as the
    runtime and the exports ran it before the exchange (the measurements made
    then record it, so that their predictions price what ran): under open-mpi
    ``MPI_Reduce_scatter_block`` (a reduce and a linear scatter for large
    blocks in small groups), under gloo ``reduce_scatter_tensor`` (an
    all_reduce of a clone of the whole input).
    """

    EXCHANGE = "exchange"
    LIBRARY = "library"


class HanBroadcast(StrEnum):
    """How the simulator prices coll/han's inter-host broadcast stage under ``library: open-mpi``.

    ``binomial`` (what an omitted field means): libnbc's ibcast as Open MPI 5
    runs it by default (``coll_libnbc_ibcast_skip_dt_decision`` true): linear
    up to 4 host leaders, a binomial tree above, each round forwarding the
    whole segment, the round's transfers that leave one unit sharing its
    uplink; ``one-copy``: one pipelined copy across each level above 4
    leaders, the price the first frozen campaign froze, kept so that its
    recorded hierarchies are scored under the model it judged.
    """

    BINOMIAL = "binomial"
    ONE_COPY = "one-copy"


class HanAllGather(StrEnum):
    """How the simulator prices an all_gather step that Open MPI's coll/han runs (a group spanning hosts with several
    members on one) under ``library: open-mpi``.

    ``hierarchical`` (what an omitted field means): as coll/han runs it, a
    gather to each host's leader, an allgather among the leaders, a broadcast
    inside each host, one after the other; ``flat``: the flat group's
    recursive doubling, the price the campaigns before this field were judged
    under, kept so that their recorded hierarchies are scored under the model
    they judged.
    """

    HIERARCHICAL = "hierarchical"
    FLAT = "flat"


class TunedAllReduce(StrEnum):
    """How the simulator prices a blocking all_reduce that Open MPI's coll/tuned runs (a group that coll/han leaves
    alone: inside one host, or one member per host) under ``library: open-mpi``.

    ``distance-doubling`` (what an omitted field means): Open MPI 5's fixed
    decision, Rabenseifner above a size threshold that depends on the group
    size, its rounds in the order its source runs them (recursive vector
    halving with distance doubling: the first round, half the buffer, with
    the next rank, so the least significant digit of the rank order carries
    the most data), and for a group that is not a power of two the extra
    rounds that fold its surplus members in and out; ``rules``: the same
    decision with the rounds priced in the opposite order (the outermost
    level first), the price the campaigns recorded from issue 32 to issue 47
    froze; ``fastest``: the faster of recursive doubling and a ring, the price
    the campaigns recorded before that froze. The last two are kept so that
    recorded hierarchies are scored under the model they judged.
    """

    DISTANCE_DOUBLING = "distance-doubling"
    RULES = "rules"
    FASTEST = "fastest"


class TunedTrees(StrEnum):
    """How the simulator prices a blocking broadcast or reduce that Open MPI's coll/tuned runs (a group that coll/han
    leaves alone: inside one host, or one member per host) under ``library: open-mpi``.

    ``rules`` (what an omitted field means): Open MPI 5's fixed decision
    (``coll_tuned_decision_fixed.c``), which picks the algorithm by group size
    and message size and runs it unsegmented: from 1 MiB a chain for 4-7
    members, a linear fan-out for 8-15, and so on (``solver.open_mpi``,
    ``TUNED_BROADCAST`` and ``TUNED_REDUCE``); ``fastest``: the faster of a
    binomial tree and a scatter-based schedule, the price every campaign
    recorded before this field froze, kept so that their recorded hierarchies
    are scored under the model they judged.
    """

    RULES = "rules"
    FASTEST = "fastest"


class GpuArch(StrEnum):
    """The GPU generation whose columns of NCCL's tuning tables apply (``src/graph/tuning.cc``: Volta, Ampere,
    Hopper, Blackwell), or ``cdna3`` (AMD MI300X under RCCL, whose own base latencies and protocols apply)."""

    VOLTA = "volta"
    AMPERE = "ampere"
    HOPPER = "hopper"
    BLACKWELL = "blackwell"
    CDNA3 = "cdna3"


class CpuVendor(StrEnum):
    """The host CPU's vendor, which NCCL's tuning reads for multi-node LL bandwidth and the network post overhead."""

    INTEL = "intel"
    AMD = "amd"


class NcclProfile(BaseModel):
    """What NCCL's tuning model needs of a system beyond its links: the GPU generation and the host CPU's vendor."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arch: GpuArch = Field(description="GPU generation: volta, ampere, hopper, blackwell, or cdna3 (MI300X, RCCL)")
    cpu: CpuVendor = Field(default=CpuVendor.INTEL, description="host CPU vendor: intel or amd")


@dataclass(frozen=True)
class Link:
    """Resolved link figures of one level, in SI units (bytes/s, seconds)."""

    bandwidth: float
    latency: float
    uplink: float | None


class Hierarchy(BaseModel):
    """A machine as a tree of levels, outermost first (pod > rack > node > gpu)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="custom", description="a name for reports")
    levels: tuple[Level, ...] = Field(min_length=1, max_length=MAX_LEVELS, description="levels, outermost first")
    reduce_GBps: float | None = Field(default=None, **RATE_GBPS, description="rate at which a device sums received data into its buffer, GB/s (CPUs; omit for GPUs, where it hides under transfers)")
    step_overhead_us: float | None = Field(default=None, **TIME_US, description="fixed cost of launching one collective step, microseconds (fitted by calibration)")
    library: CollectiveLibrary | None = Field(default=None, description="the library that runs the collectives (open-mpi, nccl, gloo), whose algorithm choices the simulator follows; calibration sets it")
    nccl: NcclProfile | None = Field(default=None, description="under library nccl: the GPU generation and CPU vendor whose columns of NCCL's tuning tables apply; omitted: hopper, intel")
    reduce_scatter: ReduceScatterRun | None = Field(default=None, description="under open-mpi or gloo, how a reduce_scatter step runs: exchange (the blocks exchanged and summed: the runtime's pairwise exchange, or the exported module's all_to_all_single on gloo; the default) or library (MPI_Reduce_scatter_block, or gloo's reduce_scatter_tensor, an all_reduce of the whole input, for measurements made before the exchange)")
    han_broadcast: HanBroadcast | None = Field(default=None, description="under open-mpi, how coll/han's broadcast between host leaders is priced: binomial (libnbc's tree above 4 leaders, as Open MPI 5 runs it; the default) or one-copy (the first frozen campaign's price, for the hierarchies it recorded)")
    han_all_gather: HanAllGather | None = Field(default=None, description="under open-mpi, how an all_gather that coll/han runs (a group spanning hosts with several members on one) is priced: hierarchical (a gather to each host's leader, an allgather among the leaders, a broadcast inside each host; the default) or flat (the flat group's recursive doubling, for hierarchies recorded before)")
    tuned_all_reduce: TunedAllReduce | None = Field(default=None, description="under open-mpi, how a blocking all_reduce that coll/tuned runs (inside one host, or one member per host) is priced: distance-doubling (Open MPI 5's fixed decision, Rabenseifner with its rounds in its source's order and its fold for groups that are not a power of two; the default), rules (the same with the rounds in the opposite order) or fastest (the faster of recursive doubling and a ring); the last two for hierarchies recorded before")
    tuned_trees: TunedTrees | None = Field(default=None, description="under open-mpi, how a blocking broadcast or reduce that coll/tuned runs (inside one host, or one member per host) is priced: rules (Open MPI 5's fixed decision: chain, linear, binomial or scatter-allgather by group and message size, unsegmented; the default) or fastest (the faster of a binomial tree and a scatter-based schedule, for hierarchies recorded before)")

    @field_validator("levels")
    @classmethod
    def _unique_level_names(cls, levels: tuple[Level, ...]) -> tuple[Level, ...]:
        names = [lv.name for lv in levels]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"level names must be unique; repeated: {', '.join(quote(n, 24) for n in duplicates[:4])}")
        return levels

    @property
    def counts(self) -> tuple[int, ...]:
        """Children per parent at each level, outermost first."""
        return tuple(lv.count for lv in self.levels)

    @property
    def level_names(self) -> tuple[str, ...]:
        """Level names, outermost first."""
        return tuple(lv.name for lv in self.levels)

    @property
    def num_devices(self) -> int:
        """Total number of devices (the product of the level counts)."""
        return math.prod(self.counts)

    def level_index(self, name: str) -> int:
        """Index of the level called `name`; KeyError when there is none."""
        try:
            return self.level_names.index(name)
        except ValueError:
            raise KeyError(name) from None

    def devices_below(self, level: int) -> int:
        """Devices inside one unit of `level` (the product of the inner counts)."""
        return math.prod(self.counts[level + 1 :])

    def coords(self, rank: int) -> tuple[int, ...]:
        """Level coordinates of device `rank` (level 0 most significant)."""
        out = []
        for count in reversed(self.counts):
            rank, c = divmod(rank, count)
            out.append(c)
        return tuple(reversed(out))

    def rank(self, coords: tuple[int, ...]) -> int:
        """Linear rank of the device at level coordinates `coords`."""
        r = 0
        for c, count in zip(coords, self.counts, strict=True):
            r = r * count + c
        return r

    @property
    def host_level(self) -> int:
        """Index of the level whose units are hosts (shared memory): the outermost level named as in
        HOST_LEVEL_NAMES, else the innermost level's parent; a cell at this level or an outer one separates hosts.
        -1 when the hierarchy has one level and none of those names."""
        names = self.level_names
        return next((i for i, name in enumerate(names) if name in HOST_LEVEL_NAMES), len(names) - 2)

    def fabric(self, level: int) -> Fabric:
        """The :class:`Fabric` of `level`: its own, else the network at and outside the host level, NVLink inside."""
        given = self.levels[level].fabric
        if given is not None:
            return given
        return Fabric.NET if level <= self.host_level else Fabric.NVLINK

    def link(self, level: int) -> Link:
        """Link figures of `level`, with the documented defaults filled in."""
        lv = self.levels[level]
        depth = len(self.levels) - 1 - level
        bw = lv.bandwidth_GBps if lv.bandwidth_GBps is not None else DEFAULT_BANDWIDTH_GBPS / BANDWIDTH_STEP**depth
        lat = lv.latency_us if lv.latency_us is not None else DEFAULT_LATENCY_US * LATENCY_STEP**depth
        up = lv.uplink_GBps * 1e9 if lv.uplink_GBps is not None else None
        return Link(bandwidth=bw * 1e9, latency=lat * 1e-6, uplink=up)

    @cached_property
    def links(self) -> tuple[Link, ...]:
        """Resolved link figures of every level, outermost first."""
        return tuple(self.link(i) for i in range(len(self.levels)))

    def describe(self) -> str:
        """Compact text such as ``node 4 x gpu 8``."""
        return " x ".join(f"{lv.name} {lv.count}" for lv in self.levels)
