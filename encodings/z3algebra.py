"""The algebra a cost model is written against, over Z3 terms."""

from __future__ import annotations

from typing import Any, Sequence

import z3


class Z3Algebra:
    """Symbolic evaluation: booleans are Z3 Bool terms, values Z3 Real terms.

    `ops` maps each collective to the Z3 Bool that says a step is that
    collective; the cost model's `op` argument is ignored in favour of it.
    """

    def __init__(self, ops: dict[Any, Any]):
        self.ops = ops

    def ite(self, cond: Any, then: Any, other: Any) -> Any:
        if isinstance(cond, bool):
            return then if cond else other
        return z3.If(cond, _real(then), _real(other))

    def any(self, conds: Sequence[Any]) -> Any:
        conds = [c for c in conds if c is not False]
        if not conds:
            return False
        return z3.Or(*conds) if len(conds) > 1 else conds[0]

    def is_op(self, op: Any, which: Any) -> Any:
        return self.ops[which]


def _real(x: Any) -> Any:
    if isinstance(x, (int, float)):
        return z3.RealVal(float(x))
    return x
