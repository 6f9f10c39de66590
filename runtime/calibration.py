"""Measure each level's latency and bandwidth over MPI (or torch.distributed) and fit a hierarchy to them: the code
behind ``python -m scripts.calibrate`` and the tuner's refitted hierarchy (``python -m runtime.tune``).

For each level ``l`` with two or more children (:func:`measure_level`):

* ping-pong between rank 0 and the first rank of the next level-``l`` unit (their
  outermost differing level is ``l``), small and large messages, one-way time =
  round trip / 2, median over iterations after warm-up;
* ``alpha`` (latency_us) and ``beta`` (bandwidth_GBps) of ``t(s) = alpha + s / beta``
  (:func:`fit_alpha_beta`);
* concurrent: every rank of unit 0 sends to its counterpart in unit 1 at once; the
  aggregate rate out of the unit is the uplink (``uplink_GBps``);
* two-way: the same pairs exchange the same bytes at once, as the exchanging
  schedules do, in rounds of :data:`DUPLEX_CHUNK_BYTES` (back-to-back Sendrecv);
  the one-way rate over the two-way rate is what each direction keeps of it
  (``duplex_efficiency``, at most 1), the figure the simulator's exchanging
  schedules use; written for every level but the innermost, whose two-way time
  measures CPU copies contending. One exchange of the whole buffer measured
  either the full rate or half of it from one run to the next on the shaped
  testbed (docs/measurements/two-way/6x2-repeat/); rounds of 512 KiB repeat.

:class:`Bench` measures over a :class:`BenchComm`: :class:`MpiComm` (mpi4py) or ``runtime/torch_comm.py``'s
``TorchComm`` (torch.distributed, gloo: every byte over TCP, also inside a node), the same measuring code for
both. :func:`fitted_hierarchy` writes the figures into a hierarchy, with the library that ran them
(``Hierarchy.library``: the simulator follows Open MPI's, or gloo's, algorithm choices). Only the hierarchy
model and numpy are needed (mpi4py or torch for measuring), never the solver or Z3.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import numpy as np

from p2synth.hierarchies.model import (CollectiveLibrary, HanAllGather, HanBroadcast, Hierarchy, ReduceScatterRun,
                                       TunedAllReduce, TunedTrees)

KiB, MiB = 1024, 1024 * 1024
LATENCY_SIZES = (8, 256, 4 * KiB)
BANDWIDTH_SIZES = (64 * KiB, 1 * MiB, 4 * MiB, 16 * MiB)
SMALL = 64 * KiB  # sizes up to this get --small-iters iterations
SMALL_FIT = 4 * KiB  # sizes up to this fix the fitted latency
LARGE = 1 * MiB  # sizes from this on fix the fitted bandwidth
MIN_CONCURRENT_BYTES = 256 * KiB
DUPLEX_CHUNK_BYTES = 512 * KiB  # the two-way probe's round: each pair exchanges its bytes in rounds of this size
REDUCE_BYTES = 16 * MiB  # buffer of the summing-rate measurement (at most --max-bytes)
REDUCE_WINDOW_S = 0.2
TAG_PING, TAG_PONG, TAG_FLOW = 11, 12, 13


def message_sizes(max_bytes: int) -> list[int]:
    """Ping-pong sizes: the latency sizes, then the bandwidth sizes up to `max_bytes` (always including it)."""
    sizes = [s for s in (*LATENCY_SIZES, *BANDWIDTH_SIZES) if s < max_bytes]
    return sizes + [max_bytes]


# ---- fitting (pure) ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Fit:
    """``t(s) = alpha_s + s / bandwidth`` (seconds, bytes/s), with each size's relative residual (sizes ascending)."""

    alpha_s: float
    bandwidth: float
    rel_residuals: tuple[float, ...]


