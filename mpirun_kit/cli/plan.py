"""`mpirun_kit plan JOB.yaml`: print the fully resolved plan of a job spec, run nothing.

Argument parsing and host discovery only: the plan itself is built by the pure
functions in spec/ (load -> compile -> jobplan) on top of the launcher's
``build_launch_plan``.  This module also holds the helpers the other job
commands (submit, validate) share: reading the host's facts (GPUs, topology,
EFA, MPI flavour) and building the stack-output resolver.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Mapping

from ..errors import SpecError

EXIT_CODES = "exit codes: 0 ok; 64 invalid spec or flag (every problem listed with file:line: key.path); " \
             "69 AWS unreachable while resolving ${stack:...} references."


def add_spec_args(p: argparse.ArgumentParser) -> None:
    """Flags shared by plan and submit."""
    p.add_argument("spec", metavar="JOB.yaml", help="job spec file (see jobs/ and the README)")
    p.add_argument("--target", choices=("local", "sim", "ssh", "sagemaker"),
                   help="run on this target instead of the spec's target.type")
    p.add_argument("--region", metavar="REGION", help="AWS region for ${stack:...} outputs (default: the spec's "
                   "target.sagemaker.region, else the AWS configuration)")
    p.add_argument("--stack-output", action="append", default=[], metavar="STACK.KEY=VALUE",
                   help="use VALUE for ${stack:STACK.KEY} instead of asking CloudFormation (repeatable)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def parse_stack_overrides(items: list[str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for item in items:
        ref, sep, value = item.partition("=")
        stack, dot, key = ref.partition(".")
        if not sep or not dot or not stack or not key:
            raise SpecError(f"--stack-output {item!r}: expected STACK.OutputKey=VALUE, e.g. mrk-fsx.FileSystemId=fs-0123")
        out.setdefault(stack, {})[key] = value
    return out


def make_resolver(overrides: Mapping[str, Mapping[str, str]], region: str | None):
    """Stack name -> outputs: CLI overrides first, then CloudFormation (boto3, created on first use)."""
    clients: dict = {}

    def resolve(stack: str) -> Mapping[str, str]:
        if stack in overrides:
            return overrides[stack]
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError

        from ..errors import ClusterError
        from ..stack.outputs import get_outputs

        if "cf" not in clients:
            clients["cf"] = boto3.client("cloudformation", region_name=region)
        try:
            return get_outputs(stack, clients["cf"])
        except (BotoCoreError, ClientError) as exc:
            raise ClusterError(f"could not read outputs of stack {stack!r} ({exc}); check AWS credentials and "
                               "--region, or pass --stack-output STACK.KEY=VALUE") from exc
    return resolve


@dataclass(frozen=True)
class HostFacts:
    """What this machine contributes to a plan (read here, in the CLI, once)."""

    topology: object
    gpus: int
    efa: bool | None
    flavour: str
    cpu_count: int
    run_as_root: bool


def detect_flavour() -> str:
    """The local MPI flavour from `mpirun --version`; openmpi4 (this project's) when there is no mpirun."""
    from ..errors import LaunchError
    from ..plan.mpi import detect_flavour as parse

    exe = shutil.which("mpirun")
    if exe is None:
        return "openmpi4"
    try:
        res = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10)
        return parse(res.stdout + res.stderr)
    except (OSError, subprocess.TimeoutExpired, LaunchError):
        return "openmpi4"


def host_facts() -> HostFacts:
    from ..topology import detect_efa, read_topology

    topo = read_topology()
    return HostFacts(topo, len(topo.gpus), detect_efa().present or None, detect_flavour(),
                     os.cpu_count() or 1, os.geteuid() == 0)


def compile_from_args(args, facts: HostFacts | None = None, *, python: str | None = None):
    """Load, validate and compile the spec named on the command line."""
    from ..spec.compile import compile_job
    from ..spec.load import load_job

    job = load_job(args.spec, target=args.target)
    facts = facts or host_facts()
    region = args.region or job.target.sagemaker.region
    resolver = make_resolver(parse_stack_overrides(args.stack_output), region)
    if python is None:
        # Local and simulated hosts share this interpreter (and its venv); remote hosts have their own.
        python = {"local": sys.executable, "sim": sys.executable, "ssh": job.target.ssh.python}.get(
            job.target.type, "python")  # the training image's interpreter (docker/Dockerfile)
    local = job.target.type in ("local", "sim")
    return compile_job(job, python=python, resolver=resolver, efa=facts.efa if local else None,
                       local_gpus=facts.gpus), facts


def _plan(args) -> int:
    from ..spec import jobplan

    compiled, facts = compile_from_args(args)
    local = compiled.job.target.type in ("local", "sim")
    plan = jobplan.make_job_plan(
        # Remote masters build the plan from their own environment; only local runs forward ours.
        compiled, dict(os.environ) if compiled.job.target.type == "local" else {}, topology=facts.topology if local else None,
        detected_flavour=facts.flavour if local else "openmpi4",
        run_as_root=facts.run_as_root if local else compiled.job.target.type in ("sagemaker", "sim"),
        cpu_count=facts.cpu_count if local else None, python=compiled.launch.program[0]
        if compiled.job.program.module else sys.executable)
    print(jobplan.to_json(plan) if args.json else jobplan.render(plan), end="" if not args.json else "\n")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "plan", help="print the fully resolved plan of a job spec (hosts, rank map, argv, env, tuning)",
        description="Validate JOB.yaml, resolve ${stack:...} outputs, apply the NCCL/EFA preset under your env, "
                    "and print what would run: hosts and slots, rank -> host -> GPU -> CPU set, the mpirun argv, "
                    "the ranks' environment with where each variable came from (secrets redacted), the tuning "
                    "applied and why, and warnings (stale knobs, your values overriding presets). Runs nothing.",
        epilog=EXIT_CODES)
    add_spec_args(p)
    p.set_defaults(func=_plan)
