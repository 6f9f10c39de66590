"""How many injected faults the check catches, with the tagged data and with the old data pattern, side by side.

    python -m scripts.fault_audit [--bytes 1000] [--out audit.json]

Runs every ``--inject`` KIND on every program of the small cases of the
runtime tests (tests/runtime_support.py CASES, every collective), under
real ``mpiexec``, twice: with the check data of runtime/data.py and with the
pattern the runtime used before it, ``f(rank, i) = 1 + (i mod 31) + 32 (rank
mod p)`` in float32 (kept here, and only here, for this comparison). Prints,
per KIND, the runs the fault struck and how many each pattern caught. Run it
from the repository root (it reuses the tests' cases). Exit status 1 if the
tagged data misses any fault, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from p2synth.hierarchies.cli import EXIT_USAGE, ArgumentParser, UsageError
from p2synth.hierarchies.program import Collective
from p2synth.runtime.data import SUMMING, Group, tagged_data
from p2synth.runtime.faults import FaultKind
from scripts.tables import console, table

OLD_INDEX_PERIOD = 31
OLD_RANK_STRIDE = 32
OLD_EXACT_LIMIT = 2**24


@dataclass(frozen=True)
class OldPattern:
    """The check data before the tags: ``1 + (i mod 31) + 32 (rank mod p)``, float32, NaN-poisoned."""

    collective: Collective
    group: Group
    count: int
    world_size: int
    dtype = np.dtype(np.float32)
    poison = float("nan")

    @property
    def period(self) -> int:
        """The rank period that kept group sums below 2**24."""
        return max(1, min(self.world_size, OLD_EXACT_LIMIT // (OLD_RANK_STRIDE * self.group.size)))

    def _values(self, rank: int, count: int) -> np.ndarray:
        i = np.arange(count, dtype=np.int64)
        return (1 + i % OLD_INDEX_PERIOD + OLD_RANK_STRIDE * (rank % self.period)).astype(self.dtype)

    def input(self) -> np.ndarray:
        """The old input: one chunk for all_gather, else the whole message."""
        n = self.count // self.group.size if self.collective is Collective.ALL_GATHER else self.count
        return self._values(self.group.rank, n)

    def expected(self) -> np.ndarray | None:
        """The old closed forms (root only after a reduce)."""
        group, col, chunk = self.group, self.collective, self.count // self.group.size
        i = np.arange(self.count, dtype=np.int64)
        total = (group.size * (1 + i % OLD_INDEX_PERIOD) + OLD_RANK_STRIDE * sum(r % self.period for r in group.members)).astype(self.dtype)
        if col is Collective.REDUCE_SCATTER:
            return total[group.position * chunk : (group.position + 1) * chunk]
        if col in SUMMING:
            return total if col is Collective.ALL_REDUCE or group.position == 0 else None
        if col is Collective.ALL_GATHER:
            return np.concatenate([self._values(m, chunk) for m in group.members])
        if col is Collective.ALL_TO_ALL:  # (not in the old runtime) place k: member k's chunk addressed here
            mine = slice(group.position * chunk, (group.position + 1) * chunk)
            return np.concatenate([self._values(m, self.count)[mine] for m in group.members])
        if col is Collective.SEND_RECV:  # (not in the old runtime) the predecessor's input
            return self._values(group.members[group.position - 1], self.count)
        return self._values(group.root, self.count)


PATTERNS = {"tagged": tagged_data, "old": OldPattern}


def worker(pattern: str, calls: list[str]) -> int:
    """Inside mpiexec: run runtime.bench once per command line with `pattern` as check data."""
    from p2synth.runtime.bench import main

    for call in calls:
        main(shlex.split(call), data=PATTERNS[pattern])
    return 0


def audit(nbytes: str, folder: Path) -> dict[str, dict[str, Counter]]:
    """Run every case under both patterns; per pattern and KIND, a Counter of verdicts."""
    from tests.runtime_support import CASES, case_plans, run_mpi

    tally: dict[str, dict[str, Counter]] = {p: {str(k): Counter() for k in FaultKind} for p in PATTERNS}
    for case, (placement, _, _) in CASES.items():
        plans = case_plans(case, folder)
        for pattern in PATTERNS:
            outs, calls = [], []
            for collective, (plan, *_) in plans.items():
                for kind in FaultKind:
                    out = folder / f"{case}-{collective.value}-{kind}-{pattern}.out.json"
                    out.unlink(missing_ok=True)
                    outs.append((kind, out))
                    calls.append(f"{plan} --top all --bytes {nbytes} --inject {kind} --out {out}")
            job = run_mpi(placement.num_devices, ["-m", "scripts.fault_audit", "--worker", pattern, *calls], timeout=1800)
            if job.returncode != 0:
                raise SystemExit(f"error: the {pattern} run of case {case} failed (status {job.returncode}):\n{job.stderr[-2000:]}")
            for kind, out in outs:
                if out.exists():  # absent where the kind applies to no program of the plan
                    for r in json.loads(out.read_text())["results"]:
                        tally[pattern][str(kind)][r["verdict"]] += 1
    return tally


COLUMNS = ("kind", "struck", "tagged caught", "old caught", "old missed", "not applicable")


def summary(tally: dict[str, dict[str, Counter]]) -> list[tuple]:
    """One row per KIND under :data:`COLUMNS` (the runs the fault struck, as the tagged data saw them, and what
    each pattern caught), then the total row."""
    rows, totals = [], [0] * 5
    for kind in FaultKind:
        new, old = tally["tagged"][str(kind)], tally["old"][str(kind)]
        row = (new["detected"] + new["missed"], new["detected"], old["detected"], old["missed"], new["not applicable"])
        totals = [a + b for a, b in zip(totals, row)]
        rows.append((str(kind), *row))
    return rows + [("total", *totals)]


def main(argv: list[str] | None = None) -> int:
    """The audit's command line; prints one row per KIND and a total. Exit 2 on bad arguments."""
    p = ArgumentParser(prog="python -m scripts.fault_audit", description=__doc__.split("\n")[0])
    p.add_argument("--bytes", default="1000", help="message size of every run (default 1000, as the runtime tests)")
    p.add_argument("--out", type=Path, default=None, help="write the counts as JSON here")
    p.add_argument("--worker", default=None, choices=list(PATTERNS), help=argparse.SUPPRESS)
    try:
        args, rest = p.parse_known_args(argv)
        if args.worker is None and rest:
            raise UsageError(f"unrecognized arguments: {' '.join(rest)}")
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.worker is not None:
        return worker(args.worker, rest)
    with tempfile.TemporaryDirectory() as tmp:
        tally = audit(args.bytes, Path(tmp))
    rows = summary(tally)
    console().print(table(COLUMNS, rows, title=f"every --inject KIND on every program of the small cases, --bytes {args.bytes}"))
    if args.out is not None:
        args.out.write_text(json.dumps({p: {k: dict(c) for k, c in kinds.items()} for p, kinds in tally.items()}, indent=2) + "\n")
    _, struck, caught, *_ = rows[-1]
    return 1 if caught != struck else 0


if __name__ == "__main__":
    sys.exit(main())
