"""`mpirun_kit entrypoint` (every host of a SageMaker-style job) and `mpirun_kit launch` (plain mpirun use).

Argument parsing only; the work is in mpirun_kit/entrypoint/.  This and
cluster/discover.py are the only readers of os.environ and /opt/ml.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

def _codes(bad_input: str, unreachable: str) -> str:
    """The exit codes of entrypoint and launch; 64 and 69 worded for each."""
    from ..errors import ExitCode
    from .main import exit_codes

    return exit_codes(ExitCode.BAD_INPUT, ExitCode.UNREACHABLE, ExitCode.LAUNCH_FAILED, ExitCode.HOST_LOST,
                      ExitCode.MASTER_LOST, ExitCode.HUNG, ExitCode.TIMEOUT, ExitCode.CANNOT_START, job=True, notes={
                          0: "the job succeeded (--dry-run: the plan was printed)",
                          70: "launcher failure (MPI daemon never started, result port taken)",
                          127: "a rank's program could not be executed (not found or not executable)",
                          64: bad_input, 69: unreachable})


def _common(p: argparse.ArgumentParser, spec_help: str) -> None:
    p.add_argument("--dry-run", action="store_true", help="print the resolved launch plan and exit 0")
    p.add_argument("--json", action="store_true", help="machine-readable output (plan with --dry-run, else a result line)")
    p.add_argument("--spec", type=Path, metavar="FILE", help=spec_help)
    p.add_argument("-n", "--processes-per-host", type=int, metavar="N", help="ranks per host (default: GPUs, else 1)")
    p.add_argument("--mpi-flavour", choices=("auto", "openmpi4", "openmpi5", "mpich"),
                   help="MPI dialect (default: detected from `mpirun --version`)")
    p.add_argument("--result-port", type=int, metavar="PORT", help="TCP port of the master's result channel")
    p.add_argument("--ssh-port", type=int, metavar="PORT", help="port of the workers' sshd")
    p.add_argument("--grace", type=float, metavar="S", help="seconds between SIGTERM and SIGKILL on shutdown")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="-- PROGRAM ARGS",
                   help="what every rank runs (overrides the launch spec)")


def register(subparsers) -> None:
    from .main import add_command

    p = add_command(
        subparsers, "entrypoint",
        help="per-host entrypoint: elect a master, run mpirun across hosts, share the exit code",
        description="Run on every host of a job (SageMaker: the container's entrypoint). Reads "
                    "OPT_ML/input/config/resourceconfig.json and hyperparameters.json (LaunchSpec under key "
                    "'mpirun_kit_launch'), elects algo-1 (else the first sorted host name) as master. The master "
                    "waits for every worker's sshd, runs mpirun, writes OPT_ML/output/failure on failure and tells "
                    "every worker the result; each worker serves sshd and exits with the job's code. Its "
                    "progress lines are on by default (its stderr is the job's log).",
        examples=["mpirun_kit entrypoint", "mpirun_kit entrypoint --dry-run --hosts algo-1:2,algo-2:2 "
                  "--current-host algo-1 -- python train.py",
                  "mpirun_kit entrypoint --opt-ml /var/tmp/opt_ml --role worker --no-sshd"],
        codes=_codes("bad input: resourceconfig.json, hyperparameters.json, flags",
                     "a worker's sshd never answered"))
    p.add_argument("--opt-ml", type=Path, default=Path("/opt/ml"), metavar="DIR", help="SageMaker root (default /opt/ml)")
    p.add_argument("--role", choices=("auto", "master", "worker"), default="auto",
                   help="force a role (default: elected)")
    p.add_argument("--no-sshd", action="store_true", help="do not start sshd on a worker (the platform runs one)")
    p.add_argument("--sshd-config", metavar="FILE", help="sshd_config for the worker's sshd")
    p.add_argument("--hosts", metavar="H1:N,H2:N", help="host list instead of resourceconfig.json")
    p.add_argument("--hostfile", type=Path, metavar="FILE", help="'host slots=N' file instead of resourceconfig.json")
    p.add_argument("--current-host", metavar="NAME", help="this host's name in --hosts/--hostfile")
    p.add_argument("--secret-file", type=Path, metavar="FILE",
                   help="the job secret (`mpirun_kit keys new`) that authenticates workers on the result channel "
                        "(default: OPT_ML/input/data/mpirun-keys/job-secret when present)")
    p.add_argument("--job", metavar="NAME",
                   help="the job's name, inside every result-channel key and MAC; every host must be given the same "
                        "(default: $TRAINING_JOB_NAME, which SageMaker sets, else none)")
    p.add_argument("--no-progress", action="store_true",
                   help="only warnings, errors and the result, as other commands print by default (what `submit "
                        "--target sim|ssh` passes to every host without -v)")
    _common(p, "a LaunchSpec JSON file (overrides the one in hyperparameters.json)")
    p.set_defaults(func=_entrypoint, launch=False)

    q = add_command(
        subparsers, "launch", help="run mpirun across a host list from this machine (no SageMaker needed)",
        description="Plain multi-host launch from this machine: hosts must already run sshd. Same plan, "
                    "output prefixes, failure reporting and signal handling as the entrypoint's master.",
        examples=["mpirun_kit launch --hosts localhost:2 -- python -c 'print(1)'",
                  "mpirun_kit launch --hostfile hosts.txt --spec launch.json",
                  "mpirun_kit launch --hosts node1:8,node2:8 --dry-run --json -- python train.py"],
        codes=_codes("bad input: --hosts, --hostfile, --spec, flags", "a host's sshd never answered"))
    g = q.add_mutually_exclusive_group(required=True)
    g.add_argument("--hosts", metavar="H1:N,H2:N", help="hosts with slots, e.g. localhost:2")
    g.add_argument("--hostfile", type=Path, metavar="FILE", help="'host slots=N' per line")
    q.add_argument("--opt-ml", type=Path, default=None, metavar="DIR",
                   help="where output/failure is written, and input/config/hyperparameters.json read (default "
                        "$TMPDIR/mpirun-kit-launch-UID, made 0700; refused if it exists with another owner or "
                        "group/other access)")
    _common(q, "a LaunchSpec JSON file: the program, env, MPI options and timeouts")
    q.set_defaults(func=_entrypoint, launch=True, role="master", no_sshd=True, sshd_config=None, current_host=None,
                   secret_file=None, job=None)


def default_launch_opt_ml() -> Path:
    """`launch`'s own directory: per user, in the temporary directory (TMPDIR, else /tmp)."""
    import tempfile

    return Path(tempfile.gettempdir()) / f"mpirun-kit-launch-{os.geteuid()}"


