"""Bringing a testbed up and down: namespaces, bridges, veth links, tc shaping, the state file.

Every command runs inside a namespace this module created (``ip -n NS``, ``tc -n NS``);
nothing is added to, changed in or read from the host's own network configuration.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from scripts.testbed.config import (
    STATE_DIR,
    TestbedConfig,
    bridges,
    links,
    owned_namespace,
    state_path,
    tbf_args,
)

UP_TIMEOUT_S = 10.0


class TestbedError(RuntimeError):
    """A testbed operation that failed or was refused; the message is one line for the user."""

    __test__ = False


class Refused(TestbedError):
    """The testbed cannot be used as asked here (not root, no namespaces, already up, not up)."""


def tool_path(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin")
    if path is None:
        raise Refused(f"`{name}` not found; the testbed needs iproute2 (ip, tc, bridge) and util-linux (unshare)")
    return path


def sh(*args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    """Run one command (tool name first, resolved on PATH); raise TestbedError with its stderr on failure."""
    argv = [tool_path(args[0]), *args[1:]]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise TestbedError(f"`{' '.join(args)}` did not finish in {timeout:.0f} s") from None
    if check and r.returncode != 0:
        msg = (r.stderr or r.stdout).strip().splitlines()
        raise TestbedError(f"`{' '.join(args)}` failed: {msg[-1] if msg else f'exit {r.returncode}'}")
    return r


def is_root() -> bool:
    """Effective root; ``P2S_TESTBED_PRETEND_NONROOT=1`` says no (to test the refusal as root)."""
    return os.geteuid() == 0 and os.environ.get("P2S_TESTBED_PRETEND_NONROOT") != "1"


def require_root() -> None:
    if not is_root():
        raise Refused("must run as root (network namespaces and tc need it): try sudo")


def list_namespaces() -> list[str]:
    """Names of all named network namespaces (``ip netns list``)."""
    r = sh("ip", "netns", "list", check=False)
    if r.returncode != 0:
        raise Refused(f"network namespaces are unavailable: `ip netns list` failed: {r.stderr.strip()}")
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def owned_namespaces(instance: str = "") -> list[str]:
    """The existing namespaces of testbed `instance`."""
    return [ns for ns in list_namespaces() if owned_namespace(ns, instance)]


def netns_available() -> tuple[bool, str]:
    """Whether this process can create network namespaces: (ok, reason if not). Creates and removes a probe."""
    if not is_root():
        return False, "not root"
    probe = f"p2s-probe{os.getpid()}"
    try:
        for tool in ("ip", "tc", "unshare"):
            tool_path(tool)
        sh("ip", "netns", "add", probe)
    except TestbedError as e:
        return False, str(e)
    sh("ip", "netns", "del", probe, check=False)
    return True, ""


# ---- state file ----------------------------------------------------------------------------
def read_state(instance: str = "", state_dir: Path = STATE_DIR) -> dict | None:
    path = state_path(instance, state_dir)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise TestbedError(f"unreadable state file {path}: {e}; remove it after `down`") from None


def _write_state(path: Path, state: dict, *, create: bool = False) -> None:
    """Write the state file; with `create`, fail if it exists (an atomic "is a testbed up?")."""
    text = json.dumps(state, indent=2) + "\n"
    if create:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def config_from_state(state: dict) -> TestbedConfig:
    return TestbedConfig(**state["config"])


# ---- up ------------------------------------------------------------------------------------
def up(cfg: TestbedConfig, hierarchy_path: Path, state_dir: Path = STATE_DIR) -> dict:
    """Create the testbed of `cfg`, write its hierarchy file; return the state. All or nothing.

    On any failure, Ctrl-C or SIGTERM in the middle, everything created so far is removed
    before the exception propagates.
    """
    require_root()
    existing = owned_namespaces(cfg.instance)
    path = state_path(cfg.instance, state_dir)
    if existing or path.exists():
        what = f"namespaces {', '.join(existing)}" if existing else f"state file {path}"
        raise Refused(f"a testbed is already up ({what}); run `down` first")
    for tool in ("tc", "unshare", "bridge"):
        tool_path(tool)
    if not hierarchy_path.resolve().parent.is_dir():
        raise Refused(f"cannot write the hierarchy file {hierarchy_path}: no such directory")
    state = {
        "status": "creating",
        "config": cfg.to_dict(),
        "namespaces": cfg.namespaces,
        "nodes": cfg.node_table(),
        "hierarchy_file": str(hierarchy_path.resolve()),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    with sigterm_as_interrupt():
        try:
            _write_state(path, state, create=True)
        except FileExistsError:
            raise Refused(f"a testbed is already up (state file {path}); run `down` first") from None
        try:
            _build(cfg)
            _wait_up(cfg)
            hierarchy_path.write_text(cfg.hierarchy().model_dump_json(indent=2, exclude_none=True) + "\n")
            state["status"] = "up"
            _write_state(path, state)
        except BaseException:
            down(cfg.instance, state_dir, log=lambda *_: None)
            raise
    return state


def _build(cfg: TestbedConfig) -> None:
    sw = cfg.switch_ns
    for ns in cfg.namespaces:
        try:
            sh("ip", "netns", "add", ns)
        except TestbedError as e:
            raise Refused(f"cannot create network namespace {ns} (are namespaces available here?): {e}") from None
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        # No IPv6: no router solicitations or DAD on the shaped links, nothing but our IPv4.
        sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
           "net.ipv6.conf.default.disable_ipv6=1")
    for br in bridges(cfg):
        sh("ip", "-n", sw, "link", "add", br, "type", "bridge", "stp_state", "0")
        sh("ip", "-n", sw, "link", "set", br, "up")
    for ln in links(cfg):
        # Created from inside ns_b, so not even a transient interface appears in the host's namespace.
        sh("ip", "-n", ln.ns_b, "link", "add", ln.if_b, "type", "veth", "peer", "name", ln.if_a, "netns", ln.ns_a)
        for ns, ifname, master in ((ln.ns_a, ln.if_a, ln.master_a), (ln.ns_b, ln.if_b, ln.master_b)):
            if master:
                sh("ip", "-n", ns, "link", "set", ifname, "master", master)
            if ln.rate_bps is not None:  # each end's egress: shaped in both directions
                sh("tc", "-n", ns, "qdisc", "add", "dev", ifname, "root", *tbf_args(ln.rate_bps))
        if ln.address:
            sh("ip", "-n", ln.ns_a, "addr", "add", ln.address, "dev", ln.if_a)
        sh("ip", "-n", ln.ns_a, "link", "set", ln.if_a, "up")
        sh("ip", "-n", ln.ns_b, "link", "set", ln.if_b, "up")


def _wait_up(cfg: TestbedConfig, timeout: float = UP_TIMEOUT_S) -> None:
    """Wait until every veth end is oper-UP and every bridge port forwards (MPI fails on a link not yet up)."""
    ends = [(ln.ns_a, ln.if_a) for ln in links(cfg)] + [(ln.ns_b, ln.if_b) for ln in links(cfg)]
    deadline = time.monotonic() + timeout
    while True:
        pending = [f"{ns}/{ifname}" for ns, ifname in ends if _operstate(ns, ifname) != "UP"]
        ports = json.loads(sh("bridge", "-n", cfg.switch_ns, "-j", "link", "show").stdout or "[]")
        pending += [f"{cfg.switch_ns}/{p['ifname']} ({p.get('state')})" for p in ports if p.get("state") != "forwarding"]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TestbedError(f"links not up after {timeout:.0f} s: {', '.join(pending[:4])}")
        time.sleep(0.05)


def _operstate(ns: str, ifname: str) -> str:
    out = json.loads(sh("ip", "-n", ns, "-j", "link", "show", "dev", ifname).stdout)
    return out[0].get("operstate", "") if out else ""


class sigterm_as_interrupt:
    """Within the block, SIGTERM raises KeyboardInterrupt, so cleanup code runs."""

    def __enter__(self):
        def handler(signum, frame):
            raise KeyboardInterrupt(f"signal {signum}")

        try:
            self._old = signal.signal(signal.SIGTERM, handler)
        except ValueError:  # not the main thread
            self._old = None
        return self

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)
        return False


# ---- down ----------------------------------------------------------------------------------
def down(instance: str = "", state_dir: Path = STATE_DIR, log=print) -> list[str]:
    """Remove testbed `instance`: stop what runs in its namespaces, delete them, remove the state file.

    Idempotent, and complete after a partial `up`: it removes the namespaces the state file
    names and any other namespace with this testbed's name pattern. Deleting a namespace
    deletes its veth ends (so their peers), bridges and qdiscs. Returns the namespaces removed.
    """
    require_root()
    path = state_path(instance, state_dir)
    state = None
    try:
        state = read_state(instance, state_dir)
    except TestbedError:
        pass  # unreadable: removed below all the same
    existing = set(list_namespaces())
    names = [ns for ns in (state or {}).get("namespaces", []) if ns in existing and owned_namespace(ns, instance)]
    names += sorted(ns for ns in existing if owned_namespace(ns, instance) and ns not in names)
    _stop_processes(names)
    for ns in names:
        sh("ip", "netns", "del", ns, check=False)
    left = [ns for ns in list_namespaces() if owned_namespace(ns, instance)]
    if left:
        raise TestbedError(f"could not remove namespaces {', '.join(left)}")
    path.unlink(missing_ok=True)
    path.with_suffix(".tmp").unlink(missing_ok=True)
    log(f"testbed down: removed {len(names)} namespaces" if names or state else "testbed down: nothing was up")
    return names


def _stop_processes(namespaces: list[str], grace_s: float = 3.0) -> None:
    """SIGTERM, then SIGKILL, every process still inside `namespaces` (left-over MPI ranks)."""
    def pids() -> list[int]:
        out = []
        for ns in namespaces:
            r = sh("ip", "netns", "pids", ns, check=False)
            out += [int(p) for p in r.stdout.split() if p.isdigit() and int(p) != os.getpid()]
        return out

    for sig in (signal.SIGTERM, signal.SIGKILL):
        found = pids()
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and pids():
            time.sleep(0.1)


# ---- status --------------------------------------------------------------------------------
def status(instance: str = "", state_dir: Path = STATE_DIR) -> dict | None:
    """The state of testbed `instance` with the namespaces now present (`present`), or None if none."""
    state = read_state(instance, state_dir)
    present = owned_namespaces(instance)
    if state is None and not present:
        return None
    state = dict(state or {"status": "partial (no state file)"})
    state["present"] = present
    return state

