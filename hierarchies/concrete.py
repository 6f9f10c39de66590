"""The concrete per-device semantics (docs/semantics.md section 3): the reference checker.

It simulates every device: an ``active`` flag and a map chunk -> contribution
set (which devices' inputs are summed into that chunk, as a bitmask over
ranks). For an all_to_all request a chunk is addressed instead: its id is the
destination's reduced coordinate followed by the source's, and its value the
source's rank bit; chunks are moved, never summed. For a send_recv request
(a shift) every device starts with its own contribution in every chunk and
must end with its predecessor's on the axis (member ``i - 1 mod n`` of its
group, members in chunk order), chunk for chunk. It knows nothing of the
abstract cell statuses; it is the independent check every reported program
must pass.

The devices are held as one matrix (see `Devices`): row = device, column =
chunk, entry = contribution bitmask split into 32-bit words (0 = chunk not
held), so a step runs on every group of its slice at once with numpy. Words
keep 32 bits in 64-bit integers so that summing a group's contributions never
overflows: contributions are disjoint iff their sum equals their bitwise OR.
An addressed (all_to_all) chunk's value is one source, held as its rank + 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

import numpy as np

from p2synth.hierarchies.placement import Cell, Placement
from p2synth.hierarchies.program import Collective, Program, Request, Step

WORD_BITS = 32  # bits of a contribution bitmask per matrix word (the rest stay zero: sums cannot overflow)


@dataclass(frozen=True)
class CheckResult:
    """Outcome of running a program on every device: `ok` iff valid and the goal is reached."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


@dataclass
class DeviceState:
    """What one device holds: active or not, and chunk id -> contributor bitmask."""

    active: bool
    chunks: dict[tuple[int, ...], int]


class InvalidStep(Exception):
    """A step whose preconditions fail on some group."""


class Devices:
    """Every device's state: `active` (devices,) and `held` (devices, chunks, words) contribution bitmasks.

    Indexing gives one device's `DeviceState` (a copy: chunk key -> rank
    bitmask, the chunks it holds); `ConcreteChecker.apply` updates in place.
    """

    def __init__(self, checker: ConcreteChecker, active: np.ndarray, held: np.ndarray):
        self.checker = checker
        self.active = active
        self.held = held

    def __len__(self) -> int:
        """Number of devices."""
        return len(self.active)

    def __getitem__(self, rank: int) -> DeviceState:
        keys, decode = self.checker.chunk_keys, self.checker.decode
        row = self.held[rank]
        chunks = {keys[k]: decode(row[k]) for k in np.flatnonzero(row.any(axis=1))}
        return DeviceState(bool(self.active[rank]), chunks)

    def __iter__(self):
        """Every device's `DeviceState`, by rank."""
        return (self[r] for r in range(len(self)))


def mask_to_words(mask: int, words: int) -> np.ndarray:
    """A rank bitmask as `words` little-endian words of WORD_BITS bits."""
    low = (1 << WORD_BITS) - 1
    return np.array([(mask >> (WORD_BITS * i)) & low for i in range(words)], dtype=np.uint64)


def words_to_mask(words: np.ndarray) -> int:
    """The rank bitmask of little-endian words of WORD_BITS bits."""
    return sum(int(w) << (WORD_BITS * i) for i, w in enumerate(words))


def fail_first(checks: list[tuple[np.ndarray, str]]) -> None:
    """InvalidStep for the first group (in group order) failing a check, with its first failing check's message.

    Each check is (per-group failure mask, message), in the order a group is
    checked: the message is the one a group-by-group run would raise.
    """
    bad = np.logical_or.reduce([mask for mask, _ in checks])
    if bad.any():
        first = int(np.argmax(bad))
        raise InvalidStep(next(message for mask, message in checks if mask[first]))


def mixed_radix(digits: np.ndarray, radices: list[int]) -> np.ndarray:
    """Rows of `digits` read as mixed-radix numbers, the first column most significant."""
    out = np.zeros(len(digits), dtype=np.int64)
    for col, radix in enumerate(radices):
        out = out * radix + digits[:, col]
    return out


