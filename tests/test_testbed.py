"""The emulated cluster testbed (scripts.testbed) and calibration (scripts.calibrate).

The first part checks the pure pieces (rates, names, topology, hierarchy, launcher
command, fitting) anywhere. Tests marked ``testbed`` build a real testbed: they need
root, network namespaces, tc and mpirun, and skip with the reason otherwise.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.runtime_support import testbed_skip_reason

from p2synth.hierarchies.model import CollectiveLibrary, Hierarchy, ReduceScatterRun
from p2synth.runtime.calibration import library_of
from scripts.calibrate import LARGE, fit_alpha_beta, fitted_hierarchy, message_sizes
from scripts.testbed.config import (
    PREFIX,
    SUBNET,
    ConfigError,
    TestbedConfig,
    format_rate,
    links,
    owned_namespace,
    parse_rate,
    state_path,
)
from scripts.testbed.launch import agent_script, hostfile_text, mpirun_argv

ROOT = Path(__file__).resolve().parent.parent


def cli(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "scripts.testbed", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, check=False, env={**os.environ, **(env or {})})


# ---- pure pieces ---------------------------------------------------------------------------
@pytest.mark.parametrize("text,bits", [("1gbit", 10**9), ("200mbit", 2 * 10**8), ("1.5Gbit", 15 * 10**8),
                                       ("250kbit", 250_000), ("none", None), (" unshaped ", None)])
def test_parse_rate(text, bits):
    assert parse_rate(text) == bits


@pytest.mark.parametrize("text", ["1gbps", "100mbps", "fast", "1g", "", "10kbit"])
def test_parse_rate_refuses_bytes_units_and_nonsense(text):
    with pytest.raises(ConfigError):
        parse_rate(text)


def test_format_rate_round_trips():
    for text in ("1gbit", "200mbit", "1500mbit", "250kbit", "none"):
        assert format_rate(parse_rate(text)) == text


@pytest.mark.parametrize("kwargs,msg", [
    ({"nodes": 3, "racks": 2}, "--racks must divide"),
    ({"inter_rack_bps": 10**8}, "--inter-rack needs --racks"),
    ({"nodes": 0}, "--nodes"),
    ({"ranks_per_node": 0}, "--ranks-per-node"),
    ({"instance": "Bad_Name"}, "instance"),
])
def test_config_refuses_impossible_layouts(kwargs, msg):
    with pytest.raises(ConfigError, match=msg):
        TestbedConfig(**{"nodes": 4, "ranks_per_node": 2, "inter_node_bps": 10**9, **kwargs})


def test_hierarchy_of_a_racked_testbed_matches_rank_placement_and_rates():
    cfg = TestbedConfig(nodes=4, ranks_per_node=2, inter_node_bps=10**9, racks=2, inter_rack_bps=2 * 10**8)
    h = Hierarchy.model_validate_json(cfg.hierarchy().model_dump_json())  # what `up` writes loads
    assert h.level_names == ("rack", "node", "core") and h.counts == (2, 2, 2) and h.num_devices == cfg.world_size
    rack, node, core = h.levels
    assert node.bandwidth_GBps == node.uplink_GBps == 0.125
    assert rack.uplink_GBps == 0.025 and rack.bandwidth_GBps == 0.025  # a rank crossing racks meets the uplink
    assert core.uplink_GBps is None and core.bandwidth_GBps > 10 * node.bandwidth_GBps
    for r in range(cfg.world_size):  # mixed-radix coordinates agree with "consecutive ranks per node"
        c = h.coords(r)
        assert c[0] * 2 + c[1] == cfg.node_of_rank(r) and cfg.rack_of(cfg.node_of_rank(r)) == c[0]


def test_hierarchy_without_racks_has_two_levels():
    h = TestbedConfig(nodes=3, ranks_per_node=4, inter_node_bps=None).hierarchy()
    assert h.level_names == ("node", "core") and h.counts == (3, 4) and h.levels[0].bandwidth_GBps > 0


def test_links_are_prefixed_short_unique_and_shaped_as_asked():
    cfg = TestbedConfig(nodes=6, ranks_per_node=1, inter_node_bps=10**9, racks=3, inter_rack_bps=3 * 10**8)
    ls = links(cfg)
    assert len(ls) == 3 + 6
    names = [(ln.ns_a, ln.if_a) for ln in ls] + [(ln.ns_b, ln.if_b) for ln in ls]
    assert len(set(names)) == len(names)
    assert all(ifn.startswith(PREFIX) and len(ifn) <= 15 for _, ifn in names)
    assert all(ns.startswith(PREFIX) for ns, _ in names)
    assert [ln.rate_bps for ln in ls] == [3 * 10**8] * 3 + [10**9] * 6
    addrs = [ln.address.split("/")[0] for ln in ls if ln.address]
    assert len(set(addrs)) == 6 and all(__import__("ipaddress").ip_address(a) in SUBNET for a in addrs)


def test_namespace_ownership_is_exact_per_instance():
    assert owned_namespace("p2s-n0") and owned_namespace("p2s-sw") and owned_namespace("p2s-n12")
    assert not owned_namespace("p2s-t1-n0") and owned_namespace("p2s-t1-n0", "t1")
    assert not owned_namespace("p2s-probe42") and not owned_namespace("other-n0") and not owned_namespace("p2s-n0x")
    assert state_path("") != state_path("t1")


def test_launcher_command_has_the_flags_docs_testbed_lists(tmp_path):
    cfg = TestbedConfig(nodes=2, ranks_per_node=3, inter_node_bps=10**9, instance="x")
    state = {"status": "up", "config": cfg.to_dict(), "nodes": cfg.node_table()}
    argv = mpirun_argv(state, ["python", "-c", "pass"], tmp_path / "agent", tmp_path / "hosts", "/w")
    text = " ".join(argv)
    assert argv[1:4] == ["netns", "exec", "p2s-x-n0"] and "--uts" in argv
    for flag in ("-n 6", "--bind-to none", "mpi_yield_when_idle 1", "btl self,sm,tcp", f"btl_tcp_if_include {SUBNET}",
                 f"oob_tcp_if_include {SUBNET}", f"plm_ssh_agent {tmp_path / 'agent'}", "--wdir /w"):
        assert flag in text
    assert argv[-3:] == [sys.executable, "-c", "pass"]  # python -> the running interpreter
    assert hostfile_text(state) == "10.231.0.1 slots=3\n10.231.0.2 slots=3\n"
    agent = agent_script(state)
    assert "10.231.0.2|p2s-x-n1) ns=p2s-x-n1 hn=p2s-x-n1" in agent and "--uts" in agent


def test_fit_recovers_alpha_and_beta_from_exact_times():
    sizes = message_sizes(16 << 20)
    alpha, bw = 20e-6, 0.125e9
    fit = fit_alpha_beta({s: [alpha + s / bw] * 3 for s in sizes})
    assert fit.bandwidth == pytest.approx(bw, rel=1e-6)
    assert fit.alpha_s == alpha + 256 / bw  # the median small-message time: its per-byte part is 10% here
    assert max(map(abs, fit.rel_residuals[-3:])) < 1e-3 and max(map(abs, fit.rel_residuals)) < 0.15


def test_fit_ignores_a_token_bucket_burst():
    # a 256 KiB burst passes at line speed: small and middle sizes are faster than alpha + s/beta
    sizes, alpha, bw, burst = message_sizes(16 << 20), 10e-6, 0.125e9, 256 << 10
    times = {s: [alpha + max(s - burst, 0) / bw + min(s, burst) / 5e9] for s in sizes}
    fit = fit_alpha_beta(times)
    assert fit.bandwidth == pytest.approx(bw, rel=1e-6) and fit.alpha_s == pytest.approx(alpha, rel=0.01)
    assert LARGE <= 1 << 20


def test_fit_latency_shrugs_off_a_slow_spell_during_one_size():
    # 8 B measured while the box was busy (ms), 256 B and 4 KiB at the real 10 us
    samples = {8: [1.4e-3] * 30, 256: [10e-6] * 30, 4096: [11e-6] * 30, 1 << 20: [8.4e-3] * 5, 4 << 20: [33.6e-3] * 5}
    fit = fit_alpha_beta(samples)
    assert fit.alpha_s == pytest.approx(10e-6, rel=0.11) and fit.bandwidth == pytest.approx(0.1248e9, rel=0.01)


def test_fitted_hierarchy_loads_and_keeps_unmeasured_levels():
    h = TestbedConfig(nodes=1, ranks_per_node=4, inter_node_bps=10**9).hierarchy()
    res = {1: {"fit": {"latency_us": 1.23456, "bandwidth_GBps": 7.654321},
               "concurrent": {"uplink_GBps": 20.0}, "duplex": {"efficiency": 0.54321}}}
    out = fitted_hierarchy(h, res, reduce_GBps=6.2625)
    assert out.levels[0] == h.levels[0] and out.levels[1].bandwidth_GBps == 7.654 and out.levels[1].latency_us == 1.235
    # the innermost level's two-way figure is CPU contention, not a link: not written
    assert out.levels[1].uplink_GBps == 20.0 and out.levels[1].duplex_efficiency is None
    res[0] = {"fit": {"latency_us": 20.0, "bandwidth_GBps": 0.1}, "duplex": {"efficiency": 0.54321}}
    assert fitted_hierarchy(h, res).levels[0].duplex_efficiency == 0.543
    assert Hierarchy.model_validate_json(out.model_dump_json()) == out and out.name.endswith("-fitted")
    if "reduce_GBps" in Hierarchy.model_fields:  # the summing rate, where the model carries it
        assert out.reduce_GBps == 6.263
    # the library that ran the measurements, named by MPI's library string, is written and loads back
    assert out.library is None
    lib = fitted_hierarchy(h, res, library=library_of("Open MPI v5.0.11, package: Open MPI user@localhost")).library
    assert lib is CollectiveLibrary.OPEN_MPI and library_of("MPICH Version:\t4.2.0") is None
    assert Hierarchy.model_validate_json(fitted_hierarchy(h, res, library=lib).model_dump_json()).library is lib
    # how a reduce_scatter step ran is said outright for the two backends that run the exchange, nothing for others
    for library, rs in ((lib, ReduceScatterRun.EXCHANGE), (CollectiveLibrary.GLOO, ReduceScatterRun.EXCHANGE),
                        (CollectiveLibrary.NCCL, None), (None, None)):
        assert fitted_hierarchy(h, res, library=library).reduce_scatter is rs


def test_refuses_without_root_in_one_line():
    r = cli("up", "--nodes", "2", "--ranks-per-node", "1", "--inter-node", "1gbit",
                    env={"P2S_TESTBED_PRETEND_NONROOT": "1"})
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and r.stderr.startswith("error: ") and "root" in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_bad_arguments_exit_2_in_one_line():
    r = cli("up", "--nodes", "4", "--ranks-per-node", "1", "--inter-node", "1gbit", "--racks", "3",
                    "--inter-rack", "1gbit")
    assert r.returncode == 2 and "--racks must divide" in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
    r = cli("up", "--nodes", "four")
    assert r.returncode == 2 and r.stderr == "error: argument --nodes: invalid int value: 'four'\n"


# ---- a real testbed ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def needs_testbed():
    reason = testbed_skip_reason()
    if reason:
        pytest.skip(reason)


INSTANCE = f"t{os.getpid() % 10**6}"

WHERE = textwrap.dedent("""
    import json, os, socket
    from mpi4py import MPI
    c = MPI.COMM_WORLD
    local = c.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
    rows = c.gather([c.rank, socket.gethostname(), os.stat('/proc/self/ns/net').st_ino, local], root=0)
    total = c.allreduce(c.rank)
    if c.rank == 0:
        print(json.dumps({"sum": total, "ranks": rows}))
