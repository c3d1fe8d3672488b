"""`mpirun_kit plan JOB.yaml`: print the fully resolved plan of a job spec, run nothing.

Argument parsing and host discovery only: the plan itself is built by the pure
functions in spec/ (load -> compile -> jobplan) on top of the launcher's
``build_launch_plan``.  This module also holds the helpers the other job
commands (submit, validate) share: reading the host's facts (GPUs, topology,
EFA, MPI flavour) and building the stack-output resolver.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Mapping

from ..errors import SpecError

#: what 64 and 69 mean for the commands that compile a job spec (plan, submit).
SPEC_CODE_NOTES = {
    64: "invalid spec or flag (every problem listed as file:line: key.path), or no AWS region for ${stack:...}",
    69: "no AWS credentials or AWS unreachable while reading ${stack:...} outputs (--stack-output avoids AWS)",
}


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


def stack_refs(job) -> tuple[tuple[str, str], ...]:
    """Every ``${stack:STACK.OutputKey}`` a job spec uses, in order of first use."""
    from ..spec.compile import _map_strings
    from ..spec.load import MACRO_RE, STACK_RE

    refs: dict[tuple[str, str], None] = {}

    def collect(text: str) -> str:
        for m in MACRO_RE.finditer(text):
            ref = STACK_RE.match(m.group(1))
            if ref:
                refs[(ref.group(1), ref.group(2))] = None
        return text
    _map_strings(job, collect)
    return tuple(refs)


def _cloudformation_outputs(region: str | None):
    """Stack name -> outputs from CloudFormation (boto3 client created on first use)."""
    clients: dict = {}

    def fetch(stack: str) -> Mapping[str, str]:
        import boto3

        from ..stack.outputs import get_outputs

        if "cf" not in clients:
            endpoint = os.environ.get("AWS_ENDPOINT_URL") or None
            clients["cf"] = boto3.client("cloudformation", region_name=region, endpoint_url=endpoint)
        return get_outputs(stack, clients["cf"])
    return fetch


def resolve_stacks(refs: tuple[tuple[str, str], ...], overrides: Mapping[str, Mapping[str, str]],
                   region: str | None, fetch=None) -> dict[str, Mapping[str, str]]:
    """The outputs of every stack ``refs`` name: ``--stack-output`` values first, then CloudFormation.

    Every stack is tried before failing, so one run reports all that could not be read.

    Raises:
        ClusterError (69: no credentials, AWS unreachable) or SpecError (64: no region, unknown
        stacks): naming every stack that failed and the ``--stack-output`` flags that replace them.
    """
    from ..errors import ClusterError, MpirunKitError
    from .main import translate

    fetch = fetch or _cloudformation_outputs(region)
    out: dict[str, Mapping[str, str]] = {}
    failed: dict[str, MpirunKitError] = {}
    for stack in dict.fromkeys(s for s, _ in refs):
        if stack in overrides:
            out[stack] = overrides[stack]
            continue
        try:
            out[stack] = fetch(stack)
        except MpirunKitError as exc:
            failed[stack] = exc
        except Exception as exc:  # noqa: BLE001 - botocore's no-region/credentials errors, named below
            known = translate(exc)
            if known is None:
                raise
            failed[stack] = known
    if not failed:
        return out
    # The same cause for every stack (no credentials, no region) is said once.
    reasons = list(dict.fromkeys(str(e).replace(f" for stack {s!r}", "") for s, e in failed.items()))
    flags = " ".join(f"--stack-output {s}.{k}=VALUE" for s, k in refs if s in failed)
    cls = ClusterError if any(isinstance(e, ClusterError) for e in failed.values()) else SpecError
    raise cls(f"could not read the outputs of stack(s) {', '.join(failed)}: {'; '.join(reasons)}; or give the "
              f"values on the command line: {flags}")


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


def load_spec(path, target: str | None = None):
    """load_job, with the spec's relative paths resolved against its own directory."""
    from ..spec.compile import resolve_relative_paths
    from ..spec.load import load_job

    return resolve_relative_paths(load_job(path, target=target), os.path.dirname(os.path.abspath(path)))


def compile_from_args(args, facts: HostFacts | None = None, *, python: str | None = None):
    """Load, validate and compile the spec named on the command line -> (compiled, facts)."""
    compiled, facts, _ = compile_with_stack_values(args, facts, python=python)
    return compiled, facts


