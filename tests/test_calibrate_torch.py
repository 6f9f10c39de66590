"""``scripts.calibrate --client torch``: the same measurements over torch.distributed's gloo backend on 4 local
processes (node 2 x core 2, over the loopback; ``-m torch``, skipped without torch), and its bad arguments (one line,
exit 2, before torch is imported)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from p2synth.hierarchies.model import CollectiveLibrary, Hierarchy, Level

ROOT = Path(__file__).resolve().parent.parent
H = Hierarchy(name="gloo-local", levels=(Level(name="node", count=2), Level(name="core", count=2)))
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _rank(rank: int, port: int, workdir: Path) -> None:
    """One forked rank: join over env:// on the loopback and calibrate; exits with main's status."""
    for key in RANK_VARIABLES:
        os.environ.pop(key, None)
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                       "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"})
    from scripts import calibrate

    code = calibrate.main(["--client", "torch", "--hierarchy", str(workdir / "h.json"),
                           "--out", str(workdir / "fitted.json"),
                           "--max-bytes", "8M", "--iters", "5", "--small-iters", "9", "--warmup", "1"])
    sys.stderr.flush()
    os._exit(code)


@pytest.mark.torch
def test_four_local_gloo_ranks_fit_both_levels_and_write_library_gloo(tmp_path):
    pytest.importorskip("torch")
    import torch.distributed  # noqa: F401  (imported once, before forking)

    from tests.forked import run_forked
    (tmp_path / "h.json").write_text(H.model_dump_json())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert run_forked(_rank, (port, tmp_path), 4, timeout_s=120) == 0
    fitted = Hierarchy.model_validate_json((tmp_path / "fitted.json").read_text())
    assert fitted.name == "gloo-local-fitted" and fitted.counts == (2, 2)
    assert fitted.library is CollectiveLibrary.GLOO
    assert json.loads((tmp_path / "fitted.json").read_text())["library"] == "gloo"
    for level in fitted.levels:
        assert level.latency_us > 0 and level.bandwidth_GBps > 0, level
    node = fitted.levels[0]
    assert node.uplink_GBps > 0 and 0 < node.duplex_efficiency <= 1  # two ranks per node: concurrent and two-way
    assert fitted.reduce_GBps > 0
    raw = json.loads((tmp_path / "fitted.calibration.json").read_text())
    assert raw["client"] == "torch" and raw["backend"] == "gloo" and raw["ranks"] == 4 and "mpi" not in raw
    assert [lv["level"] for lv in raw["levels"]] == ["node", "core"] and all("fit" in lv for lv in raw["levels"])
    assert len(raw["reduce"]["all_at_once_per_rank_GBps"]) == 4


@pytest.mark.parametrize("args, env, line", [
    (["--iters", "0"], {"RANK": "0", "WORLD_SIZE": "4"},
     "error: --iters and --small-iters must be at least 1, --warmup at least 0"),
    ([], {"RANK": "0", "WORLD_SIZE": "2"},
     "error: the hierarchy has 4 devices (node 2 x core 2) but the job has 2 ranks; run 4 processes"),
    ([], {}, "error: no rank: launch one process per rank with mpirun (OMPI_COMM_WORLD_RANK) or torchrun (RANK)"),
    (["--client", "mpi", "--ifname", "lo"], {"RANK": "0", "WORLD_SIZE": "4"},
     "error: --ifname needs --client torch (MPI picks its interfaces itself)"),
])
def test_bad_arguments_get_one_line_and_exit_2(tmp_path, args, env, line):
    (tmp_path / "h.json").write_text(H.model_dump_json())
    base = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES}
    client = [] if "--client" in args else ["--client", "torch"]
    run = subprocess.run([sys.executable, "-m", "scripts.calibrate", *client, "--hierarchy", str(tmp_path / "h.json"),
                          "--out", str(tmp_path / "fitted.json"), *args], cwd=ROOT, env={**base, **env},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stderr.strip() == line, run.stderr
    assert not (tmp_path / "fitted.json").exists()
