"""scripts/check_clients.py without downloading anything: its arguments, pytest's summary line, and the whole command
on a fake environment whose ``python`` answers the inspection, pip and pytest calls from files.

The real run (PyTorch and JAX installed, the tests run for real) is the command itself; docs/exports.md.
"""

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import check_clients
from scripts.check_clients import CHECKOUT, Framework, Outcome

# The fake interpreter. `-m venv PATH` makes bin/python in PATH, a copy of itself; in a venv (the folder above bin/),
# `-c ...` prints the venv's state.json; `-m pip ...` logs its argv to pip.log and completes state.json (or fails if
# pip-fails exists); `-m pytest ... -m MARK ...` logs its argv and working directory, sleeps `pytest-MARK.sleep`
# seconds, prints pytest-MARK.out, exits with pytest-MARK.rc.
FAKE = """\
#!{python}
import json, os, shutil, sys, time
from pathlib import Path
args = sys.argv[1:]
if args[:2] == ["-m", "venv"]:
    venv = Path(args[2])
    (venv / "bin").mkdir(parents=True)
    shutil.copy(__file__, venv / "bin" / "python")
    (venv / "state.json").write_text(json.dumps({{"versions": {{n: None for n in ["torch", "jax"]}}, "p2synth": []}}))
    sys.exit(0)
venv = Path(__file__).parent.parent
if args[0] == "-c":
    print((venv / "state.json").read_text())
elif args[:2] == ["-m", "pip"]:
    with open(venv / "pip.log", "a") as log:
        log.write(json.dumps(args) + "\\n")
    if (venv / "pip-fails").exists():
        sys.exit("ERROR: No matching distribution found for torch>=2.6")
    (venv / "state.json").write_text(json.dumps({{"versions": {{"torch": "2.14.1", "jax": "0.10.2"}},
                                                 "p2synth": [{hierarchies!r}]}}))
elif args[:2] == ["-m", "pytest"]:
    mark = args[args.index("-m", 2) + 1]
    with open(venv / "pytest.log", "a") as log:
        log.write(json.dumps([args, os.getcwd(), os.environ.get("VIRTUAL_ENV"), "PYTHONPATH" in os.environ]) + "\\n")
    if (venv / f"pytest-{{mark}}.sleep").exists():
        time.sleep(float((venv / f"pytest-{{mark}}.sleep").read_text()))
    print((venv / f"pytest-{{mark}}.out").read_text())
    sys.exit(int((venv / f"pytest-{{mark}}.rc").read_text()))
"""

PASSED = {"torch": ("..........\n139 passed, 879 deselected in 12.30s", 0),
          "jax": ("=== short test summary info ===\n139 passed, 879 deselected, 2 warnings in 9.81s", 0)}


