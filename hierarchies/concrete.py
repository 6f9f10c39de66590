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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

from p2synth.hierarchies.placement import Cell, Placement
from p2synth.hierarchies.program import Collective, Program, Request, Step


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


class ConcreteChecker:
    """Simulates programs for one request on one placement, device by device."""

    def __init__(self, placement: Placement, request: Request):
        self.placement = placement
        self.request = request
        self.cells: tuple[Cell, ...] = request.reduced_cells(placement)
        self.n = placement.num_devices
        # reduced coordinate of each device = its digits on the reduced cells (the chunk it "owns")
        self.coord = [tuple(placement.digits(r).get(c, 0) for c in self.cells) for r in range(self.n)]
        self.all_chunks = list(product(*(range(placement.factor(c)) for c in self.cells)))
        # each device's reduction group, members in chunk order (member k owns chunk all_chunks[k])
        roots = [placement.root(r, self.cells) for r in range(self.n)]
        groups = {root: placement.group(root, self.cells) for root in set(roots)}
        masks = {root: sum(1 << m for m in members) for root, members in groups.items()}
        self.members = [groups[root] for root in roots]
        self.group_of = [masks[root] for root in roots]
        self._step_groups: dict[tuple[Cell, ...], list[tuple[int, ...]]] = {}

    def root_of_group(self, rank: int) -> int:
        """The reduction-group root of `rank`: the member with reduced coordinate 0."""
        return self.members[rank][0]

    # -- start and goal --------------------------------------------------
    def start(self) -> list[DeviceState]:
        """Initial state of every device for the request's collective."""
        col = self.request.collective
        states = []
        for r in range(self.n):
            if col is Collective.ALL_GATHER:
                states.append(DeviceState(True, {self.coord[r]: 1 << r}))
            elif col is Collective.BROADCAST:
                is_root = not any(self.coord[r])
                states.append(DeviceState(is_root, {k: 1 << r for k in self.all_chunks} if is_root else {}))
            elif col is Collective.ALL_TO_ALL:  # chunk j addressed to the member whose coordinate is j
                states.append(DeviceState(True, {k + self.coord[r]: 1 << r for k in self.all_chunks}))
            else:
                states.append(DeviceState(True, {k: 1 << r for k in self.all_chunks}))
        return states

    def goal_failure(self, states: list[DeviceState]) -> str:
        """Empty if every device meets the request's goal, else why not."""
        col = self.request.collective
        for r, st in enumerate(states):
            group = self.group_of[r]
            root = self.root_of_group(r)
            if col is Collective.ALL_REDUCE:
                want = {k: group for k in self.all_chunks}
            elif col is Collective.REDUCE_SCATTER:
                want = {self.coord[r]: group}
            elif col is Collective.ALL_GATHER:
                want = {k: 1 << owner for k, owner in zip(self.all_chunks, self.members[r])}
            elif col is Collective.BROADCAST:
                want = {k: 1 << root for k in self.all_chunks}
            elif col is Collective.ALL_TO_ALL:  # one chunk from each member, each addressed to r
                want = {self.coord[r] + self.coord[m]: 1 << m for m in self.members[r]}
            elif col is Collective.SEND_RECV:  # the predecessor's whole buffer
                members = self.members[r]
                want = {k: 1 << members[members.index(r) - 1] for k in self.all_chunks}
            else:  # reduce: only the root is held to the goal
                if r != root:
                    continue
                want = {k: group for k in self.all_chunks}
            if not st.active or st.chunks != want:
                return f"device {r} does not hold the {col.value} result"
        return ""

    # -- steps -------------------------------------------------------------
    def groups(self, step: Step) -> list[tuple[int, ...]]:
        """The device groups of `step`, each ordered by the members' digits on the slice."""
        groups = self._step_groups.get(step.slice)
        if groups is None:
            roots = dict.fromkeys(self.placement.root(r, step.slice) for r in range(self.n))
            groups = self._step_groups[step.slice] = [self.placement.group(root, step.slice) for root in roots]
        return groups

    def apply(self, states: list[DeviceState], step: Step) -> None:
        """Apply `step` to every group at once, in place; InvalidStep if a precondition fails."""
        positions = {c: i for i, c in enumerate(self.cells)}
        if any(c not in positions for c in step.slice):
            raise InvalidStep(f"{step.op.value} slice has a cell that is not reduced")
        idx = [positions[c] for c in step.slice]
        if (step.op is Collective.ALL_TO_ALL) != (self.request.collective is Collective.ALL_TO_ALL):
            raise InvalidStep("all_to_all moves addressed chunks: it only applies to, and is the only step of, "
                              "an all_to_all request")
        if (step.op is Collective.SEND_RECV) != (self.request.collective is Collective.SEND_RECV):
            raise InvalidStep("send_recv is a shift: it only applies to, and is the only step of, a send_recv request")
        if step.op is Collective.SEND_RECV and len(step.slice) != len(self.cells):
            raise InvalidStep("send_recv shifts along the whole axis: its slice is every cell of it")
        for members in self.groups(step):
            self._apply_group(states, step, members, idx)

    def _apply_group(self, states: list[DeviceState], step: Step, members: tuple[int, ...], idx: list[int]) -> None:
        op = step.op
        sts = [states[m] for m in members]
        if not any(s.active for s in sts):
            return
        root = members[0]  # members are sorted by slice digits: the first has all zeros
        if op is Collective.BROADCAST:
            if not states[root].active or any(states[m].active for m in members[1:]):
                raise InvalidStep("broadcast needs an active root and inactive members")
            for m in members[1:]:
                states[m] = DeviceState(True, dict(states[root].chunks))
            return
        if not all(s.active for s in sts):
            raise InvalidStep(f"{op.value} on a group with inactive members")
        if op is Collective.ALL_TO_ALL:
            self._exchange(states, members, idx)
            return
        if op is Collective.SEND_RECV:  # member i's buffer to member i + 1 (mod the group size)
            if any(s.chunks != {k: 1 << m for k in self.all_chunks} for m, s in zip(members, sts)):
                raise InvalidStep("send_recv sends each member's own input, once")
            held = [dict(s.chunks) for s in sts]
            for i, m in enumerate(members):
                states[m] = DeviceState(True, held[i - 1])
            return
        if op is Collective.ALL_GATHER:
            keys = [set(s.chunks) for s in sts]
            if len({len(k) for k in keys}) != 1 or sum(len(k) for k in keys) != len(set().union(*keys)):
                raise InvalidStep("all_gather needs disjoint, equally large chunk sets")
            union = {k: v for s in sts for k, v in s.chunks.items()}
            for m in members:
                states[m] = DeviceState(True, dict(union))
            return
        # all_reduce, reduce_scatter, reduce: same chunk set, disjoint contributions
        chunk_set = set(sts[0].chunks)
        if any(set(s.chunks) != chunk_set for s in sts):
            raise InvalidStep(f"{op.value} needs the same chunk set on every member")
        summed = {}
        for k in chunk_set:
            total = 0
            for s in sts:
                if total & s.chunks[k]:
                    raise InvalidStep(f"{op.value} would count a contribution twice")
                total |= s.chunks[k]
            summed[k] = total
        if op is Collective.ALL_REDUCE:
            for m in members:
                states[m] = DeviceState(True, dict(summed))
        elif op is Collective.REDUCE:
            states[root] = DeviceState(True, summed)
            for m in members[1:]:
                states[m] = DeviceState(False, {})
        else:  # reduce_scatter: member m keeps the chunks whose slice digits equal its own
            by_part: dict[tuple[int, ...], dict] = {}
            for k, v in summed.items():
                by_part.setdefault(tuple(k[i] for i in idx), {})[k] = v
            sizes = {len(v) for v in by_part.values()}
            parts = math.prod(self.placement.factor(self.cells[i]) for i in idx)
            if len(by_part) != parts or len(sizes) != 1:
                raise InvalidStep("reduce_scatter needs a chunk set that splits evenly over the group")
            for m in members:
                mine = tuple(self.coord[m][i] for i in idx)
                states[m] = DeviceState(True, by_part[mine])

    def _exchange(self, states: list[DeviceState], members: tuple[int, ...], idx: list[int]) -> None:
        """all_to_all on one group: member m gets every chunk whose destination digits on the slice are m's.

        Every member must send an equal, non-empty share to every member
        (itself included): a cell already exchanged leaves nothing to send.
        """
        digits = [tuple(self.coord[m][i] for i in idx) for m in members]
        shares = []
        for m in members:
            parts: dict[tuple[int, ...], dict] = {d: {} for d in digits}
            for k, v in states[m].chunks.items():  # a chunk's destination digits on the slice pick its receiver
                parts[tuple(k[i] for i in idx)][k] = v
            if len({len(p) for p in parts.values()}) != 1 or not parts[digits[0]]:
                raise InvalidStep("all_to_all needs an equal, non-empty share for every member")
            shares.append(parts)
        for m, d in zip(members, digits):
            received: dict[tuple[int, ...], int] = {}
            for parts in shares:
                received.update(parts[d])
            states[m] = DeviceState(True, received)

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