def options_from_args(args):
    from ..entrypoint import EntrypointOptions
    from .common_flags import output_level

    program = tuple(args.program[1:] if args.program[:1] == ["--"] else args.program)
    overrides = {}
    for flag, field in (("processes_per_host", "processes_per_host"), ("mpi_flavour", "mpi_flavour"),
                        ("result_port", "result_port"), ("ssh_port", "ssh_port")):
        if getattr(args, flag) is not None:
            overrides[field] = getattr(args, flag)
    # launch's default directory sits in a shared /tmp: it must be this user's alone (entrypoint/main.py).
    default_opt_ml = args.launch and args.opt_ml is None
    opt_ml = default_launch_opt_ml() if default_opt_ml else args.opt_ml
    opts = EntrypointOptions(
        opt_ml=opt_ml, opt_ml_private=default_opt_ml, role=args.role, dry_run=args.dry_run, json=args.json, start_sshd=not args.no_sshd,
        sshd_config=args.sshd_config, hosts=args.hosts, hostfile=args.hostfile, current_host=args.current_host,
        spec_file=args.spec, secret_file=args.secret_file, program=program, overrides=tuple(overrides.items()),
        job=args.job if args.job is not None else os.environ.get("TRAINING_JOB_NAME", ""), launch=args.launch,
        verbosity=output_level(args))
    return opts, args.grace


def _entrypoint(args) -> int:
    import dataclasses

    from ..entrypoint.main import resolve_spec, run_entrypoint

    opts, grace = options_from_args(args)
    if grace is not None:
        spec = resolve_spec(opts)
        opts = dataclasses.replace(opts, overrides=opts.overrides + (
            ("timeouts", dataclasses.replace(spec.timeouts, grace_s=grace)),))
    return run_entrypoint(opts, os.environ)
