"""The abstract cell-status semantics (docs/semantics.md section 4) and the explicit search over it.

The state of the whole system is four sets of reduced cells, kept as bitmasks
over the reduced-cell indices: ``X`` summed, ``Y`` scattered, ``Z`` rooted
(only devices with zero digits on ``Z`` are active), ``P`` still to exchange
(all_to_all only). Each cell of a reducing request has one of four statuses:
untouched, summed, summed+scattered, summed+rooted. A cell of an all_to_all
request is either still to exchange or *exchanged*; such a request starts with
every cell to exchange and nothing to sum (``X`` full, like all_gather), so no
reducing step applies to it, and a reducing request never has a cell to
exchange, so no all_to_all step applies to it. Validity depends only on which
cells exist, never on their sizes.

A send_recv request (a shift along one axis) starts with every cell summed
(nothing to sum, as for all_gather) and *still to shift* (``R``), and its one
step shifts them all at once: ``SR`` is valid only over exactly the cells
still to shift, which only a send_recv request has, and no other step applies
to such a request, so its one program is its default. It is no step op
(:data:`OPS`): the enumerations and the searches never offer it.

Besides the semantics this module enumerates every program within a bound and
counts them exactly; the explicit cost searches the Z3 encoding is held to
live in ``solver/topn.py`` and ``solver/pipelined.py``, the tests' Dijkstra
oracle in ``tests/oracles.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import comb
from typing import Iterator

from p2synth.hierarchies.program import STEP_OPS, Collective

OPS: tuple[Collective, ...] = STEP_OPS  # send_recv is no step op: its only program is its default


@dataclass(frozen=True, order=True)
class AbstractState:
    """Bitmasks over reduced cells: X summed, Y scattered, Z rooted, P still to exchange (all_to_all), R still to
    shift (send_recv)."""

    X: int
    Y: int
    Z: int
    P: int = 0
    R: int = 0


def start_state(collective: Collective, num_cells: int) -> AbstractState:
    """The abstract start of a request with `num_cells` reduced cells."""
    full = (1 << num_cells) - 1
    if collective is Collective.ALL_GATHER:
        return AbstractState(full, full, 0)  # each device owns one chunk: nothing left to sum
    if collective is Collective.BROADCAST:
        return AbstractState(full, 0, full)  # only the root is active and holds everything
    if collective is Collective.ALL_TO_ALL:
        return AbstractState(full, 0, 0, full)  # no cell exchanged yet, nothing to sum
    if collective is Collective.SEND_RECV:
        return AbstractState(full, 0, 0, 0, full)  # nothing shifted yet, nothing to sum
    return AbstractState(0, 0, 0)


def is_goal(collective: Collective, state: AbstractState, num_cells: int) -> bool:
    """Whether `state` meets the goal of `collective`."""
    full = (1 << num_cells) - 1
    if collective is Collective.REDUCE_SCATTER:
        return state == AbstractState(full, full, 0)
    if collective is Collective.REDUCE:
        return state.X == full and state.Y == 0
    return state == AbstractState(full, 0, 0)  # all_reduce, all_gather, broadcast, all_to_all, send_recv (all moved)


def apply(state: AbstractState, op: Collective, S: int) -> AbstractState | None:
    """The state after step ``(op, S)``, or None if the step is invalid there."""
    if S == 0:
        return None
    X, Y, Z, P = state.X, state.Y, state.Z, state.P
    if op is Collective.SEND_RECV:  # a shift moves every cell still to shift at once
        return AbstractState(X, Y, Z, P) if S == state.R else None
    if state.R:
        return None  # a send_recv request's one step is its shift
    untouched = S & X == 0
    if op is Collective.ALL_REDUCE:
        return AbstractState(X | S, Y, Z, P) if untouched else None
    if op is Collective.REDUCE_SCATTER:
        return AbstractState(X | S, Y | S, Z, P) if untouched else None
    if op is Collective.REDUCE:
        return AbstractState(X | S, Y, Z | S, P) if untouched else None
    if op is Collective.ALL_GATHER:
        return AbstractState(X, Y & ~S, Z, P) if S & ~Y == 0 else None
    if op is Collective.ALL_TO_ALL:  # every cell of S not yet exchanged; leaves them exchanged
        return AbstractState(X, Y, Z, P & ~S) if S & ~P == 0 else None
    # broadcast
    return AbstractState(X, Y, Z & ~S, P) if S & ~Z == 0 else None


def run(collective: Collective, num_cells: int, steps: list[tuple[Collective, int]]) -> AbstractState | None:
    """Final abstract state of a program given as (op, slice mask) pairs; None if a step is invalid."""
    state = start_state(collective, num_cells)
    for op, S in steps:
        state = apply(state, op, S)
        if state is None:
            return None
    return state


def successors(state: AbstractState, num_cells: int) -> Iterator[tuple[Collective, int, AbstractState]]:
    """Every valid step from `state` with the state it leads to."""
    full = (1 << num_cells) - 1
    eligible = {
        Collective.ALL_REDUCE: full & ~state.X,
        Collective.REDUCE_SCATTER: full & ~state.X,
        Collective.REDUCE: full & ~state.X,
        Collective.ALL_GATHER: state.Y,
        Collective.BROADCAST: state.Z,
        Collective.ALL_TO_ALL: state.P,
    }
    for op in OPS:
        mask = eligible[op]
        S = mask
        while S:  # every non-empty subset of `mask`
            nxt = apply(state, op, S)
            assert nxt is not None
            yield op, S, nxt
            S = (S - 1) & mask


def enumerate_programs(collective: Collective, num_cells: int, max_steps: int) -> Iterator[tuple[tuple[Collective, int], ...]]:
    """Every valid program of at most `max_steps` steps, as tuples of (op, slice mask)."""
    if collective is Collective.SEND_RECV:  # its one program: the shift over every cell
        if max_steps >= 1 and num_cells >= 1:
            yield ((Collective.SEND_RECV, (1 << num_cells) - 1),)
        return

    def walk(state: AbstractState, prefix: tuple, depth: int) -> Iterator[tuple]:
        if is_goal(collective, state, num_cells):
            yield prefix
        if depth == max_steps:
            return
        for op, S, nxt in successors(state, num_cells):
            yield from walk(nxt, prefix + ((op, S),), depth + 1)

    yield from walk(start_state(collective, num_cells), (), 0)


def count_programs(collective: Collective, num_cells: int, max_steps: int) -> int:
    """Exact number of valid programs of 1..`max_steps` steps.

    Cells are interchangeable, so the state is folded to how many cells have
    each status; a step picks j cells of the eligible status (C(n, j) ways).
    """
    return _count(collective, num_cells, max_steps)


# status indices: untouched, summed, summed+scattered, summed+rooted, still to
# exchange (all_to_all; an exchanged cell is "summed": nothing left to do).
_U, _S, _SS, _SR, _P = range(5)


@lru_cache(maxsize=None)
def _count(collective: Collective, C: int, K: int) -> int:
    if collective is Collective.SEND_RECV:
        return int(C >= 1 and K >= 1)  # its one program (see enumerate_programs)
    start = {
        Collective.ALL_GATHER: (0, 0, C, 0, 0),
        Collective.BROADCAST: (0, 0, 0, C, 0),
        Collective.ALL_TO_ALL: (0, 0, 0, 0, C),
    }.get(collective, (C, 0, 0, 0, 0))

    def goal(n: tuple[int, ...]) -> bool:
        if collective is Collective.REDUCE_SCATTER:
            return n == (0, 0, C, 0, 0)
        if collective is Collective.REDUCE:
            return n[_U] == 0 and n[_SS] == 0
        return n == (0, C, 0, 0, 0)

    moves = [(_U, _S), (_U, _SS), (_U, _SR), (_SS, _S), (_SR, _S), (_P, _S)]  # AR, RS, R, AG, B, A2A

    layer = {start: 1}
    total = 0
    for _ in range(K):
        nxt: dict[tuple, int] = {}
        for n, ways in layer.items():
            for src, dst in moves:
                for j in range(1, n[src] + 1):
                    m = list(n)
                    m[src] -= j
                    m[dst] += j
                    key = tuple(m)
                    nxt[key] = nxt.get(key, 0) + ways * comb(n[src], j)
        layer = nxt
        total += sum(w for n, w in layer.items() if goal(n))
    return total  # the empty program is not counted: a program has at least one step
