"""The exported modules' groups per axis and per request (issue 48, point 4), and docs/exports.md's training snippet.

The plan: data 4 x tensor 2 on 2 nodes of 4 cores, placed ``data=[node 2, core 2] tensor=[core 2]``, so the data
axis spans two mesh dimensions. Without torch, the PyTorch module's ``groups(mesh)`` runs on the recording stand-in
(tests/fake_torch.py); with torch, the snippet of docs/exports.md runs as written, 8 ranks under gloo (the job runs as
``python -m tests.test_export_groups WORKDIR``: torch imported once, then 8 ranks forked), and the test reads what
every rank saw.
"""

from __future__ import annotations

import json
import os
import re
import runpy
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from p2synth.hierarchies.plan_file import load_plan_file
from tests import fake_torch
from tests.fake_torch import World
from tests.forked import ROOT, run_forked, run_worker
from tests.test_exports_calls import group_ranks, load

WORLD = 8
JOB_TIMEOUT_S = 240
SPEC = {
    "hierarchy": {"name": "cpu-2x4", "levels": [
        {"name": "node", "count": 2, "bandwidth_GBps": 1.0, "uplink_GBps": 1.0, "latency_us": 20},
        {"name": "core", "count": 4, "bandwidth_GBps": 8.0, "latency_us": 1}]},
    "axes": [{"name": "data", "size": 4}, {"name": "tensor", "size": 2}],
    "workload": [
        {"name": "tp_allreduce", "axes": ["tensor"], "message_bytes": 2048, "count": 40},
        {"name": "grad_allreduce", "axes": ["data"], "message_bytes": 33280, "gradient": True, "bucket_bytes": 32768},
    ],
    "placements": [[[2, 2], [1, 2]]],
}
SNIPPET = re.compile(r"<!-- training-snippet -->\n```python\n(.*?)```", re.S)


