"""Message sizes in, results out: size parsing, nccl-tests bandwidths, the table and the JSON.

Bandwidths follow nccl-tests (its performance notes, ``NVIDIA/nccl-tests:doc/PERFORMANCE.md``): ``algbw = S / t`` with
``S`` the message size (the full gathered/scattered buffer for all_gather
and reduce_scatter), GB = 1e9 bytes; ``busbw = algbw * factor(n)`` with the
factor of the *requested* collective and ``n`` the reduction group size:
``2(n-1)/n`` for all_reduce, ``(n-1)/n`` for reduce_scatter, all_gather and
all_to_all, 1 for reduce and broadcast. For hierarchical programs busbw is only a
normalisation; compare programs by time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum

from p2synth.hierarchies.bound import of_bound_text
from p2synth.hierarchies.program import Collective


def bus_factor(collective: Collective, n: int) -> float:
    """nccl-tests' bus bandwidth factor of `collective` over `n` ranks."""
    if collective is Collective.ALL_REDUCE:
        return 2 * (n - 1) / n
    if collective in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.ALL_TO_ALL):
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
    wrong: int  # mismatches of the check run (tagged uint64 data), summed over ranks
    wrong_timed: int  # mismatches in the timed runs' float32 output, summed over ranks
    transposes: int
    bound_s: float | None = None  # the lower bound at these bytes on the plan's hierarchy (hierarchies/bound.py)

    @property
    def of_bound(self) -> float | None:
        """Measured time over the bound (1.00x would reach it); None without a bound."""
        return self.time_s / self.bound_s if self.bound_s else None

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
    collective: Collective, group_size: int, default_time_s: float, wrong: int, wrong_timed: int, transposes: int,
    bound_s: float | None = None,
) -> Result:
    """A Result with algbw, busbw and the speedup over the default filled in (`bound_s`: the lower bound at these bytes)."""
    algbw = nbytes / time_s / 1e9
    return Result(
        placement, is_default, position, nbytes, count, program, text, predicted_s, time_s, time_mean_s, repeats_s,
        algbw, algbw * bus_factor(collective, group_size), default_time_s / time_s, wrong, wrong_timed, transposes,
        bound_s,
    )


COLUMNS = ("size(B)", "count(elts)", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "speedup", "of bound", "#wrong")


def table_header(label_width: int) -> str:
    """The column header line (nccl-tests style, starting with '#')."""
    return f"#{COLUMNS[0]:>11} {COLUMNS[1]:>12}  {'program':<{label_width}} " + " ".join(f"{c:>11}" for c in COLUMNS[2:])


def table_row(result: Result, label_width: int) -> str:
    """One table line for `result`."""
    return (
        f"{result.bytes:>12} {result.count:>12}  {result.label:<{label_width}} {result.time_s * 1e6:>11.1f} "
        f"{result.algbw_GBps:>11.3f} {result.busbw_GBps:>11.3f} {result.speedup:>11.2f} {of_bound_text(result.of_bound):>11} "
        f"{result.wrong + result.wrong_timed:>11}"
    )


def out_of_bounds_line(wrong: int) -> str:
    """nccl-tests' closing verdict: how many values were wrong, OK or FAILED."""
    return f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}"


def table_footer(results: list[Result]) -> list[str]:
    """The closing lines: wrong values (OK/FAILED) and the mean bus bandwidth, as nccl-tests ends."""
    wrong = sum(r.wrong + r.wrong_timed for r in results)
    mean_busbw = sum(r.busbw_GBps for r in results) / len(results) if results else 0.0
    return [
        out_of_bounds_line(wrong),
        f"# Avg bus bandwidth    : {mean_busbw:.3f}",
    ]


class Verdict(str, Enum):
    """What an injected fault came to in one program."""

    DETECTED = "detected"  # the fault struck and the check found wrong elements
    MISSED = "missed"  # the fault struck and the check found nothing: the checker failed
    NOT_APPLICABLE = "not applicable"  # the kind has nowhere to strike: the program ran as a control

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class InjectResult:
    """One (program, size) run with an injected fault; the JSON entry of ``--inject`` output."""

    placement: int
    is_default: bool
    position: int | None
    bytes: int
    count: int
    program: dict
    text: str
    fault: str | None  # where the fault struck, in words; None when not applicable
    wrong: int
    verdict: Verdict

    @property
    def label(self) -> str:
        """``default <program>`` or ``#<index in the plan> <program>``."""
        return f"{'default' if self.is_default else f'#{self.position}'} {self.text}"

    def to_json(self) -> dict:
        """The entry as written to the bench JSON."""
        return {**asdict(self), "verdict": self.verdict.value}


def verdict(applicable: bool, wrong: int) -> Verdict:
    """The verdict of a run: a fault that struck is detected iff some element is wrong."""
    if not applicable:
        return Verdict.NOT_APPLICABLE
    return Verdict.DETECTED if wrong else Verdict.MISSED


def inject_header(label_width: int) -> str:
    """The column header of an ``--inject`` table."""
    return f"#{COLUMNS[0]:>11} {COLUMNS[1]:>12}  {'program':<{label_width}} {'#wrong':>11}  {'verdict':<15} fault"


def inject_row(result: InjectResult, label_width: int) -> str:
    """One line of an ``--inject`` table."""
    return (
        f"{result.bytes:>12} {result.count:>12}  {result.label:<{label_width}} {result.wrong:>11}  "
        f"{result.verdict.value:<15} {result.fault or '-'}"
    )


def inject_footer(kind: str, results: list[InjectResult]) -> list[str]:
    """The closing line: how many struck programs were caught, and whether the controls were exact."""
    struck = [r for r in results if r.verdict is not Verdict.NOT_APPLICABLE]
    caught = sum(r.verdict is Verdict.DETECTED for r in struck)
    controls = [r for r in results if r.verdict is Verdict.NOT_APPLICABLE]
    bad_controls = sum(r.wrong > 0 for r in controls)
    state = "OK" if caught == len(struck) and not bad_controls else "FAILED"
    return [
        f"# Injected {kind}: detected in {caught} of {len(struck)} runs it struck; "
        f"{len(controls)} not applicable, {bad_controls} of them wrong: {state}",
    ]
