"""What ``pip install .`` installs: the one namespace ``p2synth`` (docs/packaging.md), its data files and its command."""

import glob
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CODE = ("hierarchies", "encodings", "solver", "runtime")  # the folders installed as p2synth.<folder>
NOT_INSTALLED = ("scripts", "tests")


def test_every_code_package_is_installed_under_p2synth_and_nothing_else_is():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folder_of = config["package-dir"]
    assert folder_of == {f"p2synth.{top}": top for top in CODE}
    found = {
        ".".join(("p2synth", *init.parent.relative_to(ROOT).parts))
        for top in CODE for init in (ROOT / top).rglob("__init__.py")
    }
    assert set(config["packages"]) == found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel pip builds from this checkout (with build isolation, as ``pip install .`` does)."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
                   check=True, capture_output=True, text=True, timeout=600)
    [path] = glob.glob(str(out / "p2synth-*.whl"))
    return zipfile.ZipFile(path)


def test_the_wheel_holds_the_p2synth_namespace_alone(wheel):
    names = wheel.namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"p2synth"}
    assert not any(n.split("/")[1] in NOT_INSTALLED for n in names if n.startswith("p2synth/"))
    assert {n.split("/")[1] for n in names if n.startswith("p2synth/")} == set(CODE)
    assert not (ROOT / "p2synth").exists()  # a folder of that name would shadow the install from a checkout


def test_the_wheel_carries_every_bundled_system_and_the_command(wheel):
    systems = {Path(p).name for p in (ROOT / "hierarchies" / "systems").glob("*.json")}
    assert systems and {Path(n).name for n in wheel.namelist() if n.startswith("p2synth/hierarchies/systems/")} == systems
    [entry_points] = [n for n in wheel.namelist() if n.endswith("entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "p2synth = p2synth.runtime.command:main" in text.replace("  ", " ")
