"""The NCCL all_to_all (grouped send/recv) of runtime/backends.py over several ranks, in one process.

tests/fake_cupy.py's communicator has one rank; here a recording stand-in for
NCCL's point-to-point calls connects k NcclGroup objects, so the pairing of
sends and receives, the block offsets and the single group call per
all_to_all are checked for real group sizes. What this does not exercise:
NCCL itself, device memory and streams (scripts/gpu_check on a GPU machine).
"""

import ctypes
import sys
import types

import numpy as np
import pytest
from mpi4py import MPI

import tests.fake_cupy as fake_cupy_module
from p2synth.hierarchies import Collective
from p2synth.runtime.backends import CupyBackend, NcclGroup
from p2synth.runtime.data import CHECK_DTYPE, DTYPE
from scripts.gpu_check import DTYPES, PIECES, check_pipeline

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
    g.stream, g.comm, g.types, g.members = 0, Comm(fabric, rank), TYPES, members
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
    assert len(stages) == len(Collective) and main not in stages
    by_stream = {ptr: [what for p, what in fake_cupy.LOG if p == ptr] for ptr in [main, *stages]}
    pieces = len(DTYPES) * 2 * sum(PIECES)  # pieces run: two runs of each piece count, for each dtype
    last = len(stages) - 1
    for k, (op, ptr) in enumerate(zip(Collective, stages)):
        nccl = [w for w in by_stream[ptr] if w in NCCL_NAMES.values()]
        assert nccl == [NCCL_NAMES[op]] * pieces, k  # step k of every piece, and nothing else
        assert by_stream[ptr].count("copyto") == ((k > 0) + (k == last)) * pieces  # its repack; the tail's on the last
        assert by_stream[ptr].count("record") >= pieces  # an event after each piece's step
    main_work = [w for w in by_stream[main] if w in ("copyto", *NCCL_NAMES.values())]
    assert main_work == ["copyto"] * 2 * 2 * len(PIECES) * len(DTYPES)  # a split and a merge per run, no NCCL call
