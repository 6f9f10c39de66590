"""The one-GPU check: CuPy buffer paths, a one-rank NCCL communicator and ``runtime.bench --backend cupy``, all exact.

    python -m scripts.gpu_check [--seed 0]
    python -m scripts.gpu_check --multi [--gpus G] [--timeout S]      # 2 to 8 GPUs: scripts/gpu_multi.py

For a machine with one NVIDIA GPU (device 0 is used; CI has none). It checks,
against numpy and exactly (bit for bit):

1. buffers: the cupy backend's upload, download, fill and transpose (random
   shapes and axis orders, on whole buffers and on the prefix views the
   executor uses), for float32 and uint64 random data;
2. nccl: a one-rank NCCL communicator (runtime/nccl.py ``NcclGroup`` over
   ``MPI.COMM_SELF``) running each of the six collectives and the shift
   (send_recv) on random float32 and uint64 data, out of place and, for the calls that can run in place
   (all_reduce, reduce, broadcast), in place: on one rank each result is the input;
3. pipeline: a pipelined program's run (runtime/executor.py ``Pipeline``) on
   2 and 4 pieces of random float32 and uint64 data: a chain of the six
   collectives a synthesized program's steps choose among (``STEP_OPS``; a
   send_recv is never pipelined) on the one-rank NCCL communicator, one CUDA stream per step,
   the collectives issued one by one in wavefront order, events between a
   piece's consecutive steps, a local repack (a transpose)
   before every step but the first and after the last, the split and the merge
   on the rank's stream; run twice back to back, the output must be the
   repacks applied to every piece of the input;
4. bench: ``runtime.bench --backend cupy`` in this process (an MPI singleton)
   on a one-device plan of each collective, whose default is the collective
   over the one-member reduction group: every check run and timed run exact.

It prints one line and exits with:

* 0: ``gpu_check: ok: ...``, every check exact; or ``skipped: ...`` when CuPy
  is not installed (``import cupy`` finds no module): nothing to check;
* 1: ``gpu_check: FAILED: ...``, a check gave a wrong result or raised (a CUDA
  or NCCL error);
* 2: bad arguments, one ``error: ...`` line on stderr;
* 3: ``gpu_check: FAILED: cupy backend unavailable: CuPy is installed but
  ...``: CuPy is there but cannot run (no CUDA driver or device, NCCL missing
  or not built, a broken install), a broken GPU setup rather than a skip.

It takes seconds (far under the 5 minutes allowed).

``--multi`` runs the multi-GPU check instead (scripts/gpu_multi.py: the CuPy
runtime under mpiexec with pipelined programs and every ``--inject`` fault,
torchrun with NCCL running an exported module, the DDP hook with its guard and
the client tuner, each under a hard timeout); its exit statuses are the same.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from mpi4py import MPI

from p2synth.hierarchies import Collective
from p2synth.hierarchies.program import STEP_OPS
from p2synth.hierarchies.cli import EXIT_USAGE, ArgumentParser, UsageError, one_line
from p2synth.runtime.backends import BackendUnavailable, CupyMissing, GroupComm
from p2synth.runtime.nccl import CupyBackend, load_cupy
from p2synth.runtime.data import CHECK_DTYPE, DTYPE
from p2synth.runtime.executor import Buffers, PieceCalls, Pipeline, StepCalls, merge_pieces, split_pieces
from p2synth.runtime.layout import Role
from scripts import gpu_multi

DTYPES = (DTYPE, CHECK_DTYPE)
IN_PLACE = (Collective.ALL_REDUCE, Collective.REDUCE, Collective.BROADCAST)
TRANSPOSE_TRIALS = 12
PIECES = (2, 4)
PIPELINE_CHUNKS = 4
EXIT_OK, EXIT_FAILED, EXIT_BROKEN = 0, 1, 3  # and EXIT_USAGE (2)


class CheckFailed(Exception):
    """One check gave a wrong result."""


def random_data(rng: np.random.Generator, dtype: np.dtype, count: int) -> np.ndarray:
    """`count` random values of `dtype` (every bit pattern of uint64; normal floats)."""
    if dtype == CHECK_DTYPE:
        return rng.integers(0, 2**64, size=count, dtype=np.uint64, endpoint=False)
    return rng.standard_normal(count).astype(dtype)


def same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Raise CheckFailed unless `got` equals `want` bit for bit."""
    if got.shape != want.shape or got.dtype != want.dtype:
        raise CheckFailed(f"{what}: got {got.dtype}{got.shape}, want {want.dtype}{want.shape}")
    bad = np.count_nonzero(np.any(got.view(np.uint8).reshape(got.size, -1) != want.view(np.uint8).reshape(want.size, -1), axis=1))
    if bad:
        raise CheckFailed(f"{what}: {bad} of {got.size} elements differ")


