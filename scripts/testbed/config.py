"""What a testbed is, as data: sizes, shaping rates, names, addresses and the hierarchy it models.

Nothing here touches the system, so all of it is tested without root.

Topology (a star of bridges inside one "switch" namespace)::

    no racks:   node ns --veth-- [bridge p2s-br]                      (shaped node link, both ways)
    racks:      node ns --veth-- [bridge p2s-rackK] --veth-- [bridge p2s-core]
                         node link (inter-node rate)   rack uplink (inter-rack rate)
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from p2synth.hierarchies.cli import UsageError
from p2synth.hierarchies.model import Hierarchy, Level

PREFIX = "p2s"  # every namespace and link this tool creates starts with it
SUBNET = ipaddress.IPv4Network("10.231.0.0/24")  # used only inside the namespaces we create
MAX_NODES = SUBNET.num_addresses - 3  # .1 .. .253
STATE_DIR = Path("/run")  # tmpfs: cleared at reboot together with the namespaces
NODE_IF = f"{PREFIX}-eth0"  # the node's only interface (besides lo), inside its namespace
INSTANCE_PATTERN = re.compile(r"^[a-z0-9]{1,12}$")

# Nominal figures the hierarchy file gets before calibration replaces them (see docs/testbed.md).
# Shaped links get their bandwidth from the rate; the rest are rough figures measured on a
# 2-core box with scripts.calibrate (latencies vary 2-10x with CPU contention).
CORE_BANDWIDTH_GBPS = 10.0  # Open MPI sm BTL, one pair of ranks in a node (measured 7-20)
CORE_LATENCY_US = 2.0  # sm BTL small-message hop (measured 1-3.5)
NODE_LATENCY_US = 20.0  # TCP over veth + bridge between namespaces, ob1 PML (measured 10 idle, 100+ busy)
RACK_LATENCY_US = 25.0  # one bridge and veth hop more than node to node (measured 12 idle)
UNSHAPED_GBPS = 1.0  # an unshaped veth link as Open MPI's TCP BTL sees it (rough)

_RATE = re.compile(r"^(\d+(?:\.\d+)?)([kmgt]?)bit$")
_SCALE = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


class ConfigError(UsageError):
    """A testbed description that cannot be built; the message says what to change."""


def parse_rate(text: str) -> int | None:
    """A link rate in tc's bit units (``1gbit``, ``200mbit``, ``1.5gbit``) -> bits/s; ``none`` -> None (unshaped).

    tc's byte units (``mbps`` = megabytes/s) are refused on purpose: they read like megabits.
    """
    t = text.strip().lower()
    if t in ("none", "unshaped"):
        return None
    m = _RATE.match(t)
    if not m:
        raise ConfigError(f"bad rate {text!r}: use a number with kbit, mbit, gbit or tbit (e.g. 1gbit, 200mbit), or none")
    bits = round(float(m.group(1)) * _SCALE[m.group(2)])
    if bits < 100_000:
        raise ConfigError(f"rate {text!r} is too slow for MPI start-up; use at least 100kbit")
    return bits


def format_rate(bits: int | None) -> str:
    """Bits/s -> short tc-style text (``1gbit``, ``200mbit``); None -> ``none``."""
    if bits is None:
        return "none"
    for unit, scale in (("tbit", 10**12), ("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bits >= scale and bits % scale == 0:
            return f"{bits // scale}{unit}"
    return f"{bits}bit"


def gbps(bits: int | None) -> float:
    """Bits/s -> GB/s (1e9 bytes/s) as the hierarchy files use; None (unshaped) -> the unshaped guess."""
    return UNSHAPED_GBPS if bits is None else bits / 8e9


@dataclass(frozen=True)
class TestbedConfig:
    """A testbed: `nodes` namespaces in `racks` equal racks, `ranks_per_node` MPI ranks in each.

    `instance` ("" for the default one) lets several testbeds live side by side: it goes into
    every namespace name and the state file name.
    """

    __test__ = False  # not a pytest test class

    nodes: int
    ranks_per_node: int
    inter_node_bps: int | None
    racks: int = 1
    inter_rack_bps: int | None = None
    instance: str = ""

    def __post_init__(self) -> None:
        if self.instance and not INSTANCE_PATTERN.match(self.instance):
            raise ConfigError(f"bad instance name {self.instance!r}: 1-12 lowercase letters or digits")
        if not 1 <= self.nodes <= MAX_NODES:
            raise ConfigError(f"--nodes must be 1..{MAX_NODES}, got {self.nodes}")
        if self.ranks_per_node < 1:
            raise ConfigError(f"--ranks-per-node must be at least 1, got {self.ranks_per_node}")
        if self.racks < 1 or self.nodes % self.racks:
            raise ConfigError(f"--racks must divide --nodes ({self.nodes}), got {self.racks}")
        if self.racks == 1 and self.inter_rack_bps is not None:
            raise ConfigError("--inter-rack needs --racks 2 or more")

    # ---- names and addresses -------------------------------------------------------------
    @property
    def prefix(self) -> str:
        """Prefix of every namespace of this testbed: ``p2s`` or ``p2s-INSTANCE``."""
        return namespace_prefix(self.instance)

    @property
    def switch_ns(self) -> str:
        return f"{self.prefix}-sw"

    def node_ns(self, node: int) -> str:
        """Namespace of `node`; also the hostname its ranks see."""
        return f"{self.prefix}-n{node}"

    def node_ip(self, node: int) -> str:
        return str(SUBNET.network_address + 1 + node)

    @property
    def nodes_per_rack(self) -> int:
        return self.nodes // self.racks

    def rack_of(self, node: int) -> int:
        return node // self.nodes_per_rack

    @property
    def namespaces(self) -> list[str]:
        """Every namespace this testbed creates, the switch first."""
        return [self.switch_ns] + [self.node_ns(i) for i in range(self.nodes)]

    def node_table(self) -> list[dict]:
        """One record per node, as the state file keeps them and the launcher reads them."""
        return [{"node": i, "namespace": self.node_ns(i), "hostname": self.node_ns(i), "ip": self.node_ip(i),
                 "rack": self.rack_of(i)} for i in range(self.nodes)]

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    def node_of_rank(self, rank: int) -> int:
        """Ranks are consecutive per node: rank = node * ranks_per_node + local."""
        return rank // self.ranks_per_node

    # ---- the hierarchy it models ---------------------------------------------------------
    def hierarchy(self) -> Hierarchy:
        """Levels ``[rack,] node, core`` with nominal link figures from the shaping rates.

        node: one rank alone gets the node link; all ranks of a node share it (uplink).
        rack: a rank crossing racks is held to the slower of its node link and the rack
        uplink; all ranks of a rack share the rack uplink. core: shared memory (a guess).
        """
        node_bw = gbps(self.inter_node_bps)
        levels = []
        if self.racks > 1:
            rack_up = gbps(self.inter_rack_bps)
            levels.append(Level(name="rack", count=self.racks, bandwidth_GBps=min(node_bw, rack_up),
                                latency_us=RACK_LATENCY_US, uplink_GBps=rack_up))
        levels.append(Level(name="node", count=self.nodes_per_rack, bandwidth_GBps=node_bw,
                            latency_us=NODE_LATENCY_US, uplink_GBps=node_bw))
        levels.append(Level(name="core", count=self.ranks_per_node, bandwidth_GBps=CORE_BANDWIDTH_GBPS,
                            latency_us=CORE_LATENCY_US))
        shape = "x".join(str(lv.count) for lv in levels)
        return Hierarchy(name=f"testbed-{shape}", levels=tuple(levels))

    def to_dict(self) -> dict:
        return asdict(self)


def namespace_prefix(instance: str = "") -> str:
    return f"{PREFIX}-{instance}" if instance else PREFIX


def owned_namespace(name: str, instance: str = "") -> bool:
    """Whether namespace `name` belongs to testbed `instance` (by its exact name pattern)."""
    return re.fullmatch(rf"{re.escape(namespace_prefix(instance))}-(sw|n\d+)", name) is not None


def state_path(instance: str = "", state_dir: Path = STATE_DIR) -> Path:
    """The JSON state file of testbed `instance`."""
    return state_dir / (f"p2synth-testbed-{instance}.json" if instance else "p2synth-testbed.json")


@dataclass(frozen=True)
class VethLink:
    """One veth pair: end `a` in namespace `ns_a`, end `b` in `ns_b`; each end's egress shaped at `rate_bps`.

    `master_a`/`master_b` name the bridge an end is enslaved to (None: it is a node end
    and carries `address`).
    """

    ns_a: str
    if_a: str
    ns_b: str
    if_b: str
    rate_bps: int | None
    master_a: str | None = None
    master_b: str | None = None
    address: str | None = None  # of end a, with prefix length


def bridges(cfg: TestbedConfig) -> list[str]:
    """Bridges inside the switch namespace."""
    if cfg.racks == 1:
        return [f"{PREFIX}-br"]
    return [f"{PREFIX}-core"] + [f"{PREFIX}-rack{k}" for k in range(cfg.racks)]


def links(cfg: TestbedConfig) -> list[VethLink]:
    """Every veth pair of the testbed: rack uplinks first, then one link per node."""
    out = []
    if cfg.racks > 1:
        for k in range(cfg.racks):
            out.append(VethLink(cfg.switch_ns, f"{PREFIX}-r{k}up", cfg.switch_ns, f"{PREFIX}-r{k}dn", cfg.inter_rack_bps,
                            master_a=f"{PREFIX}-rack{k}", master_b=f"{PREFIX}-core"))
    for i in range(cfg.nodes):
        bridge = f"{PREFIX}-br" if cfg.racks == 1 else f"{PREFIX}-rack{cfg.rack_of(i)}"
        out.append(VethLink(cfg.node_ns(i), NODE_IF, cfg.switch_ns, f"{PREFIX}-n{i}", cfg.inter_node_bps,
                        master_b=bridge, address=f"{cfg.node_ip(i)}/{SUBNET.prefixlen}"))
    return out


def tbf_args(rate_bps: int) -> list[str]:
    """tc arguments of a tbf qdisc at `rate_bps`.

    burst: the bytes that may leave at line speed after an idle spell. Small, so a
    1 MiB message already sees the rate (2 ms of traffic, at least 64 KiB so a GSO
    packet fits). latency bounds the queue: 50 ms of traffic beyond the burst.
    """
    burst = max(rate_bps // 8 // 500, 64 * 1024)
    return ["tbf", "rate", f"{rate_bps}bit", "burst", str(burst), "latency", "50ms"]