def fit_alpha_beta(samples: dict[int, list[float]]) -> Fit:
    """Fit ``t(s) = alpha + s / beta`` to one-way times (`samples`: size -> timed iterations).

    1. ``1/beta`` is the least-squares slope of the per-size medians over the large sizes
       (``>= LARGE``; at least the two largest): what a long message pays per byte once the
       link runs at its rate.
    2. ``alpha`` is the median of all samples of the small sizes (``<= SMALL_FIT``; at least
       the smallest size): what a short message pays; their per-byte part is below the
       noise. Pooling the sizes keeps a burst of scheduler delays during one size (8 ranks
       on 2 shared cores) from moving alpha, which a line through three medians does not.

    One line through all sizes would let the large sizes' intercept stand for the latency,
    and on a token-bucket link that intercept is off by the burst (often negative); nor can
    the large sizes' slope be applied to the small ones, which pass inside the burst at line
    speed. Sizes in between (burst, eager-to-rendezvous switch) sit off both; their
    residuals are reported, not fitted.
    """
    sizes = sorted(samples)
    if len(sizes) < 2 or any(not samples[x] or min(samples[x]) <= 0 for x in sizes):
        raise ValueError("need two or more sizes, each with positive times")
    s = np.asarray(sizes, dtype=float)
    t = np.asarray([statistics.median(samples[x]) for x in sizes])
    large = s >= LARGE if np.count_nonzero(s >= LARGE) >= 2 else np.arange(len(s)) >= len(s) - 2
    inv_bw, _ = np.polyfit(s[large], t[large], 1)
    if inv_bw <= 0:
        raise ValueError("times do not grow with message size; cannot fit a bandwidth")
    small = [x for x in sizes if x <= SMALL_FIT] or sizes[:1]
    alpha = statistics.median([v for x in small for v in samples[x]])
    rel = (alpha + s * inv_bw - t) / t
    return Fit(alpha_s=alpha, bandwidth=float(1.0 / inv_bw), rel_residuals=tuple(float(r) for r in rel))


def significant(x: float, digits: int = 4) -> float:
    """`x` rounded to `digits` significant figures (what the written files keep)."""
    return float(f"{x:.{digits}g}")


def library_of(mpi_version: str) -> CollectiveLibrary | None:
    """The collective library an MPI library string names (``MPI.Get_library_version()``); None for one whose
    algorithm choices the simulator does not know."""
    return CollectiveLibrary.OPEN_MPI if mpi_version.lstrip().startswith("Open MPI") else None


def fitted_hierarchy(h: Hierarchy, results: dict[int, dict], name: str | None = None,
                     reduce_GBps: float | None = None, library: CollectiveLibrary | None = None) -> Hierarchy:
    """`h` with each measured level's latency, bandwidth, uplink and duplex efficiency replaced by the fitted figures
    (a level whose measurements could not be fitted keeps its figures).

    `reduce_GBps` (the rate a device sums data, all devices at once) is set where the
    hierarchy model has that field, and `library` (the one that ran the measurements) where given,
    with Open MPI's ``reduce_scatter: exchange`` (the runtime's); every other field of `h` is kept.
    """
    levels = list(h.levels)
    for l, res in results.items():
        if "fit" not in res:  # measured but not fitted (see measure_level): the level keeps its figures
            continue
        update = {"latency_us": significant(res["fit"]["latency_us"]), "bandwidth_GBps": significant(res["fit"]["bandwidth_GBps"])}
        if res.get("concurrent"):
            update["uplink_GBps"] = significant(res["concurrent"]["uplink_GBps"])
        # not on the innermost level: there both "directions" are CPU copies on the same cores, and the
        # two-way time measures their contention (the accuracy report's shared-memory efficiency), not a link
        if res.get("duplex") and l < len(levels) - 1:
            update["duplex_efficiency"] = significant(min(1.0, res["duplex"]["efficiency"]), 3)
        levels[l] = levels[l].model_copy(update=update)
    update = {"name": name or f"{h.name}-fitted", "levels": tuple(levels)}
    if reduce_GBps is not None and "reduce_GBps" in Hierarchy.model_fields:
        update["reduce_GBps"] = significant(reduce_GBps)
    if library is not None:
        update["library"] = library
    # said outright, so that a record of it tells what its runs ran
    if library in (CollectiveLibrary.OPEN_MPI, CollectiveLibrary.GLOO):
        update["reduce_scatter"] = ReduceScatterRun.EXCHANGE
    if library is CollectiveLibrary.OPEN_MPI:
        update["han_broadcast"] = HanBroadcast.BINOMIAL
        update["tuned_all_reduce"] = TunedAllReduce.DISTANCE_DOUBLING
        update["tuned_trees"] = TunedTrees.RULES
        update["han_all_gather"] = HanAllGather.HIERARCHICAL
    out = h.model_copy(update=update)
    return Hierarchy.model_validate_json(out.model_dump_json())  # re-validated: what we write loads


