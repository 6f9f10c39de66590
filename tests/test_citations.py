"""The repository stands alone: every file a doc, comment or test cites is in the repository.

A cited path with a folder must exist relative to the repository root or to
the citing file; a bare ``NAME.md`` must be some file of the repository. Not
citations of ours: paths inside URLs, another project's file written as
``owner/repo:path``, and outputs the tools write (paths .gitignore ignores).
"""

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TEXT = (".md", ".py", ".toml", ".txt", ".sh", ".cfg")
# A path with at least one folder, ending in a file type we cite; not part of a longer path, URL or owner/repo:path.
PATH = re.compile(r"(?<![\w./:$-])((?:\.\.?/)*(?:[\w.-]+/)+[\w.-]+\.(?:md|py|json|toml|txt|png|sh|csv)(?:\.gz)?)\b")
BARE_MD = re.compile(r"(?<![\w./:\"'-])([\w.-]+\.md)\b")  # a quoted bare name is a file the code writes
SELF = "tests/test_citations.py"  # its examples of bad citations are the check's own test cases
FORBIDDEN = re.compile(r"DESIGN\.md|\.\./shared|shared/reference")


def repository_files() -> list[str]:
    """Tracked files and untracked ones git does not ignore (what a commit would carry)."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return sorted({f for f in out.splitlines() if (ROOT / f).is_file()})


def ignored(paths: list[str]) -> set[str]:
    """The paths .gitignore ignores: outputs the tools write, not files of the repository."""
    if not paths:
        return set()
    done = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=ROOT, input="\n".join(paths),
                          capture_output=True, text=True)
    return set(done.stdout.splitlines())


def dangling(text: str, citing: str, files: set[str]) -> list[str]:
    """The citations in `text` (the content of file `citing`) of files that are not among `files`."""
    known = files | {str(p) for f in files for p in Path(f).parents}
    names = {Path(f).name for f in files}
    bad = [m.group(0) for m in FORBIDDEN.finditer(text)]
    candidates = []
    for m in PATH.finditer(text):
        cited = m.group(1)
        here = os.path.normpath(Path(citing).parent / cited)
        if os.path.normpath(cited) not in known and here not in known:
            candidates.append(cited)
    outputs = ignored([c.lstrip("./") for c in candidates])
    bad += [c for c in candidates if c.lstrip("./") not in outputs]
    bad += [m.group(1) for m in BARE_MD.finditer(text) if m.group(1) not in names]
    return bad


def test_no_file_cites_a_file_outside_the_repository():
    files = repository_files()
    found = {
        f: dangling((ROOT / f).read_text(errors="replace"), f, set(files))
        for f in files if (f.endswith(TEXT) or f.startswith(".ci/")) and f != SELF
    }
    assert {f: bad for f, bad in found.items() if bad} == {}


@pytest.mark.parametrize("text,bad", [
    ("see DESIGN.md section 4", ["DESIGN.md", "DESIGN.md"]),
    ("as in ../shared/reference/p2-paper.md", ["../shared", "../shared/reference/p2-paper.md"]),
    ("the notes in paper.md and `notes.md`", ["paper.md", "notes.md"]),
    ("see docs/no-such-page.md and hierarchies/nowhere.py", ["docs/no-such-page.md", "hierarchies/nowhere.py"]),
    ("see [the contract](semantics.md#5) and docs/model.md, hierarchies/verify.py", []),
    ("nccl-tests (NVIDIA/nccl-tests:doc/PERFORMANCE.md), https://example.org/a/b.md", []),
    ("the testbed writes ./testbed-hierarchy.json", []),
])
def test_the_check_catches_what_it_should_and_only_that(text, bad):
    assert dangling(text, "docs/index.md", set(repository_files())) == bad
