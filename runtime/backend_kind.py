"""The backends' names, and why one cannot run: the part of runtime/backends.py that runtime/nccl.py needs too.

Both backend modules import these from here, so that runtime/backends.py
(which loads runtime/nccl.py only when the cupy backend is asked for) and
runtime/nccl.py do not import each other.
"""

from __future__ import annotations

from enum import Enum


class BackendKind(str, Enum):
    """The available backends."""

    NUMPY = "numpy"
    CUPY = "cupy"

    def __str__(self) -> str:
        return self.value


class BackendUnavailable(RuntimeError):
    """The chosen backend cannot run here (no CuPy, no CUDA device, no NCCL...)."""


class CupyMissing(BackendUnavailable):
    """CuPy is not installed (``import cupy`` finds no module): the cupy backend is not an option here, nothing is broken.

    Every other reason the cupy backend cannot run (no CUDA driver or device,
    no NCCL or NVRTC library, a CuPy that fails to import) is a plain
    :class:`BackendUnavailable`: CuPy is there but broken.
    """
