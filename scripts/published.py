"""The GPU cost model against published nccl-tests measurements: one row per published figure, beside the model.

Each row of ``docs/measurements/published-nccl-tests.json`` is a figure a
public source printed (an nccl-tests or rccl-tests bus bandwidth, with its
size, system and settings). For each, this prices NCCL's default (one call
over every GPU, ``hierarchies.program.default_program``) on the bundled
system the row names, at the row's node count and size, with the alpha-beta
model under ``library: nccl`` (``solver/nccl.py``), and prints the predicted
bus bandwidth, the relative error, NCCL's algorithm and protocol as the model
picks them, and the lower bound's bus bandwidth. A row with ``"nvls": false``
(a run that set ``NCCL_NVLS_ENABLE=0``) is priced on the system without its
switch reduction. Nothing in the model is fitted to these rows.

The summary gives the targets' figures: the median and largest |error| at
64 MiB and above (and over the NVLS and SHARP rows there), the median from 1
to 16 MiB, beside two trivial baselines under the same rules: the link's own
figure (busbw = the level's bandwidth whatever the size) and NCCL's ring
alone (every other algorithm off). It also counts the rows whose figure beats
the bound (must be none).

    python -m scripts.published [--data PATH] [--out docs/measurements/published.md]

Exit 0; exit 2 with one line for a missing or malformed data file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from p2synth.hierarchies.bound import lower_bound
from p2synth.hierarchies.library import load_system
from p2synth.hierarchies.model import Hierarchy
from p2synth.hierarchies.placement import Axis, Placement
from p2synth.hierarchies.program import Collective, Request, default_program
from p2synth.solver.models import program_cost, step_schedules

DATA = Path("docs/measurements/published-nccl-tests.json")
OUT = Path("docs/measurements/published.md")
LARGE = 64 << 20           # the "64 MiB and above" rows
SMALL = (1 << 20, 16 << 20)  # the "1 to 16 MiB" rows
BUS_FACTOR = {Collective.ALL_REDUCE: lambda n: 2 * (n - 1) / n, Collective.ALL_GATHER: lambda n: (n - 1) / n}


@dataclass(frozen=True)
class Row:
    """One published figure and the model's prediction for it."""

    id: str
    system: str
    nodes: int
    gpus: int
    collective: Collective
    nvls: bool
    size: int
    published: float     # busbw, GB/s
    predicted: float     # busbw, GB/s
    schedule: str
    bound: float         # the bound's busbw, GB/s
    link: float          # the trivial baseline: the slowest spanned level's bandwidth as busbw
    ring: float          # the ring alone

    @property
    def error(self) -> float:
        """Relative error of the predicted busbw."""
        return self.predicted / self.published - 1.0

    @property
    def switch(self) -> bool:
        """Whether the model runs this row through a reducing switch (NVLS, NVLSTree, CollNet)."""
        return self.schedule.startswith(("NVLS", "CollNet"))


def without_switch(h: Hierarchy) -> Hierarchy:
    """`h` with no level's switch reducing (a run with NVLS or CollNet off)."""
    levels = tuple(lv.model_copy(update={"switch_reduce": None, "switch_reduce_GBps": None, "switch_latency_us": None})
                   for lv in h.levels)
    return h.model_copy(update={"levels": levels})


def ring_only(h: Hierarchy) -> Hierarchy:
    """`h` priced as a plain ring: no switch, and no library (AlphaBeta's ring or tree, the previous GPU model)."""
    return without_switch(h).model_copy(update={"library": None})


def busbw(h: Hierarchy, collective: Collective, size: int) -> tuple[float, str, float]:
    """NCCL's default (one call over every device) on `h` at `size` bytes: predicted busbw, schedule, bound busbw."""
    n = h.num_devices
    placement = Placement(h, (Axis(name="data", size=n),), (h.counts,))
    request = Request(frozenset({0}), collective)
    program = default_program(placement, request)
    seconds = program_cost(placement, request, program, float(size))
    bound = lower_bound(placement, request, float(size)).seconds
    factor = BUS_FACTOR[collective](n)
    return size / seconds / 1e9 * factor, step_schedules(placement, request, program, float(size))[0], \
        size / bound / 1e9 * factor


def priced(entry: dict, size: int, published: float) -> Row:
    """The :class:`Row` of one published figure of `entry` at `size`."""
    h = load_system(entry["system"], entry["nodes"])
    if h.num_devices != entry["gpus"]:
        raise ValueError(f"{entry['id']}: {entry['system']} on {entry['nodes']} nodes has {h.num_devices} GPUs, "
                         f"not {entry['gpus']}")
    if not entry.get("nvls", True):
        h = without_switch(h)
    collective = Collective(entry["collective"])
    predicted, schedule, bound = busbw(h, collective, size)
    ring = busbw(ring_only(h), collective, size)[0]
    link = min(h.links[l].bandwidth for l in range(len(h.levels)) if h.counts[l] > 1) / 1e9
    return Row(entry["id"], entry["system"], entry["nodes"], entry["gpus"], collective, entry.get("nvls", True), size,
               published, predicted, schedule, bound, link, ring)


