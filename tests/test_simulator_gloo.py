"""The simulator's gloo profile (``"library": "gloo"``; solver/gloo.py ``gloo_times``, docs/simulator.md "gloo"):
hand-computed steps, Z3 minimising it exactly, no program below the lower bound, and the solver end to end."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from p2synth.hierarchies import Axis, Collective, Hierarchy, Level, Placement, Request
from p2synth.hierarchies import abstract
from p2synth.hierarchies.model import CollectiveLibrary, ReduceScatterRun
from p2synth.solver.cost import step_seconds
from p2synth.solver.simulator import Simulator
from tests import test_bound
from tests.test_simulator import assert_z3_ranks_as_the_search

AR, RS, AG, R, B, A2A, SR = Collective
GLOO = CollectiveLibrary.GLOO
ROOT = Path(__file__).resolve().parent.parent
M = float(1 << 26)
GAMMA = 1.0 / 2e9  # reduce_GBps 2
OVERHEAD = 5e-6


def _two_level(library=GLOO, uplink=1.0, nodes=2, cores=2, duplex=None) -> Placement:
    """node x core, nodes joined at 1 GB/s per device (10 us), the node's uplink `uplink` GB/s shared by its cores;
    cores at 10 GB/s (1 us); summing at 2 GB/s; 5 us per call. One axis over every device."""
    h = Hierarchy(levels=(Level(name="node", count=nodes, bandwidth_GBps=1.0, uplink_GBps=uplink, latency_us=10.0,
                                duplex_efficiency=duplex),
                          Level(name="core", count=cores, bandwidth_GBps=10.0, latency_us=1.0)),
                  reduce_GBps=2.0, step_overhead_us=5.0, library=library)
    return Placement(h, (Axis(name="data", size=nodes * cores),), ((nodes, cores),))


def _step(p: Placement, request_op: Collective, op: Collective, S: int, Y: int = 0, m: float = M, **kw) -> float:
    """Seconds of step (op, S) of a `request_op` request over the axis, with the cells `Y` scattered."""
    request = Request(frozenset({0}), request_op)
    cells = len(request.reduced_cells(p))
    return step_seconds(Simulator(p, request, m, **kw), abstract.AbstractState(0, Y, 0), op, S, cells)


def test_all_reduce_is_one_ring_in_rank_order():
    """node 2 x core 2, one all_reduce over all four. gloo's ring: each member sends 2 (k-1)/k m = 1.5 m, and one
    flow crosses each node boundary per direction: 1.5 m at one device's 1 GB/s (the node's uplink, 1 GB/s for its
    two cores, carries that one flow: 1.5 m x 2 devices / 2 members / 1 GB/s, the same); 2 (k-1) = 6 rounds of the
    slowest spanned latency (10 us); (k-1)/k m summed."""
    ring = 6 * 10e-6 + 1.5 * M / 1e9 + 0.75 * M * GAMMA + OVERHEAD
    assert math.isclose(_step(_two_level(), AR, AR, 0b11), ring, rel_tol=1e-12)
    # Open MPI's flat Rabenseifner (no coll/han: a pipelined piece) pushes both members' halves through the NIC
    open_mpi = _step(_two_level(CollectiveLibrary.OPEN_MPI), AR, AR, 0b11, nonblocking=True)
    assert math.isclose(open_mpi, 2 * (10e-6 + 1e-6) + 2 * M / 1e9 + 0.75 * M * GAMMA + OVERHEAD, rel_tol=1e-12)
    # the ideal hierarchy-aware schedule moves the same bytes over the NIC, in 2 log2 k rounds
    aware = _step(_two_level(None), AR, AR, 0b11, hierarchy_aware=True)
    assert math.isclose(aware, 2 * 11e-6 + 1.5 * M / 1e9 + 0.75 * M * GAMMA + OVERHEAD, rel_tol=1e-12)


def test_the_rings_one_flow_per_boundary_gets_one_devices_bandwidth():
    """Without a shared uplink (each core its own 1 GB/s NIC) the ideal schedules spread a unit's traffic over its
    members; gloo's ring sends it all through the one member next to the boundary."""
    ring = _step(_two_level(uplink=None), AR, AR, 0b11)
    assert math.isclose(ring, 6 * 10e-6 + 1.5 * M / 1e9 + 0.75 * M * GAMMA + OVERHEAD, rel_tol=1e-12)
    aware = _step(_two_level(None, uplink=None), AR, AR, 0b11, hierarchy_aware=True)
    assert math.isclose(aware, 2 * 11e-6 + 0.75 * M / 1e9 + 0.75 * M * GAMMA + OVERHEAD, rel_tol=1e-12)


def test_the_ring_crossing_both_ways_pays_the_duplex_efficiency():
    slow = _step(_two_level(duplex=0.5), AR, AR, 0b11)
    assert math.isclose(slow, 6 * 10e-6 + 3.0 * M / 1e9 + 0.75 * M * GAMMA + OVERHEAD, rel_tol=1e-12)


