"""Issue 46, the cupy backend's setup without a GPU: NCCL unique ids of CuPy 13 and 14, the GPU a rank uses, the
order of NCCL launches, events made once, and no import cycle (tests/fake_cupy.py stands in for CuPy)."""

import ast
import os
import sys

import numpy as np
import pytest
from mpi4py import MPI

import tests.fake_cupy as fake_cupy_module
from p2synth.hierarchies import Collective
from p2synth.runtime.backend_kind import BackendUnavailable
from p2synth.runtime.devices import device_index, launcher_device
from p2synth.runtime.nccl import IMPLICIT_ORDER, CupyBackend, LaunchOrder, launch_order
from scripts.gpu_check import check_pipeline
from tests.runtime_support import ROOT


@pytest.fixture
def fake_cupy(monkeypatch):
    """Install tests/fake_cupy.py as cupy (call it with install's options); restored afterwards."""
    for name in ("cupy", "cupy.cuda", "cupy.cuda.nccl"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delenv(IMPLICIT_ORDER, raising=False)

    def install(**options):
        fake_cupy_module.install(**options)
        return fake_cupy_module

    return install


@pytest.mark.parametrize("version", [13, 14])
@pytest.mark.parametrize("op", list(Collective))
def test_a_group_connects_and_runs_with_the_unique_id_of_cupy(fake_cupy, version, op):
    """CuPy 14's get_unique_id returns bytes and its NcclCommunicator takes bytes; 13's a tuple of C chars. The
    group used to write the id into int64s and pass a tuple: ValueError on CuPy 14."""
    fake_cupy(version=version)
    backend = CupyBackend(MPI.COMM_SELF)
    group = backend.group(MPI.COMM_SELF)
    src, dst = backend.empty(8), backend.empty(8)
    backend.upload(np.arange(8, dtype=np.float32), src)
    getattr(group, op.value)(src, dst)
    assert np.array_equal(backend.download(dst), np.arange(8, dtype=np.float32))
    group.free()


@pytest.mark.parametrize("version", [13, 14])
def test_the_fake_refuses_the_other_versions_id(fake_cupy, version):
    fake = fake_cupy(version=version)
    other = fake.unique_id(27 - version)  # 13 <-> 14
    with pytest.raises(TypeError, match="Argument 'commId' has incorrect type"):
        sys.modules["cupy.cuda.nccl"].NcclCommunicator(1, other, 0)


@pytest.mark.parametrize("local_rank, local_size, devices, visible, index", [
    (0, 1, 1, None, 0), (3, 4, 8, None, 3), (2, 4, 4, "0,1,2,3", 2),
    (5, 8, 1, "5", 0),  # SLURM --gpus-per-task=1: each rank sees its own GPU only
])
def test_each_rank_uses_its_own_gpu(local_rank, local_size, devices, visible, index):
    assert device_index(local_rank, local_size, devices, visible) == index


@pytest.mark.parametrize("visible", [None, "", "0,1"])
def test_more_ranks_than_gpus_without_a_launcher_giving_one_each_is_refused(visible):
    with pytest.raises(BackendUnavailable, match="4 ranks on this node but 2 GPU"):
        device_index(3, 4, 2, visible)


@pytest.mark.parametrize("version, env, order", [
    (22600, {}, LaunchOrder.IMPLICIT), (23203, {IMPLICIT_ORDER: "1"}, LaunchOrder.IMPLICIT),
    (23203, {IMPLICIT_ORDER: "0"}, LaunchOrder.CHAINED), (22503, {}, LaunchOrder.CHAINED), (21805, {}, LaunchOrder.CHAINED),
])
def test_the_launch_order_follows_the_nccl_version_and_the_setting(version, env, order):
    assert launch_order(version, env) is order


def test_from_nccl_2_26_the_backend_asks_for_the_implicit_launch_order(fake_cupy):
    fake_cupy(nccl_version=22605)
    backend = CupyBackend(MPI.COMM_SELF)
    assert backend.order is LaunchOrder.IMPLICIT and os.environ[IMPLICIT_ORDER] == "1" and backend.chain is None


@pytest.mark.parametrize("schedule", ["last", "first"])
def test_before_nccl_2_26_each_collective_waits_for_the_one_issued_before(fake_cupy, schedule):
    """The chained order: every stage stream's collective is queued after a wait for the event recorded after the
    rank's previous collective, whatever its stream, so the device runs them in the order issued (and the pipelined
    check stays exact)."""
    fake_cupy(nccl_version=22503, schedule=schedule)
    backend = CupyBackend(MPI.COMM_SELF)
    assert backend.order is LaunchOrder.CHAINED
    lanes = backend.stage_lanes(2)
    group = backend.group(MPI.COMM_SELF)
    src, dst = backend.empty(4), backend.empty(4)
    lanes[0].start(group, Collective.ALL_REDUCE, src, dst)
    lanes[1].start(group, Collective.ALL_GATHER, src, dst)
    first, second = (list(lane.stream.queue) for lane in lanes)
    assert [what for what, _ in first] == ["allReduce", "record", "record"]  # the chain's event, then the lane's
    assert [what for what, _ in second][:2] == ["wait", "allGather"]
    (chained, number) = second[0][1]
    assert chained is backend.chain.last and number == 1  # the record after lane 0's allReduce
    backend.synchronize()
    assert check_pipeline(backend, np.random.default_rng(1)) == 4


def test_a_pipelined_program_makes_its_events_once(fake_cupy):
    """A CUDA event per step, piece and run (issue 46): the second and later runs record into the first run's."""
    fake = fake_cupy()
    backend = CupyBackend(MPI.COMM_SELF)
    compiled = _one_rank_pipeline(backend)
    compiled()
    made = fake.Event.made
    compiled()
    compiled()
    assert made > 0 and fake.Event.made == made


def _one_rank_pipeline(backend):
    """A pipelined run of scripts/gpu_check's chain on 4 pieces (one rank), as a callable."""
    from scripts.gpu_check import PIPELINE_CHUNKS, STEP_OPS, chain
    from p2synth.runtime.executor import Buffers, Pipeline, merge_pieces, split_pieces
    from p2synth.runtime.layout import Role

    group = backend.group(MPI.COMM_SELF)
    buffers = Buffers(backend, Collective.ALL_REDUCE, PIPELINE_CHUNKS * 4 * 16, PIPELINE_CHUNKS)
    send, recv = buffers.get(Role.SEND), buffers.get(Role.RECV)
    pipeline = Pipeline(
        tuple(chain(backend, group, buffers, p, 4) for p in range(4)),
        (split_pieces(backend, send, buffers.get(Role.PIECES_IN), PIPELINE_CHUNKS, 4),),
        (merge_pieces(backend, buffers.get(Role.PIECES_OUT), recv, PIPELINE_CHUNKS, 4),),
        backend.main_lane(), backend.stage_lanes(len(STEP_OPS)),
    )

    def run():
        pipeline.run()
        backend.synchronize()

    return run


def test_the_nccl_module_does_not_import_the_backends_module():
    """runtime/backends.py loads runtime/nccl.py when the cupy backend is asked for; nccl.py imported backends.py back
    (an import cycle). It takes what it needs from runtime/backend_kind.py."""
    tree = ast.parse((ROOT / "runtime" / "nccl.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert "p2synth.runtime.backends" not in imported


@pytest.mark.parametrize("env, devices, index", [
    ({"LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4"}, 4, 3),
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "CUDA_VISIBLE_DEVICES": "6"}, 1, 0),
    ({}, 2, 0),
])
def test_the_launchers_local_rank_picks_the_gpu(env, devices, index):
    assert launcher_device(env, devices) == index


def test_no_docstring_places_the_nccl_classes_in_the_backends_module():
    """Issue 46: docstrings said ``NcclGroup`` lived in runtime/backends.py; it is in runtime/nccl.py."""
    wrong = [f"{path.relative_to(ROOT)}:{n}" for folder in ("runtime", "scripts", "solver", "docs")
             for path in sorted((ROOT / folder).rglob("*")) if path.suffix in (".py", ".md")
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if "backends.py" in line and any(name in line for name in ("NcclGroup", "CupyBackend", "StreamLane"))
             and "nccl.py" not in line]
    assert wrong == []
