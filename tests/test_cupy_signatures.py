"""Issue 46: tests/fake_cupy.py must have the real ``cupy.cuda.nccl`` signatures, or CI tests a CuPy that does not
exist. Where CuPy (with its NCCL library) is installed, compare the fake of its major version with it; elsewhere
skip. Loading CuPy and NCCL needs no GPU, nor does ``get_unique_id``."""

import importlib.util

import pytest

from tests.fake_cupy import SIGNATURES, UNIQUE_ID_TYPES

pytestmark = pytest.mark.skipif(importlib.util.find_spec("cupy") is None, reason="CuPy is not installed here")


@pytest.fixture(scope="module")
def nccl():
    """The real cupy.cuda.nccl, and CuPy's major version (skips where NCCL cannot be loaded)."""
    import cupy
    from cupy.cuda import nccl

    if not nccl.available:
        pytest.skip("CuPy is installed without its NCCL library (nvidia-nccl-cu12)")
    return nccl, int(cupy.__version__.split(".")[0])


def first_line(obj) -> str:
    return (obj.__doc__ or "").strip().splitlines()[0]


def test_the_fake_has_the_signatures_of_the_installed_cupy(nccl):
    module, major = nccl
    assert major in SIGNATURES, f"CuPy {major}: tests/fake_cupy.py has no fake of it"
    for name, signature in SIGNATURES[major].items():
        obj = module
        for part in name.split("."):
            obj = getattr(obj, part)
        assert first_line(obj) == signature, name


def test_the_unique_id_has_the_type_the_fake_gives(nccl):
    module, major = nccl
    uid = module.get_unique_id()
    assert type(uid) is UNIQUE_ID_TYPES[major] and len(uid) == 128
