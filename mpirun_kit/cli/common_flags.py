"""What the commands that compile a job spec (plan, submit) share: its flags, what 64 and 69 mean for
them, our one-line stderr notes (``say``, which the stack commands use too), the SageMaker quota
preflight (service/compile.py's), the record store and the job service the job commands call.

Place in the data flow: argument parsing only; cli/resolve.py compiles the spec these flags name.
One home, so submit does not borrow from the plan command's module.
"""
from __future__ import annotations

import argparse
import os
import sys

from ..targets import TARGET_MODULES

#: what 64 and 69 mean for the commands that compile a job spec (plan, submit).
SPEC_CODE_NOTES = {
    64: "invalid spec or flag (every problem listed as file:line: key.path), a ${stack:...} stack that does not "
        "exist, or one in another region than the job's",
    69: "no AWS credentials or AWS unreachable while reading ${stack:...} outputs (submit only: plan and "
        "submit's dry run show them unresolved; --stack-output avoids AWS)",
}


def add_spec_args(p: argparse.ArgumentParser) -> None:
    """Flags shared by plan and submit."""
    p.add_argument("spec", metavar="JOB.yaml", help="job spec file (see jobs/ and the README)")
    p.add_argument("--target", choices=tuple(TARGET_MODULES),
                   help="run on this target instead of the spec's target.type")
    p.add_argument("--region", metavar="REGION", help="AWS region for ${stack:...} outputs (default: the spec's "
                   "target.sagemaker.region, else the AWS configuration)")
    p.add_argument("--stack-output", action="append", default=[], metavar="STACK.KEY=VALUE",
                   help="use VALUE for ${stack:STACK.KEY} instead of asking CloudFormation (repeatable)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def output_level(args) -> int:
    """The command's output level (core/verbosity.py), set on ``args`` by cli/main.py; a namespace built
    without main (a library caller's, a test's) gets VERBOSE, the library's level."""
    from ..core import verbosity

    return getattr(args, "verbosity", verbosity.VERBOSE)


def say(args, line: str) -> None:
    """One line of ours on stderr (the region the spec's stacks are read in), unless -q."""
    from ..core import verbosity

    if output_level(args) >= verbosity.DEFAULT:
        print(f"mpirun_kit: {line}", file=sys.stderr, flush=True)


def quota_preflight(compiled) -> tuple[str | None, str | None]:
    """(shortfall line, note) for a SageMaker job's quota: service/compile.py's, imported when asked (boto3)."""
    from ..service.compile import quota_preflight as preflight

    return preflight(compiled)


def add_state_dir_arg(p) -> None:
    """``--state-dir``: where the job records are (the submit, jobs, status, logs and cancel commands)."""
    p.add_argument("--state-dir", metavar="DIR",
                   help="the job record store's directory (default $MPIRUN_KIT_STATE_DIR, else "
                        "$XDG_STATE_HOME/mpirun_kit, else ~/.local/state/mpirun_kit)")


def store_of(args):
    """The job record store: ``--state-dir``, else the environment's choice (records.default_state_dir)."""
    from ..records import RecordStore, default_state_dir

    return RecordStore(getattr(args, "state_dir", None) or default_state_dir(os.environ))


def service_of(args):
    """The job service (service/runner.py) over ``store_of(args)``, with the CLI's AWS clients (cli/resolve.py
    ``aws_client``: ``AWS_ENDPOINT_URL``) and our notes on stderr (``say``)."""
    from ..service.runner import JobService
    from .resolve import aws_client, stack_names

    return JobService(store_of(args), aws=aws_client, report=lambda line: say(args, line),
                      stack_names=lambda: stack_names(lambda line: say(args, line)), environ=dict(os.environ))
