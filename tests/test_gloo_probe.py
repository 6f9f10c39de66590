"""scripts/gloo_probe.py: its pure parts without torch (arguments, the layout's groups, the table and the JSON from a
recorded list of timings), and one run on 4 local gloo processes over the loopback (``-m torch``; skipped without
torch)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from scripts import gloo_probe

ROOT = Path(__file__).resolve().parent.parent
TXT = ROOT / "docs" / "measurements" / "ddp" / "gloo-rs" / "gloo-steps-4x2-1gbit.txt"


def test_the_layouts_groups_are_one_member_per_node_and_the_ranks_of_one_node():
    node, core = gloo_probe.layout_groups(4, 2)
    assert node == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert core == [[0, 1], [2, 3], [4, 5], [6, 7]]
    node, core = gloo_probe.layout_groups(2, 3)
    assert node == [[0, 3], [1, 4], [2, 5]] and core == [[0, 1, 2], [3, 4, 5]]


def test_the_calls_and_their_labels_are_the_recorded_files():
    """The labels of a 4 x 2 run at 64 MiB begin with those of docs/measurements/ddp/gloo-rs/gloo-steps-4x2-1gbit.txt, in
    order (the probe that wrote it had no exchange calls)."""
    labels = [c.label for c in gloo_probe.calls(4, 2, 64 << 20)]
    recorded = [line[:52].rstrip() for line in TXT.read_text().splitlines() if not line.startswith("#")]
    assert labels[:len(recorded)] == recorded and len(labels) == len(recorded) + 3
    assert labels[-3:] == ["all_to_all + sum core pairs 64->32 MiB", "all_to_all + sum node groups 32->8 MiB",
                           "the four steps, RS as all_to_all + sum"]


def _recorded() -> tuple[dict, list[dict]]:
    meta = {"tool": "scripts.gloo_probe", "commit": "abc", "started_utc": "2026-01-01T00:00:00Z",
            "finished_utc": "2026-01-01T00:01:00Z", "torch": "2.14.1", "backend": "gloo", "dtype": "float32",
            "bytes_per_rank": 64 << 20, "repeats": 3, "layout": {"nodes": 4, "ranks_per_node": 2, "world": 8}}
    times = [[1.0071, 0.99, 1.2], [0.3712, 0.4, 0.37], [0.9241, 0.93, 0.9], [0.4676, 0.47, 0.46], [0.2828, 0.29, 0.28],
             [0.8551, 0.86, 0.85], [1.9608, 1.97, 1.95], [0.1505, 0.16, 0.15]]
    records = [{"name": c.name, "label": c.label, "group": c.group, "seconds": t}
               for c, t in zip(gloo_probe.calls(4, 2, 64 << 20), times)]
    return meta, records


def test_the_table_prints_each_median_in_ms_as_the_recorded_file():
    meta, records = _recorded()
    text = gloo_probe.table(meta, records)
    lines = text.splitlines()
    assert lines[0].startswith("# gloo collectives on the 4 nodes x 2 ranks layout, torch 2.14.1")
    body = [line for line in TXT.read_text().splitlines() if not line.startswith("#")]
    assert lines[2:] == body  # the same labels, columns and medians


def test_the_json_keeps_every_repeat_and_its_median():
    meta, records = _recorded()
    doc = json.loads(json.dumps(gloo_probe.record(meta, records)))
    assert doc["commit"] == "abc" and doc["layout"]["world"] == 8 and doc["torch"] == "2.14.1"
    first = doc["calls"][0]
    assert first["name"] == "all_reduce_world" and first["seconds"] == [1.0071, 0.99, 1.2]
    assert first["median_s"] == 1.0071


@pytest.mark.parametrize("argv, words", [
    (["--out", "x.json", "--size", "1000"], "multiple of 32"),
    (["--out", "x.json", "--nodes", "0"], "--nodes"),
    (["--nodes", "2"], "--out"),
    (["--out", "x.json", "--repeats", "two"], "--repeats"),
])
def test_bad_arguments_are_one_line_and_exit_2(argv, words):
    run = subprocess.run([sys.executable, "-m", "scripts.gloo_probe", *argv], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 2 and run.stdout == ""
    assert len(run.stderr.strip().splitlines()) == 1 and words in run.stderr and "Traceback" not in run.stderr


def test_no_rank_is_one_line_and_exit_2(tmp_path):
    """Without a launcher's rank variables the probe says so, before importing torch; so does a world that does not
    fit the layout."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")}
    run = subprocess.run([sys.executable, "-m", "scripts.gloo_probe", "--out", str(tmp_path / "x.json")], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1 and "no rank" in run.stderr
    run = subprocess.run([sys.executable, "-m", "scripts.gloo_probe", "--out", str(tmp_path / "x.json")], cwd=ROOT,
                         env={**env, "RANK": "0", "WORLD_SIZE": "6"}, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stderr.strip() == "error: 6 ranks launched for a 4 x 2 layout"


def _rank(rank: int, port: int, out: Path) -> None:
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                       "GLOO_SOCKET_IFNAME": "lo"})
    code = gloo_probe.main(["--nodes", "2", "--ranks-per-node", "2", "--size", "64K", "--repeats", "2",
                            "--out", str(out), "--ifname", "lo"])
    os._exit(code)


@pytest.mark.torch
def test_four_local_gloo_ranks_run_every_call(tmp_path):
    pytest.importorskip("torch")
    import torch.distributed  # noqa: F401  (imported once, before forking)

    from tests.forked import run_forked
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "probe.json"
    assert run_forked(_rank, (port, out), 4, timeout_s=240) == 0
    doc = json.loads(out.read_text())
    assert doc["layout"] == {"nodes": 2, "ranks_per_node": 2, "world": 4, "node_groups": [[0, 2], [1, 3]],
                             "core_groups": [[0, 1], [2, 3]]}
    assert [c["name"] for c in doc["calls"]] == [c.name for c in gloo_probe.calls(2, 2, 65536)]
    assert all(len(c["seconds"]) == 2 and all(t > 0 for t in c["seconds"]) for c in doc["calls"])
    assert doc["bytes_per_rank"] == 65536 and doc["backend"] == "gloo"
    times = [datetime.fromisoformat(doc[k]) for k in ("started_utc", "finished_utc")]
    assert times == sorted(times) and all(t.utcoffset().total_seconds() == 0 for t in times)
