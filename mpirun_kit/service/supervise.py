"""The one process that supervises a recorded job: in the foreground, or detached in a session of its own.

Place in the data flow: after runs.py's ``begin`` recorded the job, ``supervise`` marks it running
(its pid and start time in the record), has the target run it (``Target.run``, tee'ing stdout into
the run directory's ``output.log``) and writes its end (runs.py ``end_record``), whatever happened.
``start_detached`` starts a copy of the CLI (``mpirun_kit run-detached ID``) in its own session that
does the same from the saved request (``run_recorded``), and returns once it runs the job.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from ..core import verbosity
from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..core.private import open_private, read_private
from ..errors import LaunchError, MpirunKitError, translate
from ..records import RUN_FILES, JobRecord, JobState, RecordStore, process_start
from ..targets.outcome import Outcome
from .requests import Submission
from .runs import end_record, load_request

#: how long a detached start waits for the detached supervisor to start the job.
DETACH_START_S = 60.0


def supervise(store: RecordStore, sub: Submission, *, started: float, tee: bool = True) -> Outcome:
    """Run the recorded job to its end under this process; its record and run directory say how it ended.

    ``tee``: keep a copy of what the job prints on stdout in the run directory's ``output.log`` (a detached
    supervisor's stdout is that file already).
    """
    from ..exec.output import FdTee

    rec, target = sub.record, sub.target
    store.update(rec.job_id, supervisor_pid=os.getpid(), supervisor_start=process_start(os.getpid()),
                 state=JobState.RUNNING, started_at=time.time())
    sys.stdout.flush()
    if tee:   # made here, 0600, where nothing is (never through a link): FdTee appends to it
        os.close(open_private(Path(rec.run_dir) / RUN_FILES["output"], "job's output", create=True))
    copy = FdTee(_stdout_fd(), Path(rec.run_dir) / RUN_FILES["output"]) if tee else None
    outcome = None
    try:
        outcome = target.run(sub.dry, sub.opts, started=started)
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
        end_record(store, rec, outcome, target, sub.opts)


def _stdout_fd() -> int:
    """The descriptor our stdout writes to (1 when sys.stdout is not a file, e.g. captured): the children's."""
    try:
        return sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):   # io.UnsupportedOperation is both OSError and ValueError
        return 1


def start_detached(store: RecordStore, rec: JobRecord, *, level: int | None = None,
                   clock: Clock = SYSTEM_CLOCK, named=None) -> JobRecord:
    """Start ``mpirun_kit run-detached ID`` in a session of its own (no terminal, stdin from /dev/null, stdout to
    the run directory's output.log, stderr to submit.log) and return the record once it runs the job.
    ``level``: the output level (core/verbosity.py) it prints at; None: VERBOSE, the library's.  The status
    line's level travels in the saved request's SubmitOptions.verbosity too.  ``named(record)``: whether the
    platform has named the job yet (Slurm's id once sbatch answered); given, the return waits for it too, so
    ``status`` right after finds the job (issue 40 item 5).

    Raises:
        LaunchError: it ended, or did not start the job within DETACH_START_S (its last lines quoted).
    """
    from ..core.programs import cli_argv
    from ..exec.command import spawn

    run = Path(rec.run_dir)
    level = verbosity.VERBOSE if level is None else level
    flags = ["-q"] if level <= verbosity.QUIET else ["-v"] if level >= verbosity.VERBOSE else []
    # the CLI's `run-detached` command: argument parsing around ``run_recorded``
    argv = cli_argv(sys.executable, *flags, "run-detached", rec.job_id, "--state-dir", str(store.dir))
    store.update(rec.job_id, detached=True)
    # Both made here, 0600, where nothing is: never opened through a link (core/private.py, issue #39).
    with open(os.devnull, "rb") as stdin, \
            os.fdopen(open_private(run / RUN_FILES["output"], "job's output", create=True), "ab") as out, \
            os.fdopen(open_private(run / RUN_FILES["log"], "supervisor's log", create=True), "ab") as err:
        proc = spawn(argv, stdin=stdin, stdout=out, stderr=err, start_new_session=True, close_fds=True)
    deadline = Deadline(clock, DETACH_START_S)
    while True:
        now = store.get(rec.job_id)
        started = now.state != JobState.PENDING and (named is None or now.state.terminal or named(now))
        if started or proc.poll() is not None or deadline.expired():
            break
        clock.sleep(0.05)
    if now.state == JobState.PENDING:
        code = proc.poll()
        if code is None:
            proc.send_signal(signal.SIGTERM)
        log = read_private(run / RUN_FILES["log"], "supervisor's log").decode(errors="replace")
        tail = log.strip().splitlines()[-3:]
        raise LaunchError(f"job {rec.job_id}: the detached supervisor did not start the job within "
                          f"{DETACH_START_S:g}s{f' (it exited {code})' if code is not None else ''}: "
                          f"{' / '.join(tail) or 'no output'}; see {run / RUN_FILES['log']}")
    return now


def run_recorded(store: RecordStore, job_id: str) -> Outcome:
    """The detached supervisor's work (`mpirun_kit run-detached ID`): run the request recorded for ``job_id``."""
    rec = store.get(job_id)
    target, dry, opts = load_request(rec)
    return supervise(store, Submission(rec, target, dry, opts), started=rec.created_at, tee=False)
