"""Every package folder of the project is listed in pyproject.toml, so a non-editable install carries it."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP = ("hierarchies", "encodings", "solver", "runtime", "scripts")


def test_every_package_folder_is_installed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    renamed = {folder: name for name, folder in config["package-dir"].items()}  # encodings -> p2synth.encodings
    found = set()
    for top in TOP:
        for init in (ROOT / top).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT).parts
            found.add(".".join((renamed.get(parts[0], parts[0]), *parts[1:])))
    assert found == listed
