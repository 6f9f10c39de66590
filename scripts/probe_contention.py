"""What one small exchange costs when other ranks share the cores: calibration's figure beside two busier ones.

    mpirun -n 16 python -m scripts.probe_contention HIERARCHY --out probe.json   # one rank per device
    python -m scripts.probe_contention --from-raw probe.json                     # the table again, no MPI

Calibration (``runtime.calibration``) times one pair while every other rank sleeps in a
barrier. In a training step, or a collective, the other ranks are not asleep: they wait
inside MPI for their own messages, and on a machine whose cores are shared by several
ranks a waiting rank takes its share of a core. For each level of HIERARCHY (the
machine the job runs on, one rank per device, rank order as the placement's; levels of
more than one unit), and each size of ``--sizes``, this times ``--rounds`` back-to-back
``Sendrecv`` exchanges between a rank and its partner in the next unit of the same
parent (rank ``r`` and ``r + d``, ``d`` the devices below one unit), counted from an
untimed empty exchange between the two, three ways:

* ``idle``: one pair (ranks 0 and ``d``) while every other rank sleeps (calibration's setting;
  calibration itself takes the median of single round trips);
* ``waiting``: the same pair while every other rank waits inside a blocking MPI call;
* ``every_pair``: every rank of every even unit with its partner in the next, at once.

Each figure is the median over ``--iters`` timed iterations (after ``--warmup``) of the
slowest rank's time over the rounds, divided by the rounds: seconds per exchange. The
table prints them in microseconds with the ratios to ``idle``. Times only: nothing is
reduced, so there is nothing to check.

Exit codes: 0 done; 2 bad arguments, an unreadable file, or a rank count other than the
hierarchy's device count (one line on stderr, from rank 0).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

from p2synth.hierarchies.cli import EXIT_USAGE, ArgumentParser, UsageError, one_line, write_json_atomic
from p2synth.hierarchies.model import Hierarchy
from p2synth.runtime.calibration import Bench
from scripts.campaign import now
from p2synth.runtime.provenance import checkout_state
from scripts.tables import console, markdown, table

TAG = 77
MAX_BYTES = 1 << 20
REGIMES = ("idle", "waiting", "every_pair")
COLUMNS = ("level", "bytes", "pairs", "idle us", "waiting us", "every pair us", "waiting / idle", "every pair / idle")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; UsageError on a bad one."""
    p = ArgumentParser(prog="python -m scripts.probe_contention", description=__doc__.split("\n")[0])
    p.add_argument("hierarchy", type=Path, nargs="?", help="the machine's hierarchy JSON (one rank per device)")
    p.add_argument("--from-raw", type=Path, help="print the table of a recorded --out file; no MPI")
    p.add_argument("--out", type=Path, help="write the figures here (rank 0)")
    p.add_argument("--markdown", type=Path, help="with --from-raw: also write the table as Markdown here")
    p.add_argument("--sizes", default="8,8192", help="comma-separated message sizes in bytes (default 8,8192)")
    p.add_argument("--rounds", type=int, default=32, help="back-to-back exchanges per timed iteration (default 32)")
    p.add_argument("--iters", type=int, default=15, help="timed iterations (default 15)")
    p.add_argument("--warmup", type=int, default=3, help="untimed iterations first (default 3)")
    args = p.parse_args(argv)
    if (args.hierarchy is None) == (args.from_raw is None):
        raise UsageError("give HIERARCHY (to measure, under mpirun) or --from-raw FILE (to print a recorded one)")
    try:
        args.sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        raise UsageError(f"--sizes {args.sizes!r}: give whole byte counts separated by commas, e.g. 8,8192") from None
    if min(args.sizes) < 1 or args.rounds < 1 or args.iters < 1 or args.warmup < 0:
        raise UsageError("--sizes, --rounds and --iters must be at least 1, --warmup at least 0")
    if max(args.sizes) > MAX_BYTES:
        raise UsageError(f"--sizes: at most {MAX_BYTES} bytes (a small exchange's cost is what this measures)")
    for name, path in (("--out", args.out), ("--markdown", args.markdown)):
        if path is not None and not path.parent.is_dir():
            raise UsageError(f"{name} {path}: folder {path.parent} does not exist")
    return args


