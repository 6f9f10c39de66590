"""scripts/bench_ddp.py's parameter check catches a wrong all-reduce: 4 gloo ranks (CPU, forked) train bench_ddp's own
model (2 x Linear(16, 16)) through bench_ddp's own run, ``one_run`` (2 untimed + 5 timed SGD steps, lr 1e-3), its
final parameters checked elementwise against the reference run's (DDP's default all-reduce) and rank 0's. A correct
averaging hook matches; three faulty hooks, registered with ``register_comm_hook``, must not: one that skips the
reduction (returns the bucket unchanged), one that sums instead of averaging, and two that reduce the wrong slice (the
buffer shifted by one element; only the first half, the rest left local).

The job runs as ``python -m tests.test_bench_ddp_faults WORKDIR`` (torch imported once, then the ranks forked) and
rank 0 writes every run's check; the tests read it. Skipped without torch (``-m torch`` selects them).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.forked import run_forked, run_worker

WORLD, JOB_TIMEOUT_S = 4, 120
ARGS = SimpleNamespace(layers=2, width=16, batch=8, seed=0, warmup=2, steps=5, lr=1e-3, bucket_mib=25.0)
CORRECT, FAULTY = ("default", "average"), ("skip", "sum", "shifted", "first_half")

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def checks(tmp_path_factory) -> dict:
    """Run the job once; each hook's run record (rank 0's)."""
    pytest.importorskip("torch")
    workdir = tmp_path_factory.mktemp("ddp-faults")
    run_worker("tests.test_bench_ddp_faults", [str(workdir)], JOB_TIMEOUT_S)
    return json.loads((workdir / "checks.json").read_text())


def test_a_correct_averaging_hook_matches_the_default(checks):
    for name in CORRECT:
        assert checks[name]["params_match"], (name, checks[name])
        assert checks[name]["params_tol_share"] < 0.01  # the same sums in another order: far inside the tolerance


@pytest.mark.parametrize("name", FAULTY)
def test_a_faulty_hook_is_a_mismatch_by_a_wide_margin(checks, name):
    assert not checks[name]["params_match"], checks[name]
    assert checks[name]["params_tol_share"] > 10  # at least 10 times the tolerance: no borderline catch
    assert checks[name]["params_max_diff"] > 1e-6


def test_params_mismatch_is_none_within_the_tolerance_and_the_largest_difference_beyond():
    torch = pytest.importorskip("torch")
    from scripts import bench_ddp

    b = [torch.tensor([1.0, -2.0, 0.0]), torch.tensor([[0.5]])]
    tol = lambda x: bench_ddp.PARAMS_ATOL + bench_ddp.PARAMS_RTOL * abs(x)  # noqa: E731
    within = [torch.tensor([1.0 + 0.9 * tol(1.0), -2.0 - 0.9 * tol(2.0), 0.9 * tol(0.0)], dtype=torch.float64),
              torch.tensor([[0.5]], dtype=torch.float64)]
    assert bench_ddp.params_mismatch(within, [t.double() for t in b]) is None
    beyond = [b[0].clone(), torch.tensor([[0.5 + 1e-3]])]
    assert bench_ddp.params_mismatch(beyond, b) == pytest.approx(1e-3, rel=1e-3)
    largest, share = bench_ddp.params_gap(beyond, b)
    assert share == pytest.approx(largest / tol(0.5), rel=1e-3)
    assert bench_ddp.params_mismatch([torch.tensor([float("nan"), -2.0, 0.0]), b[1]], b) == float("inf")
    with pytest.raises(ValueError, match="differ in number or shapes"):
        bench_ddp.params_gap(b[:1], b)


# -- the job (python -m tests.test_bench_ddp_faults WORKDIR) --------------------------------------------------------


def done(tensor):
    """A Future already holding `tensor`, as a comm hook returns."""
    import torch

    future = torch.futures.Future()
    future.set_result(tensor)
    return future


def average(state, bucket):
    """Correct: each rank's gradients divided by the world, then summed (DDP's own hook, done by hand)."""
    import torch.distributed as dist

    buffer = bucket.buffer()
    dist.all_reduce(buffer.div_(dist.get_world_size()))
    return done(buffer)


def skip(state, bucket):
    """Faulty: no reduction; every rank steps on its own gradients."""
    return done(bucket.buffer())


def summed(state, bucket):
    """Faulty: the sum, not the average."""
    import torch.distributed as dist

    buffer = bucket.buffer()
    dist.all_reduce(buffer)
    return done(buffer)


def shifted(state, bucket):
    """Faulty: the average of the buffer shifted by one element (each gradient lands on its neighbour)."""
    import torch
    import torch.distributed as dist

    buffer = bucket.buffer()
    moved = torch.roll(buffer, 1).div_(dist.get_world_size())
    dist.all_reduce(moved)
    return done(buffer.copy_(moved))


def first_half(state, bucket):
    """Faulty: only the first half averaged, the rest left local."""
    import torch.distributed as dist

    buffer = bucket.buffer()
    dist.all_reduce(buffer[: buffer.numel() // 2].div_(dist.get_world_size()))
    return done(buffer)


HOOKS = {"default": None, "average": average, "skip": skip, "sum": summed, "shifted": shifted, "first_half": first_half}


def rank_main(rank: int, workdir: Path) -> None:
    """One rank: the reference run with DDP's all-reduce, then a run per hook, each checked by bench_ddp."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from scripts import bench_ddp

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{workdir / 'store'}", rank=rank, world_size=WORLD)
    initial = [p.detach().clone() for p in bench_ddp.build_model(ARGS, ARGS.seed).parameters()]
    batches = bench_ddp.make_batches(ARGS, rank)
    models = {}
    for name, hook in HOOKS.items():
        models[name] = DDP(bench_ddp.build_model(ARGS, ARGS.seed), bucket_cap_mb=ARGS.bucket_mib)
        if hook is not None:
            models[name].register_comm_hook(None, hook)
    _, reference = bench_ddp.one_run(models["default"], initial, batches, ARGS)
    checks = {name: bench_ddp.one_run(model, initial, batches, ARGS, reference)[0] for name, model in models.items()}
    if rank == 0:
        (workdir / "checks.json").write_text(json.dumps(checks))
    dist.destroy_process_group()


def run_ranks(workdir: Path) -> int:
    """Fork WORLD ranks after importing torch once; 1 if a rank fails or hangs."""
    import torch  # noqa: F401  (imported once, before forking: the ranks share it)

    return run_forked(rank_main, (workdir,), WORLD, JOB_TIMEOUT_S - 20)


if __name__ == "__main__":
    sys.exit(run_ranks(Path(sys.argv[1])))
