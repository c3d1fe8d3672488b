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


def sweep_orphans() -> list[str]:
    """Tear down the sim clusters whose `submit` died by SIGKILL (service/lifecycle.py ``sweep_orphans``), each
    said on stderr; run by every `sim` command (the job service runs it before every submit and job listing)."""
    from ..service.lifecycle import sweep_orphans as sweep

    return sweep(report=lambda line: print(f"mpirun_kit: {line}", file=sys.stderr))


def register(sub: argparse._SubParsersAction) -> None:
    from ..errors import ExitCode
    from .main import add_command, exit_codes

    codes = exit_codes(ExitCode.BAD_INPUT, ExitCode.UNREACHABLE, notes={
        64: "bad input: cluster name, host count, not root", 69: "the cluster is not up, or a host did not start"})

    def action(parent, name: str, helptext: str, description: str, examples: list[str], **kw):
        return add_command(parent, name, help=helptext, description=description, examples=examples,
                           codes=kw.pop("codes", codes), **kw)

    p = action(sub, "sim", "simulated multi-host cluster (namespaces + sshd per host)",
               "A simulated multi-host cluster on this machine (root only): one network namespace, sshd and "
               "/opt/ml tree per host, algo-1..algo-N, as SageMaker lays them out. A cluster stays up between "
               "commands; its files live under --root (default /var/tmp/mpirun-kit-sim/NAME).",
               ["mpirun_kit sim up --hosts 2", "mpirun_kit sim exec algo-2 -- hostname", "mpirun_kit sim down"])
    ssub = p.add_subparsers(dest="sim_command", metavar="ACTION", required=True)

    def name_root(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--name", default="sim", help="cluster name, 1-12 lowercase letters/digits (default sim)"
                        ).completer = cluster_names   # type: ignore[attr-defined] # argcomplete's hook
        sp.add_argument("--root", help="the cluster's state directory (default /var/tmp/mpirun-kit-sim/NAME)")

    up = action(ssub, "up", "bring up N hosts algo-1..algo-N",
                "Bring up a simulated cluster of --hosts hosts and print each host's address (--json: as JSON).",
                ["mpirun_kit sim up", "mpirun_kit sim up --hosts 4 --name big --json"])
    up.add_argument("--hosts", type=int, default=3, help="number of hosts (default 3)")
    name_root(up)
    up.add_argument("--instance-type", default="ml.c5.xlarge", help="instance type in resourceconfig.json")
    up.add_argument("--json", action="store_true", help="print hosts as JSON")
    up.add_argument("--replace", action="store_true",
                    help="if a cluster of this name is up, tear it down and start afresh (default: refuse, exit 69)")
    up.add_argument("--slurm", action="store_true",
                    help="also run a real Slurm: munge on every host, slurmctld on algo-1 (the login node), slurmd on "
                         "every host (target slurm with target.slurm.sim: NAME submits to it)")
    up.add_argument("--accounting", action="store_true",
                    help="with --slurm: MariaDB and slurmdbd on algo-1, so sacct answers (~4 s more)")
    up.set_defaults(func=_up)

    down = action(ssub, "down", "tear a cluster down (idempotent)",
                  "Stop every process of a simulated cluster and remove its namespaces; a cluster that is not "
                  "up is not an error.", ["mpirun_kit sim down", "mpirun_kit sim down --name big",
                                          "mpirun_kit sim down --all"])
    name_root(down)
    down.add_argument("--all", action="store_true", help="tear down every simulated cluster on this machine")
    down.set_defaults(func=_down)

    ls = action(ssub, "list", "list simulated clusters on this machine",
                "Print the names of the simulated clusters that are up (--json: a JSON list).",
                ["mpirun_kit sim list", "mpirun_kit sim list --json"])
    ls.add_argument("--json", action="store_true", help="a JSON list of cluster names")
    ls.set_defaults(func=_list)

    ex = action(ssub, "exec", "run a command on one host: sim exec [--name N] HOST -- CMD...",
                "Run a command inside one simulated host's namespace and exit with its exit code.",
                ["mpirun_kit sim exec algo-1 -- hostname", "mpirun_kit sim exec --name big algo-3 -- ip addr"],
                codes=exit_codes(ExitCode.BAD_INPUT, ExitCode.UNREACHABLE, notes={
                    0: "the command succeeded", 64: "no command given",
                    69: "the cluster is not up"}, extra="other codes: the command's own exit code"))
    name_root(ex)
    ex.add_argument("host", help="host name, e.g. algo-2")
    ex.add_argument("argv", nargs=argparse.REMAINDER, help="command and arguments")
    ex.set_defaults(func=_exec)


def _up(args) -> int:
    sweep_orphans()
    from ..sim import SimCluster, SimClusterExistsError
    sim = SimCluster(args.hosts, _root(args), args.name, instance_type=args.instance_type)
    try:
        sim.up(replace=args.replace)
        if args.slurm or args.accounting:
            from ..sim.slurm import SlurmCluster
            SlurmCluster(sim, accounting=args.accounting).up()
    except SimClusterExistsError:
        raise  # another cluster's: leave it alone
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
    sweep_orphans()
    from ..sim import down_all, down_named, purge_root
    if args.all:
        names = down_all()
        for name in names:
            purge_root(DEFAULT_ROOT / name)
        print(f"tore down {len(names)} cluster(s): {', '.join(names) or '-'}", file=sys.stderr)
        return 0
    # Works from namespace names alone, so it also cleans up after a crashed controller; then nothing of the
    # cluster stays on disk (its keys included).
    existed = down_named(args.name)
    from ..sim.slurm import remove_files
    from ..sim.layout import plan_layout
    remove_files(plan_layout(args.name, 1, _root(args)))   # Slurm's spool and munge key, if sim up --slurm ran
    purge_root(_root(args))
    print(f"sim cluster {args.name!r} {'torn down' if existed else 'was not up'}", file=sys.stderr)
    return 0


def cluster_names(**_) -> list[str]:
    """Completion of --name (argcomplete's completer): the clusters that are up, never file names."""
    from ..sim import list_clusters

    try:
        return list_clusters()
    except OSError:
        return []


def _list(args) -> int:
    """The clusters that are up; beside each, the job that brought it up (its record's native name, issue #28)."""
    sweep_orphans()
    from ..sim import list_clusters
    from .common_flags import store_of

    names = list_clusters()
    jobs = {r.native: r.job_id for r in store_of(args).list(target="sim") if r.native in names}
    if args.json:
        print(json.dumps(names))
    else:
        print("\n".join(f"{n}  job {jobs[n]}" if n in jobs else n for n in names))
    return 0


def _exec(args) -> int:
    sweep_orphans()
    from ..errors import SpecError
    from ..sim import SimCluster
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        raise SpecError("sim exec: no command given; usage: mpirun_kit sim exec algo-1 -- hostname")
    sim = SimCluster.attach(args.name, _root(args))
    proc = sim.popen(args.host, argv, stdin=None)
    return proc.wait()
