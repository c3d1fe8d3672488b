"""`mpirun_kit submit JOB.yaml [--target T] [--detach]`: run a job spec on its target; the job's exit code is ours.

Argument parsing and printing only: the flags become a ``SubmitRequest`` and the job service
(service/runner.py ``JobService``) does the work: it compiles the spec, has the target make the
choices a pure builder must not make (``prepare``: a free port, a cluster name, a SageMaker job
name), whose request value ``--dry-run`` prints, records the job (a job id, printed first, and a run
directory holding the resolved spec, the plan, the output, the failure report, the timeline and the
outcome) and supervises it to its end, in the foreground or, with ``--detach``, in a copy of this
process in its own session (``mpirun_kit run-detached ID``) that the terminal's end does not reach.
``--json`` ends stdout with how it ended (an Outcome) whatever happened.
"""
from __future__ import annotations

import json
import sys
import time

from ..core import verbosity
from ..errors import ExitCode
from .common_flags import SPEC_CODE_NOTES, add_spec_args, add_state_dir_arg, output_level, say, service_of


def request_of(args):
    """The submit flags as the service's typed request."""
    from ..service.requests import SubmitRequest

    return SubmitRequest(spec=args.spec, target=args.target, region=args.region,
                         stack_outputs=tuple(args.stack_output), job_name=args.job_name, wait=args.wait,
                         keep_keys=getattr(args, "keep_keys", False), resume_from=getattr(args, "resume_from", None),
                         detach=args.detach, verbosity=output_level(args))


def _warn(lines) -> None:
    for w in lines:   # a target returns what the user must hear; the CLI says it
        print(f"mpirun_kit: warning: {w}", file=sys.stderr)


def _submit(args) -> int:
    """Run the job; with --json, end stdout with one JSON Outcome line, whatever happened."""
    from ..errors import MpirunKitError, translate
    from ..service.runs import error_outcome, outcome_json
    from ..targets import get_target

    started = time.time()
    compiled = target = None
    svc = service_of(args)
    req = request_of(args)
    try:
        compiled = svc.compile(req, dry_run=args.dry_run)
        _warn(compiled.warnings)
        for n in compiled.env_notes:   # the shell's variables left behind: a note, not a warning (-q: none)
            say(args, f"note: {n}")
        target = get_target(compiled.job.target.type)
        if args.dry_run:
            dry = svc.dry_run(req, compiled)
            _warn(dry.warnings)
            print(dry.to_json() if args.json else dry.render(), end="\n" if args.json else "")
            return 0
        sub = svc.record(req, compiled)
        _warn(sub.warnings)
        if args.detach:
            return detach(args, svc, sub)
        say_job(sub.record, output_level(args))
        outcome = svc.run(sub, started=started)
    except Exception as exc:
        known = exc if isinstance(exc, MpirunKitError) else translate(exc)
        if args.json and not args.dry_run and known is not None:
            print(error_outcome(args.target, compiled, target, known, started).to_json(), flush=True)
        raise
    if args.json:
        sys.stdout.flush()
        print(outcome_json(outcome, sub.record), flush=True)
    return outcome.exit_code


def say_job(rec, level: int) -> None:
    """The job id first (`status`, `logs`, `cancel` take it): on a terminal, and at -v; by default a redirected
    submit prints only the ranks' lines and warnings (issue 16), and --json's result line carries the id."""
    from ..core import verbosity

    if level >= verbosity.VERBOSE or (level >= verbosity.DEFAULT and sys.stderr.isatty()):
        print(f"mpirun_kit: job {rec.job_id} (run directory {rec.run_dir})", file=sys.stderr, flush=True)


def detach(args, svc, sub) -> int:
    """``submit --detach``: the job started under its own supervisor; its id on stdout, how to follow it on stderr."""
    rec = sub.record
    now = svc.detach(sub, level=output_level(args))
    if args.json:
        print(json.dumps({"job_id": rec.job_id, "state": now.state.value, "run_dir": rec.run_dir}), flush=True)
    else:
        print(rec.job_id, flush=True)
    if not args.quiet:
        print(f"mpirun_kit: job {rec.job_id} runs in the background (run directory {rec.run_dir}); "
              f"`mpirun_kit status {rec.job_id}`, `mpirun_kit logs {rec.job_id} --follow`, "
              f"`mpirun_kit cancel {rec.job_id}`", file=sys.stderr)
    return 0


def register(subparsers) -> None:

    from .main import add_command, exit_codes

    p = add_command(
        subparsers, "submit", help="run a job spec on its target (local, sim, ssh, sagemaker)",
        description="Validate and compile JOB.yaml, then run it: local = this machine via mpirun (the default); "
                    "sim = the simulated multi-host cluster; ssh = real hosts over paramiko; sagemaker = a "
                    "CreateTrainingJob request. Every run gets a job id (printed first) and a run directory of its own "
                    "(spec, plan, output, failure report, timeline, result); `jobs`, `status ID`, `logs ID` and "
                    "`cancel ID` follow it, and --detach leaves it running in the background. "
                    "--dry-run prints exactly what would run (the request) and exits; "
                    "with --json as JSON. Without --dry-run, --json ends stdout with one JSON result line: "
                    "exit_code, source (job: the program's own code; launcher: mpirun_kit's, e.g. 64/70/75; "
                    "platform: SageMaker/AWS), reason, root_cause (rank, host), failure_file, timeline.",
        examples=["mpirun_kit submit jobs/maskrcnn-demo.yaml",
                  "mpirun_kit submit jobs/allreduce-bench.yaml --target sim",
                  "mpirun_kit submit jobs/allreduce-bench.yaml --detach",
                  "mpirun_kit submit jobs/maskrcnn.yaml --dry-run --json",
                  "mpirun_kit submit jobs/allreduce-bench.yaml --target sim --json -q",
                  "mpirun_kit submit jobs/maskrcnn.yaml --wait --job-name mrk-coco-1"],
        codes=exit_codes(ExitCode.BAD_INPUT, ExitCode.UNREACHABLE, ExitCode.LAUNCH_FAILED, ExitCode.HOST_LOST,
                         ExitCode.MASTER_LOST, ExitCode.HUNG, ExitCode.TIMEOUT, ExitCode.CANNOT_START, job=True,
                         notes={0: "the job succeeded (sagemaker without --wait: the job was created)",
                                **SPEC_CODE_NOTES,
                                69: "a host never answered on ssh, or AWS refused, unreachable or no credentials "
                                    "(also while reading ${stack:...} outputs)"}))
    add_spec_args(p)
    p.add_argument("--dry-run", action="store_true", help="print the request (argv, spec, CreateTrainingJob) and exit 0")
    p.add_argument("--wait", action="store_true", help="sagemaker: follow status and CloudWatch logs until the job ends")
    p.add_argument("--job-name", metavar="NAME", help="sagemaker: training job name (default NAME-YYYYmmdd-HHMMSS)")
    p.add_argument("--keep-keys", action="store_true", help="sagemaker: leave the job's key secret (which submit makes "
                   "under the job's own key prefix) in S3 after the job; by default --wait removes it when the job ends")
    p.add_argument("--resume-from", metavar="JOB", help="sagemaker: copy training job JOB's checkpoints into this job's "
                   "own checkpoint prefix first, so a trainer resuming from its newest checkpoint continues JOB's "
                   "run (by default a job sees only its own)")
    p.add_argument("--detach", action="store_true",
                   help="return once the job started, printing its id; it runs on under a supervisor of its own "
                        "(closing the terminal does not stop it): follow it with status, logs, cancel")
    add_state_dir_arg(p)
    p.set_defaults(func=_submit)


