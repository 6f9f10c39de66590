"""Which buffer each action of a program's layout plan reads and writes.

The layout plan itself (chunk order, collectives and repacks) comes from the
one layout engine, hierarchies/layout.py; this module gives every action its
source and destination buffer on this rank.
"""

from __future__ import annotations

from enum import Enum

from p2synth.hierarchies.layout import Action, Exchange
from p2synth.hierarchies.program import Collective

__all__ = ["IN_PLACE_OPS", "Role", "assign_buffers"]


class Role(str, Enum):
    """The buffers an action reads or writes: input, output, and two scratch buffers.

    A pipelined program (``Program.pipeline > 1``) reads its pieces'
    input from ``PIECES_IN`` and writes their output to ``PIECES_OUT``, the
    send and receive buffers re-cut piece by piece (see runtime/executor.py).
    A reduce_scatter step that the backend runs as a pairwise exchange receives
    each peer's block in ``EXCHANGE`` before adding it to its destination.
    """

    SEND = "send"
    RECV = "recv"
    SCRATCH_A = "scratch_a"
    SCRATCH_B = "scratch_b"
    PIECES_IN = "pieces_in"
    PIECES_OUT = "pieces_out"
    EXCHANGE = "exchange"  # where a reduce_scatter step run as an exchange receives a block (runtime/backends.py)


# Calls that run with the same buffer as input and output. all_reduce is not one
# of them: Open MPI 5's libnbc runs an in-place Iallreduce with its binomial
# algorithm (reduce to a root, broadcast back) whatever the size, and an
# out-of-place one of 4 members or more and 64 KiB or more with Rabenseifner's
# (docs/measurements/limit.md), so all_reduce steps run out of place, like nccl-tests.
IN_PLACE_OPS = frozenset({Collective.REDUCE, Collective.BROADCAST})


def assign_buffers(actions: tuple[Action, ...]) -> tuple[tuple[Role, Role], ...]:
    """(source, destination) buffer of every action, out of place like nccl-tests.

    Walks backwards from the last action, which writes the receive buffer:
    in-place calls (reduce, broadcast) keep their buffer, the others
    (all_reduce, reduce_scatter, all_gather, all_to_all, transposes) read from
    the other scratch buffer. The first action reads the
    send buffer, which is never written.
    """
    out = Role.RECV
    pairs: list[tuple[Role, Role]] = []
    for action in reversed(actions):
        if isinstance(action, Exchange) and action.step.op in IN_PLACE_OPS:
            src = out
        else:
            src = Role.SCRATCH_B if out is Role.SCRATCH_A else Role.SCRATCH_A
        pairs.append((src, out))
        out = src
    pairs.reverse()
    if pairs:
        pairs[0] = (Role.SEND, pairs[0][1])
    return tuple(pairs)
