"""One slot of a program sketch as Z3 formulas, and Z3's proof that it is exactly the state space's move table.

A slot holds at most one op and a slice of reduced cells; every cell's
(summed, scattered, rooted, to exchange) Booleans move by the op's rule
(:func:`slot_constraints`), from the request's start to its goal
(:func:`boundary_values`). :func:`prove_step_semantics` shows, once per
collective and cell count, that these formulas allow exactly the moves of
``hierarchies/statespace.py``, so the explicit search over the state space and
the Z3 sketch (``encodings/programs.py``) range over the same programs.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

import z3

from p2synth.hierarchies.program import STEP_OPS, Collective
from p2synth.hierarchies.statespace import STATUS_BITS, Status, goal_statuses, moves, statuses


def boundary_values(collective: Collective) -> tuple[tuple, tuple]:
    """Per cell, (summed, scattered, rooted, to exchange) at the start, and at the goal (None: either)."""
    start = {
        Collective.ALL_GATHER: (True, True, False, False),
        Collective.BROADCAST: (True, False, True, False),
        Collective.ALL_TO_ALL: (True, False, False, True),
    }.get(collective, (False, False, False, False))
    goal = {
        Collective.REDUCE_SCATTER: (True, True, False, False),
        Collective.REDUCE: (True, False, None, False),  # rooted or not
    }.get(collective, (True, False, False, False))
    return start, goal


def slot_constraints(collective: Collective, ops: dict, used: Any, slice_: Sequence[Any],
                     before: Sequence[tuple], after: Sequence[tuple]) -> z3.BoolRef:
    """One slot of a sketch: at most one op (all_to_all alone for an all_to_all request, never otherwise), `used`
    iff there is one, a non-empty slice when used, and every cell's status move (`before`/`after`: per cell,
    (summed, scattered, rooted, to exchange) Booleans)."""
    exchange = collective is Collective.ALL_TO_ALL
    out = [z3.Not(b) for op, b in ops.items() if (op is Collective.ALL_TO_ALL) != exchange]
    out += [used == z3.Or(list(ops.values())), z3.AtMost(*ops.values(), 1), z3.Implies(used, z3.Or(list(slice_)))]
    out += [_cell_transition(exchange, ops, used, s, b, a) for s, b, a in zip(slice_, before, after)]
    return z3.And(out)


def _cell_transition(exchange: bool, op: dict, used: Any, s: Any, before: tuple, after: tuple) -> z3.BoolRef:
    """One cell in one slot: the op's precondition on the cell's status, and its next status."""
    (x, y, z, p), (x1, y1, z1, p1) = before, after
    if exchange:  # all_to_all or an unused slot: the step's cells must be to exchange, and become exchanged
        return z3.And(z3.Implies(z3.Not(used), z3.Not(s)), x1 == x, y1 == y, z1 == z,
                      z3.Implies(s, p), p1 == z3.And(p, z3.Not(s)))
    untouched = z3.Implies(s, z3.Not(x))
    return z3.And(
        p1 == p,
        z3.Implies(z3.Not(used), z3.And(z3.Not(s), x1 == x, y1 == y, z1 == z)),
        z3.Implies(op[Collective.ALL_REDUCE], z3.And(untouched, x1 == z3.Or(x, s), y1 == y, z1 == z)),
        z3.Implies(op[Collective.REDUCE_SCATTER], z3.And(untouched, x1 == z3.Or(x, s), y1 == z3.Or(y, s), z1 == z)),
        z3.Implies(op[Collective.REDUCE], z3.And(untouched, x1 == z3.Or(x, s), y1 == y, z1 == z3.Or(z, s))),
        z3.Implies(op[Collective.ALL_GATHER], z3.And(z3.Implies(s, y), x1 == x, y1 == z3.And(y, z3.Not(s)), z1 == z)),
        z3.Implies(op[Collective.BROADCAST], z3.And(z3.Implies(s, z), x1 == x, y1 == y, z1 == z3.And(z, z3.Not(s)))),
    )


class SemanticsMismatch(Exception):
    """The sketch's steps differ from the state space's move table: a bug, never a result."""


@lru_cache(maxsize=128)
def prove_step_semantics(collective: Collective, cells: int) -> None:
    """Prove with Z3 that one slot of the sketch is exactly the state space's move table, and the sketch's start
    and goal exactly the state space's, for every well-formed state of `cells` cells; SemanticsMismatch otherwise.

    Well-formed: each cell's (summed, scattered, rooted, to exchange) bits are
    those of one of the collective's statuses (``hierarchies.statespace.STATUS_BITS``).
    The move table says: a used slot runs one op of ``moves(collective)`` on a
    non-empty slice whose cells all have the op's source status and get its
    target status, the other cells unchanged; an unused slot changes nothing.
    With these, a program is valid in the sketch iff it is a path from the
    state space's start to one of its goals (induction over the slots), which
    is what ``solver/certificate.py`` relies on. The answer depends only on the
    collective and the cell count, so it is cached.
    """
    ops = {op: z3.Bool(f"op_{op.value}") for op in STEP_OPS}
    used, slice_ = z3.Bool("used"), [z3.Bool(f"slice_{c}") for c in range(cells)]
    before = [tuple(z3.Bool(f"{n}{c}") for n in "xyzp") for c in range(cells)]
    after = [tuple(z3.Bool(f"{n}{c}'") for n in "xyzp") for c in range(cells)]
    own = statuses(collective)

    def has(bits: tuple, status: Status) -> z3.BoolRef:
        return z3.And([b == v for b, v in zip(bits, STATUS_BITS[status])])

    well_formed = z3.And([z3.Or([has(b, s) for s in own]) for b in before])
    same = z3.And([a == b for A, B in zip(after, before) for a, b in zip(A, B)])
    runs = []
    for m in moves(collective):
        only = z3.And([b if op is m.op else z3.Not(b) for op, b in ops.items()])
        cells_move = z3.And([z3.If(s, z3.And(has(b, m.source), has(a, m.target)), z3.And([x == y for x, y in zip(a, b)]))
                             for s, b, a in zip(slice_, before, after)])
        runs.append(z3.And(only, z3.Or(slice_), cells_move))
    table = z3.If(used, z3.Or(runs), z3.And(z3.And([z3.Not(b) for b in ops.values()]), z3.And([z3.Not(s) for s in slice_]), same))
    sketch = slot_constraints(collective, ops, used, slice_, before, after)
    start, goal = boundary_values(collective)
    first, ends = statuses(collective)[0], goal_statuses(collective)
    state = before
    sketch_start = z3.And([b == v for bits in state for b, v in zip(bits, start)])
    sketch_goal = z3.And([b == v for bits in state for b, v in zip(bits, goal) if v is not None])
    table_start = z3.And([has(bits, first) for bits in state])
    table_goal = z3.And([z3.Or([has(bits, g) for g in ends]) for bits in state])
    solver = z3.Solver()
    solver.add(z3.Or(z3.Not(table_start == sketch_start),
                     z3.And(well_formed, z3.Or(sketch != table, table_goal != sketch_goal))))
    result = solver.check()
    if result != z3.unsat:
        detail = f": counter-example {solver.model()}" if result == z3.sat else f" (Z3 answered {result})"
        raise SemanticsMismatch(f"the sketch's steps for {collective.value} over {cells} cells are not the move table{detail}")
