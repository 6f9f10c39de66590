"""Bounded sketches of collective programs over the abstract cell-status state.

A sketch has `K` step slots. Slot ``i`` holds an op (one of the
collectives, or none for an unused trailing slot) and a slice ``S_i``, a set
of reduced cells. The abstract state ``(X, Y, Z)`` (summed,
scattered, rooted; plus ``P``, still to exchange, for an all_to_all request,
whose only steps are all_to_all ones) is threaded through the slots and the request's goal is
asserted at the end (docs/semantics.md section 4, docs/model.md section 5). Every model decodes into one
program; distinct models are distinct programs.

The encoding only knows cell indices; the caller maps them to cells. One slot's
formulas, and Z3's proof that they are the state space's moves, are
``encodings/stepsemantics.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import z3

from p2synth.encodings.deadline import Deadline
from p2synth.encodings.errors import SolverTimeout
from p2synth.encodings.stepsemantics import boundary_values, slot_constraints
from p2synth.encodings.z3algebra import Z3Algebra, _real
from p2synth.hierarchies.program import STEP_OPS, Collective, RawProgram

TIE_TOLERANCE = 1e-9  # relative: costs closer than this are equal (they come from float figures)
StepCost = Callable[[Z3Algebra, Any, Sequence[Any], Sequence[Any], Sequence[Any]], Any]


@dataclass(frozen=True)
class SketchProgram:
    """A program found by the optimiser (run on `pieces` pieces), its cost under the model, and whether it is proved cheapest."""

    program: RawProgram
    cost: float
    proved: bool
    exact: Any = field(default=None, compare=False, repr=False)  # the cost as Z3's exact rational
    pieces: int = 1


@dataclass(frozen=True)
class PieceCosts:
    """How a sketch costs programs run on `pieces` pieces: the model's step time and per-level traffic on one
    piece, and `combine(alg, stages, traffic, pieces)`, the pipeline's time (``solver.pipeline_time.pipelined_seconds``)."""

    pieces: int
    step_cost: StepCost
    traffic: Callable[..., Sequence[Any]]
    combine: Callable[..., Any]


