"""Issue 46: ``pip install '.[gpu]'`` must install what the cupy backend needs on a machine with an NVIDIA driver and
no CUDA toolkit. CuPy's wheels ship no NCCL (``cupy.cuda.nccl.available`` is False without ``nvidia-nccl-cu12``) and
no NVRTC, which compiles CuPy's kernels; CuPy 14 loads NVRTC from ``nvidia-cuda-nvrtc-cu12`` (cuda.pathfinder),
CuPy 13 only from a CUDA toolkit. Checked without a GPU in throwaway environments with CuPy 13.6 and 14.2."""

import tomllib

from packaging.requirements import Requirement
from packaging.version import Version

from tests.runtime_support import ROOT


def gpu_extra() -> dict[str, Requirement]:
    """The gpu extra's requirements by package name."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return {r.name: r for r in map(Requirement, extras["gpu"])}


def test_the_gpu_extra_installs_cupy_nccl_and_nvrtc():
    assert set(gpu_extra()) == {"cupy-cuda12x", "nvidia-nccl-cu12", "nvidia-cuda-nvrtc-cu12"}


def test_it_takes_a_cupy_that_loads_nvrtc_from_its_wheel_and_an_nccl_with_the_implicit_launch_order():
    extra = gpu_extra()
    cupy = extra["cupy-cuda12x"].specifier
    assert not cupy.contains(Version("13.6.0")) and cupy.contains(Version("14.2.0")) and not cupy.contains(Version("15.0.0"))
    nccl = extra["nvidia-nccl-cu12"].specifier
    assert not nccl.contains(Version("2.25.1")) and nccl.contains(Version("2.26.2")) and nccl.contains(Version("2.32.3"))
    nvrtc = extra["nvidia-cuda-nvrtc-cu12"].specifier
    assert nvrtc.contains(Version("12.9.86")) and not nvrtc.contains(Version("13.0.0"))
