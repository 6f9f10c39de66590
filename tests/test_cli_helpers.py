"""hierarchies.cli helpers: atomic writes leave ordinary files."""

import os
import stat

from p2synth.hierarchies.cli import write_json_atomic, write_text_atomic


def test_atomic_writes_give_the_permissions_of_an_ordinary_write(tmp_path):
    """The written file is 0666 less the umask (a temporary file's 0600 would hide tuned.json from a group)."""
    old = os.umask(0o022)
    try:
        write_json_atomic({"a": 1}, tmp_path / "x.json")
        write_text_atomic("hi\n", tmp_path / "y.txt")
        with open(tmp_path / "z.txt", "w") as f:
            f.write("ordinary")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {"x.json": 0o644, "y.txt": 0o644, "z.txt": 0o644}
    assert (tmp_path / "x.json").read_text() == '{\n "a": 1\n}\n'
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