# ---- measuring (over MPI or torch.distributed) ------------------------------------------------
class BenchComm:
    """What :class:`Bench` needs of a communicator: the point-to-point and synchronising calls of its measurements,
    a clock, and buffers in the form the transport sends (:meth:`message`). :class:`MpiComm` is mpi4py's,
    ``runtime/torch_comm.py``'s ``TorchComm`` torch.distributed's (gloo: every byte over TCP, also inside a node).

    Every rank calls the collective ones (:meth:`barrier`, :meth:`ibarrier`, :meth:`max_on`, :meth:`gather`)
    in the same order.
    """

    def rank(self) -> int:
        """This process's rank."""
        raise NotImplementedError

    def wtime(self) -> float:
        """Wall-clock seconds (differences only)."""
        raise NotImplementedError

    def message(self, buf: np.ndarray):
        """`buf` (uint8, contiguous) as the transport sends and receives it (made once per size, outside the
        timed loops)."""
        raise NotImplementedError

    def send(self, msg, dest: int, tag: int) -> None:
        """Send `msg` (from :meth:`message`) to `dest`; blocking."""
        raise NotImplementedError

    def recv(self, msg, source: int, tag: int) -> None:
        """Receive into `msg` (from :meth:`message`) from `source`; blocking."""
        raise NotImplementedError

    def sendrecv(self, out, back, peer: int, tag: int) -> None:
        """Send `out` to `peer` and receive `back` from it at once (both from :meth:`message`)."""
        raise NotImplementedError

    def barrier(self) -> None:
        """Wait for every rank."""
        raise NotImplementedError

    def ibarrier(self):
        """A barrier started, not waited for: an object whose ``Test()`` says whether every rank has entered it."""
        raise NotImplementedError

    def max_on(self, value: float, root: int) -> float | None:
        """The maximum of `value` over ranks on `root`; None elsewhere."""
        raise NotImplementedError

    def gather(self, obj, root: int) -> list | None:
        """Every rank's `obj`, by rank, on `root`; None elsewhere."""
        raise NotImplementedError


class MpiComm(BenchComm):
    """An mpi4py communicator (``MPI.COMM_WORLD``) as a :class:`BenchComm`: buffers as ``[buf, MPI.BYTE]``,
    the clock ``MPI.Wtime``."""

    def __init__(self, comm) -> None:
        from mpi4py import MPI

        self.comm, self.MPI = comm, MPI

    def rank(self) -> int:
        return self.comm.Get_rank()

    def wtime(self) -> float:
        return self.MPI.Wtime()

    def message(self, buf: np.ndarray):
        return [buf, self.MPI.BYTE]

    def send(self, msg, dest: int, tag: int) -> None:
        self.comm.Send(msg, dest=dest, tag=tag)

    def recv(self, msg, source: int, tag: int) -> None:
        self.comm.Recv(msg, source=source, tag=tag)

    def sendrecv(self, out, back, peer: int, tag: int) -> None:
        self.comm.Sendrecv(out, dest=peer, sendtag=tag, recvbuf=back, source=peer, recvtag=tag)

    def barrier(self) -> None:
        self.comm.Barrier()

    def ibarrier(self):
        return self.comm.Ibarrier()

    def max_on(self, value: float, root: int) -> float | None:
        return self.comm.reduce(value, op=self.MPI.MAX, root=root)

    def gather(self, obj, root: int) -> list | None:
        return self.comm.gather(obj, root=root)


