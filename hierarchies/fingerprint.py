"""The fingerprint checker: the concrete semantics (``hierarchies/concrete.py``) with each contribution set held as
a few fingerprints instead of a bitmask over ranks, which makes a 4,096-device reduction group checkable
(``hierarchies/verify.py`` picks it beyond the exact checker's size; docs/semantics.md section 3).
"""

from __future__ import annotations

import numpy as np

from p2synth.hierarchies.concrete import ConcreteChecker
from p2synth.hierarchies.program import Collective

# Fingerprints are sums modulo this prime (2^31 - 1) of one random value per device, FINGERPRINTS of them apiece.
FINGERPRINT_PRIME = (1 << 31) - 1
FINGERPRINTS = 2


class FingerprintChecker(ConcreteChecker):
    """The concrete semantics with each contribution set held as FINGERPRINTS fingerprints, not as a bitmask.

    Device ``d`` contributes FINGERPRINTS random values ``r_d`` in ``[1, p)``
    (``p`` = FINGERPRINT_PRIME, a seeded generator: the same every run); a
    chunk holds, per fingerprint, the sum modulo ``p`` of its contributors'
    values, 0 when not held. Every step runs as in :class:`ConcreteChecker`
    (groups, chunk sets, shares, activity: the same code), except that
    summing adds fingerprints, so a contribution counted twice is not refused
    at the step but shows at the goal, where every judged device's every
    chunk must equal the fingerprint of exactly the set it must hold. A
    wrong chunk (a set differing from the right one, contributions counted
    with any multiplicity) matches with probability at most ``1/p`` per
    fingerprint (a non-zero linear form in independent uniform values), so a
    wrong program passes with probability at most ``chunks x devices / p^2``
    (3.6e-12 for 4,096 devices and chunks; a held chunk whose fingerprints
    both sum to 0, read as not held, is as unlikely). It holds ``FINGERPRINTS``
    32-bit words per device and chunk where the exact checker holds
    ``devices / 32``: what makes a 4,096-device reduction group checkable.
    ``tests/test_fingerprint.py`` holds its verdicts equal to the exact
    checker's on random programs, faulty ones included. All-to-all chunks are
    addressed, not summed; this checker does not take them.
    """

    def _chunk_layout(self) -> None:
        if self.request.collective is Collective.ALL_TO_ALL:
            raise ValueError("all_to_all chunks are addressed, not summed: check them with ConcreteChecker")
        super()._chunk_layout()
        self.words, self.dtype = FINGERPRINTS, np.uint32
        rng = np.random.default_rng(0x9e3779b9)
        self.rank_bits = rng.integers(1, FINGERPRINT_PRIME, size=(self.n, FINGERPRINTS), dtype=np.uint32)
        self._encoded: dict[int, np.ndarray] = {}

    def encode(self, mask: int) -> np.ndarray:
        """The fingerprints of a contribution set (a bitmask over ranks)."""
        got = self._encoded.get(mask)
        if got is None:
            ranks = [r for r in range(self.n) if mask >> r & 1]
            got = (self.rank_bits[ranks].sum(axis=0, dtype=np.uint64) % FINGERPRINT_PRIME).astype(np.uint32)
            self._encoded[mask] = got
        return got

    def decode(self, entry: np.ndarray) -> int:
        """Fingerprints do not give their set back: ValueError."""
        raise ValueError("a fingerprint does not give its contribution set back")

    def combine(self, held: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The members' fingerprints summed modulo the prime (each below 2^31, summed in 64 bits: no overflow), and
        no refusal at the step: a contribution counted twice shows at the goal."""
        summed = (held.sum(axis=1, dtype=np.uint64) % FINGERPRINT_PRIME).astype(np.uint32)
        return summed, np.zeros(held.shape[0], dtype=bool)
