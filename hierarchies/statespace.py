"""The abstract semantics as a dense state space: every state an index, every step an array of index moves.

The abstract state of a request (``hierarchies/abstract.py``) gives each reduced
cell one *status*; a step ``(op, S)`` needs every cell of ``S`` in the op's
source status and moves them to its target status (the table :data:`MOVES`).
Here a state is the mixed-radix number of its cells' statuses (cell 0 least
significant, radix = the number of statuses the collective uses), so the whole
space of ``C`` cells is ``radix ** C`` integers and one step is, for every state
it applies to, the same index offset. That lets the explicit search and its
certificate check (``solver/topn.py``, ``solver/certificate.py``) treat all
states at once with numpy instead of one Python object each.

Validity still depends only on which cells exist: a StateSpace depends on the
collective and the number of reduced cells, nothing else, and is shared by every
placement and cost model (:func:`state_space` caches it).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property, lru_cache

import numpy as np

from p2synth.hierarchies.abstract import AbstractState
from p2synth.hierarchies.program import Collective

MAX_STATES = 1 << 22  # radix ** cells beyond this is too large to hold as arrays


# Arrays of state, step and row indices are 32-bit above this many entries, where they hold most of the search's
# memory (18.7 million rows for 12 cells folded); 64-bit below, where numpy indexes faster with them.
NARROW_ABOVE = 1 << 24


def index_dtype(count: int) -> type:
    """The integer type of an index array of `count` entries (NARROW_ABOVE)."""
    return np.int32 if NARROW_ABOVE < count < 2 ** 31 else np.int64


class Status(IntEnum):
    """What has happened to one reduced cell (docs/semantics.md section 4)."""

    UNTOUCHED = 0
    SUMMED = 1      # summed (and, for all_to_all, exchanged): nothing left to do
    SCATTERED = 2   # summed + scattered: each device holds 1/factor of the data
    ROOTED = 3      # summed + reduced to the root: only the root is active
    TO_EXCHANGE = 4  # all_to_all: chunks still addressed across this cell


# Each status as the abstract state's bits of its cell: (summed X, scattered Y, rooted Z, to exchange P).
STATUS_BITS: dict[Status, tuple[bool, bool, bool, bool]] = {
    Status.UNTOUCHED: (False, False, False, False),
    Status.SUMMED: (True, False, False, False),
    Status.SCATTERED: (True, True, False, False),
    Status.ROOTED: (True, False, True, False),
    Status.TO_EXCHANGE: (True, False, False, True),
}


@dataclass(frozen=True)
class Move:
    """An op's effect on each cell of its slice: it needs status `source` and leaves `target`."""

    op: Collective
    source: Status
    target: Status


MOVES: tuple[Move, ...] = (
    Move(Collective.ALL_REDUCE, Status.UNTOUCHED, Status.SUMMED),
    Move(Collective.REDUCE_SCATTER, Status.UNTOUCHED, Status.SCATTERED),
    Move(Collective.REDUCE, Status.UNTOUCHED, Status.ROOTED),
    Move(Collective.ALL_GATHER, Status.SCATTERED, Status.SUMMED),
    Move(Collective.BROADCAST, Status.ROOTED, Status.SUMMED),
    Move(Collective.ALL_TO_ALL, Status.TO_EXCHANGE, Status.SUMMED),
)


def statuses(collective: Collective) -> tuple[Status, ...]:
    """The statuses a cell of a `collective` request can have, its start status first."""
    if collective is Collective.ALL_GATHER:
        return (Status.SCATTERED, Status.SUMMED)
    if collective is Collective.BROADCAST:
        return (Status.ROOTED, Status.SUMMED)
    if collective is Collective.ALL_TO_ALL:
        return (Status.TO_EXCHANGE, Status.SUMMED)
    return (Status.UNTOUCHED, Status.SUMMED, Status.SCATTERED, Status.ROOTED)


def moves(collective: Collective) -> tuple[Move, ...]:
    """The moves that can occur in a `collective` request (those between its statuses)."""
    own = set(statuses(collective))
    return tuple(m for m in MOVES if m.source in own and m.target in own)


def goal_statuses(collective: Collective) -> frozenset[Status]:
    """The statuses every cell may end in."""
    if collective is Collective.REDUCE_SCATTER:
        return frozenset({Status.SCATTERED})
    if collective is Collective.REDUCE:
        return frozenset({Status.SUMMED, Status.ROOTED})  # the root holds the sum; others may too
    return frozenset({Status.SUMMED})