class Probe:
    """The three timings over one communicator; every rank calls every method in the same order."""

    def __init__(self, comm, rounds: int, iters: int, warmup: int, max_bytes: int) -> None:
        """`comm`: an mpi4py communicator or a calibration :class:`BenchComm`, one rank per device. The measuring
        calls and the sleeping barrier are calibration's (:class:`Bench`)."""
        self.bench = Bench(comm, iters=iters, small_iters=iters, warmup=warmup)
        self.comm, self.rounds = self.bench.comm, rounds
        self.out, self.back = np.zeros(max_bytes, dtype=np.uint8), np.zeros(max_bytes, dtype=np.uint8)

    def _exchange(self, peer: int, size: int) -> float:
        """`rounds` Sendrecv exchanges of `size` bytes with `peer`; the seconds they took, counted from an untimed
        empty exchange, so that neither partner's time includes the other's wake-up from the barrier."""
        comm = self.comm
        comm.sendrecv(comm.message(self.out[:0]), comm.message(self.back[:0]), peer, TAG)
        out, back = comm.message(self.out[:size]), comm.message(self.back[:size])
        t0 = comm.wtime()
        for _ in range(self.rounds):
            comm.sendrecv(out, back, peer, TAG)
        return comm.wtime() - t0

    def per_exchange(self, pairs: list[tuple[int, int]], size: int, others_sleep: bool) -> float | None:
        """Seconds per exchange when `pairs` exchange at once (the slowest rank's, median over the iterations); the
        other ranks sleep (`others_sleep`) or wait in a blocking barrier. Rank 0's figure; None elsewhere."""
        rank, bench = self.comm.rank(), self.bench
        peer = next((b if rank == a else a for a, b in pairs if rank in (a, b)), None)
        samples = []
        for i in range(bench.warmup + bench.iters):
            bench.idle_barrier()
            took = self._exchange(peer, size) if peer is not None else 0.0
            if others_sleep:
                bench.idle_barrier()  # the other ranks sleep here while the pairs exchange
            else:
                self.comm.barrier()  # the other ranks wait here, inside MPI, while the pairs exchange
            slowest = self.comm.max_on(took, 0)
            if rank == 0 and i >= bench.warmup:
                samples.append(slowest / self.rounds)
        return statistics.median(samples) if rank == 0 else None


def level_pairs(h: Hierarchy, level: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """One pair across `level` (ranks 0 and d), and every pair: each rank of an even unit with its partner in the
    next unit of the same parent (ranks r and r + d; d the devices below one unit of the level). A level of one
    unit has no pairs (empty lists)."""
    count, d = h.levels[level].count, h.devices_below(level)
    if count < 2:
        return [], []
    return [(0, d)], [(r, r + d) for r in range(h.num_devices) if (r // d) % count % 2 == 0 and (r // d) % count + 1 < count]


def measure(args: argparse.Namespace, comm) -> dict | None:
    """Every level and size of the command line; the document on rank 0 (None elsewhere)."""
    h = Hierarchy.model_validate_json(args.hierarchy.read_text())
    probe = Probe(comm, args.rounds, args.iters, args.warmup, max(args.sizes))
    started, rows = now(), []
    for level in range(len(h.levels)):
        one, every = level_pairs(h, level)
        if not every:
            continue
        for size in args.sizes:
            figures = {"idle": probe.per_exchange(one, size, others_sleep=True),
                       "waiting": probe.per_exchange(one, size, others_sleep=False),
                       "every_pair": probe.per_exchange(every, size, others_sleep=False)}
            rows.append({"level": h.levels[level].name, "bytes": size, "pairs": len(every),
                         **{f"{k}_s": v for k, v in figures.items()}})
    if comm.Get_rank() != 0:
        return None
    return {**checkout_state(), "started": started, "finished": now(), "command": sys.argv,
            "hierarchy": h.model_dump(mode="json", exclude_none=True), "ranks": comm.Get_size(),
            "rounds": args.rounds, "iters": args.iters, "warmup": args.warmup, "rows": rows}


def cells(doc: dict) -> list[tuple[str, ...]]:
    """The table's rows: per level and size the three figures in microseconds and the ratios to ``idle``."""
    out = []
    for r in doc["rows"]:
        idle = r["idle_s"]
        out.append((r["level"], str(r["bytes"]), str(r["pairs"]), *(f"{r[f'{k}_s'] * 1e6:.1f}" for k in REGIMES),
                    f"{r['waiting_s'] / idle:.1f}", f"{r['every_pair_s'] / idle:.1f}"))
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure under MPI, or print a recorded file's table; 2 on bad usage (module docstring)."""
    try:
        args = parse_args(argv)
        doc = None
        if args.from_raw is not None:
            doc = json.loads(args.from_raw.read_text())
            if not (isinstance(doc, dict) and isinstance(doc.get("rows"), list)):
                raise UsageError(f"{args.from_raw}: not a probe_contention --out file (no list of rows)")
            cells(doc)
    except (UsageError, OSError, ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError) as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return EXIT_USAGE
    if args.from_raw is None:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        try:
            h = Hierarchy.model_validate_json(args.hierarchy.read_text())
            if h.num_devices != comm.Get_size():
                raise UsageError(f"the hierarchy has {h.num_devices} devices but the job has {comm.Get_size()} ranks; "
                                 f"run with -n {h.num_devices}")
        except (UsageError, OSError, ValueError) as e:
            if comm.Get_rank() == 0:
                print(f"error: {one_line(e)}", file=sys.stderr)
            return EXIT_USAGE
        doc = measure(args, comm)
        if doc is None:
            return 0
        if args.out is not None:
            write_json_atomic(doc, args.out)
    console().print(table(COLUMNS, cells(doc), title="seconds per small exchange: calibration's case and busier ones",
                          text_columns=1))
    if args.markdown is not None:
        args.markdown.write_text(markdown(COLUMNS, cells(doc)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
