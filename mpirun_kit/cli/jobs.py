"""`mpirun_kit status|logs|stop NAME`: look after a SageMaker training job submitted with `submit`.

Argument parsing and client creation only; the work is targets/sagemaker.py
(describe, follow, exit-code mapping).
"""
from __future__ import annotations

import json
import sys

EXIT_CODES = "exit codes: 0 ok (status: the job completed or is still running); 69 AWS refused or the job is " \
             "unknown; logs --follow returns the job's exit code when it ends."


def _clients(args):
    from ..targets.sagemaker import make_clients

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
    print(f"stop requested for {args.name}; SageMaker sends SIGTERM to every host, then ends the job")
    return 0


def register(subparsers) -> None:
    for name, func, text in (
            ("status", _status, "show a SageMaker training job's status and recent transitions"),
            ("logs", _logs, "print a SageMaker training job's CloudWatch logs, every host prefixed"),
            ("stop", _stop, "stop a SageMaker training job (SIGTERM to every host, then the job ends)")):
        p = subparsers.add_parser(name, help=text, description=text + ".", epilog=EXIT_CODES)
        p.add_argument("name", metavar="NAME", help="training job name (printed by `submit`)")
        p.add_argument("--region", metavar="REGION", help="AWS region (default: the AWS configuration)")
        if name == "status":
            p.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "logs":
            p.add_argument("--follow", action="store_true", help="keep following until the job ends")
            p.add_argument("--poll", type=float, default=10.0, metavar="S", help="seconds between polls (default 10)")
        p.set_defaults(func=func)
