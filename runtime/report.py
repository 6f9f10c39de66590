"""Message sizes in, results out: size parsing, nccl-tests bandwidths, the table and the JSON.

Bandwidths follow nccl-tests (doc/PERFORMANCE.md): ``algbw = S / t`` with
``S`` the message size (the full gathered/scattered buffer for all_gather
and reduce_scatter), GB = 1e9 bytes; ``busbw = algbw * factor(n)`` with the
factor of the *requested* collective and ``n`` the reduction group size:
``2(n-1)/n`` for all_reduce, ``(n-1)/n`` for reduce_scatter and all_gather,
1 for reduce and broadcast. For hierarchical programs busbw is only a
normalisation; compare programs by time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hierarchies.program import Collective

def bus_factor(collective: Collective, n: int) -> float:
    """nccl-tests' bus bandwidth factor of `collective` over `n` ranks."""
    if collective is Collective.ALL_REDUCE:
        return 2 * (n - 1) / n
    if collective in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class Result:
    """One (program, size) measurement; the JSON entry of the bench output."""

    placement: int
    is_default: bool
    position: int | None  # the program's index in the plan's list; None for the default
    bytes: int
    count: int
    program: dict
    text: str
    predicted_s: float | None
    time_s: float
    time_mean_s: float
    repeats_s: tuple[float, ...]
    algbw_GBps: float
    busbw_GBps: float
    speedup: float
    wrong: int
    transposes: int

    @property
    def label(self) -> str:
        """``default <program>`` or ``#<index in the plan> <program>``."""
        return f"{'default' if self.is_default else f'#{self.position}'} {self.text}"

    def to_json(self) -> dict:
        """The entry as written to the bench JSON."""
        out = asdict(self)
        out["repeats_s"] = list(self.repeats_s)
        return out


def make_result(
    *, placement: int, is_default: bool, position: int | None, nbytes: int, count: int, program: dict, text: str,
    predicted_s: float | None, time_s: float, time_mean_s: float, repeats_s: tuple[float, ...],
    collective: Collective, group_size: int, default_time_s: float, wrong: int, transposes: int,
) -> Result:
    """A Result with algbw, busbw and the speedup over the default filled in."""
    algbw = nbytes / time_s / 1e9
    return Result(
        placement, is_default, position, nbytes, count, program, text, predicted_s, time_s, time_mean_s, repeats_s,
        algbw, algbw * bus_factor(collective, group_size), default_time_s / time_s, wrong, transposes,
    )


COLUMNS = ("size(B)", "count(elts)", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "speedup", "#wrong")


def table_header(label_width: int) -> str:
    """The column header line (nccl-tests style, starting with '#')."""
    return f"#{COLUMNS[0]:>11} {COLUMNS[1]:>12}  {'program':<{label_width}} " + " ".join(f"{c:>11}" for c in COLUMNS[2:])


def table_row(result: Result, label_width: int) -> str:
    """One table line for `result`."""
    return (
        f"{result.bytes:>12} {result.count:>12}  {result.label:<{label_width}} {result.time_s * 1e6:>11.1f} "
        f"{result.algbw_GBps:>11.3f} {result.busbw_GBps:>11.3f} {result.speedup:>11.2f} {result.wrong:>11}"
    )


def table_footer(results: list[Result]) -> list[str]:
    """The closing lines: wrong values (OK/FAILED) and the mean bus bandwidth, as nccl-tests ends."""
    wrong = sum(r.wrong for r in results)
    mean_busbw = sum(r.busbw_GBps for r in results) / len(results) if results else 0.0
    return [
        f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}",
        f"# Avg bus bandwidth    : {mean_busbw:.3f}",
    ]