def compile_with_stack_values(args, facts: HostFacts | None = None, *, python: str | None = None):
    """compile_from_args, plus the ``("STACK.Key", value)`` pairs the spec was compiled with."""
    from ..spec.compile import compile_job

    if not args.spec.strip():
        raise SpecError("JOB.yaml is an empty string; name a job spec file, e.g. jobs/maskrcnn-demo.yaml")
    job = load_spec(args.spec, args.target)
    facts = facts or host_facts()
    region = args.region or job.target.sagemaker.region
    refs = stack_refs(job)
    outputs = resolve_stacks(refs, parse_stack_overrides(args.stack_output), region) if refs else {}
    if python is None:
        # Local and simulated hosts share this interpreter (and its venv); remote hosts have their own.
        python = {"local": sys.executable, "sim": sys.executable, "ssh": job.target.ssh.python}.get(
            job.target.type, "python")  # the training image's interpreter (docker/Dockerfile)
    local = job.target.type in ("local", "sim")
    compiled = compile_job(job, python=python, resolver=outputs.__getitem__, efa=facts.efa if local else None,
                           local_gpus=facts.gpus)
    values = tuple((f"{s}.{k}", str(outputs[s][k])) for s, k in refs if k in outputs.get(s, {}))
    # The job against the stacks it names (role reach, key channel, FSx subnet): before anything is sent.
    from ..stack.infra import bucket_kms_keys, check_job_infrastructure, job_buckets

    kms_keys: tuple[str, ...] = ()
    if compiled.job.target.type == "sagemaker" and any("RoleBucket" in o for o in outputs.values()):
        import boto3  # the buckets' default KMS keys: one GetBucketEncryption each, best effort

        kms_keys = bucket_kms_keys(boto3.client("s3", region_name=region), job_buckets(compiled.job))
    infra = check_job_infrastructure(job, compiled.job, outputs, kms_keys=kms_keys)
    if infra:
        compiled = dataclasses.replace(compiled, warnings=compiled.warnings + infra)
    return compiled, facts, values


def _plan(args) -> int:
    from ..spec import jobplan

    compiled, facts, stack_values = compile_with_stack_values(args)
    local = compiled.job.target.type in ("local", "sim")
    plan = jobplan.make_job_plan(
        # Remote masters build the plan from their own environment; only local runs forward ours.
        compiled, dict(os.environ) if compiled.job.target.type == "local" else {}, topology=facts.topology if local else None,
        detected_flavour=facts.flavour if local else "openmpi4",
        run_as_root=facts.run_as_root if local else compiled.job.target.type in ("sagemaker", "sim"),
        cpu_count=facts.cpu_count if local else None, python=compiled.launch.program[0]
        if compiled.job.program.module else sys.executable, stack_values=stack_values)
    print(jobplan.to_json(plan) if args.json else jobplan.render(plan), end="" if not args.json else "\n")
    if not args.json and compiled.job.program.module == "mpirun_kit.maskrcnn.train":
        from ..maskrcnn.config import schedule_for_program  # the Mask R-CNN schedule at this world size

        print("  " + (schedule_for_program(plan.launch.program, len(plan.launch.ranks)) or ""))
    return 0


def register(subparsers) -> None:
    from ..errors import ExitCode
    from .main import add_command, exit_codes

    p = add_command(
        subparsers, "plan", help="print the fully resolved plan of a job spec (hosts, rank map, argv, env, tuning)",
        description="Validate JOB.yaml, resolve ${stack:...} outputs, apply the NCCL/EFA preset under your env, "
                    "and print what would run, each fact once: the stack outputs used, hosts and slots, "
                    "rank -> host -> GPU -> CPU set (identical rows merged into ranges), the tuning applied and "
                    "why, the ranks' environment with where each variable came from (secrets redacted), the "
                    "master, timeouts and the mpirun argv, and warnings. Runs nothing.",
        examples=["mpirun_kit plan jobs/maskrcnn-demo.yaml",
                  "mpirun_kit plan jobs/maskrcnn.yaml --json",
                  "mpirun_kit plan jobs/maskrcnn.yaml --stack-output mrk-role.RoleArn=arn:aws:iam::123456789012:"
                  "role/mrk --stack-output mrk-fsx.FileSystemId=fs-0123 ...",
                  "mpirun_kit plan jobs/allreduce-bench.yaml --target sim"],
        codes=exit_codes(ExitCode.BAD_INPUT, ExitCode.UNREACHABLE, notes=SPEC_CODE_NOTES))
    add_spec_args(p)
    p.set_defaults(func=_plan)
