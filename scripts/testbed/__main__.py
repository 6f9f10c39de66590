"""``python -m scripts.testbed {up,run,down,status}``: the emulated cluster from the command line.

Exit codes: 0 done; 1 an operation failed (what was created is removed again);
2 refused or bad arguments (not root, namespaces unavailable, already up, not up);
every error one line on stderr, ``error: ...``; ``run`` passes the job's exit code through (124: --timeout, 130: interrupted).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from p2synth.hierarchies.cli import ArgumentParser, UsageError
from scripts.testbed.config import (
    ConfigError,
    TestbedConfig,
    format_rate,
    parse_rate,
    state_path,
)
from scripts.testbed.launch import run
from scripts.testbed.net import (
    Refused,
    TestbedError,
    config_from_state,
    down,
    list_namespaces,
    read_state,
    require_root,
    status,
    up,
)

EXIT_OK, EXIT_FAILED, EXIT_REFUSED = 0, 1, 2
PROG = "python -m scripts.testbed"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; UsageError on a bad one."""
    common = ArgumentParser(add_help=False)
    common.add_argument("--instance", default=argparse.SUPPRESS,
                        help="name of a separate testbed (1-12 of a-z0-9; default: $P2S_TESTBED_INSTANCE or none)")
    p = ArgumentParser(prog=PROG, description=__doc__.split("\n")[0], parents=[common])
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=ArgumentParser)

    u = sub.add_parser("up", parents=[common], help="create the namespaces and links, write the hierarchy file")
    u.add_argument("--nodes", type=int, required=True, help="number of node namespaces")
    u.add_argument("--ranks-per-node", type=int, required=True, help="MPI ranks in each node")
    u.add_argument("--inter-node", required=True, help="node link rate, each direction (e.g. 1gbit, 200mbit; none: unshaped)")
    u.add_argument("--racks", type=int, default=1, help="group the nodes into this many racks (default 1: no rack level)")
    u.add_argument("--inter-rack", help="rack uplink rate, each direction (needed with --racks > 1)")
    u.add_argument("--hierarchy-out", default="testbed-hierarchy.json",
                   help="where to write the hierarchy file (default ./testbed-hierarchy.json)")

    r = sub.add_parser("run", parents=[common], help="run one MPI job over all nodes: run [options] -- COMMAND...")
    r.add_argument("--timeout", type=float, help="stop the job after this many seconds (exit 124)")
    r.add_argument("--mpirun-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for mpirun, before the command (repeatable)")
    r.add_argument("--dry-run", action="store_true", help="print the command line (and keep its agent files)")
    r.add_argument("command", nargs=argparse.REMAINDER, help="the command each rank runs, after --")

    sub.add_parser("down", parents=[common], help="remove everything the testbed created (idempotent)")
    s = sub.add_parser("status", parents=[common], help="what is up (exit 0) or that nothing is (exit 1)")
    s.add_argument("--json", action="store_true", help="print the state as JSON")
    args = p.parse_args(argv)
    args.instance = getattr(args, "instance", os.environ.get("P2S_TESTBED_INSTANCE", ""))
    if args.cmd == "run" and args.command[:1] == ["--"]:
        args.command = args.command[1:]
    return args


def cmd_up(args: argparse.Namespace) -> int:
    """Bring the testbed up and say what it is and what to run next."""
    if args.racks > 1 and args.inter_rack is None:
        raise ConfigError("--racks > 1 needs --inter-rack RATE")
    cfg = TestbedConfig(nodes=args.nodes, ranks_per_node=args.ranks_per_node, inter_node_bps=parse_rate(args.inter_node),
                        racks=args.racks, inter_rack_bps=parse_rate(args.inter_rack) if args.inter_rack else None,
                        instance=args.instance)
    state = up(cfg, Path(args.hierarchy_out))
    racks = f" in {cfg.racks} racks, rack uplinks {format_rate(cfg.inter_rack_bps)}" if cfg.racks > 1 else ""
    h = cfg.hierarchy()
    inst = f" --instance {cfg.instance}" if cfg.instance else ""
    print(f"testbed up: {cfg.nodes} nodes x {cfg.ranks_per_node} ranks{racks}, node links {format_rate(cfg.inter_node_bps)}")
    print(f"  namespaces: {', '.join(cfg.namespaces)}  (state: {state_path(cfg.instance)})")
    print(f"  hierarchy:  {state['hierarchy_file']}  ({h.describe()})")
    print(f"  next:       {PROG}{inst} run -- python -m runtime.bench PLAN.json   |   {PROG}{inst} down")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    """Run one MPI job over the testbed that is up; the job's exit code."""
    require_root()
    state = read_state(args.instance)
    if state is None:
        raise Refused("no testbed is up; start one with `up`")
    missing = sorted(set(state.get("namespaces", [])) - set(list_namespaces()))
    if missing:
        raise Refused(f"the testbed's namespaces {', '.join(missing)} are gone; run `down`, then `up`")
    return run(state, args.command, timeout=args.timeout, extra=args.mpirun_arg, dry_run=args.dry_run)


def cmd_down(args: argparse.Namespace) -> int:
    """Remove everything the testbed created (nothing up is fine)."""
    down(args.instance)
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    """Print what is up (0), or that nothing is (1)."""
    state = status(args.instance)
    if args.json:
        print(json.dumps(state, indent=2))
        return EXIT_OK if state else EXIT_FAILED
    if state is None:
        print("testbed: nothing is up")
        return EXIT_FAILED
    print(f"testbed {state['status']}: namespaces present: {', '.join(state['present']) or 'none'}")
    if "config" in state:
        cfg = config_from_state(state)
        print(f"  {cfg.nodes} nodes x {cfg.ranks_per_node} ranks, {cfg.racks} rack(s); node links "
              f"{format_rate(cfg.inter_node_bps)}" + (f", rack uplinks {format_rate(cfg.inter_rack_bps)}" if cfg.racks > 1 else ""))
        for n in state["nodes"]:
            print(f"  node {n['node']}: {n['namespace']} {n['ip']} rack {n['rack']}")
        print(f"  hierarchy file: {state['hierarchy_file']}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Run the command line; the exit status (see the module docstring)."""
    try:
        args = parse_args(argv)
        return {"up": cmd_up, "run": cmd_run, "down": cmd_down, "status": cmd_status}[args.cmd](args)
    except BrokenPipeError:  # output piped into `head`: the work is done, stay quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except (UsageError, Refused) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_REFUSED
    except (TestbedError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("error: interrupted (anything half-built was removed)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
