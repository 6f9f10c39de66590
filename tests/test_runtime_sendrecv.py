"""send_recv (a shift along one axis) end to end: the solver's plan, the exact check and every fault under mpiexec.

The spec puts ``pipe`` (4) over node 2 x socket 2 and ``data`` (2) on the
cores of a 2 x 2 x 2 machine, so the shift's one step spans two levels
(``wrong-slice`` applies) over groups of four (``wrong-neighbour`` applies);
rank 0 holds its whole buffer of four chunks (``swap-chunks`` applies).
Nothing is summed, repacked or split into blocks: the other kinds apply to
no program, which runtime.bench says in one line (exit 2).
"""

import json
import subprocess
import sys

import pytest

from p2synth.runtime.faults import FaultKind
from tests.runtime_support import EACH, ROOT, run_mpi

SPEC = {
    "hierarchy": {"levels": [
        {"name": "node", "count": 2, "bandwidth_GBps": 1.0, "uplink_GBps": 1.0, "latency_us": 20},
        {"name": "socket", "count": 2, "bandwidth_GBps": 4.0, "latency_us": 5},
        {"name": "core", "count": 2, "bandwidth_GBps": 8.0, "latency_us": 1}]},
    "axes": [{"name": "pipe", "size": 4}, {"name": "data", "size": 2}],
    "request": {"axes": ["pipe"], "collective": "send_recv"},
    "message_bytes": 1_000_000,
    "placements": [[[2, 2, 1], [1, 1, 2]]],
}
APPLIES = {FaultKind.SWAP_CHUNKS, FaultKind.WRONG_SLICE, FaultKind.WRONG_NEIGHBOUR}


def solve(tmp_path, spec: dict = SPEC, *extra: str) -> subprocess.CompletedProcess:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return subprocess.run([sys.executable, "-m", "solver.run", str(path), "--quiet", *extra], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_plan_holds_the_one_shift_proved_best_at_the_hand_computed_time(tmp_path):
    """Alpha-beta by hand (docs/model.md, "Point-to-point"), 1 MB: pipe@node's wrap-around leaves each node from one
    sender per pipe group; a node holds 4 cores and 2 of them are pipe members inside it (socket factor 2), so 2
    senders share its 1 GB/s uplink: 0.5 GB/s, 2 ms, + 20 us. pipe@socket: 5 us + 1 MB / 4 GB/s = 255 us. The
    slower: 2.02 ms."""
    plan = tmp_path / "plan.json"
    job = solve(tmp_path, SPEC, "--out", str(plan))
    assert job.returncode == 0, job.stderr
    entry = json.loads(plan.read_text())["placements"][0]
    shift = {"steps": [{"op": "send_recv", "slice": [["pipe", "node"], ["pipe", "socket"]]}], "pipeline": 1}
    assert {k: entry["default"][k] for k in ("steps", "pipeline")} == shift
    assert [{k: p[k] for k in ("steps", "pipeline")} for p in entry["programs"]] == [shift]
    assert entry["program_count"] == 1 and entry["optimal"] is True
    assert entry["default"]["cost_s"] == pytest.approx(2.02e-3, rel=1e-12)
    assert entry["programs"][0]["cost_s"] == entry["default"]["cost_s"]


WORKLOAD = {k: v for k, v in SPEC.items() if k not in ("request", "message_bytes")} | {"workload": [
    {"name": "grads", "axes": ["data"], "message_bytes": 4096},
    {"name": "acts", "axes": ["pipe", "data"], "collective": "send_recv", "message_bytes": 4096}]}


@pytest.mark.parametrize("spec,field", [
    ({**SPEC, "request": {"axes": ["pipe", "data"], "collective": "send_recv"}}, "request.axes"),
    (WORKLOAD, "workload.1.axes"),
])
def test_a_send_recv_over_two_axes_is_one_spec_error(tmp_path, spec, field):
    job = solve(tmp_path, spec)
    assert job.returncode == 2 and job.stdout == ""
    assert job.stderr.strip().splitlines() == [
        f"spec error: {field}: send_recv shifts along exactly one axis, not 2; name one axis (one send_recv request per axis)"]


@pytest.mark.mpi
def test_send_recv_is_exact_and_every_applicable_fault_is_detected(tmp_path):
    """mpiexec -n 8: the clean run exact (check and timed runs), each applicable kind detected (exit 3, wrong > 0),
    the others applying to no program (exit 2, one line)."""
    plan = tmp_path / "plan.json"
    job = solve(tmp_path, SPEC, "--out", str(plan))
    assert job.returncode == 0, job.stderr
    clean = tmp_path / "clean.json"
    calls = [f"{plan} --bytes 4K:64K:4 --warmup 0 --iters 1 --repeats 1 --out {clean}"]
    outs = {}
    for kind in FaultKind:
        outs[kind] = tmp_path / f"{kind}.json"
        calls.append(f"{plan} --bytes 4096 --inject {kind} --out {outs[kind]}")
    job = run_mpi(8, ["-c", EACH, *calls], timeout=300)
    assert job.returncode == 0, job.stderr
    codes = json.loads(job.stdout.splitlines()[-1])
    assert codes == [0] + [3 if kind in APPLIES else 2 for kind in FaultKind]
    results = json.loads(clean.read_text())["results"]
    assert [r["bytes"] for r in results] == [4096, 16384, 65536]
    assert all(r["wrong"] == 0 and r["wrong_timed"] == 0 and r["is_default"] for r in results)
    for kind in APPLIES:
        [result] = json.loads(outs[kind].read_text())["results"]
        assert result["verdict"] == "detected" and result["wrong"] > 0, kind
    # the wrong neighbour moves every element: all 1024 of each of the 8 ranks
    assert json.loads(outs[FaultKind.WRONG_NEIGHBOUR].read_text())["results"][0]["wrong"] == 8 * 1024
    errors = [line for line in job.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == len(FaultKind) - len(APPLIES) and all(" applies to none of the " in e for e in errors)


def test_a_plan_file_with_a_send_recv_over_two_axes_is_one_line(tmp_path):
    """A hand-edited plan (the solver never writes one): runtime.bench refuses it in one line, exit 2."""
    plan = tmp_path / "plan.json"
    assert solve(tmp_path, SPEC, "--out", str(plan)).returncode == 0
    data = json.loads(plan.read_text())
    data["request"]["axes"] = ["pipe", "data"]
    plan.write_text(json.dumps(data))
    job = run_mpi(8, ["-m", "runtime.bench", str(plan), "--bytes", "4096"], timeout=120)
    assert job.returncode == 2
    assert [line for line in job.stderr.splitlines() if line.startswith("error:")] == [
        "error: bad plan: ValueError: send_recv shifts along exactly one axis, not 2"]  # rank 0 speaks
