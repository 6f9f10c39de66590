"""The emulated cluster: one network namespace per node, shaped veth links, one MPI job across them.

    sudo python -m scripts.testbed up --nodes 4 --ranks-per-node 2 --inter-node 1gbit [--racks 2 --inter-rack 200mbit]
    sudo python -m scripts.testbed run -- python -m runtime.bench plan.json --top 10
    sudo python -m scripts.testbed down

See docs/testbed.md.
"""

from scripts.testbed.config import ConfigError, TestbedConfig, format_rate, parse_rate
from scripts.testbed.launch import run
from scripts.testbed.net import (
           Refused,
           TestbedError,
           down,
           netns_available,
           owned_namespaces,
           read_state,
           status,
           up,
)

__all__ = ["ConfigError", "Refused", "TestbedConfig", "TestbedError", "down", "format_rate", "netns_available",
           "owned_namespaces", "parse_rate", "read_state", "run", "status", "up"]
