"""What the synthesis can still win on each bundled GPU system, and how far NCCL's default already is from the bound.

For each bundled system under ``library: nccl``, node count and size below,
this solves an all_reduce over every GPU (``python -m solver.run`` on a
one-axis spec, ``max_steps`` 4, every program proved) and prints: NCCL's
default (one call) with the algorithm the model says NCCL runs, the best
synthesized program, its speedup over the default, the default over the
lower bound, and the default's *validation*: the model's |error| against the
published nccl-tests figure (``docs/measurements/published-nccl-tests.json``,
``scripts/published.py``) for the same system, node count and collective
nearest in size (within a factor 4), where it lies within 15%. A win is *claimed*
only where the default is validated and the speedup exceeds that error.

    python -m scripts.gpu_headroom [--out docs/measurements/gpu-systems.md]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from p2synth.hierarchies.library import load_system
from p2synth.hierarchies.program import Collective
from p2synth.solver import run
from scripts import published

CASES = (("dgx-a100", (1, 2, 16)), ("dgx-h100", (1, 2, 4, 16)), ("dgx-h200", (1, 2, 16)), ("dgx-b200", (1, 2, 16)),
         ("gb200-nvl72", (1, 2)), ("h100-rail", (1, 2)), ("mi300x", (1, 2)))
SIZES = (16 << 20, 1 << 30)
VALIDATED = 0.15


@dataclass(frozen=True)
class Headroom:
    """One system, node count and size: NCCL's default, the best program, the bound."""

    system: str
    nodes: int
    gpus: int
    size: int
    default_s: float
    default_algorithm: str
    best_s: float
    best_text: str
    best_algorithms: tuple[str, ...]
    bound_s: float
    validation: float | None  # the least |error| of a matching published figure, where one is within 15%

    @property
    def claimed(self) -> bool:
        """Whether the speedup is a claim: the default validated, and the gain above the validating error."""
        return self.validation is not None and self.speedup - 1.0 > self.validation

    @property
    def speedup(self) -> float:
        """The default's time over the best program's."""
        return self.default_s / self.best_s


def solve(system: str, nodes: int, size: int, workdir: Path) -> dict:
    """The result JSON of an all_reduce over every GPU of `system` on `nodes` nodes at `size` bytes."""
    gpus = load_system(system, nodes).num_devices
    spec = {"hierarchy": {"system": system, "nodes": nodes}, "axes": [{"name": "data", "size": gpus}],
            "request": {"axes": ["data"], "collective": "all_reduce"}, "message_bytes": size, "max_steps": 4}
    path, out = workdir / "spec.json", workdir / "result.json"
    path.write_text(json.dumps(spec))
    code = run.main([str(path), "--out", str(out), "--quiet"])
    if code != 0:
        raise RuntimeError(f"solver.run exited {code} on {system} x{nodes}")
    return json.loads(out.read_text())


def program_text(entry: dict) -> str:
    """A result JSON program as the tables write it: ``RS(data@gpu) -> AR(data@node) -> AG(data@gpu) x16 pieces``."""
    steps = " -> ".join(f"{Collective(step['op']).short}({','.join(f'{a}@{l}' for a, l in step['slice'])})"
                        for step in entry["steps"])
    return steps + (f" x{entry['pipeline']} pieces" if entry["pipeline"] > 1 else "")


def validation(system: str, nodes: int, size: int, rows: list[published.Row]) -> float | None:
    """The model's |error| against the published all_reduce figure of `system` on `nodes` nodes nearest to `size`
    (within a factor 4; of two as near, the worse), if it is within 15% (None otherwise)."""
    near = [r for r in rows if r.system == system and r.nodes == nodes and r.nvls
            and r.collective.value == "all_reduce" and size / 4 <= r.size <= size * 4]
    if not near:
        return None
    nearest = min(near, key=lambda r: (abs(math.log2(r.size / size)), -abs(r.error)))
    return abs(nearest.error) if abs(nearest.error) <= VALIDATED else None


def headroom(rows: list[published.Row]) -> list[Headroom]:
    """Every case of CASES at every size of SIZES."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for system, node_counts in CASES:
            for nodes in node_counts:
                for size in SIZES:
                    result = solve(system, nodes, size, Path(tmp))
                    [entry] = result["placements"]  # one request: its programs are the placement's own
                    best = entry["programs"][0]
                    out.append(Headroom(system, nodes, load_system(system, nodes).num_devices, size,
                                        entry["default"]["cost_s"], entry["default"]["nccl_algorithms"][0],
                                        best["cost_s"], program_text(best), tuple(best["nccl_algorithms"]),
                                        entry["bound_s"], validation(system, nodes, size, rows)))
    return out


def markdown(found: list[Headroom]) -> str:
    """The table as ``docs/measurements/gpu-systems.md`` holds it."""
    lines = ["# What synthesis can win on each GPU system", "",
             "Generated by `python -m scripts.gpu_headroom`: an all_reduce over every GPU, NCCL's default (one "
             "call, priced by the model of NCCL's algorithm choice) against the best proved program of at most 4 "
             "steps, and against the lower bound. *validated*: the model's \\|error\\| against the published nccl-tests "
             "figure for the same system, node count and collective nearest in size (within a factor 4), where it "
             "lies within 15% (published.md). A speedup is *claimed* only where the default is validated and "
             "the speedup exceeds that error; elsewhere it is what the model predicts, no more.", "",
             "| system | GPUs | size | NCCL default | default over bound | best program | speedup | validated | claimed |",
             "|---|---|---|---|---|---|---|---|---|"]
    for h in found:
        best = "the default" if h.speedup < 1.0 + 1e-9 else f"`{h.best_text}` ({', '.join(h.best_algorithms)})"
        lines.append(f"| {h.system} | {h.gpus} | {published.size_text(h.size)} | "
                     f"{h.default_s * 1e3:.3f} ms, {h.default_algorithm} | {h.default_s / h.bound_s:.2f}x | {best} | "
                     f"{h.speedup:.2f}x | {'-' if h.validation is None else f'{h.validation:.1%}'} | "
                     f"{'yes' if h.claimed else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Build the table (print it, or write it with --out)."""
    parser = argparse.ArgumentParser(prog="python -m scripts.gpu_headroom", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="write the markdown table here (default: print it)")
    args = parser.parse_args(argv)
    rows = published.rows(json.loads(published.DATA.read_text()))
    published.emit(markdown(headroom(rows)), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
