"""`mpirun_kit submit JOB.yaml [--target T] [--detach]`: run a job spec on its target; the job's exit code is ours.

Argument parsing and the job's record: the target (targets.get_target) makes the choices a
pure builder must not make (a free port, a cluster name, a SageMaker job name with a timestamp)
in ``prepare``, whose request value ``--dry-run`` prints, and ``run`` executes it and says how it
ended (an Outcome, printed by ``--json``).  Every real submission first gets a record
(records/: a job id, printed first, and a run directory of its own holding the resolved spec,
the plan, the output, the failure report, the timeline and the result); ``supervise`` is the
one place that runs a recorded job and writes its end, in the foreground or, with ``--detach``,
in a copy of this process in its own session (``mpirun_kit run-detached ID``, output to the run
directory) that the terminal's end does not reach.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..errors import ExitCode
from .resolve import compile_from_args
from .common_flags import SPEC_CODE_NOTES, add_spec_args, add_state_dir_arg, output_level, store_of


def _submit(args) -> int:
    """Run the job; with --json, end stdout with one JSON Outcome line, whatever happened."""
    from ..errors import MpirunKitError, translate
    from ..targets import get_target
    from ..targets.base import SubmitOptions

    started = time.time()
    compiled = target = None
    try:
        from .common_flags import say

        compiled = compile_for_submit(args, report=lambda line: say(args, line))
        for w in compiled.warnings:
            print(f"mpirun_kit: warning: {w}", file=sys.stderr)
        target = get_target(compiled.job.target.type)
        if args.dry_run:
            dry = target.prepare(compiled, SubmitOptions(wait=args.wait, job_name=args.job_name,
                                                            verbosity=output_level(args)))
            for w in dry.warnings:  # a target returns what the user must hear; the CLI says it
                print(f"mpirun_kit: warning: {w}", file=sys.stderr)
            print(dry.to_json() if args.json else dry.render(), end="\n" if args.json else "")
            return 0
        store, rec, dry, opts = begin(args, compiled, target)
        for w in dry.warnings:
            print(f"mpirun_kit: warning: {w}", file=sys.stderr)
        if args.detach:
            return detach(args, store, rec)
        say_job(rec, output_level(args))
        outcome = supervise(store, rec, target, dry, opts, started=started)
    except Exception as exc:
        known = exc if isinstance(exc, MpirunKitError) else translate(exc)
        if args.json and not args.dry_run and known is not None:
            print(error_outcome(args, compiled, target, known, started).to_json(), flush=True)
        raise
    if args.json:
        sys.stdout.flush()
        print(result_json(outcome, rec), flush=True)
    return outcome.exit_code


def say_job(rec, level: int) -> None:
    """The job id first (`status`, `logs`, `cancel` take it): on a terminal, and at -v; by default a redirected
    submit prints only the ranks' lines and warnings (issue 16), and --json's result line carries the id."""
    from ..core import verbosity

    if level >= verbosity.VERBOSE or (level >= verbosity.DEFAULT and sys.stderr.isatty()):
        print(f"mpirun_kit: job {rec.job_id} (run directory {rec.run_dir})", file=sys.stderr, flush=True)


def compile_for_submit(args, report):
    """The spec named by ``args`` compiled for a submission, with the quota preflight (a shortfall refuses a
    real run and is a warning of a dry run's); ``report`` hears the region line."""
    from .common_flags import quota_preflight

    # A dry run needs no AWS: stacks it cannot read stay ${stack:...}, each with what resolves it.
    compiled, _ = compile_from_args(args, offline=args.dry_run, report=report)
    short, note = quota_preflight(compiled)  # before anything is created
    if short and not args.dry_run:
        from ..errors import ClusterError

        raise ClusterError(short)
    if short:
        compiled = dataclasses.replace(compiled, warnings=compiled.warnings + (short,))
    if note:  # an unreadable quota is plan's to report; here the request itself will say what is wrong
        logging.getLogger(__name__).info("%s", note)
    return compiled


def begin(args, compiled, target):
    """A real submission up to its start: the record (job id, run directory), the request prepared with the
    record's choices and written to the run directory -> (store, record, dry run, options).  A failure here
    ends the record as failed, with the error's code and first line."""
    from ..records import JobState
    from ..targets.base import SubmitOptions
    from .sim import sweep_orphans

    sweep_orphans()   # sim clusters left by a submit killed with SIGKILL go now, each said on stderr (H2)
    store = store_of(args)
    spec_path = Path(args.spec).resolve()
    rec = store.create(compiled.job.name, target.name, spec=str(spec_path),
                       runs_root=runs_root(compiled, store, spec_path.parent))
    opts = SubmitOptions(wait=args.wait, job_name=args.job_name, keep_keys=args.keep_keys,
                         resume_from=args.resume_from, job_id=rec.job_id, run_dir=rec.run_dir,
                         verbosity=output_level(args))
    try:
        dry = target.prepare(compiled, opts)
        rec = record_request(store, rec, target, compiled, dry, opts)
    except Exception as exc:   # the record says the job never ran, and why
        store.finish(rec.job_id, state=JobState.FAILED, exit_code=getattr(exc, "exit_code", None),
                     source="launcher", reason=str(exc).split("\n", 1)[0])
        raise
    return store, rec, dry, opts


def runs_root(compiled, store, spec_dir: Path) -> Path:
    """Where the job's run directories go: in its output directory on this machine (``output.local_path``,
    default ``runs/NAME`` beside the spec, where the ranks' ``${output}`` is too); for a platform whose output
    path is inside its container, under the store."""
    from ..spec.compile import output_path

    if compiled.job.target.type == "sagemaker":
        return store.dir / "runs" / compiled.job.name
    return spec_dir / output_path(compiled.job)   # an absolute output path stays itself


def record_request(store, rec, target, compiled, dry, opts):
    """Write the run directory's spec, plan and request (records.RUN_FILES), and what the record keeps of them."""
    from ..core.files import write_atomic
    from ..records import RUN_FILES
    from ..targets.base import plain

    run = Path(rec.run_dir)
    # The resolved spec holds the env's real values (secret-looking ones too: the ranks need them): only this user reads it.
    write_atomic(run / RUN_FILES["spec"], compiled.launch.to_json() + "\n", mode=0o600)
    write_atomic(run / RUN_FILES["plan"], dry.render())
    saved = {"target": dry.target, "job": dry.job, "request": plain(dry.request), "files": [list(f) for f in dry.files],
             "notes": list(dry.notes), "warnings": list(dry.warnings), "opts": dataclasses.asdict(opts)}
    # As sent, secrets included: only this user reads it (the detached supervisor runs from it).
    write_atomic(run / RUN_FILES["request"], json.dumps(saved, indent=1, sort_keys=True, default=str), mode=0o600)
    native, details = target.handle(dry)
    return store.update(rec.job_id, native=native, details=details)


def load_request(rec):
    """The DryRun and SubmitOptions ``record_request`` saved for the job ``rec`` (the detached supervisor's input)."""
    from ..records import RUN_FILES
    from ..targets import get_target
    from ..targets.base import DryRun, SubmitOptions

    saved = json.loads((Path(rec.run_dir) / RUN_FILES["request"]).read_text())
    target = get_target(saved["target"])
    # The target's own redaction hook again: whatever this copy prints shows what `submit --dry-run` showed.
    dry = DryRun(saved["target"], saved["job"], target.request_from(saved["request"]),
                 files=tuple(tuple(f) for f in saved["files"]), notes=tuple(saved["notes"]),
                 warnings=tuple(saved["warnings"]), redact=target.redact)
    return target, dry, SubmitOptions(**saved["opts"])


def supervise(store, rec, target, dry, opts, *, started: float, tee: bool = True):
    """Run the recorded job to its end under this process; its record and run directory say how it ended.

    ``tee``: keep a copy of what the job prints on stdout in the run directory's ``output.log`` (a detached
    supervisor's stdout is that file already).
    """
    from ..errors import MpirunKitError, translate
    from ..exec.output import FdTee
    from ..records import RUN_FILES, JobState, process_start

    store.update(rec.job_id, supervisor_pid=os.getpid(), supervisor_start=process_start(os.getpid()),
                 state=JobState.RUNNING, started_at=time.time())
    sys.stdout.flush()
    copy = FdTee(_stdout_fd(), Path(rec.run_dir) / RUN_FILES["output"]) if tee else None
    outcome = None
    try:
        outcome = target.run(dry, opts, started=started)
        return outcome
    except Exception as exc:
        known = exc if isinstance(exc, MpirunKitError) else translate(exc)
        if known is not None:
            outcome = target.error_outcome(rec.name, known, started)
        raise
    finally:
        sys.stdout.flush()
        if copy is not None:
            copy.close()
        end_record(store, rec, outcome, target, opts)


def _stdout_fd() -> int:
    """The descriptor our stdout writes to (1 when sys.stdout is not a file, e.g. captured): the children's."""
    try:
        return sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):   # io.UnsupportedOperation is both OSError and ValueError
        return 1


