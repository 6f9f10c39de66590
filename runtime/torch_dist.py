"""Joining a torch.distributed job from any launcher, and the two collectives the timing code needs over it.

A job launched by ``torchrun`` finds its rank, world size and rendezvous in
``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``; one launched by
``mpiexec`` (or the emulated cluster's ``scripts.testbed run``) finds its rank in
``OMPI_COMM_WORLD_RANK`` and has no rendezvous: rank 0 opens a TCP store on a
free port of its address on the job's interface and sends address and port to
the others over MPI. Gloo binds that interface too (``GLOO_SOCKET_IFNAME``):
hostnames in network namespaces resolve to nothing, and gloo would fall back to
the loopback.

:class:`TorchWorld` gives torch.distributed the ``Barrier`` / ``Allreduce(MAX)``
face of an MPI communicator, so the interleaved timing of ``runtime/measure.py``
runs unchanged over the client's backend.

torch is imported inside the functions only: importing this module costs nothing.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from collections.abc import Mapping

import numpy as np

from p2synth.hierarchies.cli import UsageError

SIOCGIFADDR = 0x8915


def rank_and_world(env: Mapping[str, str]) -> tuple[int, int]:
    """This process's rank and the world size, from Open MPI's variables or torchrun's; UsageError without either."""
    for rank_key, size_key in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("RANK", "WORLD_SIZE")):
        if rank_key in env and size_key in env:
            return int(env[rank_key]), int(env[size_key])
    raise UsageError("no rank: launch one process per rank with mpirun (OMPI_COMM_WORLD_RANK) or torchrun (RANK)")


def interface_address(name: str) -> str:
    """The IPv4 address of the network interface `name`; UsageError if it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError as e:
            raise UsageError(f"--ifname {name}: no IPv4 address ({e.strerror})") from None
    return socket.inet_ntoa(packed[20:24])


def default_ifname(env: Mapping[str, str]) -> str:
    """The interface to use: ``GLOO_SOCKET_IFNAME`` if set, else the only interface besides the loopback (as in a
    testbed node), else the loopback."""
    if env.get("GLOO_SOCKET_IFNAME"):
        return env["GLOO_SOCKET_IFNAME"].split(",")[0]
    others = [name for _, name in socket.if_nameindex() if name != "lo"]
    return others[0] if len(others) == 1 else "lo"


def init_process_group(backend: str, ifname: str | None = None, master_addr: str | None = None,
                       master_port: int = 0) -> tuple[int, int]:
    """Join the job's default process group on `backend` ("gloo" or "nccl"); (rank, world size).

    Under torchrun (``MASTER_ADDR`` set) torch's own rendezvous; otherwise rank 0
    hosts the store on `master_addr` (default: its address on `ifname`) and
    `master_port` (0: a free one), and both reach the others over MPI unless
    both are given. Collective: every rank of the job calls it.
    """
    import torch.distributed as dist

    env = os.environ
    rank, world = rank_and_world(env)
    ifname = ifname or default_ifname(env)
    env.setdefault("GLOO_SOCKET_IFNAME", ifname)
    if "MASTER_ADDR" in env and "RANK" in env:
        dist.init_process_group(backend, rank=rank, world_size=world)
        return rank, world
    address, port, store = master_addr, master_port, None
    if rank == 0:
        address = address or interface_address(ifname)
        store = dist.TCPStore(address, port, world, is_master=True, wait_for_workers=False)
        port = store.port
    if master_addr is None or master_port == 0:
        from mpi4py import MPI

        address, port = MPI.COMM_WORLD.bcast((address, port), root=0)
    if store is None:
        store = dist.TCPStore(address, port, world, is_master=False)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world)
    return rank, world


class TorchWorld:
    """torch.distributed's default group seen as the MPI communicator runtime/measure.py times with: ``Barrier``,
    ``Allreduce`` (maximum only) and ``Get_rank`` / ``Get_size``.

    `device` is where its small tensors go: the job's GPU under NCCL ("cuda"), whose process groups have no CPU
    backend ("No backend type associated with device type cpu"), "cpu" under gloo.
    """

    def __init__(self, device: str = "cpu"):
        self.device = device

    def Barrier(self) -> None:  # noqa: N802  (MPI's spelling)
        """Wait for every rank (under NCCL on this rank's current GPU, rather than one torch guesses)."""
        import torch
        import torch.distributed as dist

        if self.device.startswith("cuda"):
            dist.barrier(device_ids=[torch.cuda.current_device()])
        else:
            dist.barrier()

    def Allreduce(self, send: np.ndarray, recv: np.ndarray, op=None) -> None:  # noqa: N802
        """`recv` = the elementwise maximum of `send` over ranks (float64; `op` must be a maximum)."""
        import torch
        import torch.distributed as dist

        from mpi4py import MPI  # runtime/measure.py, the caller, has loaded it already

        if op is not MPI.MAX:
            raise ValueError("TorchWorld.Allreduce takes the maximum only")
        t = torch.tensor(np.asarray(send, dtype=np.float64).ravel().tolist(), dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        recv[...] = np.asarray(t.tolist(), dtype=np.float64).reshape(recv.shape)

    def Get_rank(self) -> int:  # noqa: N802
        """This process's rank."""
        import torch.distributed as dist

        return dist.get_rank()

    def Get_size(self) -> int:  # noqa: N802
        """The number of ranks."""
        import torch.distributed as dist

        return dist.get_world_size()