def _library_rs(p: Placement) -> Placement:
    """`p` with gloo's own reduce_scatter (``reduce_scatter: library``), as the exports ran it before the exchange."""
    h = p.hierarchy.model_copy(update={"reduce_scatter": ReduceScatterRun.LIBRARY})
    return Placement(h, p.axes, p.matrix)


def test_gloos_own_reduce_scatter_costs_the_all_reduce_of_its_whole_input():
    """``reduce_scatter: library``: ProcessGroupGloo's reduce_scatter all-reduces the whole input and keeps its block:
    the all_reduce's time, on every slice, scattered or not, blocking or not (gloo runs async calls alike)."""
    p = _library_rs(_two_level())
    for S in (0b01, 0b10, 0b11):
        for Y in (0, 0b01, 0b10):
            if S & Y:
                continue
            for nonblocking in (False, True):
                assert _step(p, AR, RS, S, Y, nonblocking=nonblocking) == _step(p, AR, AR, S, Y, nonblocking=nonblocking)
    # the measured 924 vs 855 ms (docs/measurements/ddp/gloo-rs/gloo-steps-4x2-1gbit.txt): twice the bytes of an ideal reduce_scatter (the summing is the same)
    assert _step(p, AR, RS, 0b11) > 1.6 * _step(_two_level(None), AR, RS, 0b11, hierarchy_aware=True)


def test_the_exported_reduce_scatter_is_an_exchange_and_a_sum():
    """What the exported module runs on gloo (all_to_all_single, then the sum; an omitted field means it): node 2 x
    core 2, over all four. Each member sends m/4 to each of 3 peers: the node's two members send m/2 each to the other
    node through its shared 1 GB/s uplink (m), m/4 to the other core at 10 GB/s; one latency per peer (2 x 10 us +
    1 us); 3/4 m summed. Each member sends half the all_reduce's bytes, the node's uplink carries m against the ring's
    1.5 m; the same price as the Open MPI runtime's exchange."""
    p = _two_level()
    expected = 21e-6 + M / 1e9 + 0.75 * M * GAMMA + OVERHEAD
    assert math.isclose(_step(p, AR, RS, 0b11), expected, rel_tol=1e-12)
    assert _step(p, AR, RS, 0b11) < 0.75 * _step(p, AR, AR, 0b11)
    explicit = Placement(p.hierarchy.model_copy(update={"reduce_scatter": ReduceScatterRun.EXCHANGE}), p.axes, p.matrix)
    for S in (0b01, 0b10, 0b11):
        for nonblocking in (False, True):
            ours = _step(p, AR, RS, S, nonblocking=nonblocking)
            assert ours == _step(explicit, AR, RS, S, nonblocking=nonblocking)
            assert ours == _step(_two_level(CollectiveLibrary.OPEN_MPI), AR, RS, S, nonblocking=nonblocking)


def test_all_gather_is_a_ring():
    """From the scattered state (each holds m/4) the ring all_gather sends (k-1) m/4 = 0.75 m per member, one flow
    per node boundary, k-1 = 3 rounds of 10 us; nothing summed."""
    assert math.isclose(_step(_two_level(), AR, AG, 0b11, Y=0b11), 3 * 10e-6 + 0.75 * M / 1e9 + OVERHEAD, rel_tol=1e-12)


def test_reduce_is_a_ring_reduce_scatter_then_a_gather_to_the_root():
    """gloo/reduce.cc: the ring reduce-scatter (0.75 m per member, 3 rounds, 0.75 m summed), then each member sends
    its chunk straight to the root: m/2 from the other node into the root's at its 1 GB/s, one 10 us latency (the
    core level's share, 0.75 m at 10 GB/s after 1 us, is faster)."""
    expected = 3 * 10e-6 + 0.75 * M / 1e9 + 0.75 * M * GAMMA + 10e-6 + 0.5 * M / 1e9 + OVERHEAD
    assert math.isclose(_step(_two_level(), R, R, 0b11), expected, rel_tol=1e-12)


def test_broadcast_is_a_binomial_tree():
    """gloo/broadcast.cc: log2 k rounds of the whole buffer, the inner one first; the node round's two senders (both
    cores of the root's node) share its 1 GB/s uplink: 2 m. No choice by size, unlike the ideal model."""
    expected = (10e-6 + 2 * M / 1e9) + (1e-6 + M / 10e9) + OVERHEAD
    assert math.isclose(_step(_two_level(), B, B, 0b11), expected, rel_tol=1e-12)
    assert _step(_two_level(None), B, B, 0b11) < expected  # the ideal model takes the scatter-based broadcast here


def test_all_to_all_and_send_recv_keep_the_shared_terms():
    for op in (A2A, SR):
        assert _step(_two_level(), op, op, 0b11) == _step(_two_level(None), op, op, 0b11)