@dataclass(frozen=True)
class SlicePlan:
    """What a step needs of its slice: the groups and which chunks each member's slice digits pick.

    `groups` (groups, members) holds ranks, members ordered by their digits on
    the slice; `member_part` the same shape, each member's slice digits as one
    number; `chunk_part` (chunks,) the destination chunk's slice digits as one
    number; `parts` the number of distinct slice digits.
    """

    groups: np.ndarray
    member_part: np.ndarray
    chunk_part: np.ndarray
    parts: int

    def mine(self, member_part: np.ndarray) -> np.ndarray:
        """(groups, members, chunks): whether a chunk's slice digits are its member's (`member_part` of the groups)."""
        return member_part[:, :, None] == self.chunk_part[None, None, :]

    def shares(self, present: np.ndarray) -> np.ndarray:
        """Per row of `present` (..., chunks): how many present chunks fall in each part, (..., parts)."""
        order = np.argsort(self.chunk_part, kind="stable")  # every part has as many chunk ids as the others
        by_part = present[..., order].reshape(present.shape[:-1] + (self.parts, -1))
        return by_part.sum(axis=-1, dtype=np.int64)


class ConcreteChecker:
    """Simulates programs for one request on one placement, device by device."""

    def __init__(self, placement: Placement, request: Request):
        self.placement = placement
        self.request = request
        self.cells: tuple[Cell, ...] = request.reduced_cells(placement)
        self.n = placement.num_devices
        # every device's digit on every cell of the placement (the bijection rank <-> digits)
        self.cell_digits = np.array([[placement.digits(r).get(c, 0) for c in placement.cells] for r in range(self.n)],
                                    dtype=np.int64).reshape(self.n, len(placement.cells))
        # reduced coordinate of each device = its digits on the reduced cells (the chunk it "owns")
        column = {c: i for i, c in enumerate(placement.cells)}
        self.coord = [tuple(row) for row in self.cell_digits[:, [column[c] for c in self.cells]].tolist()]
        self.all_chunks = list(product(*(range(placement.factor(c)) for c in self.cells)))
        # each device's reduction group, members in chunk order (member k owns chunk all_chunks[k])
        self.members: list[tuple[int, ...]] = [()] * self.n
        self.group_of = [0] * self.n
        for members in self.grid(self.cells).tolist():
            mask = sum(1 << m for m in members)
            for m in members:
                self.members[m], self.group_of[m] = tuple(members), mask
        self._step_groups: dict[tuple[Cell, ...], list[tuple[int, ...]]] = {}
        self._chunk_layout()
        self._plans: dict[Step, SlicePlan | str] = {}
        self._goal: tuple[np.ndarray, np.ndarray] | None = None

    def _chunk_layout(self) -> None:
        """Number the chunk ids (matrix columns) and each device's own chunk."""
        owned = {k: i for i, k in enumerate(self.all_chunks)}
        self.own_chunk = np.array([owned[c] for c in self.coord], dtype=np.int64)
        addressed = self.request.collective is Collective.ALL_TO_ALL
        self.chunk_keys = [d + s for d in self.all_chunks for s in self.all_chunks] if addressed else self.all_chunks
        # a chunk's reduced coordinate: its destination's for an addressed chunk
        dest = np.array(self.all_chunks, dtype=np.int64).reshape(len(self.all_chunks), len(self.cells))
        self.chunk_digits = np.repeat(dest, len(self.all_chunks), axis=0) if addressed else dest
        self.coord_digits = np.array(self.coord, dtype=np.int64).reshape(self.n, len(self.cells))
        # an addressed chunk's value is one source's bit, never summed: held as that rank + 1 (a small matrix)
        self.words = 1 if addressed else max(1, -(-self.n // WORD_BITS))
        self.dtype = np.uint32 if addressed else np.uint64
        self.rank_bits = (np.arange(1, self.n + 1, dtype=self.dtype)[:, None] if addressed
                          else np.stack([mask_to_words(1 << r, self.words) for r in range(self.n)]))

    def encode(self, mask: int) -> np.ndarray:
        """A contribution bitmask as a matrix entry (ValueError for an addressed chunk with several sources)."""
        if self.dtype is np.uint64:
            return mask_to_words(mask, self.words)
        if mask & (mask - 1):
            raise ValueError("an addressed chunk comes from one source")
        return np.array([mask.bit_length()], dtype=self.dtype)

    def decode(self, entry: np.ndarray) -> int:
        """The contribution bitmask of a matrix entry."""
        return words_to_mask(entry) if self.dtype is np.uint64 else 1 << (int(entry[0]) - 1)

    def root_of_group(self, rank: int) -> int:
        """The reduction-group root of `rank`: the member with reduced coordinate 0."""
        return self.members[rank][0]

    # -- start and goal --------------------------------------------------
    def start(self) -> Devices:
        """Initial state of every device for the request's collective."""
        col = self.request.collective
        ranks = np.arange(self.n)
        active = np.ones(self.n, dtype=bool)
        held = np.zeros((self.n, len(self.chunk_keys), self.words), dtype=self.dtype)
        if col is Collective.ALL_GATHER:
            held[ranks, self.own_chunk] = self.rank_bits
        elif col is Collective.BROADCAST:
            active = ~self.coord_digits.any(axis=1)
            held[active] = self.rank_bits[active][:, None, :]
        elif col is Collective.ALL_TO_ALL:  # chunk j addressed to the member whose coordinate is j
            ids = np.arange(len(self.all_chunks))[None, :] * len(self.all_chunks) + self.own_chunk[:, None]
            held[ranks[:, None], ids] = self.rank_bits[:, None, :]
        else:
            held[:] = self.rank_bits[:, None, :]
        return Devices(self, active, held)

    def _goal_matrix(self) -> tuple[np.ndarray, np.ndarray]:
        """(judged, want): which devices the goal constrains and what each must hold (0 = no chunk)."""
        col = self.request.collective
        judged = np.ones(self.n, dtype=bool)
        want = np.zeros((self.n, len(self.chunk_keys), self.words), dtype=self.dtype)
        chunk_id = {k: i for i, k in enumerate(self.chunk_keys)}
        for r in range(self.n):
            group = self.encode(self.group_of[r]) if col is not Collective.ALL_TO_ALL else None
            members = self.members[r]
            if col in (Collective.ALL_REDUCE, Collective.REDUCE):
                want[r] = group  # reduce: only the root is held to the goal
                judged[r] = col is Collective.ALL_REDUCE or r == self.root_of_group(r)
            elif col is Collective.REDUCE_SCATTER:
                want[r, chunk_id[self.coord[r]]] = group
            elif col is Collective.ALL_GATHER:
                want[r, [chunk_id[k] for k in self.all_chunks]] = self.rank_bits[list(members)]
            elif col is Collective.BROADCAST:
                want[r] = self.rank_bits[self.root_of_group(r)]
            elif col is Collective.ALL_TO_ALL:  # one chunk from each member, each addressed to r
                want[r, [chunk_id[self.coord[r] + self.coord[m]] for m in members]] = self.rank_bits[list(members)]
            else:  # send_recv: the predecessor's whole buffer
                want[r] = self.rank_bits[members[members.index(r) - 1]]
        return judged, want

    def goal_failure(self, states: Devices | list[DeviceState]) -> str:
        """Empty if every device meets the request's goal, else why not."""
        if isinstance(states, list):
            states = self.devices(states)
        if self._goal is None:
            self._goal = self._goal_matrix()
        judged, want = self._goal
        wrong = judged & (~states.active | (states.held != want).any(axis=(1, 2)))
        if wrong.any():
            return f"device {int(np.argmax(wrong))} does not hold the {self.request.collective.value} result"
        return ""

    def devices(self, states: list[DeviceState]) -> Devices:
        """The matrix form of a list of device states."""
        chunk_id = {k: i for i, k in enumerate(self.chunk_keys)}
        held = np.zeros((self.n, len(self.chunk_keys), self.words), dtype=self.dtype)
        for r, st in enumerate(states):
            for k, v in st.chunks.items():
                held[r, chunk_id[k]] = self.encode(v)
        return Devices(self, np.array([st.active for st in states], dtype=bool), held)

    # -- steps -------------------------------------------------------------
    def grid(self, cells: tuple[Cell, ...]) -> np.ndarray:
        """The groups under `cells` as rows of ranks: devices equal off `cells`, ordered by their digits on `cells`.

        Members are ordered by their digits on `cells` read as a mixed-radix
        number (the first cell most significant); groups by their first rank.
        """
        columns = {c: i for i, c in enumerate(self.placement.cells)}
        others = [c for c in self.placement.cells if c not in cells]
        off = mixed_radix(self.cell_digits[:, [columns[c] for c in others]], [self.placement.factor(c) for c in others])
        on = mixed_radix(self.cell_digits[:, [columns[c] for c in cells]], [self.placement.factor(c) for c in cells])
        rows = np.lexsort((on, off)).reshape(-1, self.placement.group_size(cells))
        return rows[np.argsort(rows.min(axis=1), kind="stable")]

    def groups(self, step: Step) -> list[tuple[int, ...]]:
        """The device groups of `step`, each ordered by the members' digits on the slice."""
        groups = self._step_groups.get(step.slice)
        if groups is None:
            groups = self._step_groups[step.slice] = [tuple(g) for g in self.grid(step.slice).tolist()]
        return groups

    def plan(self, step: Step) -> SlicePlan | str:
        """The slice plan of `step`, or why the step is invalid whatever the state (cached per step)."""
        plan = self._plans.get(step)
        if plan is None:
            plan = self._plans[step] = self._make_plan(step)
        return plan

    def _make_plan(self, step: Step) -> SlicePlan | str:
        positions = {c: i for i, c in enumerate(self.cells)}
        if any(c not in positions for c in step.slice):
            return f"{step.op.value} slice has a cell that is not reduced"
        if (step.op is Collective.ALL_TO_ALL) != (self.request.collective is Collective.ALL_TO_ALL):
            return ("all_to_all moves addressed chunks: it only applies to, and is the only step of, "
                    "an all_to_all request")
        if (step.op is Collective.SEND_RECV) != (self.request.collective is Collective.SEND_RECV):
            return "send_recv is a shift: it only applies to, and is the only step of, a send_recv request"
        if step.op is Collective.SEND_RECV and len(step.slice) != len(self.cells):
            return "send_recv shifts along the whole axis: its slice is every cell of it"
        idx = [positions[c] for c in step.slice]
        radices = [self.placement.factor(self.cells[i]) for i in idx]
        groups = self.grid(step.slice)
        member_part = mixed_radix(self.coord_digits[:, idx], radices)[groups]
        return SlicePlan(groups, member_part, mixed_radix(self.chunk_digits[:, idx], radices), math.prod(radices))

    def apply(self, states: Devices | list[DeviceState], step: Step) -> None:
        """Apply `step` to every group at once, in place; InvalidStep if a precondition fails.

        The preconditions are checked on every group before any changes: an
        invalid step leaves `states` as it was.
        """
        if isinstance(states, list):  # the per-device form: convert, apply, convert back
            matrix = self.devices(states)
            self.apply(matrix, step)
            states[:] = list(matrix)
            return
        plan = self.plan(step)
        if isinstance(plan, str):
            raise InvalidStep(plan)
        live = states.active[plan.groups].any(axis=1)  # a group with no active member does nothing
        groups, member_part = (plan.groups, plan.member_part) if live.all() else (plan.groups[live], plan.member_part[live])
        if len(groups):
            self._apply_groups(states, step.op, plan, groups, member_part)

    def _apply_groups(self, states: Devices, op: Collective, plan: SlicePlan,
                      groups: np.ndarray, member_part: np.ndarray) -> None:
        active = states.active[groups]
        if op is Collective.BROADCAST:
            fail_first([(~active[:, 0] | active[:, 1:].any(axis=1), "broadcast needs an active root and inactive members")])
            states.held[groups[:, 1:]] = states.held[groups[:, :1]]
            states.active[groups] = True
            return
        inactive = (~active.all(axis=1), f"{op.value} on a group with inactive members")
        held = states.held[groups]  # (groups, members, chunks, words)
        if op is Collective.SEND_RECV:  # member i's buffer to member i + 1 (mod the group size)
            resent = (held != self.rank_bits[groups][:, :, None, :]).any(axis=(1, 2, 3))
            fail_first([inactive, (resent, "send_recv sends each member's own input, once")])
            states.held[groups] = np.roll(held, 1, axis=1)
            return
        present = held.any(axis=3)  # (groups, members, chunks)
        if op is Collective.ALL_TO_ALL:
            self._exchange(states, plan, groups, member_part, held, present, inactive)
        elif op is Collective.ALL_GATHER:
            counts = present.sum(axis=2)
            uneven = (counts != counts[:, :1]).any(axis=1) | (counts.sum(axis=1) != present.any(axis=1).sum(axis=1))
            fail_first([inactive, (uneven, "all_gather needs disjoint, equally large chunk sets")])
            states.held[groups] = np.bitwise_or.reduce(held, axis=1)[:, None]
        else:
            self._reduce(states, op, plan, groups, member_part, held, present, inactive)

    def combine(self, held: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The members' contributions summed, (groups, chunks, words), and per group whether some contribution would
        be counted twice."""
        summed = np.bitwise_or.reduce(held, axis=1)
        # 32-bit words: the sum cannot overflow, and equals the OR iff no bit is added twice
        return summed, (held.sum(axis=1, dtype=np.uint64) != summed).any(axis=(1, 2))

    def _reduce(self, states: Devices, op: Collective, plan: SlicePlan, groups: np.ndarray, member_part: np.ndarray,
                held: np.ndarray, present: np.ndarray, inactive: tuple[np.ndarray, str]) -> None:
        """all_reduce, reduce_scatter, reduce: same chunk set, disjoint contributions."""
        summed, twice = self.combine(held)  # (groups, chunks, words)
        checks = [inactive,
                  ((present != present[:, :1]).any(axis=(1, 2)), f"{op.value} needs the same chunk set on every member"),
                  (twice, f"{op.value} would count a contribution twice")]
        if op is Collective.REDUCE_SCATTER:  # every member's slice digits pick an equal, non-empty share
            shares = plan.shares(summed.any(axis=2))  # (groups, parts)
            uneven = (shares == 0).any(axis=1) | (shares != shares[:, :1]).any(axis=1)
            checks.append((uneven, "reduce_scatter needs a chunk set that splits evenly over the group"))
        fail_first(checks)
        if op is Collective.ALL_REDUCE:
            states.held[groups] = summed[:, None]
        elif op is Collective.REDUCE:
            states.held[groups[:, 0]] = summed
            states.held[groups[:, 1:]] = 0
            states.active[groups[:, 1:]] = False
        else:  # reduce_scatter: member m keeps the chunks whose slice digits equal its own
            states.held[groups] = np.where(plan.mine(member_part)[..., None], summed[:, None], 0)

    def _exchange(self, states: Devices, plan: SlicePlan, groups: np.ndarray, member_part: np.ndarray,
                  held: np.ndarray, present: np.ndarray, inactive: tuple[np.ndarray, str]) -> None:
        """all_to_all on the groups: member m gets every chunk whose destination digits on the slice are m's.

        Every member must send an equal, non-empty share to every member
        (itself included): a cell already exchanged leaves nothing to send.
        """
        shares = plan.shares(present)  # (groups, members, parts)
        first = np.take_along_axis(shares, np.broadcast_to(member_part[:, None, :1], shares.shape[:2] + (1,)), axis=2)
        unequal = (shares != shares[:, :, :1]).any(axis=(1, 2)) | (first == 0).any(axis=(1, 2))
        fail_first([inactive, (unequal, "all_to_all needs an equal, non-empty share for every member")])
        received = np.bitwise_or.reduce(held, axis=1)  # a chunk id is held by one member of the group
        states.held[groups] = np.where(plan.mine(member_part)[..., None], received[:, None], 0)

    def check(self, program: Program) -> CheckResult:
        """Run `program` on every device; ok iff every step is valid and the goal is reached."""
        states = self.start()
        for i, step in enumerate(program.steps):
            try:
                self.apply(states, step)
            except InvalidStep as e:
                return CheckResult(False, f"step {i + 1} {step.op.value}: {e}")
        failure = self.goal_failure(states)
        return CheckResult(not failure, failure)


def check_program(placement: Placement, request: Request, program: Program) -> CheckResult:
    """Check `program` for `request` on `placement` with the concrete per-device semantics."""
    return ConcreteChecker(placement, request).check(program)
