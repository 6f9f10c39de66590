"""Joining a torch.distributed job (runtime/torch_dist.py): rank and world from either launcher, interfaces."""

import socket

import pytest

from p2synth.hierarchies.cli import UsageError
from p2synth.runtime.torch_dist import default_ifname, interface_address, rank_and_world


def test_rank_and_world_come_from_open_mpi_or_torchrun():
    assert rank_and_world({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8", "RANK": "0", "WORLD_SIZE": "1"}) == (3, 8)
    assert rank_and_world({"RANK": "1", "WORLD_SIZE": "2"}) == (1, 2)
    with pytest.raises(UsageError, match="no rank"):
        rank_and_world({})


def test_interface_addresses():
    assert interface_address("lo") == "127.0.0.1"
    with pytest.raises(UsageError, match="--ifname p2s-nosuch0: no IPv4 address"):
        interface_address("p2s-nosuch0")


def test_the_interface_is_gloos_the_only_one_besides_the_loopback_or_the_loopback():
    assert default_ifname({"GLOO_SOCKET_IFNAME": "eth7,eth8"}) == "eth7"
    others = [name for _, name in socket.if_nameindex() if name != "lo"]
    assert default_ifname({}) == (others[0] if len(others) == 1 else "lo")
