"""A job spec file made ready to submit: load it, resolve its stacks, compile it with this machine's facts.

Place in the data flow: JOB.yaml -> ``load_spec`` (spec/load.py, relative paths against the spec's
directory) -> ``compile_spec`` (stack/resolve.py: stack outputs, region, the target's interpreter, this
host's facts) -> a ``CompiledJob`` that targets/ prepare and run, with ``quota_preflight`` for a
SageMaker job's instance quota.  The AWS client factory is injected (``aws``): reading the
environment for it (``AWS_ENDPOINT_URL``) is the caller's, the CLI's or the Python API's.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Callable, Mapping, Sequence

from ..cluster.local import LocalFacts, Machine, read_local_facts
from ..errors import ClusterError, SpecError
from ..redact import is_secret

#: makes a boto3 client: (service, region) -> client.
ClientFactory = Callable[[str, "str | None"], object]


def plain_aws_client(service: str, region: str | None):
    """A boto3 client at AWS's own endpoint (the default when the caller injects none)."""
    import boto3

    return boto3.client(service, region_name=region)


def parse_stack_overrides(items: Sequence[str]) -> dict[str, dict[str, str]]:
    """``STACK.KEY=VALUE`` strings (``--stack-output``) -> {stack: {key: value}}.

    Raises:
        SpecError: an item not of that shape (names it and shows one that is).
    """
    out: dict[str, dict[str, str]] = {}
    for item in items:
        ref, sep, value = item.partition("=")
        stack, dot, key = ref.partition(".")
        if not sep or not dot or not stack or not key:
            raise SpecError(f"--stack-output {item!r}: expected STACK.OutputKey=VALUE, e.g. mrk-fsx.FileSystemId=fs-0123")
        out.setdefault(stack, {})[key] = value
    return out


def local_facts() -> LocalFacts:
    """This machine's facts, read through cluster/local.py's ``Machine`` with exec/command.py's runner."""
    from ..exec.command import command_runner

    return read_local_facts(Machine(command_runner(timeout_s=10.0)))


def load_spec(path, target: str | None = None):
    """load_job, with the spec's relative paths resolved against its own directory."""
    from ..spec.compile import resolve_relative_paths
    from ..spec.load import load_job

    return resolve_relative_paths(load_job(path, target=target), os.path.dirname(os.path.abspath(path)))


def compile_spec(spec: str, *, target: str | None = None, region: str | None = None,
                 stack_outputs: Sequence[str] = (), aws: ClientFactory = plain_aws_client,
                 facts: LocalFacts | None = None, python: str | None = None, offline: bool = False,
                 report: Callable[[str], None] | None = None, default_region=None, stack_names=None,
                 environ: Mapping[str, str] | None = None):
    """Load, validate and compile the job spec file ``spec`` -> (compiled, facts, the ``("STACK.Key", value)``
    pairs it was compiled with).

    ``offline`` (plan, ``submit --dry-run``): stacks that cannot be read for want of AWS stay
    unresolved (``${stack:...}`` as written) with a warning naming what resolves each.  ``report``
    receives the region line (``region R (from SOURCE)``); ``default_region`` is a callable giving
    the AWS configuration's region (stack/resolve.py's ``aws_default_region`` by default); ``stack_names``
    the user's stack prefix (stack/prefix.py; the names as written without it), or a callable giving it, called
    only for a spec that names a stack.  ``environ``: the submitting shell's environment (the CLI's or the API's
    caller's), whose allow-listed variables a multi-host job takes with it (``with_submit_env``); None: none.

    Raises:
        SpecError: an empty name, an invalid spec (every problem listed), unknown stacks.
        ClusterError: AWS unreachable or no credentials (not ``offline``).
    """
    from ..stack.resolve import aws_default_region, resolve_job

    if not spec.strip():
        raise SpecError("JOB.yaml is an empty string; name a job spec file, e.g. jobs/maskrcnn-demo.yaml")
    job = load_spec(spec, target)
    if python is None:
        from ..targets import get_target

        python = get_target(job.target.type).python(job)   # the target says which interpreter its hosts run
    compiled, facts, values = resolve_job(job, facts or local_facts(), region_flag=region,
                                          overrides=parse_stack_overrides(stack_outputs), aws=aws, python=python,
                                          offline=offline, report=report,
                                          default_region=default_region or aws_default_region, names=stack_names)
    return (with_submit_env(compiled, environ) if environ is not None else compiled), facts, values


