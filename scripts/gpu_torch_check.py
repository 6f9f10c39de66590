"""The torchrun side of ``python -m scripts.gpu_check --multi``: an exported module and the DDP hook over NCCL.

    torchrun --standalone --nproc-per-node N scripts/gpu_torch_check.py PLAN WORKDIR

One process per GPU (``runtime/devices.py`` picks it), ``init_process_group("nccl")``, then, checked
elementwise on every rank:

1. **export**: the plan's exported PyTorch module (``build_mesh("cuda")``) runs every planned size's function
   as the DDP hook runs it (``reduce_bucket``, not divided) on integer-valued float32 data, different on every
   rank; the output must equal the exact sum of the ranks' inputs, element for element;
2. **hook**: a small model trains 4 steps under DistributedDataParallel twice from the same start, with DDP's
   own all-reduce and with ``register_p2synth_hook`` (its guard on, 1 trial a size, so it decides and then runs
   its pick); the parameters must agree element for element after every step (to float rounding: the two
   add in different orders).

Each rank writes ``WORKDIR/rank<r>.json`` (what failed, if anything) and exits 0 when every check held, else 1.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

STEPS = 4
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}  # the hook and DDP add the ranks' gradients in different orders


def check_export(plan_path: Path, rank: int, world: int) -> list[str]:
    """The exported module's functions on every planned size; the sizes whose output was not the exact sum."""
    import torch

    from p2synth.hierarchies.plan_file import load_plan_file
    from p2synth.solver.exports.buckets import bucket_plan
    from p2synth.solver.exports.ddp import load_module, reduce_bucket
    from p2synth.solver.exports.formats import ExportFormat, export_placement

    plan = load_plan_file(plan_path)
    buckets = bucket_plan(plan, 0, None)
    module = load_module(export_placement(plan, 0, ExportFormat.TORCH), "p2synth_gpu_check")
    mesh = module.build_mesh("cuda")
    wrong = []
    for sized in buckets.sizes:
        count = sized.multiple * max(1, sized.message_bytes // (4 * sized.multiple))
        index = torch.arange(count, device="cuda", dtype=torch.float32) % 251
        x = index + (rank + 1)  # small integers: float32 sums them exactly
        expected = index * world + world * (world + 1) // 2
        out = reduce_bucket(x, module.REQUESTS[sized.name], mesh, sized.multiple, 1)
        torch.cuda.synchronize()
        if not torch.equal(out, expected):
            wrong.append(f"export {sized.name}: {int((out != expected).sum())} of {count} elements differ")
    return wrong


def train(rank: int, plan_path: Path | None) -> list:
    """The parameters before and after each of STEPS steps of a small DDP model (the p2synth hook with a plan)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 8)).cuda()
    ddp = DistributedDataParallel(model, bucket_cap_mb=0.25)
    if plan_path is not None:
        from p2synth.solver.exports.ddp import register_p2synth_hook

        register_p2synth_hook(ddp, plan_path, guard=True, guard_trials=1)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    data = torch.Generator(device="cuda").manual_seed(1000 + rank)
    flat = [torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()]
    for _ in range(STEPS):
        x = torch.randn(32, 64, device="cuda", generator=data)
        y = torch.randn(32, 8, device="cuda", generator=data)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        optimizer.step()
        flat.append(torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone())
    return flat


def check_hook(plan_path: Path, rank: int) -> list[str]:
    """Training with the hook against DDP's own all-reduce; the steps whose parameters differ."""
    import torch

    default, hooked = train(rank, None), train(rank, plan_path)
    return [f"hook: step {step}: {int((~torch.isclose(a, b, **TOLERANCE)).sum())} parameters differ from DDP's"
            for step, (a, b) in enumerate(zip(default, hooked)) if not torch.allclose(a, b, **TOLERANCE)]


def main(argv: list[str]) -> int:
    """Run both checks on this rank; 0 when both held."""
    import torch
    import torch.distributed as dist

    from p2synth.runtime.devices import launcher_device

    plan_path, workdir = Path(argv[0]), Path(argv[1])
    torch.cuda.set_device(launcher_device(os.environ, torch.cuda.device_count()))
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    failures = check_export(plan_path, rank, world) + check_hook(plan_path, rank)
    (workdir / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "failures": failures}))
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