def fake_base(tmp_path: Path, monkeypatch) -> Path:
    """Make the fake interpreter this process's sys.executable (check_clients creates venvs with it)."""
    base = tmp_path / "base-python"
    base.write_text(FAKE.format(python=sys.executable, hierarchies=str(CHECKOUT / "hierarchies")))
    base.chmod(base.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(sys, "executable", str(base))
    monkeypatch.setattr(check_clients, "required_distributions", lambda: ["torch", "jax"])
    return base


def pytest_answers(venv: Path, answers: dict) -> None:
    """What the fake pytest prints and returns for each marker."""
    for mark, (out, rc) in answers.items():
        (venv / f"pytest-{mark}.out").write_text(out)
        (venv / f"pytest-{mark}.rc").write_text(str(rc))


def lines(path: Path) -> list:
    """The JSON lines of a fake's log (none when it was never called)."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_it_makes_the_venv_installs_the_checkout_runs_each_marker_and_prints_one_line(tmp_path, monkeypatch, capsys):
    fake_base(tmp_path, monkeypatch)
    venv = tmp_path / "venv"
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    venv.mkdir()  # holding only the fake pytest's answers: no bin/python yet, so the command makes the venv
    pytest_answers(venv, PASSED)
    assert check_clients.main(["--venv", str(venv), "--pip-arg=--extra-index-url=file:///x"]) == 0
    out = capsys.readouterr()
    assert out.out == "clients: torch 2.14.1 ok (139 passed), jax 0.10.2 ok (139 passed)\n" and out.err == ""
    assert lines(venv / "pip.log") == [["-m", "pip", "install", "-q", "--extra-index-url=file:///x",
                                        "-e", f"{CHECKOUT}[test,torch,jax]"]]
    calls = lines(venv / "pytest.log")
    assert [c[0] for c in calls] == [["-m", "pytest", "-q", "-m", "torch", "tests"], ["-m", "pytest", "-q", "-m", "jax", "tests"]]
    assert {(c[1], c[2], c[3]) for c in calls} == {(str(CHECKOUT), str(venv), False)}  # repo root, the venv, no PYTHONPATH
    assert (venv / "logs" / "torch.log").read_text().strip() == PASSED["torch"][0]
    # a second run reuses the complete environment: no pip call
    assert check_clients.main(["--venv", str(venv)]) == 0
    assert len(lines(venv / "pip.log")) == 1 and len(lines(venv / "pytest.log")) == 4


def _ready_venv(tmp_path, monkeypatch, answers, p2synth=None) -> Path:
    """A fake venv that already has torch and jax (and p2synth from `p2synth`, default this checkout)."""
    base = fake_base(tmp_path, monkeypatch)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(base.read_text())
    (venv / "bin" / "python").chmod(0o755)
    (venv / "state.json").write_text(json.dumps({"versions": {"torch": "2.14.1", "jax": "0.10.2"},
                                                 "p2synth": [p2synth or str(CHECKOUT / "hierarchies")]}))
    pytest_answers(venv, answers)
    return venv


def test_a_failing_or_skipping_framework_exits_1_and_names_its_log(tmp_path, monkeypatch, capsys):
    venv = _ready_venv(tmp_path, monkeypatch, {
        "torch": ("s" * 139 + "\n139 skipped, 879 deselected in 3.89s", 0),
        "jax": ("== FAILURES ==\n== 2 failed, 137 passed, 879 deselected in 9.12s ==", 1)})
    assert check_clients.main(["--venv", str(venv), "--log-dir", str(tmp_path / "logs")]) == 1
    assert capsys.readouterr().out == (
        f"clients: torch 2.14.1 FAILED (139 skipped; log: {tmp_path / 'logs' / 'torch.log'}), "
        f"jax 0.10.2 FAILED (2 failed, 137 passed; log: {tmp_path / 'logs' / 'jax.log'})\n")
    assert not (venv / "pip.log").exists()


def test_a_venv_with_p2synth_from_another_checkout_is_reinstalled_from_this_one(tmp_path, monkeypatch, capsys):
    venv = _ready_venv(tmp_path, monkeypatch, PASSED, p2synth="/somewhere/else/hierarchies")
    assert check_clients.main(["--venv", str(venv)]) == 0
    assert len(lines(venv / "pip.log")) == 1


def test_a_failing_pip_is_one_line_and_exit_3(tmp_path, monkeypatch, capsys):
    venv = _ready_venv(tmp_path, monkeypatch, PASSED, p2synth="/somewhere/else/hierarchies")
    (venv / "pip-fails").touch()
    assert check_clients.main(["--venv", str(venv)]) == 3
    out = capsys.readouterr()
    assert out.out == "" and out.err == "error: pip install failed (exit 1): ERROR: No matching distribution found for torch>=2.6\n"
    assert not (venv / "pytest.log").exists()


def test_a_hung_framework_times_out(tmp_path, monkeypatch, capsys):
    venv = _ready_venv(tmp_path, monkeypatch, PASSED)
    (venv / "pytest-jax.sleep").write_text("30")
    assert check_clients.main(["--venv", str(venv), "--timeout", "1"]) == 1
    assert capsys.readouterr().out == (f"clients: torch 2.14.1 ok (139 passed), "
                                       f"jax 0.10.2 FAILED (timed out; log: {venv / 'logs' / 'jax.log'})\n")


@pytest.mark.parametrize(("argv", "message"), [
    (["--venv", str(CHECKOUT / ".clients-venv")], f"error: --venv {CHECKOUT / '.clients-venv'} is inside the repository"),
    (["--venv", "."], "error: --venv"),
    (["--timeout", "0"], "error: --timeout must be positive, not 0"),
    (["--frobnicate"], "error: unrecognized arguments: --frobnicate"),
])
def test_bad_arguments_are_one_line_and_exit_2(argv, message, capsys, monkeypatch):
    monkeypatch.chdir(CHECKOUT)
    assert check_clients.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_the_default_venv_is_outside_the_repository():
    args = check_clients.parse_args([])
    assert args.venv == Path.home() / ".cache" / "p2synth" / "clients-venv" and args.log_dir == args.venv / "logs"


@pytest.mark.parametrize(("output", "counts"), [
    ("....\n139 passed, 301 deselected in 0.28s\n", {"passed": 139, "deselected": 301}),
    ("==== 3 failed, 136 passed, 2 skipped, 1 warning in 9.10s ====", {"failed": 3, "passed": 136, "skipped": 2, "warnings": 1}),
    ("E   boom\n= 1 error in 0.50s =\n", {"errors": 1}),
    ("1 passed, 2 errors, 1 xfailed, 1 xpassed in 1.0s", {"passed": 1, "errors": 2, "xfailed": 1, "xpassed": 1}),
    ("no tests ran in 0.01s", {}),
    ("Traceback (most recent call last):\nImportError: no module named p2synth", {}),
    ("", {}),
])
def test_pytest_counts_reads_the_final_summary_line(output, counts):
    assert check_clients.pytest_counts(output) == counts


@pytest.mark.parametrize(("counts", "rc", "ok"), [
    ({"passed": 5}, 0, True), ({"passed": 5, "deselected": 9, "warnings": 2}, 0, True), ({"passed": 5, "skipped": 1}, 0, False),
    ({"passed": 5, "failed": 1}, 1, False), ({}, 5, False), ({"passed": 5}, 1, False), ({"passed": 0}, 0, False)])
def test_a_framework_is_ok_only_if_everything_selected_ran_and_passed(counts, rc, ok):
    assert Outcome(Framework.JAX, "0.10.2", counts, rc, Path("x.log")).ok is ok


def test_the_inspection_reads_the_running_environment():
    """The inspection script on this interpreter (the test venv, p2synth installed editable from this checkout)."""
    names = check_clients.required_distributions()
    assert {"z3-solver", "pytest", "torch", "jax"} <= set(names) and len(names) == len(set(names))
    state = check_clients.inspect_venv(Path(sys.executable), ["pytest", "no-such-distribution-p2s"])
    assert state["versions"]["pytest"] == pytest.__version__ and state["versions"]["no-such-distribution-p2s"] is None
    assert check_clients.is_complete({**state, "versions": {"pytest": pytest.__version__}})
    assert not check_clients.is_complete(state)
    assert not check_clients.is_complete({"versions": {"pytest": "9"}, "p2synth": ["/elsewhere/hierarchies"]})


def test_without_p2synth_installed_it_says_which_python_to_use():
    job = subprocess.run([sys.executable, "-c", "import runpy, sys; sys.modules['p2synth.hierarchies.cli'] = None; "
                          "runpy.run_module('scripts.check_clients', run_name='__main__')"],
                         cwd=CHECKOUT, capture_output=True, text=True, timeout=60)
    assert job.returncode == 2 and job.stdout == ""
    assert job.stderr == ("error: p2synth is not installed in this Python; run the README's first command, then "
                          ".venv/bin/python -m scripts.check_clients\n")