@dataclass(frozen=True)
class StepMoves:
    """One step ``(op, slice)`` over the whole space: the states it applies to and where each goes."""

    op: Collective
    mask: int              # the slice, bit i for reduced cell i
    sources: np.ndarray    # indices of the states where the step is valid (ascending)
    offset: int            # target index = source index + offset
    targets: np.ndarray    # the state each source goes to: sources + offset


class StateSpace:
    """Every abstract state of a `collective` request with `cells` reduced cells, and every step.

    Index ``i`` has status ``statuses[d]`` at cell ``c`` where ``d`` is digit
    ``c`` of ``i`` in radix ``len(statuses)``.
    """

    def __init__(self, collective: Collective, cells: int):
        if cells < 1:
            raise ValueError("a state space needs at least one reduced cell")
        self.collective = collective
        self.cells = cells
        self.statuses = statuses(collective)
        self.radix = len(self.statuses)
        self.size = self.radix ** cells
        if self.size > MAX_STATES:
            raise ValueError(f"{cells} reduced cells make {self.size:,} abstract states, more than {MAX_STATES:,}")
        index = np.arange(self.size, dtype=np.int64)
        digits = [(index // self.radix ** c) % self.radix for c in range(cells)]
        # status_masks[s][i]: bit c set when cell c of state i has status s
        self._masks = {s: sum(((d == k).astype(np.int64) << c) for c, d in enumerate(digits))
                       for k, s in enumerate(self.statuses)}

    # -- states ------------------------------------------------------------
    def cells_with(self, status: Status) -> np.ndarray:
        """Per state, the mask of cells with `status` (0 where the collective has no such status)."""
        return self._masks.get(status, np.zeros(self.size, dtype=np.int64))

    @cached_property
    def scattered(self) -> np.ndarray:
        """Per state, the mask of scattered cells (Y: the data a device holds shrinks by their factors)."""
        return self.cells_with(Status.SCATTERED)

    @cached_property
    def rooted(self) -> np.ndarray:
        """Per state, the mask of rooted cells (Z: only devices with zero digits on them are active)."""
        return self.cells_with(Status.ROOTED)

    @property
    def start(self) -> int:
        """The start state's index: every cell in the collective's first status (digit 0)."""
        return 0

    @cached_property
    def goal(self) -> np.ndarray:
        """Per state, whether it meets the request's goal."""
        full = (1 << self.cells) - 1
        ok = sum((self.cells_with(s) for s in goal_statuses(self.collective)), np.zeros(self.size, dtype=np.int64))
        return ok == full

    def index(self, state: AbstractState) -> int:
        """The index of an AbstractState of this request."""
        out = 0
        for c in reversed(range(self.cells)):
            out = out * self.radix + self.statuses.index(_status(state, c))
        return out

    def state(self, index: int) -> AbstractState:
        """The AbstractState at `index`."""
        masks = [0, 0, 0, 0]
        for c in range(self.cells):
            bits = STATUS_BITS[self.statuses[(index // self.radix ** c) % self.radix]]
            masks = [m | (b << c) for m, b in zip(masks, bits)]
        return AbstractState(*masks)

    # -- steps -------------------------------------------------------------
    @cached_property
    def steps(self) -> tuple[StepMoves, ...]:
        """Every step ``(op, slice)`` of the request with the states it is valid in, ops in MOVES order."""
        out = []
        for move in moves(self.collective):
            source = self.cells_with(move.source)
            step = self.statuses.index(move.target) - self.statuses.index(move.source)
            for mask in range(1, 1 << self.cells):
                sources = np.flatnonzero(source & mask == mask)
                if sources.size:
                    offset = sum(step * self.radix ** c for c in range(self.cells) if mask >> c & 1)
                    out.append(StepMoves(move.op, mask, sources, offset, sources + offset))
        return tuple(out)


    def case_keys(self, j: int) -> np.ndarray:
        """Per source state of step `j`, what its cost depends on (``solver.stepcosts.step_cases``):
        ``scattered | rooted << C | slice << 2C``."""
        step, C = self.steps[j], self.cells
        return self.scattered[step.sources] | self.rooted[step.sources] << C | step.mask << 2 * C


def _status(state: AbstractState, c: int) -> Status:
    bits = tuple(bool(m >> c & 1) for m in (state.X, state.Y, state.Z, state.P))
    return next(s for s, b in STATUS_BITS.items() if b == bits)


@lru_cache(maxsize=64)
def state_space(collective: Collective, cells: int) -> StateSpace:
    """The (cached) state space of a `collective` request with `cells` reduced cells."""
    return StateSpace(collective, cells)
