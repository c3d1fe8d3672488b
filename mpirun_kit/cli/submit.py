"""`mpirun_kit submit JOB.yaml [--target T]`: run a job spec on its target; the job's exit code is ours.

Argument parsing and the choices a pure builder must not make (a free port, a
cluster name, a SageMaker job name with a timestamp, temporary directories)
live here; each target's ``dryrun`` builds the request as a value (printed by
``--dry-run``) and its ``run`` executes it.
"""
from __future__ import annotations

import os
import shutil
import socket
import sys
import time
from pathlib import Path

from ..errors import ExitCode
from ..spec.resolve import compile_from_args
from .plan import SPEC_CODE_NOTES, add_spec_args


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sagemaker_job_name(base: str, now: float) -> str:
    """``base-YYYYmmdd-HHMMSS``, cut to SageMaker's 63 characters."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    return f"{base[:63 - len(stamp) - 1]}-{stamp}"


def build_dryrun(args, compiled):
    from ..spec.compile import output_path
    from ..targets import get_target

    job = compiled.job
    target = get_target(job.target.type)
    if job.target.type == "local":
        run_dir = Path(output_path(job)) / "launch"
        return target, target.dryrun(compiled, run_dir=run_dir.resolve(), python=sys.executable,
                                      result_port=free_port())
    if job.target.type == "sim":
        # No root given: the target makes a temporary one when the job starts (a dry run writes nothing).
        root = Path(job.target.sim.root) if job.target.sim.root else None
        exe = shutil.which("mpirun_kit", path=os.path.dirname(sys.executable)) or "mpirun_kit"
        return target, target.dryrun(compiled, root=root, name=f"s{os.getpid():x}"[:12], mpirun_kit_exe=exe)
    if job.target.type == "ssh":
        return target, target.dryrun(compiled, run_id=f"{job.name}-{os.getpid():x}")
    name = args.job_name or sagemaker_job_name(job.name, time.time())
    return target, target.dryrun(compiled, job_name=name)


def _submit(args) -> int:
    """Run the job; with --json, end stdout with one JSON Outcome line, whatever happened."""
    from ..errors import MpirunKitError
    from .main import translate

    started = time.time()
    compiled = None
    try:
        compiled, _ = compile_from_args(args)
        for w in compiled.warnings:
            print(f"mpirun_kit: warning: {w}", file=sys.stderr)
        target, dry = build_dryrun(args, compiled)
        if args.dry_run:
            print(dry.to_json() if args.json else dry.render(), end="\n" if args.json else "")
            return 0
        outcome = run_target(args, compiled, target, dry, started)
    except Exception as exc:
        known = exc if isinstance(exc, MpirunKitError) else translate(exc)
        if args.json and not args.dry_run and known is not None:
            print(error_outcome(args, compiled, known, started).to_json(), flush=True)
        raise
    if args.json:
        sys.stdout.flush()
        print(outcome.to_json(), flush=True)
    return outcome.exit_code


def run_target(args, compiled, target, dry, started: float):
    """Run ``dry`` on its target; how the job ended (targets that read the failure report say more)."""
    from ..targets.base import Outcome, outcome_of

    kind, job = compiled.job.target.type, compiled.job.name
    if kind in ("local", "sim"):
        return target.run_outcome(dry)
    if kind == "sagemaker":
        code = target.run(dry, wait=args.wait)
        name = dry.request["CreateTrainingJob"]["TrainingJobName"]
        if not args.wait:
            return Outcome(kind, job, code, "platform", f"training job {name} created; it runs on SageMaker "
                           f"(mpirun_kit status {name})")
        if code == ExitCode.INTERRUPTED:
            return Outcome(kind, job, code, "launcher", f"stopped following; training job {name} keeps running")
        platform = {ExitCode.SIGTERM: f"training job {name} was stopped (StopTrainingJob)",
                    ExitCode.TIMEOUT: f"training job {name} ran past its MaxRuntimeInSeconds"}.get(code)
        return outcome_of(kind, job, code, platform_reason=platform, started=started, ended=time.time())
    code = target.run(dry)
    return outcome_of(kind, job, code, interrupted="SIGINT" if code == ExitCode.INTERRUPTED else None, started=started,
                      ended=time.time())


def error_outcome(args, compiled, exc, started: float):
    """The Outcome of a submit that ended in an error of ours (bad spec, unreachable host, AWS refusal)."""
    from ..errors import ClusterError
    from ..targets.base import outcome_of

    kind = compiled.job.target.type if compiled else getattr(args, "target", None)
    source = "platform" if kind == "sagemaker" and isinstance(exc, ClusterError) else "launcher"
    return outcome_of(kind, compiled.job.name if compiled else None, int(exc.exit_code),
                      error=(source, str(exc).split("\n", 1)[0] or type(exc).__name__), started=started,
                      ended=time.time(), hosts={})


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
                         ExitCode.MASTER_LOST, ExitCode.HUNG, ExitCode.TIMEOUT, job=True,
                         notes={0: "the job succeeded (sagemaker without --wait: the job was created)",
                                **SPEC_CODE_NOTES,
                                69: "a host never answered on ssh, or AWS refused, unreachable or no credentials "
                                    "(also while reading ${stack:...} outputs)"}))
    add_spec_args(p)
    p.add_argument("--dry-run", action="store_true", help="print the request (argv, spec, CreateTrainingJob) and exit 0")
    p.add_argument("--wait", action="store_true", help="sagemaker: follow status and CloudWatch logs until the job ends")
    p.add_argument("--job-name", metavar="NAME", help="sagemaker: training job name (default NAME-YYYYmmdd-HHMMSS)")
    p.set_defaults(func=_submit)