@dataclass
class Bench:
    """Measurements over one communicator; every rank calls every method in the same order.

    `comm` is a :class:`BenchComm`; an mpi4py communicator given here is wrapped in :class:`MpiComm`.
    """

    comm: BenchComm
    iters: int
    small_iters: int
    warmup: int
    buf: np.ndarray = field(repr=False, default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.comm, BenchComm):
            self.comm = MpiComm(self.comm)

    def idle_barrier(self) -> None:
        """A barrier that sleeps while it waits, so idle ranks leave the 2 cores to the measuring ones."""
        req = self.comm.ibarrier()
        while not req.Test():
            time.sleep(0.0005)

    def pingpong(self, a: int, b: int, sizes: list[int]) -> dict[int, list[float]]:
        """One-way times (round trip / 2) between ranks `a` and `b` per size; filled on rank `a` only."""
        comm = self.comm
        rank, out = comm.rank(), {}
        for size in sizes:
            msg = comm.message(self.buf[:size])
            n = self.small_iters if size <= SMALL else self.iters
            samples = []
            for i in range(self.warmup + n):
                if rank == a:
                    t0 = comm.wtime()
                    comm.send(msg, b, TAG_PING)
                    comm.recv(msg, b, TAG_PONG)
                    if i >= self.warmup:
                        samples.append((comm.wtime() - t0) / 2)
                elif rank == b:
                    comm.recv(msg, a, TAG_PING)
                    comm.send(msg, a, TAG_PONG)
            if rank == a:
                out[size] = samples
        self.idle_barrier()
        return out

    def concurrent(self, senders: list[int], receivers: list[int], size: int) -> list[float]:
        """Every sender sends `size` bytes to its receiver at once; per iteration the slowest
        rank's time from a common barrier (filled on rank 0)."""
        comm = self.comm
        rank = comm.rank()
        msg = comm.message(self.buf[:size])

        def flow() -> None:
            if rank in senders:
                comm.send(msg, receivers[senders.index(rank)], TAG_FLOW)
            elif rank in receivers:
                comm.recv(msg, senders[receivers.index(rank)], TAG_FLOW)
        return self._slowest(flow)

    def exchange(self, left: list[int], right: list[int], size: int, rounds: int = 1) -> list[float]:
        """Every rank of `left` and its partner in `right` exchange `size` bytes both ways at once, `rounds` times
        back to back (Sendrecv); per iteration the slowest rank's time from a common barrier (filled on rank 0)."""
        comm = self.comm
        rank = comm.rank()
        out = comm.message(self.buf[:size])
        back = comm.message(np.empty(size, dtype=np.uint8)) if rank in left or rank in right else None

        def both_ways() -> None:
            if rank in left or rank in right:
                peer = right[left.index(rank)] if rank in left else left[right.index(rank)]
                for _ in range(rounds):
                    comm.sendrecv(out, back, peer, TAG_FLOW)
        return self._slowest(both_ways)

    def _slowest(self, action) -> list[float]:
        """Run `action` warmup + iters times, each from a common barrier; the slowest rank's time of each timed
        iteration (filled on rank 0), then an idle barrier."""
        comm = self.comm
        samples = []
        for i in range(self.warmup + self.iters):
            comm.barrier()
            t0 = comm.wtime()
            action()
            slowest = comm.max_on(comm.wtime() - t0, 0)
            if comm.rank() == 0 and i >= self.warmup:
                samples.append(slowest)
        self.idle_barrier()
        return samples

    def reduce_rates(self, nbytes: int, window_s: float = REDUCE_WINDOW_S) -> tuple[float, list[float]]:
        """Bytes/s at which a rank sums two float32 buffers (``a += b``): rank 0 alone, and
        every rank while all do it at once (as in a collective), gathered on rank 0.

        Each figure sums for `window_s` of wall time, long enough for the scheduler to
        share the cores among the ranks; the median of three windows.
        """
        a = np.ones(nbytes // 4, dtype=np.float32)
        b = np.ones_like(a)
        np.add(a, b, out=a)

        def rate() -> float:
            count, t0 = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - t0) < window_s:
                np.add(a, b, out=a)
                count += 1
            return count * a.nbytes / elapsed

        alone = statistics.median(rate() for _ in range(3)) if self.comm.rank() == 0 else 0.0
        self.idle_barrier()
        together = []
        for _ in range(3):
            self.comm.barrier()
            together.append(rate())
        rates = self.comm.gather(statistics.median(together), 0)
        self.idle_barrier()
        return alone, rates