def end_record(store, rec, outcome, target, opts) -> None:
    """The job's end in its record and run directory: ``result.json`` (the Outcome with the job id), copies of
    the failure report and timeline a target left elsewhere (a sim host's /opt/ml), the state."""
    import shutil

    from ..core.files import write_atomic
    from ..errors import ExitCode
    from ..records import RUN_FILES, JobState
    from ..targets.supervised import state_of

    run = Path(rec.run_dir)
    native = target.submitted_as(opts)   # a name the platform gave only once run() submitted it (Slurm's job id)
    if native is not None:
        store.update(rec.job_id, native=native)
    if outcome is None:  # an internal error: no result to keep, but the job is over
        store.finish(rec.job_id, state=JobState.FAILED, exit_code=int(ExitCode.LAUNCH_FAILED), source="launcher",
                     reason="submit failed before the job ended; see its log")
        return
    write_atomic(run / RUN_FILES["result"], result_json(outcome, rec) + "\n")
    for key, src in (("failure", outcome.failure_file),
                     ("timeline", ((outcome.timeline or {}).get("launch") or {}).get("file"))):
        dst = run / RUN_FILES[key]
        if src and ":" not in src and Path(src).is_file() and Path(src).resolve() != dst.resolve():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    if outcome.exit_code == 0 and target.platform and not opts.wait:
        return   # created on the platform, where it runs on: the target's describe follows it from here
    cancelled = store.get(rec.job_id).cancel_requested
    store.finish(rec.job_id, state=state_of(outcome.exit_code, cancelled=cancelled), exit_code=outcome.exit_code,
                 source=outcome.source, reason=outcome.reason, root_cause=outcome.root_cause)