def check_buffers(backend: CupyBackend, rng: np.random.Generator) -> int:
    """Upload/download/fill/transpose against numpy; returns the number of checks passed."""
    passed = 0
    for dtype in DTYPES:
        for trial in range(TRANSPOSE_TRIALS):
            shape = tuple(int(n) for n in rng.integers(1, 5, size=int(rng.integers(1, 4)))) + (int(rng.integers(1, 300)),)
            axes = tuple(int(a) for a in rng.permutation(len(shape) - 1)) + (len(shape) - 1,)
            size = int(np.prod(shape))
            host = random_data(rng, dtype, size + trial)  # a longer buffer: the executor transposes prefix views
            src, dst = backend.empty(host.size, dtype), backend.empty(host.size, dtype)
            backend.upload(host, src)
            same(backend.download(src), host, f"upload/download {dtype} of {host.size}")
            backend.fill(dst, 0)
            backend.transpose(src[:size], dst[:size], shape, axes)
            backend.synchronize()
            want = np.concatenate([host[:size].reshape(shape).transpose(axes).ravel(), np.zeros(trial, dtype)])
            same(backend.download(dst), want, f"transpose {dtype} {shape} by {axes}")
            passed += 2
    return passed


@contextlib.contextmanager
def one_rank_group(backend: CupyBackend) -> Iterator[GroupComm]:
    """The cupy backend's NCCL group over ``MPI.COMM_SELF``, freed afterwards."""
    group = backend.group(MPI.COMM_SELF)
    try:
        yield group
    finally:
        group.free()


def check_nccl(backend: CupyBackend, rng: np.random.Generator) -> int:
    """Each collective on a one-rank NCCL communicator, both dtypes; returns the number of checks passed."""
    passed = 0
    with one_rank_group(backend) as group:
        for dtype, collective in itertools.product(DTYPES, Collective):
            for in_place in (False, True) if collective in IN_PLACE else (False,):
                host = random_data(rng, dtype, int(rng.integers(1, 5000)))
                src = backend.empty(host.size, dtype)
                backend.upload(host, src)
                dst = src if in_place else backend.empty(host.size, dtype)
                if not in_place:
                    backend.fill(dst, 0)
                getattr(group, collective.value)(src, dst)
                backend.synchronize()
                where = "in place" if in_place else "out of place"
                same(backend.download(dst), host, f"nccl {collective} {dtype} {where} on one rank")
                passed += 1
    return passed


