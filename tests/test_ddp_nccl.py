"""Issue 46: the DDP hook, its guard and the client tuner under an NCCL-like process group (tests/fake_torch.py's
NcclLikeTorch: groups bound to the GPU that refuse CPU tensors and record the thread of every collective)."""

import sys
import types

import numpy as np

from p2synth.hierarchies.plan_file import parse_plan_file
from p2synth.solver.exports.buckets import bucket_plan
from tests.fake_torch import DeviceTensor, NcclLikeTorch
from tests.test_ddp import document  # noqa: F401  (the fixture: 4 KiB, 1 MiB and 25 MiB sizes on 8 ranks)

MIB = 1 << 20


def nccl_hook(document, monkeypatch, direct=frozenset(), compute_s=0.0, program=None):
    """A PlanHook over `document`'s grad_allreduce with a 1-trial guard, under NcclLikeTorch on cuda:0; the plan's
    functions return their input (`program` for 1 MiB if given); sizes in `direct` pick DDP's all-reduce."""
    from p2synth.solver.exports.ddp import PlanHook
    from p2synth.solver.exports.guard import Guard

    torch = NcclLikeTorch("cuda:0", compute_s)
    for name, module in torch.modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    plan = bucket_plan(parse_plan_file(document), 0, "grad_allreduce")
    functions = {s.name: (lambda x, mesh: x) for s in plan.sizes}
    if program is not None:
        functions["grad_allreduce_1048576"] = program
    group = torch.group("default-group")
    hook = PlanHook(plan, functions, mesh=None, divisor=8, guard=(Guard(1), group), direct=(frozenset(direct), group))
    return hook, torch


def bucket(nbytes: int, device: str = "cuda:0") -> types.SimpleNamespace:
    tensor = DeviceTensor(np.full(nbytes // 4, 8.0), device)
    return types.SimpleNamespace(buffer=lambda: tensor)


def test_the_guard_agrees_on_the_buckets_device_under_nccl(document, monkeypatch):
    """The guard's agreement all-reduced a CPU tensor (issue 46): NCCL's groups refuse it, and the error reached the
    backward pass once a size's trials ended. Its times now go through a tensor on the bucket's GPU."""
    hook, torch = nccl_hook(document, monkeypatch)
    futures = [hook(None, bucket(MIB)) for _ in range(4)]
    assert all(f.wait().a[0] == 1.0 for f in futures)  # divided by 8, summed on one rank
    assert hook.decisions()[MIB]["kept"] in ("plan", "default") and hook.reduced == 4
    assert ("default-group", "max") in {(group, op) for _, group, op, _ in torch.calls}
    hook.close()


def test_every_collective_of_gpu_buckets_comes_from_one_thread(document, monkeypatch):
    """NCCL: issuing to several communicators of one device from several threads is unsafe, and ranks may order
    them differently. Buckets of a size that runs DDP's all-reduce, trial buckets, the agreement and the buckets
    after the trials: every collective from the hook's one worker thread (a size whose pick is DDP's all-reduce
    used to start it on the calling thread)."""
    import threading

    hook, torch = nccl_hook(document, monkeypatch, direct={4096}, program=lambda x, mesh: x)
    futures = [hook(None, bucket(size)) for size in (4096, MIB, 4096, MIB, MIB, 4096, MIB)]
    assert all(f.wait() is not None for f in futures)
    threads = {thread for thread, _, _, _ in torch.calls}
    assert len(torch.calls) >= 5 and len(threads) == 1 and threading.get_ident() not in threads
    assert hook.reduced == 7 and hook.direct >= 3
    hook.close()


def test_a_trial_times_the_collective_not_the_buckets_backward_compute(document, monkeypatch):
    """The trial clock used to start before the worker's stream waited for the bucket's ready event, and its final
    synchronize waited for the backward compute too: a bucket whose gradients take 0.4 s looked 0.4 s slow."""
    hook, torch = nccl_hook(document, monkeypatch, compute_s=0.4)
    futures = [hook(None, bucket(MIB)) for _ in range(2)]
    assert all(f.wait() is not None for f in futures)
    record = hook.decisions()[MIB]
    assert record["kept"] is not None and max(record["plan_s"] + record["default_s"]) < 0.2, record
    hook.close()


def test_the_client_tuners_timing_agreement_runs_on_the_gpu_under_nccl(monkeypatch):
    """runtime/client_tune.py times through TorchWorld, whose maximum all-reduce used a CPU tensor: under NCCL the
    first round failed. Its Runners hand TorchWorld their device."""
    from mpi4py import MPI

    from p2synth.runtime.client_tune import Runners

    torch = NcclLikeTorch("cuda")
    for name, module in torch.modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    world = Runners(module=None, mesh=None, group=None, group_size=8, device="cuda").world()
    recv = np.zeros(3)
    world.Allreduce(np.array([1.0, 2.5, 3.0]), recv, op=MPI.MAX)
    assert recv.tolist() == [1.0, 2.5, 3.0] and torch.calls[0][1:3] == ("world", "max")
    world.Barrier()
    assert torch.calls[1][2] == "barrier on [0]"  # the GPU it runs on, not one torch guesses

