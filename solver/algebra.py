"""The algebras a cost model is written against: the few operations it may use besides +, -, * and / by constants.

A cost model is written once against :class:`Algebra` (``ite``, ``any``,
``is_op``). :class:`PyAlgebra` evaluates it on concrete booleans (seconds as
floats), :class:`ArrayAlgebra` on numpy arrays of cases at once, and the Z3
algebra of ``encodings/z3algebra.py`` on symbolic booleans, so the search, the
report and Z3 all evaluate the same expression.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import numpy as np

from p2synth.hierarchies.program import STEP_OPS, Collective


class Algebra(Protocol):
    """The few operations a cost model may use besides +, -, * and / by constants."""

    def ite(self, cond: Any, then: Any, other: Any) -> Any: ...

    def any(self, conds: Sequence[Any]) -> Any: ...

    def is_op(self, op: Any, which: Collective) -> Any: ...


class PyAlgebra:
    """Concrete evaluation: booleans are bools, values are floats."""

    def ite(self, cond: bool, then: float, other: float) -> float:
        return then if cond else other

    def any(self, conds: Sequence[bool]) -> bool:
        return any(conds)

    def is_op(self, op: Collective, which: Collective) -> bool:
        return op is which


PY = PyAlgebra()

OP_CODES: dict[Collective, int] = {op: i for i, op in enumerate(STEP_OPS)}  # op of ArrayAlgebra cases


class ArrayAlgebra:
    """Vectorized evaluation: booleans and values are numpy arrays, one entry per case.

    The op argument of a cost model is an array of :data:`OP_CODES`. The
    arithmetic is the same float64 arithmetic as :class:`PyAlgebra`'s, case
    by case, so each entry equals the scalar evaluation of its case.
    """

    def ite(self, cond: Any, then: Any, other: Any) -> Any:
        if isinstance(cond, (bool, np.bool_)):
            return then if cond else other
        return np.where(cond, then, other)

    def any(self, conds: Sequence[Any]) -> Any:
        conds = [c for c in conds if c is not False]
        if not conds:
            return False
        out = conds[0]
        for c in conds[1:]:
            out = out | c
        return out

    def is_op(self, op: Any, which: Collective) -> Any:
        return op == OP_CODES[which]


ARRAYS = ArrayAlgebra()


def slowest(alg: Algebra, times: Sequence[Any]) -> Any:
    """The largest of `times` (0 for none)."""
    worst = 0.0
    for t in times:
        worst = alg.ite(t > worst, t, worst)
    return worst
