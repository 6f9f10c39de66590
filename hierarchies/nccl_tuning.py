"""NCCL's tuning constants, as data: the figures its tuning model prices each algorithm and protocol with.

Every number here is read from NCCL's ``src/graph/tuning.cc`` (NCCL 2.30,
``ncclTunerConstantsDefaults``, ``nvlsEfficiency``, ``getNetOverhead`` and
the refinements of ``ncclTopoTuneModel``), or for ``GpuArch.CDNA3`` from
RCCL's ``src/graph/tuning.cc`` (its ``baseLat`` table) and ``src/graph/topo.h``.
None is fitted to a measurement. ``solver/nccl.py`` turns them into step
times; the lower bound (``hierarchies/bound.py``) reads the least latency of
a call from them.
"""

from __future__ import annotations

from enum import StrEnum

from p2synth.hierarchies.model import CpuVendor, Fabric, GpuArch, Hierarchy, NcclProfile


class Algo(StrEnum):
    """NCCL's collective algorithms (``ncclAlgoStr``)."""

    TREE = "Tree"
    RING = "Ring"
    COLLNET_DIRECT = "CollNetDirect"
    COLLNET_CHAIN = "CollNetChain"
    NVLS = "NVLS"
    NVLS_TREE = "NVLSTree"
    PAT = "PAT"


class Proto(StrEnum):
    """NCCL's protocols (``ncclProtoStr``): LL (4 bytes of data and 4 of flag), LL128 (120 of 128), Simple."""

    LL = "LL"
    LL128 = "LL128"
    SIMPLE = "Simple"


PROTOS = (Proto.LL, Proto.LL128, Proto.SIMPLE)

# baseLatencies (us), per algorithm, (LL, LL128, Simple).
BASE_US: dict[Algo, tuple[float, float, float]] = {
    Algo.TREE: (6.8, 14.0, 8.4), Algo.RING: (6.6, 14.0, 8.4),
    Algo.COLLNET_DIRECT: (0.0, 0.0, 0.0), Algo.COLLNET_CHAIN: (0.0, 0.0, 0.0),
    Algo.NVLS: (0.0, 0.0, 0.0), Algo.NVLS_TREE: (0.0, 0.0, 0.0), Algo.PAT: (8.0, 8.0, 8.0),
}
# RCCL's baseLat (us): Tree and Ring (LL, LL128, Simple) = 12, 12, 17.
RCCL_BASE_US: dict[Algo, tuple[float, float, float]] = {Algo.TREE: (12.0, 12.0, 17.0), Algo.RING: (12.0, 12.0, 17.0)}

# hwLatencies (us) per hardware class, per algorithm, (LL, LL128, Simple); 0 where NCCL has none.
HW_US: dict[Fabric, dict[Algo, tuple[float, float, float]]] = {
    Fabric.NVLINK: {Algo.TREE: (0.6, 1.25, 4.0), Algo.RING: (0.6, 1.9, 3.4), Algo.COLLNET_DIRECT: (0.0, 0.0, 3.7),
                    Algo.COLLNET_CHAIN: (0.0, 0.0, 2.8), Algo.NVLS: (0.0, 0.0, 25.0), Algo.NVLS_TREE: (0.0, 0.0, 25.0),
                    Algo.PAT: (0.0, 0.0, 4.0)},
    Fabric.PCI: {Algo.TREE: (1.0, 1.9, 4.0), Algo.RING: (1.0, 2.5, 5.7), Algo.COLLNET_DIRECT: (0.0, 0.0, 3.7),
                 Algo.COLLNET_CHAIN: (0.0, 0.0, 2.8), Algo.NVLS: (0.0, 0.0, 0.0), Algo.NVLS_TREE: (0.0, 0.0, 0.0),
                 Algo.PAT: (0.0, 0.0, 4.0)},
    Fabric.NET: {Algo.TREE: (5.0, 8.5, 14.0), Algo.RING: (2.7, 4.0, 14.0), Algo.COLLNET_DIRECT: (0.0, 0.0, 31.0),
                 Algo.COLLNET_CHAIN: (0.0, 0.0, 30.0), Algo.NVLS: (0.0, 0.0, 18.0), Algo.NVLS_TREE: (0.0, 0.0, 20.9),
                 Algo.PAT: (0.0, 0.0, 14.0)},
}

# llMaxBws (GB/s): one node by GPU generation; two and four or more nodes by CPU vendor (Intel row 0, AMD row 1).
LL_MAX_ONE_NODE = {GpuArch.VOLTA: 39.0, GpuArch.AMPERE: 87.7, GpuArch.HOPPER: 141.0, GpuArch.BLACKWELL: 282.0,
                   GpuArch.CDNA3: 141.0}
LL_MAX_NODES = {CpuVendor.INTEL: (39.0, 20.4), CpuVendor.AMD: (22.5, 19.0)}  # (2 nodes, 4 or more)