""")


def _leftovers(instance):
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout.split()
    ns = [n for n in names if owned_namespace(n, instance)]
    host_links = [ln for ln in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=False).stdout.splitlines()
                  if f" {PREFIX}-" in ln]
    return ns, host_links, state_path(instance).exists()


@pytest.mark.testbed
@pytest.mark.mpi
def test_lifecycle_up_job_calibrate_down_leaves_nothing(needs_testbed, tmp_path):
    inst = ["--instance", INSTANCE]
    hier, fitted = tmp_path / "testbed-hierarchy.json", tmp_path / "fitted.json"
    try:
        r = cli("up", *inst, "--nodes", "2", "--ranks-per-node", "2", "--inter-node", "500mbit",
                        "--hierarchy-out", str(hier))
        assert r.returncode == 0, r.stderr
        h = Hierarchy.model_validate_json(hier.read_text())
        assert h.counts == (2, 2) and h.levels[0].bandwidth_GBps == 0.0625

        r = cli("up", *inst, "--nodes", "2", "--ranks-per-node", "2", "--inter-node", "500mbit",
                        "--hierarchy-out", str(tmp_path / "again.json"))
        assert r.returncode == 2 and "already up" in r.stderr and r.stderr.count("\n") == 1
        assert not (tmp_path / "again.json").exists()

        r = cli("run", *inst, "--timeout", "60", "--", "python", "-c", WHERE)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout.strip().splitlines()[-1])
        assert out["sum"] == 0 + 1 + 2 + 3
        for rank, host, netns, local in out["ranks"]:
            node_ns = f"p2s-{INSTANCE}-n{rank // 2}"  # ranks 0-1 on node 0, 2-3 on node 1
            assert host == node_ns and netns == os.stat(f"/run/netns/{node_ns}").st_ino and local == 2

        r = cli("run", *inst, "--timeout", "60", "--", "python", "-c", "import sys; sys.exit(3)")
        assert r.returncode == 3  # the job's exit code comes through

        r = cli("run", *inst, "--timeout", "90", "--", "python", "-m", "scripts.calibrate", "--hierarchy",
                        str(hier), "--out", str(fitted), "--max-bytes", "4M", "--iters", "3", "--small-iters", "10",
                        timeout=150)
        assert r.returncode == 0, r.stderr
        f = Hierarchy.model_validate_json(fitted.read_text())
        node, core = f.levels
        shaped = 500e6 / 8e9
        assert shaped / 2 < node.bandwidth_GBps < shaped * 2, node
        assert shaped / 2 < node.uplink_GBps < shaped * 2, node
        assert core.bandwidth_GBps > 10 * node.bandwidth_GBps, (core, node)
        assert 0 < node.duplex_efficiency <= 1 and core.duplex_efficiency is None
        raw = json.loads((tmp_path / "fitted.calibration.json").read_text())
        assert [lv["level"] for lv in raw["levels"]] == ["node", "core"]
        assert all(lv["duplex"]["two_way_s"] > 0 and lv["duplex"]["pairs"] == (2, 1)[i] for i, lv in enumerate(raw["levels"]))
    finally:
        r = cli("down", *inst)
    assert r.returncode == 0, r.stderr
    assert _leftovers(INSTANCE) == ([], [], False)
    r = cli("down", *inst)  # idempotent
    assert r.returncode == 0 and "nothing was up" in r.stdout
    r = cli("run", *inst, "--", "true")
    assert r.returncode == 2 and "no testbed is up" in r.stderr


@pytest.mark.testbed
def test_refuses_when_namespaces_are_unavailable(needs_testbed, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ip").write_text("#!/bin/sh\necho 'mount --make-shared /run/netns failed: Operation not permitted' >&2\nexit 1\n")
    (fake / "ip").chmod(0o755)
    r = cli("up", "--instance", INSTANCE, "--nodes", "2", "--ranks-per-node", "1", "--inter-node", "1gbit",
                    "--hierarchy-out", str(tmp_path / "h.json"), env={"PATH": f"{fake}:{os.environ['PATH']}"})
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "namespaces are unavailable" in r.stderr
    assert _leftovers(INSTANCE) == ([], [], False) and not (tmp_path / "h.json").exists()