def chain(backend: CupyBackend, group: GroupComm, buffers: Buffers, piece: int, pieces: int) -> PieceCalls:
    """Piece `piece` of the pipelined chain: the six collectives in turn, a repack before each but the first and after the last."""
    chunks = PIPELINE_CHUNKS
    a, b = (buffers.view(r, chunks, piece, pieces) for r in (Role.SCRATCH_A, Role.SCRATCH_B))
    first = buffers.view(Role.PIECES_IN, chunks, piece, pieces)
    out = buffers.view(Role.PIECES_OUT, chunks, piece, pieces)
    shape = (chunks, a.size // chunks)

    def repack(src, dst):
        return lambda: backend.transpose(src, dst, shape, (1, 0))

    steps = tuple(StepCalls(() if k == 0 else (repack(a, b),), group, op, first if k == 0 else b, a) for k, op in enumerate(STEP_OPS))
    return PieceCalls(steps, (repack(a, out),))


def chain_expected(host: np.ndarray, pieces: int) -> np.ndarray:
    """What the chain leaves on one rank: every piece of `host` repacked once per collective, merged back."""
    chunks = PIPELINE_CHUNKS
    logical = host.reshape(chunks, pieces, -1)
    out = np.empty_like(logical)
    for p in range(pieces):
        x = logical[:, p, :].ravel()
        for _ in STEP_OPS:
            x = x.reshape(chunks, -1).T.ravel()
        out[:, p, :] = x.reshape(chunks, -1)
    return out.ravel()


def check_pipeline(backend: CupyBackend, rng: np.random.Generator) -> int:
    """The pipelined chain on the stage streams, both dtypes, 2 and 4 pieces; returns the number of runs exact."""
    with one_rank_group(backend) as group:
        for dtype, pieces in itertools.product(DTYPES, PIECES):
            count = PIPELINE_CHUNKS * pieces * int(rng.integers(1, 5000))
            host = random_data(rng, dtype, count)
            buffers = Buffers(backend, Collective.ALL_REDUCE, count, PIPELINE_CHUNKS, dtype)
            send, recv = buffers.get(Role.SEND), buffers.get(Role.RECV)
            backend.upload(host, send)
            buffers.poison(0)
            pipeline = Pipeline(
                tuple(chain(backend, group, buffers, p, pieces) for p in range(pieces)),
                (split_pieces(backend, send, buffers.get(Role.PIECES_IN), PIPELINE_CHUNKS, pieces),),
                (merge_pieces(backend, buffers.get(Role.PIECES_OUT), recv, PIPELINE_CHUNKS, pieces),),
                backend.main_lane(), backend.stage_lanes(len(STEP_OPS)),
            )
            pipeline.run()
            pipeline.run()
            backend.synchronize()
            same(backend.download(recv), chain_expected(host, pieces), f"pipeline {dtype} on {pieces} pieces of {count // pieces}")
    return len(DTYPES) * len(PIECES)


def one_device_plan(collective: Collective) -> dict:
    """A plan (runtime/plan.py format) for one device: the request's axis has size 1, the default has no steps."""
    return {
        "hierarchy": {"name": "one-gpu", "levels": [{"name": "gpu", "count": 1}]},
        "axes": [{"name": "data", "size": 1}],
        "request": {"axes": ["data"], "collective": collective.value},
        "message_bytes": 1 << 20,
        "placements": [{"matrix": [[1]], "default": {"steps": [], "cost_s": None}, "programs": []}],
    }


def bench(argv: list[str]) -> int:
    """``runtime.bench`` ARGV in this process, its exit status; an exception is raised here. ``runtime.bench``'s own
    entry point aborts the MPI job on an exception (every rank must end), which would end this process before it
    prints its FAILED line."""
    from p2synth.runtime import bench as command
    from p2synth.runtime.job import EXIT_USAGE as BENCH_USAGE, start_command

    world = MPI.COMM_WORLD
    started = start_command(world, argv, command.parse_args, command.prepare)
    return BENCH_USAGE if started is None else command._bench(*started, world, data=command.tagged_data)


def check_bench(folder: Path) -> int:
    """runtime.bench --backend cupy on the one-device plan of every collective; returns the number of plans exact."""
    for collective in Collective:
        plan, out = folder / f"{collective.value}.json", folder / f"{collective.value}.out.json"
        plan.write_text(json.dumps(one_device_plan(collective)))
        log = io.StringIO()
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            status = bench([str(plan), "--backend", "cupy", "--bytes", "4K:4M:32", "--warmup", "1", "--iters", "3",
                            "--repeats", "2", "--out", str(out)])
        if status != 0:
            last = (log.getvalue().strip().splitlines() or ["no output"])[-1]
            raise CheckFailed(f"runtime.bench --backend cupy on a one-device {collective} plan exited {status}: {last}")
        results = json.loads(out.read_text())["results"]
        wrong = [(r["bytes"], r["wrong"], r["wrong_timed"]) for r in results if r["wrong"] or r["wrong_timed"]]
        if len(results) != 3 or wrong:
            raise CheckFailed(f"runtime.bench on a one-device {collective} plan: {len(results)} results, wrong (bytes, check, timed): {wrong}")
    return len(Collective)


def describe(backend: CupyBackend) -> str:
    """The GPU's name and the CuPy and NCCL versions."""
    props = backend.cupy.cuda.runtime.getDeviceProperties(backend.device.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return f"{name}, CuPy {backend.cupy.__version__}, NCCL {backend.nccl.get_version()}"


def multi(gpus: int | None, timeout_s: float) -> int:
    """The multi-GPU check (scripts/gpu_multi.py) on the GPUs CuPy sees; a CuPy that is missing or cannot run is a
    broken setup here (exit 3): the check was asked for."""
    try:
        _, _, devices = load_cupy()
    except BackendUnavailable as e:
        print(f"gpu_check --multi: FAILED: {e}")
        return EXIT_BROKEN
    with tempfile.TemporaryDirectory(prefix="gpu-multi-") as workdir:
        return gpu_multi.main(devices, gpus, timeout_s, Path(workdir), Path(__file__).resolve().parents[1])


def main(argv: list[str] | None = None) -> int:
    """Run the four checks; print one line; 0 ok or skipped (no CuPy), 1 failed, 2 bad arguments, 3 CuPy installed
    but unusable."""
    p = ArgumentParser(prog="python -m scripts.gpu_check", description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=0, help="seed of the random data (default 0)")
    p.add_argument("--multi", action="store_true", help="the multi-GPU check instead (2 to 8 GPUs; scripts/gpu_multi.py)")
    p.add_argument("--gpus", type=int, default=None, help="with --multi: how many GPUs to use (default: every one visible)")
    p.add_argument("--timeout", type=float, default=gpu_multi.DEFAULT_TIMEOUT_S,
                   help=f"with --multi: seconds before a job counts as hung and is killed (default {gpu_multi.DEFAULT_TIMEOUT_S})")
    try:
        args = p.parse_args(argv)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.multi:
        return multi(args.gpus, args.timeout)
    start = time.perf_counter()
    try:
        backend = CupyBackend(MPI.COMM_SELF)
    except CupyMissing as e:
        print(f"skipped: {e}")
        return EXIT_OK
    except BackendUnavailable as e:  # CuPy is installed but cannot run: a broken GPU setup must not pass as skipped
        print(f"gpu_check: FAILED: {e}")
        return EXIT_BROKEN
    rng = np.random.default_rng(args.seed)
    stage = "buffers"
    try:
        buffers = check_buffers(backend, rng)
        stage = "nccl"
        nccl = check_nccl(backend, rng)
        stage = "pipeline"
        pipelined = check_pipeline(backend, rng)
        stage = "bench"
        with tempfile.TemporaryDirectory() as tmp:
            plans = check_bench(Path(tmp))
    except CheckFailed as e:
        print(f"gpu_check: FAILED: {e}")
        return EXIT_FAILED
    except Exception as e:  # a CUDA or NCCL error: one line, not a traceback
        print(f"gpu_check: FAILED: {stage}: {type(e).__name__}: {one_line(e)}")
        return EXIT_FAILED
    print(f"gpu_check: ok: {describe(backend)}: buffers {buffers} checks, nccl {nccl} one-rank collectives, "
          f"pipeline {pipelined} pipelined runs, bench {plans} one-device plans, all exact, in {time.perf_counter() - start:.1f} s")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
