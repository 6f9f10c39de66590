"""torch.distributed's default process group as the communicator :class:`runtime.calibration.Bench` measures over,
so ``python -m scripts.calibrate --client torch`` runs the same ping-pong, concurrent, two-way and summing
measurements over gloo as it does over MPI.

Gloo moves every byte over TCP, also between the ranks of one node (over the loopback), so only a calibration
over gloo gives the inner levels' figures of a job that communicates with gloo.

Buffers are the bench's numpy uint8 buffers seen as tensors (``torch.from_numpy``: no copy; received bytes land
in the numpy buffer). The clock is ``time.perf_counter``. The process group must be initialised first
(``runtime/torch_dist.py``'s ``init_process_group``). torch is imported inside the methods only: importing this
module costs nothing.
"""

from __future__ import annotations

import time

import numpy as np

from p2synth.runtime.calibration import BenchComm


class _Done:
    """A barrier request of torch's (``Work``) with MPI's ``Test``."""

    def __init__(self, work) -> None:
        self.work = work

    def Test(self) -> bool:  # noqa: N802  (MPI's spelling, which Bench.idle_barrier calls)
        return self.work.is_completed()


class TorchComm(BenchComm):
    """The default process group of torch.distributed (any backend with point-to-point; gloo on CPU)."""

    def rank(self) -> int:
        import torch.distributed as dist

        return dist.get_rank()

    def wtime(self) -> float:
        return time.perf_counter()

    def message(self, buf: np.ndarray):
        import torch

        return torch.from_numpy(buf)

    def send(self, msg, dest: int, tag: int) -> None:
        import torch.distributed as dist

        dist.send(msg, dest, tag=tag)

    def recv(self, msg, source: int, tag: int) -> None:
        import torch.distributed as dist

        dist.recv(msg, source, tag=tag)

    def sendrecv(self, out, back, peer: int, tag: int) -> None:
        import torch.distributed as dist

        sent = dist.isend(out, peer, tag=tag)
        received = dist.irecv(back, peer, tag=tag)
        sent.wait()
        received.wait()

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()

    def ibarrier(self) -> _Done:
        import torch.distributed as dist

        return _Done(dist.barrier(async_op=True))

    def max_on(self, value: float, root: int) -> float | None:
        import torch
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t[0]) if dist.get_rank() == root else None

    def gather(self, obj, root: int) -> list | None:
        import torch.distributed as dist

        out = [None] * dist.get_world_size()
        dist.all_gather_object(out, obj)
        return out if dist.get_rank() == root else None
