"""Spec, semantics (concrete and abstract), cost model, search, result format and CLI.

Our Z3 layer lives in the top-level folder ``encodings/``, but ``encodings`` is
also a standard-library package that Python imports at start-up, so a plain
``import encodings.programs`` would look only in the standard library. Adding
our folder to that package's ``__path__`` makes ``encodings.programs`` and
friends importable as submodules without touching any codec. Everything that
uses the Z3 layer imports ``solver`` first (it is the only layer above it).
"""

import encodings as _encodings
from pathlib import Path as _Path

_OURS = str(_Path(__file__).resolve().parent.parent / "encodings")
if _OURS not in _encodings.__path__:
    _encodings.__path__.append(_OURS)
