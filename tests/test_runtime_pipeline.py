"""Pipelined programs without MPI: the wavefront schedule, what a Pipeline run does on its lanes, pieces of buffers.

The MPI tests (tests/test_runtime_mpi.py, tests/test_runtime_faults.py) run
every program of the small cases on 2 and 4 pieces for real; here recording
lanes show the order of the work and its waits, whatever the backend.
"""

from itertools import groupby

import numpy as np
import pytest

from p2synth.hierarchies import Collective
from p2synth.runtime.backends import NumpyBackend
from p2synth.runtime.executor import Buffers, PieceCalls, Pipeline, StepCalls, merge_pieces, slots, split_pieces, wavefront
from p2synth.runtime.layout import Role


@pytest.mark.parametrize("pieces, steps", [(1, 1), (1, 3), (2, 1), (3, 2), (4, 3), (8, 5)])
def test_the_wavefront_runs_stage_k_of_piece_t_minus_k_at_slot_t(pieces, steps):
    order = list(wavefront(pieces, steps))
    assert sorted(order) == [(p, k) for p in range(pieces) for k in range(steps + 1)]  # every stage of every piece, once
    for p in range(pieces):  # a piece's stages in order
        assert [k for q, k in order if q == p] == list(range(steps + 1))
    slots = [(t, [k for _, k in group]) for t, group in groupby(order, key=lambda pk: pk[0] + pk[1])]
    assert [t for t, _ in slots] == list(range(pieces + steps))  # slot by slot
    for t, stages in slots:  # youngest piece first, every valid stage
        assert stages == [k for k in range(steps + 1) if 0 <= t - k < pieces]


class Recorder:
    """Lanes that log what a Pipeline asks of them; pendings are the names of what they stand for."""

    def __init__(self):
        self.log: list[tuple] = []
        self.marks = 0

    def lane(self, name: str) -> "RecordingLane":
        return RecordingLane(self, name)


class RecordingLane:
    def __init__(self, recorder: Recorder, name: str):
        self.recorder, self.name = recorder, name

    def run(self, calls):
        for call in calls:
            self.recorder.log.append((self.name, *call()))

    def start(self, group, op, src, dst, reuse=None):
        self.recorder.log.append((self.name, "start", src, op, reuse))
        return ("step", src)

    def mark(self, reuse=None):
        self.recorder.marks += 1
        self.recorder.log.append((self.name, "mark", reuse))
        return ("mark", self.name, self.recorder.marks)

    def wait(self, pending):
        self.recorder.log.append((self.name, "wait", pending))


def recorded_pipeline(pieces: int, steps: int, inactive: set[tuple[int, int]] = frozenset()) -> tuple[Recorder, Pipeline]:
    """A Pipeline whose calls log themselves: step (p, k) has src (p, k); `inactive` steps have no group."""
    rec = Recorder()

    def tag(*what):
        return lambda: what

    def piece(p):
        return PieceCalls(
            tuple(StepCalls((tag("before", p, k),), None if (p, k) in inactive else "group", Collective.ALL_REDUCE, (p, k), None,
                            (tag("after", p, k),)) for k in range(steps)),
            (tag("tail", p),),
        )

    lanes = tuple(rec.lane(f"lane{k}") for k in range(steps))
    return rec, Pipeline(tuple(piece(p) for p in range(pieces)), (tag("split"),), (tag("merge"),), rec.lane("main"), lanes)


