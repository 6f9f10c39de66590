"""The same cases measured by two accuracy campaigns, side by side: how much a runtime change moved them.

    python -m scripts.compare_campaigns docs/accuracy/raw.json docs/accuracy/exchange/raw.json

A case is (testbed, axes, placement matrix, request, size) present in both raw documents (``scripts.accuracy``'s
raw format). Per case: the default's median and the fastest measured median in each, and the ratios before /
after. The two campaigns sample their programs independently (the protocol never asks a model), so "fastest"
is the fastest of what each measured; the default is the same program in both. Prints one Markdown table and
the medians of the ratios over the cases; ``--markdown`` also writes it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from scripts.tables import markdown


def cases(raw: dict) -> dict[tuple, dict]:
    """Per case key, the default's and the fastest median (seconds) and the number of measured programs."""
    out = {}
    for tb in raw["testbeds"]:
        name = tb["testbed"]["name"]
        for combo in tb.get("combos", []):
            by_size: dict[int, list[dict]] = {}
            for r in combo.get("results", []):
                by_size.setdefault(r["nbytes"], []).append(r)
            for nbytes, results in by_size.items():
                default = next((r for r in results if r["default"]), None)
                if default is None:
                    continue
                key = (name, json.dumps(combo["axes"]), json.dumps(combo["matrix"]), json.dumps(combo["request"], sort_keys=True), nbytes)
                out[key] = {"default_s": default["time_s"], "best_s": min(r["time_s"] for r in results), "programs": len(results)}
    return out


def compare(before: dict, after: dict) -> list[dict]:
    """One row per case of both documents, in the order of `after`."""
    old, new = cases(before), cases(after)
    return [{"key": key, "before": old[key], "after": value} for key, value in new.items() if key in old]


def table(rows: list[dict]) -> str:
    """The Markdown table and the medians."""
    body = []
    for r in rows:
        name, axes, matrix, request, nbytes = r["key"]
        b, a = r["before"], r["after"]
        body.append([name, f"{json.loads(request)['collective']}({','.join(json.loads(request)['axes'])})", matrix,
                     f"{nbytes >> 20}M" if nbytes >= 1 << 20 else f"{nbytes >> 10}K",
                     f"{b['default_s'] * 1e3:.1f}", f"{a['default_s'] * 1e3:.1f}", f"{b['default_s'] / a['default_s']:.2f}x",
                     f"{b['best_s'] * 1e3:.1f}", f"{a['best_s'] * 1e3:.1f}", f"{b['best_s'] / a['best_s']:.2f}x"])
    head = ["testbed", "request", "placement", "size", "default before ms", "default after ms", "default before / after",
            "best before ms", "best after ms", "best before / after"]
    lines = [markdown(head, body)]
    if rows:
        lines.append(f"\n{len(rows)} cases; median before / after: default "
                     f"{statistics.median(r['before']['default_s'] / r['after']['default_s'] for r in rows):.2f}x, best "
                     f"{statistics.median(r['before']['best_s'] / r['after']['best_s'] for r in rows):.2f}x")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print (and with --markdown write) the comparison; 2 on unreadable input."""
    p = argparse.ArgumentParser(prog="python -m scripts.compare_campaigns", description=__doc__.split("\n\n")[0])
    p.add_argument("before", type=Path, help="the earlier campaign's raw JSON")
    p.add_argument("after", type=Path, help="the later campaign's raw JSON")
    p.add_argument("--markdown", type=Path, help="also write the table here")
    args = p.parse_args(argv)
    try:
        before, after = (json.loads(path.read_text()) for path in (args.before, args.after))
    except (OSError, ValueError) as e:
        print(f"error: cannot read raw measurements: {e}", file=sys.stderr)
        return 2
    text = table(compare(before, after))
    print(text, end="")
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
