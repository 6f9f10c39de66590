"""The NCCL all_to_all (grouped send/recv) of runtime/nccl.py over several ranks, in one process.

tests/fake_cupy.py's communicator has one rank; here a recording stand-in for
NCCL's point-to-point calls connects k NcclGroup objects, so the pairing of
sends and receives, the block offsets and the single group call per
all_to_all are checked for real group sizes (the group is runtime/nccl.py's). What this does not exercise:
NCCL itself, device memory and streams (scripts/gpu_check on a GPU machine).
"""

import ctypes
import json
import sys
import types

import numpy as np
import pytest
from mpi4py import MPI

import tests.fake_cupy as fake_cupy_module
from p2synth.hierarchies import Collective
from p2synth.hierarchies.program import STEP_OPS
from p2synth.runtime.nccl import CupyBackend, NcclGroup
from p2synth.runtime.data import CHECK_DTYPE, DTYPE
from p2synth.runtime.executor import wavefront
from scripts.gpu_check import DTYPES, PIECES, check_pipeline
from tests.runtime_support import run_mpi

TYPES = {DTYPE: 7, CHECK_DTYPE: 5}
ITEMSIZE = {7: 4, 5: 8}


class Fabric:
    """k ranks' NCCL: sends deposit their bytes, receives are filled when every rank has posted (deliver)."""

    def __init__(self):
        self.depth = 0
        self.groups = 0  # outermost group calls ended
        self.sent: dict[tuple[int, int], list[bytes]] = {}
        self.wanted: list[tuple[int, int, int, int]] = []  # (receiver, sender, address, bytes)

    def group_start(self):
        self.depth += 1

    def group_end(self):
        self.depth -= 1
        self.groups += self.depth == 0

    def deliver(self):
        for receiver, sender, address, nbytes in self.wanted:
            data = self.sent[(sender, receiver)].pop(0)
            assert len(data) == nbytes, "a send and its receive differ in size"
            ctypes.memmove(address, data, nbytes)
        assert all(not q for q in self.sent.values()), "a send without its receive"


class Comm:
    """One rank's communicator on the fabric (NCCL's send/recv signatures)."""

    def __init__(self, fabric: Fabric, rank: int):
        self.fabric, self.rank = fabric, rank

    def send(self, ptr, count, dtype, peer, stream):
        assert self.fabric.depth > 0, "send outside a group call"
        self.fabric.sent.setdefault((self.rank, peer), []).append(ctypes.string_at(ptr, count * ITEMSIZE[dtype]))

    def recv(self, ptr, count, dtype, peer, stream):
        assert self.fabric.depth > 0, "recv outside a group call"
        self.fabric.wanted.append((self.rank, peer, ptr, count * ITEMSIZE[dtype]))