def measure_level(bench: Bench, h: Hierarchy, l: int, sizes: list[int], max_bytes: int) -> dict | None:
    """All measurements and fits of level `l` (on rank 0; None elsewhere)."""
    d = h.devices_below(l)  # devices in one level-l unit; rank d is the first of unit 1
    pp = bench.pingpong(0, d, sizes)
    size = max(max_bytes // d, MIN_CONCURRENT_BYTES)
    one_way = bench.concurrent(list(range(d)), list(range(d, 2 * d)), size)
    chunk = min(size, DUPLEX_CHUNK_BYTES)
    rounds = max(1, size // chunk)
    two_way = bench.exchange(list(range(d)), list(range(d, 2 * d)), chunk, rounds)
    conc = (size, one_way) if d > 1 else None
    if bench.comm.rank() != 0:
        return None
    sizes = sorted(pp)
    medians = [statistics.median(pp[s]) for s in sizes]
    try:
        fit = fit_alpha_beta(pp)
    except ValueError as e:  # noise swamped the size dependence (a loaded machine): no figures for this level
        return {"level": h.levels[l].name, "pair": [0, d], "fit_error": str(e),
                "pingpong": [{"bytes": s, "one_way_s": significant(m, 6)} for s, m in zip(sizes, medians)]}
    res = {
        "level": h.levels[l].name,
        "pair": [0, d],
        "pingpong": [{"bytes": s, "one_way_s": significant(m, 6), "fit_rel_residual": significant(r, 3),
                      "samples_s": [significant(x, 6) for x in pp[s]]}
                     for s, m, r in zip(sizes, medians, fit.rel_residuals)],
        "fit": {"latency_us": fit.alpha_s * 1e6, "bandwidth_GBps": fit.bandwidth / 1e9},
    }
    if conc:
        size, samples = conc
        t = statistics.median(samples)
        aggregate = d * size / max(t - fit.alpha_s, 1e-9)
        res["concurrent"] = {"senders": d, "bytes_each": size, "slowest_s": significant(t, 6),
                             "samples_s": [significant(x, 6) for x in samples], "uplink_GBps": aggregate / 1e9,
                             "per_sender_GBps": aggregate / d / 1e9}
    # the same d pairs, both ways at once, in rounds: what each direction keeps of the one-way rate
    t1, t2 = statistics.median(one_way), statistics.median(two_way)
    res["duplex"] = {"pairs": d, "bytes_each": size, "one_way_s": significant(t1, 6),
                     "two_way_bytes_each": chunk * rounds, "two_way_round_bytes": chunk, "two_way_s": significant(t2, 6),
                     "two_way_samples_s": [significant(x, 6) for x in two_way],
                     "efficiency": min(1.0, (t1 / size) / (t2 / (chunk * rounds)))}
    return res
