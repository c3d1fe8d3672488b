"""A job spec file made ready to plan: parse the CLI's spec arguments, hand AWS clients to stack/resolve.py.

Place in the data flow: JOB.yaml -> ``load_job`` (spec/load.py, relative paths against the spec's
directory) -> ``stack.resolve.resolve_job`` (stack outputs, region, compile with this host's facts,
the job against its stacks) -> a ``CompiledJob`` that plan/jobplan.py prints and targets/ run.  The
CLI's plan, submit, validate and doctor commands share it.  Only this part reads the environment
(``AWS_ENDPOINT_URL``, through the client factory): the resolution itself takes its clients injected.
"""
from __future__ import annotations

import os

from ..cluster.local import LocalFacts, Machine, read_local_facts
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


def local_facts() -> LocalFacts:
    """This machine's facts, read through cluster/local.py's ``Machine`` with exec/command.py's runner."""
    from ..exec.command import command_runner

    return read_local_facts(Machine(command_runner(timeout_s=10.0)))


def load_spec(path, target: str | None = None):
    """load_job, with the spec's relative paths resolved against its own directory."""
    from ..spec.compile import resolve_relative_paths
    from ..spec.load import load_job

    return resolve_relative_paths(load_job(path, target=target), os.path.dirname(os.path.abspath(path)))


def compile_from_args(args, facts: LocalFacts | None = None, *, python: str | None = None, **kw):
    """Load, validate and compile the spec named on the command line -> (compiled, facts)."""
    compiled, facts, _ = compile_with_stack_values(args, facts, python=python, **kw)
    return compiled, facts


def compile_with_stack_values(args, facts: LocalFacts | None = None, *, python: str | None = None,
                              offline: bool = False, report=None, default_region=None):
    """compile_from_args, plus the ``("STACK.Key", value)`` pairs the spec was compiled with.

    ``offline`` (plan, ``submit --dry-run``): stacks that cannot be read for want of AWS stay
    unresolved (``${stack:...}`` as written) with a warning naming what resolves each.  ``report``
    receives the region line (``region R (from SOURCE)``); ``default_region`` is a callable giving
    the AWS configuration's region (the CLI passes ``aws_default_region``).
    """
    from ..stack.resolve import aws_default_region, resolve_job

    if not args.spec.strip():
        raise SpecError("JOB.yaml is an empty string; name a job spec file, e.g. jobs/maskrcnn-demo.yaml")
    job = load_spec(args.spec, args.target)
    if python is None:
        from ..targets import get_target

        python = get_target(job.target.type).python(job)   # the target says which interpreter its hosts run
    return resolve_job(job, facts or local_facts(), region_flag=args.region,
                       overrides=parse_stack_overrides(args.stack_output), aws=aws_client, python=python,
                       offline=offline, report=report, default_region=default_region or aws_default_region)


def aws_client(service: str, region: str | None):
    """A boto3 client for the resolution, at ``AWS_ENDPOINT_URL`` when set (moto in the tests)."""
    import boto3

    return boto3.client(service, region_name=region, endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None)
