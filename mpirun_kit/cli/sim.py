"""`mpirun_kit sim up|down|list|exec`: a simulated multi-host cluster on this machine (root only).

A cluster stays up between commands; its files live under ``--root`` (default
/var/tmp/mpirun-kit-sim/NAME).  Library: mpirun_kit.sim.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_ROOT = Path("/var/tmp/mpirun-kit-sim")


def _root(args) -> Path:
    return Path(args.root) if args.root else DEFAULT_ROOT / args.name


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sim", help="simulated multi-host cluster (namespaces + sshd per host)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ssub = p.add_subparsers(dest="sim_command", metavar="ACTION", required=True)

    up = ssub.add_parser("up", help="bring up N hosts algo-1..algo-N")
    up.add_argument("--hosts", type=int, default=3, help="number of hosts (default 3)")
    up.add_argument("--name", default="sim", help="cluster name, 1-12 lowercase letters/digits (default sim)")
    up.add_argument("--root", help="state directory (default /var/tmp/mpirun-kit-sim/NAME)")
    up.add_argument("--instance-type", default="ml.c5.xlarge", help="instance type in resourceconfig.json")
    up.add_argument("--json", action="store_true", help="print hosts as JSON")
    up.set_defaults(func=_up)

    down = ssub.add_parser("down", help="tear a cluster down (idempotent)")
    down.add_argument("--name", default="sim")
    down.add_argument("--root")
    down.add_argument("--all", action="store_true", help="tear down every simulated cluster on this machine")
    down.set_defaults(func=_down)

    ls = ssub.add_parser("list", help="list simulated clusters on this machine")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=_list)

    ex = ssub.add_parser("exec", help="run a command on one host: sim exec [--name N] HOST -- CMD...")
    ex.add_argument("--name", default="sim")
    ex.add_argument("--root")
    ex.add_argument("host", help="host name, e.g. algo-2")
    ex.add_argument("argv", nargs=argparse.REMAINDER, help="command and arguments")
    ex.set_defaults(func=_exec)


def _up(args) -> int:
    from ..sim import SimCluster
    sim = SimCluster(args.hosts, _root(args), args.name, instance_type=args.instance_type)
    try:
        sim.up()
    except BaseException:
        sim.down()
        raise
    hosts = {h.name: h.address for h in sim.hosts}
    if args.json:
        print(json.dumps({"name": sim.name, "root": str(sim.layout.root), "hosts": hosts}))
    else:
        for name, addr in hosts.items():
            print(f"{name}\t{addr}")
        print(f"sim cluster {sim.name!r} is up; run on a host with: mpirun_kit sim exec --name {sim.name} "
              f"algo-1 -- hostname; tear down with: mpirun_kit sim down --name {sim.name}", file=sys.stderr)
    return 0


def _down(args) -> int:
    from ..sim import down_all, down_named
    if args.all:
        names = down_all()
        print(f"tore down {len(names)} cluster(s): {', '.join(names) or '-'}", file=sys.stderr)
        return 0
    # Works from namespace names alone, so it also cleans up after a crashed controller.
    existed = down_named(args.name)
    state = _root(args) / "state.json"
    if state.exists():
        state.unlink()
    print(f"sim cluster {args.name!r} {'torn down' if existed else 'was not up'}", file=sys.stderr)
    return 0


def _list(args) -> int:
    from ..sim import list_clusters
    names = list_clusters()
    print(json.dumps(names) if args.json else "\n".join(names))
    return 0


def _exec(args) -> int:
    from ..errors import SpecError
    from ..sim import SimCluster
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        raise SpecError("sim exec: no command given; usage: mpirun_kit sim exec algo-1 -- hostname")
    sim = SimCluster.attach(args.name, _root(args))
    proc = sim.popen(args.host, argv, stdin=None)
    return proc.wait()
