"""`mpirun_kit doctor`: check this host, or every host of a job, before spending GPU hours on it.

Checks GPUs (NVML: count, model, memory, ECC, NVLink, GPU-NUMA map), EFA devices
and libfabric, NCCL / aws-ofi-nccl / libfabric libraries and versions, stale
NCCL/EFA variables (spec/presets.py's STALE_ENV), ~/.ssh modes and sshd, name
resolution of every peer, clock skew, free space on data/checkpoint mounts, and
runs a cross-host allreduce through torch.distributed reporting bus bandwidth.

With --hosts, every other host is reached over ssh and runs
`mpirun_kit doctor --gather-only` (the same image everywhere).  The library is
mpirun_kit.doctor; this module only parses flags, reads the environment and maps
the result to an exit code.
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

DESCRIPTION = """\
Check this host, or every host of a job, before spending GPU hours on it: GPUs (count, model, memory,
ECC, NVLink, GPU-NUMA map), EFA devices and libfabric, NCCL / aws-ofi-nccl versions, stale NCCL/EFA
variables, ~/.ssh modes and sshd (multi-host runs only), name resolution of every peer, clock skew,
free space on data/checkpoint mounts, and a cross-host allreduce reporting bus bandwidth. Each row is
printed with its status and, when not ok, the fix. With --hosts or a job spec, every other host is
reached over ssh and runs `mpirun_kit doctor --gather-only` (the same image everywhere).

