"""`mpirun_kit status|logs|stop NAME`: look after a SageMaker training job submitted with `submit`.

Argument parsing and client creation only; the work is targets/sagemaker.py
(describe, follow, exit-code mapping).
"""
from __future__ import annotations

import json
import re
import sys

from ..errors import ExitCode, SpecError
from .main import add_command, exit_codes

#: SageMaker's TrainingJobName rule.
_JOB_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")


def check_job_name(name: str) -> str:
    """Refuse a name SageMaker would refuse, before any AWS call (and before a region is needed)."""
    if not _JOB_NAME.fullmatch(name):
        raise SpecError(f"training job name {name!r} is not valid; expected 1-63 letters, digits or hyphens, "
                        "starting and ending with a letter or digit (the name `submit` printed)")
    return name


def _clients(args):
    from ..targets.sagemaker import make_clients

    check_job_name(args.name)
    return make_clients(args.region)


def _status(args) -> int:
    from ..targets.sagemaker import TERMINAL, describe, exit_code_for

    sm, _ = _clients(args)
    desc = describe(sm, args.name)
    keys = ("TrainingJobName", "TrainingJobStatus", "SecondaryStatus", "FailureReason", "TrainingStartTime",
            "TrainingEndTime", "BillableTimeInSeconds")
    view = {k: desc[k] for k in keys if k in desc}
    if args.json:
        print(json.dumps(view, indent=2, sort_keys=True, default=str))
    else:
        for k, v in view.items():
            print(f"{k:<22} {v}")
        for t in desc.get("SecondaryStatusTransitions", [])[-5:]:
            print(f"  {t.get('StartTime')}  {t.get('Status')}: {t.get('StatusMessage', '')}")
    return exit_code_for(desc) if desc.get("TrainingJobStatus") in TERMINAL else 0


def _logs(args) -> int:
    from ..targets.sagemaker import LogFollower, follow

    sm, logs = _clients(args)
    if args.follow:
        return follow(sm, args.name, logs_client=logs, poll_s=args.poll)
    LogFollower(logs, args.name, sys.stdout).poll()
    return 0


def _stop(args) -> int:
    from botocore.exceptions import ClientError

    from ..errors import ClusterError

    sm, _ = _clients(args)
    try:
        sm.stop_training_job(TrainingJobName=args.name)
    except ClientError as exc:
        raise ClusterError(f"could not stop training job {args.name!r}: "
                           f"{exc.response.get('Error', {}).get('Message', exc)}; `mpirun_kit status {args.name}` "
                           "shows whether it already ended") from exc
    if args.json:
        print(json.dumps({"job": args.name, "stop_requested": True}))
    else:
        print(f"stop requested for {args.name}; SageMaker sends SIGTERM to every host, then ends the job")
    return 0


_COMMANDS = {
    "status": ("show a SageMaker training job's status and recent transitions",
               "Print a training job's status, secondary status, failure reason, start/end times and billable "
               "seconds, then its last five status transitions (--json: the same fields as one object).",
               ["mpirun_kit status maskrcnn-20261123-101500",
                "mpirun_kit status maskrcnn-20261123-101500 --region us-west-2 --json"],
               exit_codes(ExitCode.BAD_INPUT, ExitCode.UNREACHABLE, notes={
                   0: "the job completed, or is still running",
                   64: "bad job name, or no AWS region configured",
                   69: "no AWS credentials, AWS refused, or the job is unknown"},
                   extra="other codes: the job ended; its exit code (1-63 job, 124 deadline, 143 stopped)")),
    "logs": ("print a SageMaker training job's CloudWatch logs, every host prefixed",
             "Print the CloudWatch logs of every host of a training job, each line prefixed with its host "
             "([algo-1] ...). --follow keeps polling until the job ends and returns the job's exit code.",
             ["mpirun_kit logs maskrcnn-20261123-101500",
              "mpirun_kit logs maskrcnn-20261123-101500 --follow --poll 30"],
             exit_codes(ExitCode.BAD_INPUT, ExitCode.UNREACHABLE, notes={
                 0: "the logs were printed (without --follow)",
                 64: "bad job name, or no AWS region configured",
                 69: "no AWS credentials, AWS refused, or the job is unknown"},
                 extra="--follow: the job's exit code when it ends (1-63 job, 124 deadline, 143 stopped)")),
    "stop": ("stop a SageMaker training job (SIGTERM to every host, then the job ends)",
             "Ask SageMaker to stop a training job: every host's processes get SIGTERM, then the job ends as "
             "Stopped. Returns once the request is accepted; `mpirun_kit status NAME` shows when it ended.",
             ["mpirun_kit stop maskrcnn-20261123-101500",
              "mpirun_kit stop maskrcnn-20261123-101500 --region us-west-2"],
             exit_codes(ExitCode.BAD_INPUT, ExitCode.UNREACHABLE, notes={
                 0: "stop requested",
                 64: "bad job name, or no AWS region configured",
                 69: "no AWS credentials, AWS refused (the job already ended), or the job is unknown"})),
}


def register(subparsers) -> None:
    for name, func in (("status", _status), ("logs", _logs), ("stop", _stop)):
        text, description, examples, codes = _COMMANDS[name]
        p = add_command(subparsers, name, help=text, description=description, examples=examples, codes=codes)
        p.add_argument("name", metavar="NAME", help="training job name (printed by `submit`)")
        p.add_argument("--region", metavar="REGION", help="AWS region (default: the AWS configuration)")
        if name in ("status", "stop"):
            p.add_argument("--json", action="store_true", help="machine-readable output (one JSON object)")
        if name == "logs":
            p.add_argument("--follow", action="store_true", help="keep following until the job ends")
            p.add_argument("--poll", type=float, default=10.0, metavar="S", help="seconds between polls (default 10)")
        p.set_defaults(func=func)