# perChMaxNVLSTreeBws (GB/s per channel), (two nodes, four or more); NVLSTree does not run on one node.
NVLS_TREE_PER_CHANNEL = {GpuArch.VOLTA: (18.5, 10.0), GpuArch.AMPERE: (23.6, 17.8), GpuArch.HOPPER: (57.7, 45.5),
                         GpuArch.BLACKWELL: (96.0, 80.0), GpuArch.CDNA3: (0.0, 0.0)}

# nvlsEfficiency: the share of the NVLink rate NVLS reaches (0 before Hopper: no NVLS).
NVLS_EFFICIENCY = {GpuArch.VOLTA: 0.0, GpuArch.AMPERE: 0.0, GpuArch.HOPPER: 0.85, GpuArch.BLACKWELL: 0.74,
                   GpuArch.CDNA3: 0.0}

# The bus-bandwidth refinements of ncclTopoTuneModel.
LL_BUS = 0.5                # Ring LL: half the bus bandwidth (4 bytes of data per 8)
LL128_BUS = 0.92            # Ring LL128: 120 of 128 bytes
TREE_BUS = 0.92             # Tree all_reduce
TREE_PATTERN = 0.85         # Tree, for the TREE pattern
TREE_LL_BUS = 1.0 / 3.8     # Tree LL
TREE_LL128_ONE_NODE = 7.0 / 9.0
TREE_LL128_NODES = 120.0 / 128.0
PAT_BUS = 0.75              # PAT (all_gather, reduce_scatter with one GPU per node)
COLLNET_SM90 = 0.85         # CollNetDirect all_reduce on sm90 and later
# Network post overhead (us) per step of an inter-node ring, x3 for Simple (getNetOverhead).
NET_OVERHEAD_US = {CpuVendor.INTEL: 1.0, CpuVendor.AMD: 2.0}
COLLNET_ARITY_US = 0.4      # CollNetDirect: arity serialization per local rank


DEFAULT_PROFILE = NcclProfile(arch=GpuArch.HOPPER, cpu=CpuVendor.INTEL)  # a hierarchy without an ``nccl`` field


def profile_of(h: Hierarchy) -> NcclProfile:
    """The NCCL profile `h` gives, or :data:`DEFAULT_PROFILE` (Hopper, Intel) where it gives none."""
    return h.nccl or DEFAULT_PROFILE


def base_us(arch: GpuArch, algo: Algo, proto: Proto) -> float:
    """NCCL's (or, on CDNA3, RCCL's) base latency of `algo` with `proto`, microseconds."""
    table = RCCL_BASE_US if arch is GpuArch.CDNA3 else BASE_US
    return table[algo][PROTOS.index(proto)]


def hw_us(fabric: Fabric, algo: Algo, proto: Proto) -> float:
    """NCCL's hardware latency of `algo` with `proto` on `fabric`, microseconds (0: NCCL has none)."""
    return HW_US[fabric][algo][PROTOS.index(proto)]


def ll_max_GBps(arch: GpuArch, cpu: CpuVendor, nodes_index: int) -> float:
    """NCCL's cap on LL's bus bandwidth: `nodes_index` 0 for one node, 1 for two, 2 for four or more."""
    return LL_MAX_ONE_NODE[arch] if nodes_index == 0 else LL_MAX_NODES[cpu][nodes_index - 1]


def protocols(arch: GpuArch) -> tuple[Proto, ...]:
    """The protocols NCCL runs on `arch`: LL128 is on by default from Ampere (NVLink) on; RCCL's MI300X tuning
    gives LL128 no latency (it is off there), and Volta runs LL128 only where NCCL enables it (not assumed)."""
    if arch in (GpuArch.VOLTA, GpuArch.CDNA3):
        return (Proto.LL, Proto.SIMPLE)
    return PROTOS


def least_call_us(h: Hierarchy) -> float:
    """The least latency NCCL's model gives any one call of two or more ranks on `h`, microseconds: a ring's base
    and one hop (a broadcast or a two-rank all_gather), a tree's base and two hops, PAT's base and 2.8 us per rank,
    or a reducing switch's own latency (NVLS, NVLSTree and CollNet pay it and more). Every step of a program is a
    call, so no program is predicted faster (``hierarchies/bound.py``'s latency floor under NCCL)."""
    profile = profile_of(h)
    hops = lambda algo, proto: min(HW_US[f][algo][PROTOS.index(proto)] for f in Fabric if HW_US[f][algo][PROTOS.index(proto)] > 0)
    candidates = [base_us(profile.arch, Algo.RING, p) + hops(Algo.RING, p) for p in protocols(profile.arch)]
    candidates += [base_us(profile.arch, Algo.TREE, p) + 2 * hops(Algo.TREE, p) for p in protocols(profile.arch)]
    candidates.append(base_us(GpuArch.HOPPER, Algo.PAT, Proto.SIMPLE) + 2 * 2.8)
    candidates += [lv.switch_latency_us for lv in h.levels if lv.switch_reduce is not None]
    return min(candidates)