def rows(data: dict) -> list[Row]:
    """Every published figure of the data file, priced (table rows at 1 KiB and above: smaller ones measure launch
    overhead, which no row of the model claims)."""
    out = []
    for entry in data["tables"] + data["figures"]:
        for size, _time, _algbw, bus in entry["rows"]:
            if size >= 1024:
                out.append(priced(entry, int(size), float(bus)))
    return out


def _median_abs(values: list[float]) -> float:
    return statistics.median(abs(v) for v in values) if values else float("nan")


def summary(found: list[Row]) -> dict:
    """The targets' figures over `found`, with the two trivial baselines under the same rules."""
    large = [r for r in found if r.size >= LARGE]
    small = [r for r in found if SMALL[0] <= r.size <= SMALL[1]]
    err = lambda rs, value: [value(r) / r.published - 1.0 for r in rs]
    model, link, ring = (lambda r: r.predicted), (lambda r: r.link), (lambda r: r.ring)
    return {
        "rows": len(found), "large_rows": len(large), "small_rows": len(small),
        "large_median": _median_abs(err(large, model)), "large_worst": max((abs(e) for e in err(large, model)), default=0.0),
        "large_switch_worst": max((abs(r.error) for r in large if r.switch), default=0.0),
        "large_switch_rows": sum(r.switch for r in large),
        "small_median": _median_abs(err(small, model)),
        "link_large_median": _median_abs(err(large, link)), "link_small_median": _median_abs(err(small, link)),
        "ring_large_median": _median_abs(err(large, ring)), "ring_small_median": _median_abs(err(small, ring)),
        "beat_bound": [r.id for r in found if r.published > r.bound * (1 + 1e-9)],
    }


def size_text(size: int) -> str:
    """Bytes as nccl-tests users read them: 4 KiB, 16 MiB, 8 GiB (or plain bytes)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size:,} B"


def markdown(data: dict, found: list[Row]) -> str:
    """The table and summary as ``docs/measurements/published.md`` holds them."""
    s = summary(found)
    lines = [
        "# The GPU model against published nccl-tests figures",
        "",
        "Generated by `python -m scripts.published` from `published-nccl-tests.json` (beside this file); "
        "a CI test rebuilds it. Each row is one figure a public source printed; beside it, the model's bus "
        "bandwidth for NCCL's default (one call over every GPU) on the bundled system, node count, collective and "
        "size, the relative error, the algorithm and protocol the model says NCCL runs, and the lower bound's bus "
        "bandwidth (no published figure may exceed it). Nothing in the model is fitted to these rows: every "
        "constant is a datasheet figure or NCCL's own (docs/model.md, \"NCCL's algorithm choice\").",
        "",
        "## Summary",
        "",
        "| figure | the model | link figure as busbw | ring only (the previous model) |",
        "|---|---|---|---|",
        f"| median \\|error\\|, 64 MiB and above ({s['large_rows']} rows) | {s['large_median']:.1%} | "
        f"{s['link_large_median']:.1%} | {s['ring_large_median']:.1%} |",
        f"| largest \\|error\\|, 64 MiB and above | {s['large_worst']:.1%} | | |",
        f"| largest \\|error\\|, NVLS and SHARP rows, 64 MiB and above ({s['large_switch_rows']} rows) | "
        f"{s['large_switch_worst']:.1%} | | |",
        f"| median \\|error\\|, 1 to 16 MiB ({s['small_rows']} rows) | {s['small_median']:.1%} | "
        f"{s['link_small_median']:.1%} | {s['ring_small_median']:.1%} |",
        f"| published figures above the bound | {len(s['beat_bound'])} | | |",
        "",
        "The baselines are priced under the same rules: *link figure* says busbw is the slowest level's bandwidth "
        "at every size; *ring only* is the model before NCCL's algorithm choice (AlphaBeta's ring or tree, no "
        "switch reduction).",
        "",
        "## Sources",
        "",
        "| id | hardware | NCCL | settings | source | note |",
        "|---|---|---|---|---|---|",
    ]
    for entry in data["tables"] + data["figures"]:
        lines.append(f"| `{entry['id']}` | {entry['hardware']} | {entry['nccl']} | {entry['settings']} | "
                     f"{entry['source']} | {entry.get('note', '')} |")
    lines += ["", "## Rows", "",
              "| id | system | GPUs | collective | size | published busbw | predicted busbw | error | model: NCCL runs | bound busbw |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in found:
        lines.append(f"| `{r.id}` | {r.system}{'' if r.nvls else ' (NVLS off)'} | {r.gpus} | {r.collective.value} | "
                     f"{size_text(r.size)} | {r.published:.1f} | {r.predicted:.1f} | {r.error:+.1%} | {r.schedule} | "
                     f"{r.bound:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Build the table; exit 2 with one line for a bad data file."""
    parser = argparse.ArgumentParser(prog="python -m scripts.published", description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help=f"the published figures (default {DATA})")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown table here (default: print it)")
    args = parser.parse_args(argv)
    try:
        data = json.loads(args.data.read_text())
        found = rows(data)
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: --data {args.data}: {e}", file=sys.stderr)
        return 2
    emit(markdown(data, found), args.out)
    return 0


def emit(text: str, out: Path | None) -> None:
    """Write `text` to the file `out`, or print it when there is none."""
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
