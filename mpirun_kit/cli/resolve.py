"""A job spec file named on the command line made ready to plan: the CLI's spec arguments to the service's compile.

Place in the data flow: JOB.yaml -> service/compile.py (``load_spec``, ``compile_spec``: stack outputs,
region, this host's facts) -> a ``CompiledJob`` that plan/jobplan.py prints and targets/ run.  The CLI's
plan, submit, validate and doctor commands share it.  Only this part reads the environment
(``AWS_ENDPOINT_URL``, through the client factory; where the user's configuration lives, for the stack
prefix): the resolution itself takes its clients and the user's stack names injected.
"""
from __future__ import annotations

import os

from ..cluster.local import LocalFacts
from ..service.compile import compile_spec, load_spec, local_facts, parse_stack_overrides  # noqa: F401 - the commands' names


def compile_from_args(args, facts: LocalFacts | None = None, *, python: str | None = None, **kw):
    """Load, validate and compile the spec named on the command line -> (compiled, facts)."""
    compiled, facts, _ = compile_with_stack_values(args, facts, python=python, **kw)
    return compiled, facts


def compile_with_stack_values(args, facts: LocalFacts | None = None, *, python: str | None = None,
                              offline: bool = False, report=None, default_region=None, environ=None):
    """compile_from_args, plus the ``("STACK.Key", value)`` pairs the spec was compiled with (service/compile.py
    ``compile_spec`` with ``args``' spec, --target, --region and --stack-output; ``environ``: the shell's, which a
    multi-host job takes its allow-listed variables from)."""
    return compile_spec(args.spec, target=args.target, region=args.region, stack_outputs=args.stack_output,
                        aws=aws_client, facts=facts, python=python, offline=offline, report=report,
                        default_region=default_region, environ=environ,
                        stack_names=lambda: stack_names(report))


def stack_names(report=None):
    """The user's stack prefix, which ``mrk-`` in stack names stands for (stack/prefix.py): from the configuration
    file in MPIRUN_KIT_CONFIG_DIR, else $XDG_CONFIG_HOME/mpirun_kit, else ~/.config/mpirun_kit; the first time,
    ``mrk-<user>`` is written there and ``report`` says so."""
    import getpass

    from ..stack.prefix import load_stack_names

    names, chosen = load_stack_names(user_config_file(), getpass.getuser())
    if chosen and report is not None:
        report(chosen)
    return names


def user_config_file():
    """The user's configuration file (stack/prefix.py ``config_file``); the tests' is their own (tests/conftest.py)."""
    from ..stack.prefix import config_file

    return config_file(os.environ.get("MPIRUN_KIT_CONFIG_DIR"), os.environ.get("XDG_CONFIG_HOME"),
                       os.path.expanduser("~"))


def aws_client(service: str, region: str | None):
    """A boto3 client for the resolution, at ``AWS_ENDPOINT_URL`` when set (moto in the tests)."""
    import boto3

    return boto3.client(service, region_name=region, endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None)
