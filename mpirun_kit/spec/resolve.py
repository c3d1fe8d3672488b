"""A job spec file made ready to plan: load, resolve ``${stack:...}`` outputs, compile with this host's facts.

Place in the data flow: JOB.yaml -> ``load_job`` (load.py) -> stack outputs
(``--stack-output`` values first, then CloudFormation) -> ``compile_job``
(compile.py) with ``cluster.local.LocalFacts`` -> a ``CompiledJob`` that
plan/jobplan.py prints and targets/ run.  The CLI's plan, submit, validate and
doctor commands share it; it takes their parsed arguments (``spec``, ``target``,
``region``, ``stack_output``) and reads AWS only when the spec names a stack.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import Mapping

from ..cluster.local import LocalFacts, read_local_facts
from ..errors import SpecError


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
    from .compile import _map_strings
    from .load import MACRO_RE, STACK_RE

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
    from ..errors import ClusterError, MpirunKitError, translate

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


def load_spec(path, target: str | None = None):
    """load_job, with the spec's relative paths resolved against its own directory."""
    from .compile import resolve_relative_paths
    from .load import load_job

    return resolve_relative_paths(load_job(path, target=target), os.path.dirname(os.path.abspath(path)))


def compile_from_args(args, facts: LocalFacts | None = None, *, python: str | None = None):
    """Load, validate and compile the spec named on the command line -> (compiled, facts)."""
    compiled, facts, _ = compile_with_stack_values(args, facts, python=python)
    return compiled, facts


def compile_with_stack_values(args, facts: LocalFacts | None = None, *, python: str | None = None):
    """compile_from_args, plus the ``("STACK.Key", value)`` pairs the spec was compiled with."""
    from .compile import compile_job

    if not args.spec.strip():
        raise SpecError("JOB.yaml is an empty string; name a job spec file, e.g. jobs/maskrcnn-demo.yaml")
    job = load_spec(args.spec, args.target)
    facts = facts or read_local_facts()
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
