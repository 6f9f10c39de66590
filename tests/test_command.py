"""The ``p2synth`` console command runs the same tools as their ``python -m`` forms."""

import os
import subprocess
import sys
from pathlib import Path

from tests.runtime_support import MPI_ENV

ROOT = Path(__file__).resolve().parent.parent
P2SYNTH = Path(sys.executable).parent / "p2synth"  # the console script pip put beside this interpreter


def p2synth(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(P2SYNTH), *args], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


def test_solve_writes_exactly_what_python_m_solver_run_writes(tmp_path):
    spec = "examples/cpu-2x4.json"
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert p2synth("solve", spec, "--quiet", "--out", str(a)).returncode == 0
    subprocess.run([sys.executable, "-m", "solver.run", spec, "--quiet", "--out", str(b)], cwd=ROOT, check=True)
    assert a.read_bytes() == b.read_bytes()


def test_export_prints_the_module_python_m_solver_exports_prints(tmp_path):
    plan = tmp_path / "plan.json"
    assert p2synth("solve", "examples/cpu-2x4.json", "--quiet", "--out", str(plan)).returncode == 0
    ours = p2synth("export", str(plan), "--format", "jax")
    theirs = subprocess.run([sys.executable, "-m", "solver.exports", str(plan), "--format", "jax"], cwd=ROOT,
                            capture_output=True, text=True, check=True)
    assert ours.returncode == 0 and ours.stdout == theirs.stdout and "shard_map" in ours.stdout


def test_usage_names_the_command_and_its_subcommand():
    done = p2synth("solve", "--no-such-flag")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: unrecognized arguments: --no-such-flag"]
    assert p2synth("solve", "--help").stdout.startswith("usage: p2synth solve ")


def test_an_unknown_or_missing_subcommand_is_one_line_and_exit_2():
    done = p2synth("plan")
    assert (done.returncode, done.stderr.splitlines()) == (
        2, ["error: argument subcommand: invalid choice: 'plan' (choose from 'solve', 'export', 'bench', 'tune', 'validate', 'step')"])
    done = p2synth()
    assert (done.returncode, done.stderr.splitlines()) == (2, ["error: the following arguments are required: subcommand, args"])
    shown = p2synth("--help")
    assert shown.returncode == 0 and shown.stdout.startswith("usage: p2synth [-h] {solve,export,bench,tune,validate,step} ...")


def test_bench_and_tune_never_load_z3_or_the_solver():
    code = ("import sys; sys.modules.update(dict.fromkeys(['z3', 'p2synth.solver', 'p2synth.encodings'], None)); "
            "from p2synth.runtime.command import main; sys.exit(main([sys.argv[1], '--help']))")
    for sub in ("bench", "tune", "validate", "step"):
        done = subprocess.run([sys.executable, "-c", code, sub], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, **MPI_ENV}, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"usage: p2synth {sub} ")


def test_tune_on_the_clients_backend_loads_the_exporter_but_never_z3_or_the_search():
    code = ("import sys; sys.modules.update(dict.fromkeys(['z3', 'p2synth.encodings', 'p2synth.solver.search', "
            "'p2synth.solver.planner'], None)); from p2synth.runtime.command import main; "
            "sys.exit(main(['tune', '--client', 'torch', '--help']))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **MPI_ENV}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: p2synth tune ") and "[--client {torch}]" in done.stdout