def test_z3_minimises_the_gloo_terms_exactly():
    """node 2 x core 2 (small and large), node 4 x core 2 and rack 2 x node 2 x core 2 under gloo: Z3's top 3 over
    the sketch cost what the explicit search's top 3 cost, and Z3's unsat proves that list."""
    rack = Hierarchy(levels=(Level(name="rack", count=2, bandwidth_GBps=0.5, uplink_GBps=0.5, latency_us=30.0, duplex_efficiency=0.7),
                             Level(name="node", count=2, bandwidth_GBps=1.0, uplink_GBps=1.0, latency_us=10.0),
                             Level(name="core", count=2, bandwidth_GBps=10.0, latency_us=1.0)), reduce_GBps=2.0, library=GLOO)
    three = Placement(rack, (Axis(name="data", size=8),), ((2, 2, 2),))
    cases = ([(_two_level(), op, m) for op in (AR, RS, R, B) for m in (16384.0, float(1 << 24))]
             + [(_two_level(nodes=4), AR, float(1 << 24)), (three, AR, float(1 << 24)), (three, RS, 65536.0)])
    assert_z3_ranks_as_the_search(cases)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(test_bound.cases())
def test_no_gloo_program_is_predicted_below_the_bound(case):
    """The lower bound of hierarchies/bound.py holds for gloo's terms too (random hierarchies, requests, sizes; every
    program, 1..16 pieces, both cost models): its latency floor (one latency per spanned level) is at most a ring's
    k-1 rounds of the slowest one, and a ring's one flow per boundary carries at least a unit's share of the cut."""
    p, request, nbytes, small = case
    p = Placement(p.hierarchy.model_copy(update={"library": GLOO}), p.axes, p.matrix)
    assert test_bound.cheapest_over_bound((p, request, nbytes, small)) >= 1 - 1e-9


SPEC = {
    "hierarchy": {"name": "cpu-4x2-gloo", "library": "gloo", "reduce_GBps": 2.0, "step_overhead_us": 50, "levels": [
        {"name": "node", "count": 4, "bandwidth_GBps": 0.119, "uplink_GBps": 0.12, "latency_us": 60},
        {"name": "core", "count": 2, "bandwidth_GBps": 1.0, "latency_us": 20}]},
    "axes": [{"name": "data", "size": 8}],
    "request": {"axes": ["data"], "collective": "all_reduce"},
    "message_bytes": 1 << 25,
    "max_steps": 4,
    "cost_model": "simulator",
}


def _program(steps) -> str:
    return " -> ".join(f"{s['op']}({','.join(lv for _, lv in s['slice'])})" for s in steps)


def test_the_solver_ranks_programs_for_gloo_end_to_end(tmp_path):
    """``python -m solver.run`` on a 4x2 spec that says ``"library": "gloo"``, proved. With gloo's own reduce_scatter
    (``reduce_scatter: library``, an all_reduce of the whole input) the pick never runs one over the node level, and
    the flat RS -> AG ranks below a hierarchical program and below the default ring. With the exports' exchange (the
    default) the pick does run one there (RS(core) -> RS(node) -> AG(node) -> AG(core)), faster than the library's
    pick, and the flat RS -> AG beats the default ring."""
    def solve(spec: dict, name: str) -> dict:
        (tmp_path / f"{name}.json").write_text(json.dumps(spec))
        run = subprocess.run([sys.executable, "-m", "solver.run", str(tmp_path / f"{name}.json"), "--top", "all",
                              "--jobs", "1", "--quiet", "--out", str(tmp_path / f"{name}.out.json")],
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        [placement] = json.loads((tmp_path / f"{name}.out.json").read_text())["placements"]
        assert placement["optimal"]
        return placement

    def node_rs(program: dict) -> bool:
        return any(s["op"] == "reduce_scatter" and any(lv == "node" for _, lv in s["slice"]) for s in program["steps"])

    flat_name = "reduce_scatter(node,core) -> all_gather(node,core)"
    library = solve({**SPEC, "hierarchy": {**SPEC["hierarchy"], "reduce_scatter": "library"}}, "library")
    costs = {_program(p["steps"]): p["cost_s"] for p in library["programs"]}  # each program once, at its best pieces
    best = library["programs"][0]
    assert not node_rs(best) and len(best["steps"]) > 1 and best["cost_s"] < library["default"]["cost_s"]
    hierarchical = costs["reduce_scatter(core) -> all_reduce(node) -> all_gather(core)"]
    assert hierarchical < library["default"]["cost_s"] < costs[flat_name]
    exchange = solve(SPEC, "exchange")
    costs = {_program(p["steps"]): p["cost_s"] for p in exchange["programs"]}
    best = exchange["programs"][0]
    assert _program(best["steps"]) == "reduce_scatter(core) -> reduce_scatter(node) -> all_gather(node) -> all_gather(core)"
    assert best["cost_s"] < library["programs"][0]["cost_s"] and costs[flat_name] < exchange["default"]["cost_s"]
    assert exchange["default"]["cost_s"] == library["default"]["cost_s"]  # DDP's all_reduce: gloo's ring either way
