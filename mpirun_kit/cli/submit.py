"""`mpirun_kit submit JOB.yaml [--target T]`: run a job spec on its target; the job's exit code is ours.

Argument parsing only: the target (targets.get_target) makes the choices a
pure builder must not make (a free port, a cluster name, a SageMaker job name
with a timestamp) in ``prepare``, whose request value ``--dry-run`` prints, and
``run`` executes it and says how it ended (an Outcome, printed by ``--json``).
"""
from __future__ import annotations

import dataclasses
import logging
import sys
import time

from ..errors import ExitCode
from .resolve import compile_from_args
from .plan import SPEC_CODE_NOTES, add_spec_args


def _submit(args) -> int:
    """Run the job; with --json, end stdout with one JSON Outcome line, whatever happened."""
    from ..errors import MpirunKitError
    from ..targets import get_target
    from ..targets.base import SubmitOptions
    from ..errors import translate

    started = time.time()
    compiled = target = None
    try:
        from .plan import say

        # A dry run needs no AWS: stacks it cannot read stay ${stack:...}, each with what resolves it.
        compiled, _ = compile_from_args(args, offline=args.dry_run, report=say)
        from .plan import quota_preflight

        short, note = quota_preflight(compiled)  # before anything is created
        if short and not args.dry_run:
            from ..errors import ClusterError

            raise ClusterError(short)
        if short:
            compiled = dataclasses.replace(compiled, warnings=compiled.warnings + (short,))
        if note:  # an unreadable quota is plan's to report; here the request itself will say what is wrong
            logging.getLogger(__name__).info("%s", note)
        for w in compiled.warnings:
            print(f"mpirun_kit: warning: {w}", file=sys.stderr)
        target = get_target(compiled.job.target.type)
        opts = SubmitOptions(wait=args.wait, job_name=args.job_name, keep_keys=args.keep_keys,
                             resume_from=args.resume_from)
        dry = target.prepare(compiled, opts)
        for w in dry.warnings:  # a target returns what the user must hear; the CLI says it
            print(f"mpirun_kit: warning: {w}", file=sys.stderr)
        if args.dry_run:
            print(dry.to_json() if args.json else dry.render(), end="\n" if args.json else "")
            return 0
        outcome = target.run(dry, opts, started=started)
    except Exception as exc:
        known = exc if isinstance(exc, MpirunKitError) else translate(exc)
        if args.json and not args.dry_run and known is not None:
            print(error_outcome(args, compiled, target, known, started).to_json(), flush=True)
        raise
    if args.json:
        sys.stdout.flush()
        print(outcome.to_json(), flush=True)
    return outcome.exit_code


def error_outcome(args, compiled, target, exc, started: float):
    """The Outcome of a submit that ended in an error of ours, before or while its target ran."""
    from ..targets.outcome import error_outcome as outcome_of_error

    job = compiled.job.name if compiled else None
    if target is not None:
        return target.error_outcome(job, exc, started)
    # The spec never compiled, or named no known target: the launcher (mpirun_kit) decided.
    name = compiled.job.target.type if compiled else getattr(args, "target", None)
    return outcome_of_error(name or None, job, exc, started)


def register(subparsers) -> None:

    from .main import add_command, exit_codes

    p = add_command(
        subparsers, "submit", help="run a job spec on its target (local, sim, ssh, sagemaker)",
        description="Validate and compile JOB.yaml, then run it: local = this machine via mpirun (the default); "
                    "sim = the simulated multi-host cluster; ssh = real hosts over paramiko; sagemaker = a "
                    "CreateTrainingJob request. --dry-run prints exactly what would run (the request) and exits; "
                    "with --json as JSON. Without --dry-run, --json ends stdout with one JSON result line: "
                    "exit_code, source (job: the program's own code; launcher: mpirun_kit's, e.g. 64/70/75; "
                    "platform: SageMaker/AWS), reason, root_cause (rank, host), failure_file, timeline.",
        examples=["mpirun_kit submit jobs/maskrcnn-demo.yaml",
                  "mpirun_kit submit jobs/allreduce-bench.yaml --target sim",
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
                   "own checkpoint prefix first, so --resume auto continues JOB's run (by default a job sees only its own)")
    p.set_defaults(func=_submit)
