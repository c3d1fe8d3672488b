"""`mpirun_kit jobs|status|logs|cancel|stop`: follow the jobs `submit` recorded, on every target.

Argument parsing and printing only: the job service (service/runner.py ``JobService``: ``list``,
``describe``, ``logs``, ``cancel``) reads the record from the store and has the job's target do the
work (targets/base.py; the defaults in targets/supervised.py for local, sim and ssh, SageMaker's and
Slurm's own calls for theirs).
A name the store does not know may be a SageMaker training job's name, as before records existed: the
service asks SageMaker once (service/unrecorded.py), and when it knows the name ``status``, ``logs`` and
``stop``/``cancel`` work on that training job; when it does not, the error names the records.
"""
from __future__ import annotations

import json
import sys
import time

from ..errors import ExitCode, NoSuchJobError, SpecError
from .main import add_command, exit_codes

def _record(args):
    """(the job service, the job's record, None), or (the service, None, SageMaker's description of the training job) when the
    records do not hold ``args.name`` and SageMaker knows it.

    Raises:
        NoSuchJobError: neither does (a mistyped id, mostly); with ``--json`` its JSON is printed first.
        SpecError: a prefix several job ids share.
    """
    from .common_flags import service_of

    if args.name.startswith("-") or not args.name:
        raise SpecError(f"training job name {args.name!r} is not valid; expected a job id (`mpirun_kit jobs` "
                        "lists them) or a SageMaker training job name")
    svc = service_of(args)
    try:
        return svc, svc.get(args.name), None
    except NoSuchJobError as missing:
        from ..service.unrecorded import describe_unrecorded

        try:
            return svc, None, describe_unrecorded(args.name, args.region, missing)
        except NoSuchJobError as none:
            if getattr(args, "json", False):
                print(json.dumps({"job_id": args.name, "found": False, "records": none.db,
                                  "exit_code": int(none.exit_code), "reason": str(none)}))
            raise


def job_ids(parsed_args=None, **_) -> list[str]:
    """Completion of ID (argcomplete's completer): the recorded job ids, newest first."""
    from .common_flags import store_of

    try:
        return [r.job_id for r in store_of(parsed_args).list(limit=200)]
    except SpecError:
        return []


# -- jobs ------------------------------------------------------------------------------------------

def _jobs(args) -> int:
    from .common_flags import service_of

    svc = service_of(args)
    rows = svc.list(states=args.state or (), spec=args.spec, target=args.target, limit=args.limit)
    store = svc.store
    if args.json:
        print(json.dumps([s.to_dict() for s in rows], sort_keys=True))
        return 0
    if not rows:
        print("no jobs recorded" + (" matching the filters" if args.state or args.spec or args.target else "")
              + f" ({store.db})", file=sys.stderr)
        return 0
    now = time.time()
    print(f"{'JOB ID':<28} {'STATE':<10} {'TARGET':<10} {'EXIT':>4}  {'CREATED':<19}  {'ELAPSED':>9} "
          f"{'NODES':>5}  {'USER':<10} SPEC")
    for s in rows:
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.created_at or 0))
        code = "-" if s.exit_code is None else str(s.exit_code)
        nodes = "-" if s.nodes is None else str(s.nodes)
        print(f"{s.job_id:<28} {s.state.value:<10} {s.target:<10} {code:>4}  {created:<19}  "
              f"{elapsed(s, now):>9} {nodes:>5}  {s.user or '-':<10} {s.spec or '-'}")
    return 0