def with_submit_env(compiled, environ: Mapping[str, str]):
    """The job with what it takes from the submitting shell ``environ`` (plan/env.py ``submit_env``), for a target
    whose master is another host (sim, ssh, Slurm, SageMaker): the allow-listed variables (``WANDB_``, ``CUDA_``,
    ``MLFLOW_`` ...) and the ``env_forward`` names go into the LaunchSpec's env, under the spec's own env and the
    tuning preset (which win), so every rank gets them as srun's do.  Each variable held back (a secret-looking
    name, an AWS credential) and every other one left behind is named with how to send it in ``env_notes``,
    which ``plan`` prints with its warnings and ``submit`` as warnings unless -q.  Target local is returned as it is: its ranks inherit the shell
    (LaunchSpec.env_inherit) and its plan names what they do not get."""
    from ..plan.env import FORWARD_HOW, submit_env

    job = compiled.job
    if job.target.type == "local" or compiled.launch.env_inherit:
        return compiled
    env, dropped, left = submit_env(environ, compiled.launch.env_forward)
    ours = dict(compiled.launch.env)
    env = tuple((n, v) for n, v in env if n not in ours)
    notes = [f"env: {name} not forwarded to the ranks: {why}" for name, why in dropped]
    warnings = []
    if job.target.type == "sagemaker":
        warnings += [f"env {n}: SageMaker shows the job's launch spec (a hyperparameter) in its console and API; "
                     "fetch secrets at run time (Secrets Manager via the instance role) instead"
                     for n, _ in env if is_secret(n)]
    if left:
        notes.append(f"env: not forwarded from this shell ({len(left)}): {' '.join(left)}; "
                        f"{FORWARD_HOW} to send one")
    launch = dataclasses.replace(compiled.launch, env=tuple(sorted({**dict(env), **ours}.items())))
    return dataclasses.replace(compiled, launch=launch, warnings=compiled.warnings + tuple(warnings),
                               env_notes=tuple(notes))


def quota_preflight(compiled) -> tuple[str | None, str | None]:
    """(shortfall line, note) for a SageMaker job's training-instance quota (stack/quotas.py); (None, None)
    for other targets.  The note says why the quota was not read (no credentials, no Service Quotas)."""
    job = compiled.job
    if job.target.type != "sagemaker":
        return None, None
    import boto3

    from ..stack.quotas import training_preflight

    region = job.target.sagemaker.region
    try:
        sq = boto3.client("service-quotas", region_name=region)
        sm = boto3.client("sagemaker", region_name=region)  # the account's in-progress jobs use the quota too
    except Exception as exc:  # noqa: BLE001 - botocore's no-region error: the note says it
        return None, f"quota not checked ({exc})"
    return training_preflight(sq, job.resources.instance_type, len(compiled.hosts), spot=job.spot.enabled,
                              region=region, sm=sm)


def compile_for_submit(spec: str, *, target: str | None, region: str | None, stack_outputs: Sequence[str],
                       dry_run: bool, aws: ClientFactory = plain_aws_client,
                       report: Callable[[str], None] | None = None, stack_names=None,
                       environ: Mapping[str, str] | None = None):
    """The spec compiled for a submission, with the quota preflight (a shortfall refuses a real run and is a
    warning of a dry run's); ``environ``: the submitting shell's (``compile_spec``).

    Raises:
        ClusterError: a real run the account's quota cannot hold (the shortfall line).
    """
    # A dry run needs no AWS: stacks it cannot read stay ${stack:...}, each with what resolves it.
    compiled, _, _ = compile_spec(spec, target=target, region=region, stack_outputs=stack_outputs, aws=aws,
                                  offline=dry_run, report=report, stack_names=stack_names, environ=environ)
    short, note = quota_preflight(compiled)  # before anything is created
    if short and not dry_run:
        raise ClusterError(short)
    if short:
        compiled = dataclasses.replace(compiled, warnings=compiled.warnings + (short,))
    if note:  # an unreadable quota is plan's to report; here the request itself will say what is wrong
        logging.getLogger(__name__).info("%s", note)
    return compiled