status: ok | WARN (works, worth fixing) | FAIL | absent (no such hardware here) | skip (not applicable)
"""


def register(sub: argparse._SubParsersAction) -> None:
    from ..errors import ExitCode
    from .main import add_command, exit_codes

    p = add_command(sub, "doctor", help="check a host or a whole cluster (GPUs, EFA, NCCL, ssh, clocks, allreduce)",
                    description=DESCRIPTION,
                    examples=["mpirun_kit doctor", "mpirun_kit doctor --no-allreduce --json",
                              "mpirun_kit doctor jobs/maskrcnn.yaml --dry-run",
                              "mpirun_kit doctor --hosts algo-1,algo-2 --mount /fsx --min-free-gb 100"],
                    codes=exit_codes(ExitCode.FAILED, ExitCode.BAD_INPUT, ExitCode.UNREACHABLE, notes={
                        0: "every check ok (warn / absent / skip rows do not count)",
                        1: "one or more checks failed (each printed with its fix)",
                        64: "bad input: flags, host list, job spec",
                        69: "facts could not be gathered from a host (ssh failed, no answer)"}))
    p.add_argument("spec", nargs="?", metavar="JOB.yaml",
                   help="take the hosts and the data/checkpoint paths from a job spec (instead of --hosts/--mount)")
    p.add_argument("--hosts", help="every host of the job, comma-separated, in rank order (default: this host only)")
    p.add_argument("--json", action="store_true", help="print the report (rows, facts, allreduce) as JSON")
    p.add_argument("--dry-run", action="store_true", help="print the commands each host would run, run nothing")
    p.add_argument("--mount", action="append", default=[], metavar="PATH",
                   help="data or checkpoint path to check for free space (repeatable; default: "
                        "/opt/ml/input/data, /opt/ml/checkpoints, /fsx where they exist)")
    p.add_argument("--min-free-gb", type=float, default=10.0, help="free space each --mount needs (default 10)")
    p.add_argument("--max-skew-s", type=float, default=1.0, help="clock skew allowed between hosts (default 1 s)")
    p.add_argument("--allow-stale", action="append", default=[], metavar="NAME",
                   help="a stale NCCL/EFA variable you set on purpose: reported as WARN, not FAIL (repeatable)")
    p.add_argument("--ssh-dir", default=None, help="the login user's ~/.ssh (default $HOME/.ssh)")
    p.add_argument("--ssh-port", type=int, default=22, help="sshd port on every host (default 22)")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds for gathering from all hosts, and again for the allreduce (default 120)")
    p.add_argument("--max-parallel", type=int, default=32,
                   help="hosts gathered at once over ssh (default 32; 1 = one after another)")
    p.add_argument("--no-allreduce", dest="allreduce", action="store_false", help="skip the allreduce smoke test")
    p.add_argument("--ranks-per-host", type=int, default=None,
                   help="allreduce ranks per host (default: the job spec's resources.processes_per_host, else 1; "
                        "2 tests the local path on one host)")
    p.add_argument("--allreduce-mb", type=float, default=8.0, help="allreduce message size in MiB (default 8)")
    p.add_argument("--allreduce-port", type=int, default=29499, help="rank 0's rendezvous port (default 29499)")
    p.add_argument("--remote-python", metavar="PATH",
                   help="python with mpirun_kit on the other hosts (default: this python's path, "
                        "right when every host runs the same image)")
    p.add_argument("--as-host", help="this host's name in the job (default: its hostname)")
    p.add_argument("--gather-only", action="store_true",
                   help="print this host's facts as JSON and exit (what the coordinator runs on each host)")
    p.set_defaults(func=run)


def _hosts(text: str | None, me: str) -> tuple[str, ...]:
    from ..errors import SpecError

    if text is None:
        return (me,)
    hosts = tuple(h.strip() for h in text.split(",") if h.strip())
    if not hosts:
        raise SpecError(f"--hosts {text!r}: expected host names separated by commas, e.g. algo-1,algo-2")
    for h in hosts:
        if h.startswith("-"):  # ssh would take it as an option (-oProxyCommand=...)
            raise SpecError(f"--hosts: host name {h!r} starts with '-'; expected names like algo-1")
    return hosts


def _from_spec(path: str, hosts_flag: str | None, me: str) -> tuple[tuple[str, ...], tuple[str, ...], int | None]:
    """(hosts, data and checkpoint paths, processes per host or None) of a job spec, as the job's target names
    them: the all-reduce runs as many ranks per host as the job will (issue #28: it ran 1 whatever the spec said)."""
    from ..errors import SpecError
    from ..spec.compile import channel_paths, checkpoint_path, planned_hosts
    from .resolve import load_spec

    if hosts_flag is not None:
        raise SpecError(f"doctor: got both --hosts and {path}; the job spec names the hosts, pass one or the other")
    job = load_spec(path)
    # A local-target job runs on this host, whatever its hostname.
    hosts = tuple(me if h.name == "localhost" else h.name for h in planned_hosts(job, 1))
    # Relative paths resolve against each rank's working directory, unknown here: only absolute ones.
    paths = [p for _, p in channel_paths(job)] + [checkpoint_path(job)]
    return hosts, tuple(dict.fromkeys(p for p in paths if p.startswith("/"))), job.resources.processes_per_host


def run(args) -> int:
    from ..doctor.checks import GIB, Expectations
    from ..doctor.coordinate import DoctorRequest, raise_for_status, run_doctor
    from ..doctor.gather import gather_host
    from ..doctor.report import render_json, render_table

    me = args.as_host or socket.gethostname()
    mounts = tuple(args.mount)
    spec_ranks = None
    if args.spec:
        hosts, spec_mounts, spec_ranks = _from_spec(args.spec, args.hosts, me)
        mounts = mounts or spec_mounts
    else:
        hosts = _hosts(args.hosts, me)
    ssh_dir = args.ssh_dir or os.path.join(os.environ.get("HOME", "/root"), ".ssh")
    environ = dict(os.environ)

    def gather_local():
        return gather_host(me, peers=hosts if len(hosts) > 1 else (), mounts=mounts,
                           environ=environ, ssh_dir=Path(ssh_dir), ssh_port=args.ssh_port)

    if args.gather_only:
        print(gather_local().to_json())
        return 0
    req = DoctorRequest(
        hosts=hosts, local_host=me, python=sys.executable, remote_python=args.remote_python,
        expect=Expectations(hosts=hosts, min_free_bytes=int(args.min_free_gb * GIB), max_skew_s=args.max_skew_s,
                            allow_stale=tuple(args.allow_stale)),
        mounts=mounts, ssh_dir=ssh_dir, ssh_port=args.ssh_port, timeout_s=args.timeout,
        max_parallel=args.max_parallel,
        allreduce=args.allreduce,
        ranks_per_host=args.ranks_per_host if args.ranks_per_host is not None else spec_ranks or 1,
        allreduce_bytes=int(args.allreduce_mb * 2 ** 20), allreduce_port=args.allreduce_port)
    if args.dry_run:
        print("\n".join(req.commands()))
        return 0
    report = run_doctor(req, gather_local)
    sys.stdout.write(render_json(report) if args.json else render_table(report))
    sys.stdout.flush()
    raise_for_status(report)
    return 0