def export(workdir: Path, framework: str) -> str:
    """SPEC solved, its plan written to `workdir`/plan.json, and placement 0 exported for `framework`."""
    (workdir / "spec.json").write_text(json.dumps(SPEC))
    run = subprocess.run([sys.executable, "-m", "solver.run", str(workdir / "spec.json"), "--out", str(workdir / "plan.json"),
                          "--export", framework, "--placement", "0"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, str]:
    """The plan file of SPEC and its PyTorch module's source."""
    workdir = tmp_path_factory.mktemp("groups")
    return workdir / "plan.json", export(workdir, "torch")


def expected_groups(plan: Path, rank: int) -> dict[str, list[int]]:
    """Each axis's and each request's group of `rank`, from the plan's placement (ranks in rank order)."""
    planned = load_plan_file(plan).placement(0)
    placement = planned.placement
    by_axis = {a.name: group_ranks(placement, [c for c in placement.cells if c.axis == i], rank)
               for i, a in enumerate(placement.axes)}
    by_request = {r.named.name: group_ranks(placement, r.named.request.reduced_cells(placement), rank)
                  for r in planned.requests}
    return {name: list(ranks) for name, ranks in {**by_axis, **by_request}.items()}


def test_the_groups_table_names_each_axis_and_request_with_its_mesh_dims(exported):
    _, source = exported
    table = source[source.index("GROUPS = {"):]
    table = table[: table.index("}") + 1]
    assert table.splitlines()[1:-1] == [
        '    "data": ("data@node", "data@core"),', '    "tensor": ("tensor@core",),',
        '    "tp_allreduce": ("tensor@core",),', '    "grad_allreduce_32768": ("data@node", "data@core"),',
        '    "grad_allreduce_512": ("data@node", "data@core"),']


def test_each_rank_gets_the_groups_its_placement_gives_it(exported):
    """On the stand-in for torch: groups(mesh) by name, each holding the ranks the placement groups together."""
    plan, source = exported
    world = World(WORLD, False)
    modules = [load(source, fake_torch.install(world)) for _ in range(WORLD)]

    def rank_main(rank: int) -> dict[str, list[int]]:
        module = modules[rank]
        mesh = module.build_mesh("cpu")
        first = module.groups(mesh)
        assert module.groups(mesh) == first  # made once per mesh
        return {name: list(group.ranks) for name, group in first.items()}
    for rank, got in enumerate(world.run(rank_main)):
        assert got == expected_groups(plan, rank)
    assert got["data"] == [1, 3, 5, 7] and got["tensor"] == [6, 7]  # rank 7: the data group spans both nodes


# The JAX module's GROUPS, used as a psum's axis_name and a PartitionSpec on 8 host devices (a process of its own:
# XLA_FLAGS must be set before jax starts). Device r's block is r + 1: a group's psum is the sum of its ranks + 1.
JAX_JOB = """
import json, sys
import jax, numpy as np
from jax import lax
from jax.sharding import PartitionSpec
import plan_jax as plan

mesh = plan.build_mesh()
ranks = PartitionSpec(plan.MESH_AXIS_NAMES)
x = np.arange(1, 9, dtype=np.float32)
out = {name: np.asarray(jax.jit(jax.shard_map(lambda b, axes=axes: lax.psum(b, axes), mesh=mesh, in_specs=ranks,
                                              out_specs=ranks))(x)).tolist() for name, axes in plan.GROUPS.items()}
batch = jax.device_put(np.arange(4, dtype=np.float32), jax.NamedSharding(mesh, PartitionSpec(plan.GROUPS["data"])))
out["data_shards"] = [[int(s.data[0]), s.device.id] for s in batch.addressable_shards]
json.dump(out, open(sys.argv[1], "w"))
"""


@pytest.mark.jax
def test_the_jax_groups_name_the_mesh_axes_of_each_axis_and_request(tmp_path):
    pytest.importorskip("jax")
    (tmp_path / "plan_jax.py").write_text(export(tmp_path, "jax"))
    (tmp_path / "job.py").write_text(JAX_JOB)
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={WORLD}", JAX_PLATFORMS="cpu",
               PYTHONPATH=str(tmp_path))
    run = subprocess.run([sys.executable, str(tmp_path / "job.py"), str(tmp_path / "out.json")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads((tmp_path / "out.json").read_text())
    for name in ("data", "tensor", "tp_allreduce", "grad_allreduce_32768"):
        assert out[name] == [sum(r + 1 for r in expected_groups(tmp_path / "plan.json", rank)[name]) for rank in range(WORLD)]
    # the batch sharded over the data axis: element d on the devices whose data coordinate is d
    data_of = {rank: expected_groups(tmp_path / "plan.json", rank)["tensor"][0] // 2 for rank in range(WORLD)}
    assert all(value == data_of[device] for value, device in out["data_shards"])


# -- docs/exports.md's training snippet, for real ---------------------------------------


@pytest.fixture(scope="module")
def job(exported, tmp_path_factory) -> tuple[Path, Path]:
    """Run the snippet on 8 ranks once; the plan and the job's folder."""
    pytest.importorskip("torch")
    plan, source = exported
    workdir = tmp_path_factory.mktemp("groups-job")
    (workdir / "plan_torch.py").write_text(source)
    snippet = SNIPPET.search((ROOT / "docs" / "exports.md").read_text())
    assert snippet, "docs/exports.md has no <!-- training-snippet --> python block"
    (workdir / "train.py").write_text(snippet.group(1))
    run_worker("tests.test_export_groups", [str(workdir)], JOB_TIMEOUT_S)
    return plan, workdir


@pytest.mark.torch
def test_the_snippet_trains_with_the_groups_the_placement_gives(job):
    plan, workdir = job
    for rank in range(WORLD):
        report = json.loads((workdir / f"rank-{rank}.json").read_text())
        want = expected_groups(plan, rank)
        assert report["tensor"] == want["tensor"] and report["data"] == want["data"]
        assert report["unsplit_difference"] < 1e-5  # the tensor group's sum is the unsplit MLP's output
        assert report["data_group_difference"] == 0.0  # DDP kept the replicas of each slice equal
        assert report["losses"][-1] < report["losses"][0]  # it learns


def rank_main(rank: int, workdir: Path, port: int) -> None:
    """One rank: run the snippet as torchrun would start it, then report its groups, its model against the unsplit
    MLP, its parameters against its data group's and its losses."""
    import torch
    import torch.distributed as dist

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    sys.path.insert(0, str(workdir))
    ns = runpy.run_path(str(workdir / "train.py"), run_name="train")
    tp, dp, model = ns["tp"], ns["dp"], ns["model"].module

    def gathered(t: torch.Tensor, group) -> list[torch.Tensor]:
        out = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
        dist.all_gather(out, t.detach().contiguous(), group=group)
        return out

    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(7))
    up_w, up_b = torch.cat(gathered(model.up.weight, tp)), torch.cat(gathered(model.up.bias, tp))
    down_w = torch.cat(gathered(model.down.weight, tp), dim=1)
    with torch.no_grad():
        unsplit = torch.tanh(x @ up_w.T + up_b) @ down_w.T
        split = model(x)
    flat = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    replicas = gathered(flat, dp)
    report = {"tensor": dist.get_process_group_ranks(tp), "data": dist.get_process_group_ranks(dp),
              "unsplit_difference": float((split - unsplit).abs().max()),
              "data_group_difference": max(float((r - flat).abs().max()) for r in replicas),
              "losses": ns["losses"]}
    (workdir / f"rank-{rank}.json").write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    import torch  # noqa: F401  (imported once, before forking: the ranks share it)

    sys.exit(run_forked(rank_main, (Path(sys.argv[1]), free_port()), WORLD, JOB_TIMEOUT_S - 30))