def result_json(outcome, rec) -> str:
    """``submit --json``'s last line: the Outcome, with the job id and run directory of its record."""
    return json.dumps({**json.loads(outcome.to_json()), "job_id": rec.job_id, "run_dir": rec.run_dir},
                      sort_keys=True)


#: how long `submit --detach` waits for the detached supervisor to start the job.
DETACH_START_S = 60.0


def detach(args, store, rec) -> int:
    """``submit --detach``: the job started under its own supervisor; its id on stdout, how to follow it on stderr."""
    now = start_detached(store, rec, level=output_level(args))
    if args.json:
        print(json.dumps({"job_id": rec.job_id, "state": now.state.value, "run_dir": rec.run_dir}), flush=True)
    else:
        print(rec.job_id, flush=True)
    if not args.quiet:
        print(f"mpirun_kit: job {rec.job_id} runs in the background (run directory {rec.run_dir}); "
              f"`mpirun_kit status {rec.job_id}`, `mpirun_kit logs {rec.job_id} --follow`, "
              f"`mpirun_kit cancel {rec.job_id}`", file=sys.stderr)
    return 0


def start_detached(store, rec, *, level: int | None = None, clock=None):
    """Start ``mpirun_kit run-detached ID`` in a session of its own (no terminal, stdin from /dev/null, stdout to
    the run directory's output.log, stderr to submit.log) and return the record once it runs the job.
    ``level``: the output level (core/verbosity.py) it prints at; None: VERBOSE, the library's.  The status
    line's level travels in the saved request's SubmitOptions.verbosity too.

    Raises:
        LaunchError: it ended, or did not start the job within DETACH_START_S (its last lines quoted).
    """
    from ..core import verbosity
    from ..core.clock import SYSTEM_CLOCK, Deadline
    from ..errors import LaunchError
    from ..records import RUN_FILES, JobState

    clock = clock or SYSTEM_CLOCK
    run = Path(rec.run_dir)
    level = verbosity.VERBOSE if level is None else level
    flags = ["-q"] if level <= verbosity.QUIET else ["-v"] if level >= verbosity.VERBOSE else []
    argv = [sys.executable, "-m", "mpirun_kit.cli.main", *flags, "run-detached", rec.job_id,
            "--state-dir", str(store.dir)]
    store.update(rec.job_id, detached=True)
    with open(os.devnull, "rb") as stdin, open(run / RUN_FILES["output"], "ab") as out, \
            open(run / RUN_FILES["log"], "ab") as err:
        proc = subprocess.Popen(argv, stdin=stdin, stdout=out, stderr=err, start_new_session=True, close_fds=True)
    deadline = Deadline(clock, DETACH_START_S)
    while True:
        now = store.get(rec.job_id)
        if now.state != JobState.PENDING or proc.poll() is not None or deadline.expired():
            break
        clock.sleep(0.05)
    if now.state == JobState.PENDING:
        code = proc.poll()
        if code is None:
            proc.send_signal(signal.SIGTERM)
        tail = (run / RUN_FILES["log"]).read_text(errors="replace").strip().splitlines()[-3:]
        raise LaunchError(f"job {rec.job_id}: the detached supervisor did not start the job within "
                          f"{DETACH_START_S:g}s{f' (it exited {code})' if code is not None else ''}: "
                          f"{' / '.join(tail) or 'no output'}; see {run / RUN_FILES['log']}")
    return now


def run_detached(args) -> int:
    """`mpirun_kit run-detached ID` (cli/run_detached.py): the detached copy of submit runs the recorded request."""
    store = store_of(args)
    rec = store.get(args.job_id)
    target, dry, opts = load_request(rec)
    outcome = supervise(store, rec, target, dry, opts, started=rec.created_at, tee=False)
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


