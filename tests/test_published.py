"""The GPU model against published nccl-tests figures: docs/measurements/published.md and gpu-systems.md rebuilt from
their data, no published figure above the bound, and the check catching a bound that forgets the fabric's peak."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from unittest import mock

from p2synth.hierarchies import bound
from scripts import gpu_headroom, published

ROOT = Path(__file__).resolve().parent.parent


def _data() -> dict:
    return json.loads((ROOT / published.DATA).read_text())


def test_published_md_is_rebuilt_from_its_data():
    data = _data()
    assert published.markdown(data, published.rows(data)) == (ROOT / published.OUT).read_text()


def test_no_published_figure_beats_the_bound():
    found = published.rows(_data())
    assert len(found) == 132 and published.summary(found)["beat_bound"] == []


def test_a_bound_at_the_achievable_rate_is_caught():
    """Mutation: a bound that takes each level's achievable figure (bandwidth_GBps) for its peak puts measured GB200
    NVL72 ring figures (839 GB/s busbw against NCCL's 721.8 GB/s NVLink5 figure) above it."""
    def achievable(h, l):
        link = h.links[l]
        return link.bandwidth if link.uplink is None else min(link.bandwidth, link.uplink / h.devices_below(l))
    with mock.patch.object(bound, "effective_rate", achievable):
        beaten = published.summary(published.rows(_data()))["beat_bound"]
    assert "coreweave-gb200-nvl72-1rack-allreduce" in beaten


def test_gpu_systems_md_is_rebuilt():
    rows = published.rows(_data())
    assert gpu_headroom.markdown(gpu_headroom.headroom(rows)) == (ROOT / "docs/measurements/gpu-systems.md").read_text()


def test_a_bad_data_file_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"tables": [{"id": "x"}]}')
    out = subprocess.run([sys.executable, "-m", "scripts.published", "--data", str(bad)], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 2 and out.stdout == "" and len(out.stderr.strip().splitlines()) == 1
    assert out.stderr.startswith(f"error: --data {bad}")