class ProgramSketch:
    """The Z3 encoding of every program of at most `max_steps` steps for one request.

    `num_cells` reduced cells, `collective` the requested collective. Slot
    ``i`` has one Boolean per collective (at most one true; none for an unused
    trailing slot) and one Boolean per cell for its slice; the state is one
    Boolean per cell for each of summed / scattered / rooted. Plain Booleans
    keep the problem in Z3's core SAT + linear-arithmetic solver, which proves
    optimality about twice as fast as a bit-vector encoding of the same state.
    With a `step_cost` (a cost model's ``step_time``), ``total`` is the
    program's cost as a Z3 Real term.
    """

    def __init__(self, collective: Collective, num_cells: int, max_steps: int, step_cost: StepCost | None = None,
                 pipelines: Sequence[PieceCosts] = ()):
        if num_cells < 1 or max_steps < 1:
            raise ValueError("a sketch needs at least one reduced cell and one step")
        self.collective = collective
        self.C = num_cells
        self.K = max_steps
        # Booleans plus linear real arithmetic: the QF_LRA solver proves optimality about 3x faster
        # than the default portfolio on these sketches (29.5 s -> 8.7 s on a 6-cell case).
        self.solver = z3.SolverFor("QF_LRA")
        cells, slots = range(num_cells), range(max_steps)
        self.ops = [{op: z3.Bool(f"step{i}_{op.value}") for op in STEP_OPS} for i in slots]
        self.used = [z3.Bool(f"step{i}_used") for i in slots]
        self.slices = [[z3.Bool(f"step{i}_slice_{c}") for c in cells] for i in slots]
        self.X = [[z3.Bool(f"summed{i}_{c}") for c in cells] for i in range(max_steps + 1)]
        self.Y = [[z3.Bool(f"scattered{i}_{c}") for c in cells] for i in range(max_steps + 1)]
        self.Z = [[z3.Bool(f"rooted{i}_{c}") for c in cells] for i in range(max_steps + 1)]
        self.exchange = collective is Collective.ALL_TO_ALL
        self.P = [[z3.Bool(f"to_exchange{i}_{c}") for c in cells] for i in range(max_steps + 1)] if self.exchange else None
        self._encode()
        # piece counts: one Boolean each (exactly one true); a pipeline needs two or more steps
        self.pieces = {1: z3.Bool("pieces_1"), **{p.pieces: z3.Bool(f"pieces_{p.pieces}") for p in pipelines}}
        self.solver.add(z3.PbEq([(b, 1) for b in self.pieces.values()], 1))
        for count, b in self.pieces.items():
            if count > 1:
                self.solver.add(z3.Implies(b, self.used[1] if max_steps > 1 else z3.BoolVal(False)))
        self.total = None
        if step_cost is not None:
            self.total = z3.Real("total_cost")
            total = self._cost(step_cost)
            for p in pipelines:
                total = z3.If(self.pieces[p.pieces], self._pipelined_cost(p), total)
            self.solver.add(self.total == total)

    # -- constraints -------------------------------------------------------
    def _encode(self) -> None:
        add = self.solver.add
        start, goal = boundary_values(self.collective)
        for c in range(self.C):
            for states, value in zip(self._bits_at(0, c), start):
                add(states == value)
            for states, value in zip(self._bits_at(self.K, c), goal):
                if value is not None:
                    add(states == value)
        # At least one step; unused slots only at the end
        add(self.used[0])
        for i in range(self.K):
            if i + 1 < self.K:
                add(z3.Implies(z3.Not(self.used[i]), z3.Not(self.used[i + 1])))
            add(slot_constraints(self.collective, self.ops[i], self.used[i], self.slices[i],
                                 [self._bits_at(i, c) for c in range(self.C)], [self._bits_at(i + 1, c) for c in range(self.C)]))

    def _bits_at(self, i: int, c: int) -> tuple:
        """Cell `c`'s state before slot `i`: (summed, scattered, rooted, to exchange); the last is False unless all_to_all."""
        return (self.X[i][c], self.Y[i][c], self.Z[i][c], self.P[i][c] if self.exchange else z3.BoolVal(False))

    def _cost(self, step_cost: StepCost) -> z3.ArithRef:
        terms = []
        for i in range(self.K):
            alg = Z3Algebra(self.ops[i])
            t = step_cost(alg, None, self.slices[i], self.Y[i], self.Z[i])
            terms.append(z3.If(self.used[i], t, z3.RealVal(0)))
        return z3.Sum(terms)

    def _pipelined_cost(self, pipeline: PieceCosts) -> z3.ArithRef:
        """The time of the sketch's program run on ``pipeline.pieces`` pieces (unused slots: no stage, no traffic)."""
        zero = z3.RealVal(0)
        stages, traffic = [], []
        for i in range(self.K):
            alg = Z3Algebra(self.ops[i])
            stages.append(z3.If(self.used[i], _real(pipeline.step_cost(alg, None, self.slices[i], self.Y[i], self.Z[i])), zero))
            loads = pipeline.traffic(alg, None, self.slices[i], self.Y[i], self.Z[i])
            traffic.append([z3.If(self.used[i], _real(x), zero) for x in loads])
        return _real(pipeline.combine(Z3Algebra({}), stages, traffic, pipeline.pieces))

    # -- decoding and search ----------------------------------------------
    def decode(self, model: z3.ModelRef) -> RawProgram:
        """The program of a model, as (collective, slice mask) pairs."""
        out = []
        for i in range(self.K):
            op = next((o for o, b in self.ops[i].items() if z3.is_true(model.eval(b, model_completion=True))), None)
            if op is None:
                break
            mask = sum(1 << c for c, b in enumerate(self.slices[i]) if z3.is_true(model.eval(b, model_completion=True)))
            out.append((op, mask))
        return tuple(out)

    def decode_pieces(self, model: z3.ModelRef) -> int:
        """The piece count of a model."""
        return next(p for p, b in self.pieces.items() if z3.is_true(model.eval(b, model_completion=True)))

    def _is(self, program: RawProgram, pieces: int | None = None) -> z3.BoolRef:
        """The constraint "the sketch holds exactly `program`" (run on `pieces` pieces, if given)."""
        eqs = [] if pieces is None else [self.pieces[pieces]]
        for i in range(self.K):
            if i < len(program):
                op, mask = program[i]
                eqs.append(self.ops[i][op])
                eqs += [b if mask >> c & 1 else z3.Not(b) for c, b in enumerate(self.slices[i])]
            else:
                eqs.append(z3.Not(self.used[i]))
        return z3.And(eqs)

    def block(self, program: RawProgram) -> None:
        """Exclude exactly `program` from later models."""
        self.solver.add(z3.Not(self._is(program)))

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

    def cheapest(self, deadline: Deadline | None = None, exclude: Sequence[RawProgram] = ()) -> SketchProgram | None:
        """The cheapest program (at its cheapest piece count) not in `exclude`, proved by iterative tightening.

        Finds a model, then asks for one strictly cheaper until Z3 answers
        unsat: the last cost is then optimal within the bound, and among the
        programs of that cost the one with the fewest steps is returned. On
        timeout the best so far is returned with ``proved=False``; None if
        there is no program at all. An excluded program is excluded at every
        piece count.
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
            program, pieces = self._shortest_at(best, deadline)
            return SketchProgram(program, best.cost, True, pieces=pieces)
        finally:
            self.solver.pop()

    def _tighten(self, deadline: Deadline) -> SketchProgram | None:
        """Iterative tightening inside its own solver frame."""
        best: tuple[RawProgram, z3.ArithRef, int] | None = None
        self.solver.push()  # frame for the "strictly cheaper" bounds
        try:
            while True:
                try:
                    result = deadline.check(self.solver, "cost optimisation")
                except SolverTimeout:
                    if best is None:
                        raise
                    return SketchProgram(best[0], _as_float(best[1]), False, pieces=best[2])
                if result == z3.unsat:
                    return None if best is None else SketchProgram(best[0], _as_float(best[1]), True, best[1], best[2])
                model = self.solver.model()
                cost = model.eval(self.total, model_completion=True)
                best = (self.decode(model), cost, self.decode_pieces(model))
                self.solver.add(self.total < cost)
        finally:
            self.solver.pop()

    def _shortest_at(self, best: SketchProgram, deadline: Deadline) -> tuple[RawProgram, int]:
        """Among programs exactly as cheap as the proved optimum `best`, one with the fewest steps (and its pieces).

        Ties are common (a ring reduce-scatter + all-gather costs what an
        all-reduce costs); users prefer the simpler program.
        """
        for length in range(1, len(best.program)):
            self.solver.push()
            try:
                self.solver.add(self.total <= best.exact, z3.Not(self.used[length]))
                if deadline.check(self.solver, "tie-break") == z3.sat:
                    model = self.solver.model()
                    return self.decode(model), self.decode_pieces(model)
            except SolverTimeout:
                return best.program, best.pieces
            finally:
                self.solver.pop()
        return best.program, best.pieces

    def prove_top(self, listed: Sequence[RawProgram | tuple[RawProgram, int]], deadline: Deadline | None = None
                  ) -> tuple[list[SketchProgram], bool]:
        """Check programs proposed by another search, and prove no other program is cheaper than the last.

        Each listed program (optionally with its piece count) must be a model
        of the sketch; its cost is Z3's exact evaluation. Then "not one of these
        programs (at any piece count), and strictly cheaper than the last" must
        be unsat: that proves the list holds the cheapest programs (up to ties
        with the last). With piece counts, "this program, strictly cheaper" must
        be unsat for each too: its piece count is its cheapest. Returns the
        ranked list and whether the proofs went through (False on timeout);
        ValueError if a listed program is not a model or a cheaper one exists.
        """
        if self.total is None:
            raise ValueError("this sketch was built without a cost model")
        deadline = deadline or Deadline(None)
        entries = [(e, 1) if not e or not isinstance(e[-1], int) else e for e in listed]
        ranked = []
        for program, pieces in entries:
            self.solver.push()
            try:
                self.solver.add(self._is(program, pieces))
                if deadline.check(self.solver, "program check") != z3.sat:
                    raise ValueError(f"proposed program {program} on {pieces} piece(s) is not a model of the sketch")
                exact = self.solver.model().eval(self.total, model_completion=True)
            finally:
                self.solver.pop()
            ranked.append(SketchProgram(program, _as_float(exact), proved=False, exact=exact, pieces=pieces))
        if not ranked:
            return ranked, False
        try:
            for r in ranked if len(self.pieces) > 1 else ():
                if self._cheaper_exists([self._is(r.program)], r.exact, deadline):
                    raise ValueError(f"program {r.program} is cheaper on another piece count than {r.pieces}")
            # costs come from floats: ties within a relative TIE_TOLERANCE are ties, not counter-examples
            last = max((r.exact for r in ranked), key=_as_float)
            witness = self._cheaper_exists([z3.Not(self._is(r.program)) for r in ranked], last, deadline)
        except SolverTimeout:
            return ranked, False
        if witness is not None:
            raise ValueError(f"a cheaper program exists than those proposed: {witness}")
        return [SketchProgram(r.program, r.cost, True, r.exact, r.pieces) for r in ranked], True

    def _cheaper_exists(self, constraints: list, than: Any, deadline: Deadline) -> RawProgram | None:
        """A program meeting `constraints` costing less than `than` (up to TIE_TOLERANCE), or None (unsat)."""
        self.solver.push()
        try:
            self.solver.add(*constraints, self.total < than * (1 - TIE_TOLERANCE))
            if deadline.check(self.solver, "optimality proof") == z3.sat:
                return self.decode(self.solver.model())
            return None
        finally:
            self.solver.pop()

    def top(self, n: int, deadline: Deadline | None = None) -> list[SketchProgram]:
        """The `n` cheapest programs, best first, each proved cheapest among those not yet listed."""
        out: list[SketchProgram] = []
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