def elapsed(status, now: float) -> str:
    """``jobs``' ELAPSED (squeue's TIME): started -> ended, or -> ``now`` while it runs, as [D-]HH:MM:SS; ``-``
    before it started."""
    if status.started_at is None:
        return "-"
    end = status.ended_at if status.ended_at is not None else (now if not status.state.terminal else None)
    if end is None:
        return "-"
    secs = max(0, int(end - status.started_at))
    days, rest = divmod(secs, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


# -- status ----------------------------------------------------------------------------------------

def _status(args) -> int:
    from ..service.lifecycle import status_code

    svc, rec, desc = _record(args)
    if rec is None:
        return _sagemaker_status(args, desc)
    status = svc.describe(rec.job_id)
    if args.json:
        print(status.to_json())
    else:
        cause = status.root_cause
        rows = [("job", status.job_id), ("state", status.state.value), ("target", status.target),
                ("exit_code", status.exit_code), ("source", status.source), ("reason", status.reason),
                ("root_cause", f"rank {cause['rank']} on {cause['host']}" if cause else None),
                ("native", status.native), ("detail", status.detail), ("run_dir", status.run_dir),
                ("spec", status.spec)]
        for k, v in rows:
            if v is not None:
                print(f"{k:<11} {v}")
    return status_code(status)


def _sagemaker_status(args, desc: dict) -> int:
    """``desc``: describe_training_job's answer (``_record`` asked)."""
    from ..service.unrecorded import unrecorded_status

    view, transitions, code = unrecorded_status(desc)
    if args.json:
        print(json.dumps(view, indent=2, sort_keys=True, default=str))
    else:
        for k, v in view.items():
            print(f"{k:<22} {v}")
        for t in transitions:
            print(f"  {t.get('StartTime')}  {t.get('Status')}: {t.get('StatusMessage', '')}")
    return code


# -- logs ------------------------------------------------------------------------------------------

def _logs(args) -> int:
    from ..service.lifecycle import status_code

    svc, rec, _ = _record(args)
    if rec is None:
        return _sagemaker_logs(args)
    out = sys.stdout
    for line in svc.logs(rec.job_id, rank=args.rank, follow=args.follow):
        out.write(line + "\n")
        out.flush()
    if not args.follow:
        return 0
    return status_code(svc.describe(rec.job_id))


def _sagemaker_logs(args) -> int:
    from ..service.unrecorded import clients
    from ..targets.sagemaker import LogFollower, follow

    sm, logs = clients(args.name, args.region)
    if args.follow:
        return follow(sm, args.name, logs_client=logs, poll_s=args.poll)
    LogFollower(logs, args.name, sys.stdout).poll()
    return 0


# -- cancel / stop -----------------------------------------------------------------------------------

def _cancel(args) -> int:
    svc, rec, _ = _record(args)
    if rec is None:
        return _sagemaker_stop(args)
    status, ended_before = svc.cancel(rec.job_id)
    if ended_before:
        _say(args, rec.job_id, status, f"job {rec.job_id} already ended ({status.state.value}); nothing to cancel")
        return 0
    from ..service.lifecycle import target_of

    platform = target_of(rec).platform
    _say(args, rec.job_id, status, f"job {rec.job_id}: {status.state.value}"
         + (f" (exit code {status.exit_code})" if status.exit_code is not None else "")
         + ("; the platform stops it on every host" if platform and not status.state.terminal else
            "; nothing of it is left running"))
    return 0


def _say(args, job_id: str, status, text: str) -> None:
    if args.json:
        print(status.to_json())
    else:
        print(text)


def _sagemaker_stop(args) -> int:
    from ..service.unrecorded import stop_unrecorded

    stop_unrecorded(args.name, args.region)
    if args.json:
        print(json.dumps({"job": args.name, "stop_requested": True}))
    else:
        print(f"stop requested for {args.name}; SageMaker sends SIGTERM to every host, then ends the job")
    return 0


_WHICH = ("ID: a job id `submit` printed (or a unique prefix of one), or a SageMaker training job name; the job "
          "records are in --state-dir (default $MPIRUN_KIT_STATE_DIR, else $XDG_STATE_HOME/mpirun_kit, else "
          "~/.local/state/mpirun_kit).")
_AWS_CODES = {64: "no such job, a bad job name, or (a SageMaker name) no AWS region configured",
              69: "no AWS credentials, AWS refused, or the SageMaker job is unknown"}

_COMMANDS = {
    "status": ("show a job's state, exit code, source and root cause (any target)",
               "Print a job's state (pending, running, succeeded, failed, cancelled, lost), and once it ended its "
               "exit code, who decided it (source: job, launcher, user, platform), the reason and the root cause, "
               "as `submit --json` has them (--json: one object). " + _WHICH + " For a SageMaker name the "
               "store does not know: the training job's status, secondary status, failure reason, times and "
               "last five transitions.",
               ["mpirun_kit status hello-3fa9c1", "mpirun_kit status hello-3fa9c1 --json",
                "mpirun_kit status maskrcnn-20261123-101500 --region us-west-2"],
               exit_codes(ExitCode.BAD_INPUT, ExitCode.UNREACHABLE, ExitCode.LAUNCH_FAILED, notes={
                   0: "the job succeeded, or is pending or running", **_AWS_CODES,
                   70: "the job is lost: its supervisor ended without a result (killed, a reboot)"},
                   extra="other codes: the job ended with it (1-63 job, 124 deadline, 130/143 cancelled)")),
    "logs": ("print a job's output, every line behind [rank host]; --rank R for one rank",
             "Print what a job's ranks printed (its run directory's output.log; SageMaker: the CloudWatch logs of "
             "every host, each line prefixed with its host). --rank R keeps rank R's lines; --follow keeps "
             "printing new lines until the job ends and returns the job's exit code. " + _WHICH,
             ["mpirun_kit logs hello-3fa9c1", "mpirun_kit logs hello-3fa9c1 --rank 1 --follow",
              "mpirun_kit logs maskrcnn-20261123-101500 --follow --poll 30"],
             exit_codes(ExitCode.BAD_INPUT, ExitCode.UNREACHABLE, notes={
                 0: "the logs were printed (without --follow)", **_AWS_CODES},
                 extra="--follow: the job's exit code when it ends (1-63 job, 124 deadline, 130/143 cancelled)")),
    "cancel": ("stop a job on every host: SIGTERM, the grace period, SIGKILL; nothing is left",
               "Stop a job wherever it runs: every rank on every host gets SIGTERM, then SIGKILL after the spec's "
               "timeouts.grace_s; the simulated cluster's namespaces, sshd, orted and ranks all go. Returns once "
               "nothing of it runs (SageMaker: once StopTrainingJob is accepted). The job's state becomes "
               "cancelled; cancelling a job that ended changes nothing. " + _WHICH,
               ["mpirun_kit cancel hello-3fa9c1", "mpirun_kit cancel hello-3fa9c1 --json",
                "mpirun_kit cancel maskrcnn-20261123-101500 --region us-west-2"],
               exit_codes(ExitCode.BAD_INPUT, ExitCode.UNREACHABLE, notes={
                   0: "the job was cancelled (or had already ended)", **_AWS_CODES})),
    "stop": ("stop a job: the same as cancel (kept for SageMaker training job names)",
             "The same as `cancel`, under the name earlier versions gave it for SageMaker: ask SageMaker to stop "
             "a training job (every host's processes get SIGTERM, then the job ends as Stopped), or stop a "
             "recorded job of any target. " + _WHICH,
             ["mpirun_kit stop maskrcnn-20261123-101500", "mpirun_kit stop maskrcnn-20261123-101500 --region us-west-2"],
             exit_codes(ExitCode.BAD_INPUT, ExitCode.UNREACHABLE, notes={
                 0: "stop requested", **_AWS_CODES,
                 69: "no AWS credentials, AWS refused (the job already ended), or the job is unknown"})),
}


def register(subparsers) -> None:
    from ..records import JobState
    from .common_flags import add_state_dir_arg

    p = add_command(
        subparsers, "jobs", help="list the jobs `submit` recorded, newest first (any target)",
        description="List recorded jobs, newest first: job id, state (refreshed from the job's supervisor or "
                    "platform: a job whose supervisor died without a result shows as lost), target, exit code, "
                    "when it was submitted, how long it ran ([D-]HH:MM:SS, up to now while it runs), the nodes it "
                    "was planned on, who submitted it and its spec. --state and --spec filter; --json prints one JSON list.",
        examples=["mpirun_kit jobs", "mpirun_kit jobs --state running --state pending",
                  "mpirun_kit jobs --spec jobs/allreduce-bench.yaml --json"],
        codes=exit_codes(ExitCode.BAD_INPUT, notes={0: "listed (also when none matched)",
                                                    64: "the job record store cannot be opened"}))
    p.add_argument("--state", action="append", choices=[s.value for s in JobState], metavar="STATE",
                   help="only jobs in this state (repeatable): " + ", ".join(s.value for s in JobState))
    p.add_argument("--spec", metavar="SPEC", help="only jobs of this spec (its file, or its job name)")
    p.add_argument("--target", choices=("local", "sim", "ssh", "sagemaker", "slurm"), help="only jobs on this target")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="at most N jobs (default 50; 0: all)")
    p.add_argument("--json", action="store_true", help="one JSON list of job statuses")
    add_state_dir_arg(p)
    p.set_defaults(func=_jobs)
    for name, func in (("status", _status), ("logs", _logs), ("cancel", _cancel), ("stop", _cancel)):
        text, description, examples, codes = _COMMANDS[name]
        p = add_command(subparsers, name, help=text, description=description, examples=examples, codes=codes)
        p.add_argument("name", metavar="ID", help="job id (printed by `submit`), or a SageMaker training job name"
                       ).completer = job_ids   # type: ignore[attr-defined] # argcomplete's hook
        p.add_argument("--region", metavar="REGION", help="AWS region of a SageMaker job (default: the AWS "
                                                          "configuration)")
        if name != "logs":
            p.add_argument("--json", action="store_true", help="machine-readable output (one JSON object)")
        if name == "logs":
            p.add_argument("--rank", type=int, metavar="R", help="only rank R's lines")
            p.add_argument("--follow", action="store_true", help="keep following until the job ends")
            p.add_argument("--poll", type=float, default=10.0, metavar="S",
                           help="SageMaker: seconds between polls (default 10)")
        add_state_dir_arg(p)
        p.set_defaults(func=func)