class Array(np.ndarray):
    """A host array with CuPy's ``.data.ptr``."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)


def group(fabric: Fabric, rank: int, members: int) -> NcclGroup:
    """An NcclGroup of `members` on the fabric, without the MPI bootstrap of its constructor."""
    g = object.__new__(NcclGroup)
    g.nccl = types.SimpleNamespace(groupStart=fabric.group_start, groupEnd=fabric.group_end)
    g.stream, g.comm, g.types, g.members, g.rank = 0, Comm(fabric, rank), TYPES, members, rank
    return g


@pytest.mark.parametrize("members", [1, 2, 3, 8])
@pytest.mark.parametrize("dtype", [DTYPE, CHECK_DTYPE])
def test_grouped_send_recv_is_an_all_to_all(members, dtype):
    block = 5
    fabric = Fabric()
    # element e of rank r's block j: r * 1000 + j * 10 + e (the sender, the receiver, the place)
    src = [(np.array([r * 1000 + j * 10 + e for j in range(members) for e in range(block)], dtype=dtype)).view(Array)
           for r in range(members)]
    dst = [np.zeros(members * block, dtype=dtype).view(Array) for _ in range(members)]
    for r in range(members):
        group(fabric, r, members).all_to_all(src[r], dst[r])
    fabric.deliver()
    assert fabric.groups == members and fabric.depth == 0  # one group call per rank
    for q in range(members):  # block i of rank q's output: rank i's block q
        want = np.concatenate([src[i][q * block:(q + 1) * block] for i in range(members)])
        assert np.array_equal(dst[q], want)


@pytest.mark.parametrize("members", [1, 2, 3, 8])
@pytest.mark.parametrize("step", [1, -1])
def test_send_recv_is_one_send_to_the_successor_and_one_recv_from_the_predecessor(members, step):
    """The shift (step 1) and the wrong-neighbour fault's reverse shift (step -1): rank q ends with rank q - step's
    buffer, from one send and one recv inside one group call per rank."""
    fabric = Fabric()
    src = [np.arange(r * 100, r * 100 + 7, dtype=CHECK_DTYPE).view(Array) for r in range(members)]
    dst = [np.zeros(7, dtype=CHECK_DTYPE).view(Array) for _ in range(members)]
    for r in range(members):
        group(fabric, r, members).send_recv(src[r], dst[r], step=step)
    fabric.deliver()
    assert fabric.groups == members and fabric.depth == 0
    assert sorted(fabric.sent) == sorted(((r, (r + step) % members) for r in range(members)))
    for q in range(members):
        assert np.array_equal(dst[q], src[(q - step) % members])


NCCL_NAMES = {Collective.ALL_REDUCE: "allReduce", Collective.REDUCE_SCATTER: "reduceScatter", Collective.ALL_GATHER: "allGather",
              Collective.REDUCE: "reduce", Collective.BROADCAST: "broadcast", Collective.ALL_TO_ALL: "sendrecv"}


@pytest.fixture
def fake_cupy(monkeypatch):
    """tests/fake_cupy.py installed as cupy for this test only (deferred streams, one-rank NCCL)."""
    for name in ("cupy", "cupy.cuda", "cupy.cuda.nccl"):
        monkeypatch.setitem(sys.modules, name, None)  # restored (removed) afterwards
    fake_cupy_module.install()
    return fake_cupy_module


def test_a_pipelined_program_runs_step_k_of_every_piece_on_stage_stream_k(fake_cupy):
    """scripts/gpu_check's pipelined chain (the six collectives in turn, 2 and 4 pieces, run twice) on the cupy backend:
    each NCCL call goes to its step's stream; repacks run on the stream of the step they precede (or,
    after the last, on the last step's); split and merge on the rank's stream; every stage stream records events."""
    backend = CupyBackend(MPI.COMM_SELF)
    passed = check_pipeline(backend, np.random.default_rng(0))
    assert passed == 4
    main = backend.stream.ptr
    stages = [s.ptr for s in backend.stage_streams]
    assert len(stages) == len(STEP_OPS) and main not in stages
    by_stream = {ptr: [what for p, what in fake_cupy.LOG if p == ptr] for ptr in [main, *stages]}
    pieces = len(DTYPES) * 2 * sum(PIECES)  # pieces run: two runs of each piece count, for each dtype
    last = len(stages) - 1
    for k, (op, ptr) in enumerate(zip(STEP_OPS, stages)):
        nccl = [w for w in by_stream[ptr] if w in NCCL_NAMES.values()]
        assert nccl == [NCCL_NAMES[op]] * pieces, k  # step k of every piece, and nothing else
        assert by_stream[ptr].count("copyto") == ((k > 0) + (k == last)) * pieces  # its repack; the tail's on the last
        assert by_stream[ptr].count("record") >= pieces  # an event after each piece's step
    main_work = [w for w in by_stream[main] if w in ("copyto", *NCCL_NAMES.values())]
    assert main_work == ["copyto"] * 2 * 2 * len(PIECES) * len(DTYPES)  # a split and a merge per run, no NCCL call


def calls_of(op: Collective, members: int = 1) -> list[str]:
    """The NCCL calls (as tests/fake_cupy.py's LAUNCHES names them) of one `op` over `members` ranks."""
    return ["send", "recv"] * members if op is Collective.ALL_TO_ALL else [NCCL_NAMES[op]]


def test_a_pipelined_run_issues_its_nccl_calls_one_by_one_in_wavefront_order(fake_cupy):
    """scripts/gpu_check's chain (the six collectives, one stage stream each) on 2 and 4 pieces, run twice each: the
    collectives are issued in wavefront order, each on its own (no group call across the stage streams, which NCCL
    would make wait for each other: issue 46); only all_to_all's sends and receives share a group call."""
    backend = CupyBackend(MPI.COMM_SELF)
    check_pipeline(backend, np.random.default_rng(0))
    launches = fake_cupy.LAUNCHES
    assert len({comm for comm, _, _ in launches}) == 1  # the chain's one-rank communicator
    ops = list(STEP_OPS)
    want = [call for _dtype in DTYPES for pieces in PIECES for _run in range(2)
            for _, k in wavefront(pieces, len(ops)) if k < len(ops) for call in calls_of(ops[k])]
    assert [op for _, op, _ in launches] == want
    grouped = [group for _, op, group in launches if op in ("send", "recv")]
    assert {group for _, op, group in launches if op not in ("send", "recv")} == {None}
    assert None not in grouped and len(set(grouped)) == len(grouped) // 2  # one group call per all_to_all


# A 4-rank job on the fake CuPy (one fake GPU per rank): every pipelined program of SMALL's every collective on 3
# pieces; rank 0 prints every rank's LAUNCHES as JSON.
LAUNCH_ORDER = """
import json
from dataclasses import replace
from mpi4py import MPI
import tests.fake_cupy as fake
fake.install(ranks=4)
from p2synth.hierarchies import Collective
from p2synth.runtime.nccl import CupyBackend
from p2synth.runtime.executor import Buffers, Executor
from tests.runtime_support import SMALL, all_programs, request_of
world = MPI.COMM_WORLD
backend = CupyBackend(world)
for collective in Collective:
    request = request_of(SMALL, ["data"], collective)
    programs = [replace(p, pipeline=3) for p in all_programs(SMALL, request, 3)]
    executor = Executor(backend, SMALL, request, world)
    executor.connect(programs)
    buffers = Buffers(backend, collective, 4 * 3 * 8, 4)
    for program in programs:
        executor.compile(program, buffers).run()
        backend.synchronize()
    executor.close()
every = world.gather([[list(comm), op, group] for comm, op, group in fake.LAUNCHES], root=0)
if world.Get_rank() == 0:
    print(json.dumps(every))
"""


@pytest.mark.mpi
def test_every_rank_issues_the_same_nccl_calls_on_each_communicator_in_the_same_order():
    """4 ranks, every pipelined program of every collective (rooted ones skip steps on inactive ranks): on each
    communicator its members make the same calls, in the same order."""
    job = run_mpi(4, ["-c", LAUNCH_ORDER], timeout=300)
    assert job.returncode == 0, job.stderr
    every = json.loads(job.stdout)
    by_comm: dict[tuple, dict[int, list]] = {}
    for rank, launches in enumerate(every):
        for comm, op, group in launches:
            by_comm.setdefault(tuple(comm), {}).setdefault(rank, []).append((op, group))
    assert len(by_comm) > 4  # the slices' communicators (of 1, 2 and 4 members), one per group
    for comm, members in by_comm.items():
        sequences = list(members.values())
        assert all(s == sequences[0] for s in sequences), comm
