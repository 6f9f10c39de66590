"""Bounded sketches of collective programs over the abstract cell-status state.

A sketch has `K` step slots. Slot ``i`` holds an op code ``op_i`` (one of the
five collectives, or NONE for an unused trailing slot) and a slice ``S_i``, a
bit-vector over the reduced cells. The abstract state ``(X, Y, Z)`` (summed,
scattered, rooted) is threaded through the slots and the request's goal is
asserted at the end (DESIGN.md sections 4 and 5). Every model decodes into one
program; distinct models are distinct programs.

The encoding only knows cell indices; the caller maps them to cells.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import z3

from encodings.errors import SolverTimeout
from encodings.z3algebra import Z3Algebra
from hierarchies.program import Collective

OP_CODES: dict[Collective, int] = {op: i for i, op in enumerate(Collective)}
NONE_CODE = len(OP_CODES)
_DECODE = {code: op for op, code in OP_CODES.items()}

RawProgram = tuple[tuple[Collective, int], ...]
StepCost = Callable[[Z3Algebra, Any, Sequence[Any], Sequence[Any], Sequence[Any]], Any]


@dataclass(frozen=True)
class Ranked:
    """A program found by the optimiser, its cost under the model, and whether it is proved cheapest."""

    program: RawProgram
    cost: float
    proved: bool
    exact: Any = field(default=None, compare=False, repr=False)  # the cost as Z3's exact rational


class Deadline:
    """A wall-clock budget shared by a sequence of Z3 calls."""

    def __init__(self, seconds: float | None):
        self.end = None if seconds is None else time.monotonic() + seconds

    def check(self, solver: z3.Solver | z3.Optimize, what: str) -> z3.CheckSatResult:
        """`solver.check()` within the remaining budget; SolverTimeout when it runs out."""
        if self.end is not None:
            left = self.end - time.monotonic()
            if left <= 0:
                raise SolverTimeout(what)
            solver.set("timeout", max(1, int(left * 1000)))
        result = solver.check()
        if result == z3.unknown:
            raise SolverTimeout(what)
        return result


class ProgramSketch:
    """The Z3 encoding of every program of at most `max_steps` steps for one request.

    `num_cells` reduced cells, `collective` the requested collective. With a
    `step_cost` (a cost model's ``step_time``), ``total`` is the program's cost
    as a Z3 Real term.
    """

    def __init__(self, collective: Collective, num_cells: int, max_steps: int, step_cost: StepCost | None = None):
        if num_cells < 1 or max_steps < 1:
            raise ValueError("a sketch needs at least one reduced cell and one step")
        self.collective = collective
        self.C = num_cells
        self.K = max_steps
        self.solver = z3.Solver()
        self.ops = [z3.BitVec(f"op_{i}", 3) for i in range(max_steps)]
        self.slices = [z3.BitVec(f"slice_{i}", num_cells) for i in range(max_steps)]
        self.X = [z3.BitVec(f"summed_{i}", num_cells) for i in range(max_steps + 1)]
        self.Y = [z3.BitVec(f"scattered_{i}", num_cells) for i in range(max_steps + 1)]
        self.Z = [z3.BitVec(f"rooted_{i}", num_cells) for i in range(max_steps + 1)]
        self._encode()
        self.total = None
        if step_cost is not None:
            self.total = z3.Real("total_cost")
            self.solver.add(self.total == self._cost(step_cost))

    # -- constraints -------------------------------------------------------
    def _bv(self, value: int) -> z3.BitVecRef:
        return z3.BitVecVal(value, self.C)

    def _encode(self) -> None:
        full, zero = self._bv((1 << self.C) - 1), self._bv(0)
        add = self.solver.add
        # Start state of the requested collective
        start = {
            Collective.ALL_GATHER: (full, full, zero),
            Collective.BROADCAST: (full, zero, full),
        }.get(self.collective, (zero, zero, zero))
        add(self.X[0] == start[0], self.Y[0] == start[1], self.Z[0] == start[2])
        # Goal at the end
        X, Y, Z = self.X[-1], self.Y[-1], self.Z[-1]
        if self.collective is Collective.REDUCE_SCATTER:
            add(X == full, Y == full, Z == zero)
        elif self.collective is Collective.REDUCE:
            add(X == full, Y == zero)
        else:
            add(X == full, Y == zero, Z == zero)
        # At least one step; unused slots only at the end
        add(self.ops[0] != NONE_CODE)
        for i in range(self.K):
            add(z3.ULE(self.ops[i], NONE_CODE))
            if i + 1 < self.K:
                add(z3.Implies(self.ops[i] == NONE_CODE, self.ops[i + 1] == NONE_CODE))
            add(self._transition(i))

    def _transition(self, i: int) -> z3.BoolRef:
        """Step slot `i`: preconditions on (X, Y, Z)_i and the state (X, Y, Z)_{i+1}."""
        op, S = self.ops[i], self.slices[i]
        X, Y, Z = self.X[i], self.Y[i], self.Z[i]
        X1, Y1, Z1 = self.X[i + 1], self.Y[i + 1], self.Z[i + 1]
        zero = self._bv(0)
        untouched = S & X == zero
        same = z3.And(X1 == X, Y1 == Y, Z1 == Z)
        code = OP_CODES
        return z3.And(
            z3.Implies(op == NONE_CODE, z3.And(S == zero, same)),
            z3.Implies(op != NONE_CODE, S != zero),
            z3.Implies(op == code[Collective.ALL_REDUCE], z3.And(untouched, X1 == X | S, Y1 == Y, Z1 == Z)),
            z3.Implies(op == code[Collective.REDUCE_SCATTER], z3.And(untouched, X1 == X | S, Y1 == Y | S, Z1 == Z)),
            z3.Implies(op == code[Collective.REDUCE], z3.And(untouched, X1 == X | S, Y1 == Y, Z1 == Z | S)),
            z3.Implies(op == code[Collective.ALL_GATHER], z3.And(S & ~Y == zero, X1 == X, Y1 == Y & ~S, Z1 == Z)),
            z3.Implies(op == code[Collective.BROADCAST], z3.And(S & ~Z == zero, X1 == X, Y1 == Y, Z1 == Z & ~S)),
        )

    def _bits(self, bv: z3.BitVecRef) -> list[z3.BoolRef]:
        return [z3.Extract(c, c, bv) == 1 for c in range(self.C)]

    def _cost(self, step_cost: StepCost) -> z3.ArithRef:
        alg = Z3Algebra(OP_CODES)
        terms = []
        for i in range(self.K):
            t = step_cost(alg, self.ops[i], self._bits(self.slices[i]), self._bits(self.Y[i]), self._bits(self.Z[i]))
            terms.append(z3.If(self.ops[i] == NONE_CODE, z3.RealVal(0), t))
        return z3.Sum(terms)

    # -- decoding and search ----------------------------------------------
    def decode(self, model: z3.ModelRef) -> RawProgram:
        """The program of a model, as (collective, slice mask) pairs."""
        out = []
        for op, S in zip(self.ops, self.slices):
            code = model.eval(op, model_completion=True).as_long()
            if code == NONE_CODE:
                break
            out.append((_DECODE[code], model.eval(S, model_completion=True).as_long()))
        return tuple(out)

    def block(self, program: RawProgram) -> None:
        """Exclude exactly `program` from later models."""
        eqs = []
        for i in range(self.K):
            if i < len(program):
                op, S = program[i]
                eqs += [self.ops[i] == OP_CODES[op], self.slices[i] == S]
            else:
                eqs.append(self.ops[i] == NONE_CODE)
        self.solver.add(z3.Not(z3.And(eqs)))

    def enumerate(self, deadline: Deadline | None = None, limit: int | None = None) -> Iterator[RawProgram]:
        """Every program of the sketch (blocking clauses), up to `limit`."""
        deadline = deadline or Deadline(None)
        found = 0
        self.solver.push()
        try:
            while limit is None or found < limit:
                if deadline.check(self.solver, "program enumeration") != z3.sat:
                    return
                program = self.decode(self.solver.model())
                yield program
                found += 1
                self.block(program)
        finally:
            self.solver.pop()

    def cheapest(self, deadline: Deadline | None = None, exclude: Sequence[RawProgram] = ()) -> Ranked | None:
        """The cheapest program not in `exclude`, proved by iterative tightening.

        Finds a model, then asks for one strictly cheaper until Z3 answers
        unsat: the last cost is then optimal within the bound, and among the
        programs of that cost the one with the fewest steps is returned. On
        timeout the best so far is returned with ``proved=False``; None if
        there is no program at all.
        """
        if self.total is None:
            raise ValueError("this sketch was built without a cost model")
        deadline = deadline or Deadline(None)
        self.solver.push()  # frame for the excluded programs
        try:
            for p in exclude:
                self.block(p)
            best = self._tighten(deadline)
            if best is None or not best.proved:
                return best
            return Ranked(self._shortest_at(best, deadline), best.cost, proved=True)
        finally:
            self.solver.pop()

    def _tighten(self, deadline: Deadline) -> Ranked | None:
        """Iterative tightening inside its own solver frame."""
        best: tuple[RawProgram, z3.ArithRef] | None = None
        self.solver.push()  # frame for the "strictly cheaper" bounds
        try:
            while True:
                try:
                    result = deadline.check(self.solver, "cost optimisation")
                except SolverTimeout:
                    if best is None:
                        raise
                    return Ranked(best[0], _as_float(best[1]), proved=False)
                if result == z3.unsat:
                    return None if best is None else Ranked(best[0], _as_float(best[1]), proved=True, exact=best[1])
                model = self.solver.model()
                cost = model.eval(self.total, model_completion=True)
                best = (self.decode(model), cost)
                self.solver.add(self.total < cost)
        finally:
            self.solver.pop()

    def _shortest_at(self, best: Ranked, deadline: Deadline) -> RawProgram:
        """Among programs exactly as cheap as the proved optimum `best`, one with the fewest steps.

        Ties are common (a ring reduce-scatter + all-gather costs what an
        all-reduce costs); users prefer the simpler program.
        """
        for length in range(1, len(best.program)):
            self.solver.push()
            try:
                self.solver.add(self.total <= best.exact, self.ops[length] == NONE_CODE)
                if deadline.check(self.solver, "tie-break") == z3.sat:
                    return self.decode(self.solver.model())
            except SolverTimeout:
                return best.program
            finally:
                self.solver.pop()
        return best.program

    def top(self, n: int, deadline: Deadline | None = None) -> list[Ranked]:
        """The `n` cheapest programs, best first, each proved cheapest among those not yet listed."""
        out: list[Ranked] = []
        while len(out) < n:
            try:
                r = self.cheapest(deadline, exclude=[x.program for x in out])
            except SolverTimeout:
                if not out:
                    raise
                break
            if r is None:
                break
            out.append(r)
            if not r.proved:
                break
        return out


def _as_float(value: z3.ArithRef) -> float:
    v = z3.simplify(value)
    if z3.is_rational_value(v):
        return v.numerator_as_long() / v.denominator_as_long()
    return float(v.as_decimal(20).rstrip("?"))