@pytest.mark.parametrize("pieces, steps", [(1, 1), (2, 1), (3, 2), (4, 3)])
def test_a_pipeline_waits_for_a_pieces_previous_step_before_its_next(pieces, steps):
    rec, pipeline = recorded_pipeline(pieces, steps)
    pipeline.run()
    log = rec.log
    log = [entry for entry in log if entry[1] != "mark"]
    assert log[0] == ("main", "split") and log[1] == ("lane0", "wait", ("mark", "main", 1))
    assert log[-2] == ("main", "wait", ("mark", f"lane{steps - 1}", 2)) and log[-1] == ("main", "merge")
    at = {entry: i for i, entry in enumerate(log)}
    for p in range(pieces):
        for k in range(steps):
            lane = f"lane{k}"
            start = at[(lane, "start", (p, k), Collective.ALL_REDUCE, None)]
            assert at[(lane, "before", p, k)] < start  # its local work first, on its own lane
            if k > 0:  # then only after step k - 1 of the same piece is done, and that step's after-calls ran
                assert at[(lane, "wait", ("step", (p, k - 1)))] < at[(lane, "after", p, k - 1)] < at[(lane, "before", p, k)]
        last = f"lane{steps - 1}"
        assert at[(last, "wait", ("step", (p, steps - 1)))] < at[(last, "after", p, steps - 1)] < at[(last, "tail", p)]
    starts = [(entry[2]) for entry in log if entry[1] == "start"]
    assert starts == [(p, k) for p, k in wavefront(pieces, steps) if k < steps]  # the collectives start in wavefront order


@pytest.mark.parametrize("pieces, steps", [(1, 1), (2, 1), (3, 2), (4, 3)])
def test_a_second_run_records_into_the_first_runs_pendings(pieces, steps):
    """Issue 46: a CUDA lane made a new event per step and piece on every run. The second run hands every start and
    mark the pending the same call returned in the first run (a CUDA lane records into it), the first run none."""
    rec, pipeline = recorded_pipeline(pieces, steps, inactive={(0, 0)})
    pipeline.run()
    first = [entry for entry in rec.log if entry[1] in ("start", "mark")]
    assert first and all(entry[-1] is None for entry in first)
    taken = dict(pipeline.events)
    rec.log.clear()
    pipeline.run()
    again = [entry[-1] for entry in rec.log if entry[1] in ("start", "mark")]
    assert len(again) == len(first) and None not in again
    assert sorted(map(repr, again)) == sorted(map(repr, taken.values()))


def test_an_inactive_step_starts_nothing_and_the_next_waits_for_its_lane():
    rec, pipeline = recorded_pipeline(2, 2, inactive={(1, 0)})
    pipeline.run()
    assert not [entry for entry in rec.log if entry[1:3] == ("start", (1, 0))]
    waits = [entry[2] for entry in rec.log if entry[:2] == ("lane1", "wait")]
    assert waits[1][:2] == ("mark", "lane0")  # piece 1's step 1 waits for what lane 0 did for it (its local work)


@pytest.mark.parametrize("chunks, pieces, part", [(1, 2, 3), (4, 2, 1), (4, 4, 3), (6, 3, 5)])
def test_pieces_of_a_buffer_are_the_slices_of_every_chunk(chunks, pieces, part):
    """Split puts piece p (the p-th slice of every chunk) in the p-th segment; merge undoes it; views see the pieces."""
    backend = NumpyBackend()
    chunk = pieces * part
    buffers = Buffers(backend, Collective.ALL_REDUCE, chunks * chunk, chunks)
    send, pieces_in = buffers.get(Role.SEND), buffers.get(Role.PIECES_IN)
    send[:] = np.arange(send.size)
    split_pieces(backend, send, pieces_in, chunks, pieces)()
    logical = send.reshape(chunks, pieces, part)
    for p in range(pieces):
        assert np.array_equal(buffers.view(Role.PIECES_IN, chunks, p, pieces), logical[:, p, :].ravel())
        assert np.array_equal(buffers.view(Role.PIECES_IN, 1, p, pieces), logical[0, p, :])  # the first chunk's piece
    merge_pieces(backend, pieces_in, buffers.get(Role.RECV), chunks, pieces)()
    assert np.array_equal(buffers.get(Role.RECV), send)
    whole, scratch = buffers.view(Role.SCRATCH_A, chunks, 0, 1), buffers.get(Role.SCRATCH_A)  # not pipelined: the prefix view
    assert whole.size == scratch.size and np.shares_memory(whole, scratch)
