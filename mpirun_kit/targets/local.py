"""Target ``local`` (the default): the job's ranks on this machine, via the launcher's `mpirun_kit launch`.

Place in the data flow: CompiledJob -> ``dryrun`` (argv + the LaunchSpec file,
a value) -> ``start`` writes the spec file and starts the argv, returning at once with the
launcher's pid (``Started``); ``run`` starts it (once per attempt) and has the one supervisor
(exec/supervisor.py) follow it to its end.  The launcher
(entrypoint/master) does the rest: mpirun, ``[rank host]`` output prefixes,
the root-cause failure report and the exit code, which ``run`` passes through.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..core.programs import cli_argv
from ..errors import CannotStartError, ExitCode
from ..core.clock import SYSTEM_CLOCK, Clock
from ..exec.process import follow
from ..exec.result import RESULT_FILE, read_result_file
from ..exec.signals import SignalLatch
from ..exec.supervisor import ProcessChild, Stop, signal_stop, start_process
from ..spec.compile import CompiledJob
from ..core.files import write_atomic
from ..core import verbosity
from .base import STOPPED, DryRun, Started, StatusLine, SubmitOptions, Target, retrying
from .outcome import Outcome, launch_timeline, outcome_of

SPEC_FILE = "launch-spec.json"
#: the run directory a dry run shows: a real run's is the job id's, made by the record (records/).
DRY_RUN_DIR = "<job id>"
#: seconds allowed on top of the job's own limit for start-up and the launcher's shutdown.
OVERHEAD_S = 120.0
DEFAULT_JOB_S = 7 * 24 * 3600.0


_PYTHON = re.compile(r"python(\d+(\.\d+)?)?$")


def program_start_problem(program: Sequence[str], cwd: str | None, path: str | None = None) -> str | None:
    """Why the job's program cannot start on this machine, or None: its command not found on ``path`` (None:
    this process's PATH, which the ranks inherit, as exec would search it) or not executable, or -- for
    ``python SCRIPT`` -- the script missing (python would exit 2, the usage-error code, from every rank).
    Checked by ``run`` of the targets whose ranks run here (local, sim), never by a dry run (a value);
    ``cwd``: the ranks' directory (program.working_dir, else this one)."""
    if not program:
        return None
    exe, base = program[0], Path(cwd or ".")
    if "${" in exe:
        return None
    if "/" in exe:
        where = base / exe
        if not where.is_file():
            return f"program.command: {exe!r} does not exist (resolved against {base.resolve()})"
        if not os.access(where, os.X_OK):
            return f"program.command: {exe!r} is not executable; chmod +x it or run it through its interpreter"
    elif shutil.which(exe, path=path) is None:
        searched = f"PATH={path}" if path is not None else "PATH"
        return f"program.command: {exe!r} not found on {searched}; install it or give its full path"
    if _PYTHON.match(os.path.basename(exe)):
        for arg in program[1:]:
            if arg in ("-m", "-c", "-") or arg.startswith(("-m", "-c")) or "${" in arg:
                return None
            if not arg.startswith("-"):
                if not (base / arg).is_file():
                    return (f"program.command: python script {arg!r} does not exist (resolved against "
                            f"{base.resolve()}); fix the path or set program.working_dir")
                return None
    return None


@dataclass(frozen=True)
class LocalRequest:
    """What ``run`` does for a local job (the target's typed request, base.Target's ``R``)."""

    argv: list[str]          # the launcher: `mpirun_kit launch --hosts localhost:N --spec ... --opt-ml RUN_DIR`
    cwd: str | None          # the ranks' working directory (program.working_dir: the spec's directory by default)
    retries: int
    ranks: int
    deadline_s: float        # bounds the launcher itself, should it hang (it enforces timeouts.job_s on the ranks)
    grace_s: float
    failure_file: str        # where the launcher writes its failure report (root cause first); read for the Outcome


def dryrun(compiled: CompiledJob, *, run_dir: Path, python: str, result_port: int, verbose: bool = True,
           quiet: bool = False) -> DryRun[LocalRequest]:
    """The local launch as a value.

    Args:
        compiled: the job (target local).
        run_dir: where the spec file and the failure report go (``--opt-ml``).
        python: the interpreter with mpirun_kit installed.
        result_port: a free TCP port for the launcher's result channel (chosen by the caller).
        verbose: the launcher prints its progress lines (`submit -v`); else only warnings, errors, the result.
        quiet: the launcher prints only errors and the result (`submit -q`).
    """
    slots = compiled.hosts[0].slots
    spec_path = Path(run_dir) / SPEC_FILE
    argv = [*cli_argv(python), "launch", "--hosts", f"localhost:{slots}",
            "--spec", str(spec_path), "--opt-ml", str(run_dir)] + (["-v"] if verbose else ["-q"] if quiet else [])
    # A port per run: two local jobs (or a job and a test) must not share a result channel.
    spec = dataclasses.replace(compiled.launch, result_port=result_port)
    return DryRun(
        target="local", job=compiled.job.name,
        request=LocalRequest(argv=argv, cwd=compiled.launch.working_dir, retries=compiled.job.retries, ranks=slots,
                             deadline_s=(compiled.launch.timeouts.job_s or DEFAULT_JOB_S) + OVERHEAD_S,
                             grace_s=compiled.launch.timeouts.grace_s,
                             failure_file=str(Path(run_dir) / "output" / "failure")),
        files=((str(spec_path), spec.to_json() + "\n"),),
        notes=("the failure report (root cause first) is written to " + str(Path(run_dir) / "output" / "failure"),))


def refuse_unstartable(job: str, program: Sequence[str], cwd: str | None, path: str | None = None) -> None:
    """Raises CannotStartError (exit 127) before any launch when the program cannot start here."""
    problem = program_start_problem(program, cwd, path)
    if problem:
        raise CannotStartError(f"{job}: the program cannot start: {problem}")


def free_port() -> int:
    """A TCP port free on this machine now, for the launcher's result channel (a port per run)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_files(dry: DryRun) -> None:
    """Write the request's files atomically (a half-written spec would be read by the launcher), readable by this
    user only: the launch spec carries the env's real values, secret-looking ones too (its printed copy is redacted)."""
    for path, text in dry.files:
        write_atomic(path, text, mode=0o600)


def start_launcher(req: "LocalRequest", *, clock: Clock = SYSTEM_CLOCK) -> Started:
    """The launcher process started (its own session; SIGTERM to it should we die), at once: its pid and the child
    the supervisor follows (exec/supervisor.ProcessChild, forwarding a Ctrl-C or SIGTERM as it is)."""
    proc = start_process(req.argv, cwd=req.cwd, parent_death_signal=signal.SIGTERM)
    return Started(str(proc.pid), ProcessChild(proc, forward=True, clock=clock))


def follow_launcher(started: Started, req: "LocalRequest", *, clock: Clock = SYSTEM_CLOCK,
                    stops: list[Stop] | None = None, latch: SignalLatch | None = None) -> int:
    """The launcher ``start_launcher`` started, followed by the supervisor to its end; its exit code
    (ExitCode.TIMEOUT past the deadline, 128+N after signal N reached us: the launcher stopped every rank first).
    ``stops`` collects the stop made (who asked and why), if any."""
    code, stop = follow(started.child, deadline_s=req.deadline_s, grace_s=req.grace_s, clock=clock, latch=latch)
    if stop is not None and stops is not None:
        stops.append(stop)
    return code


def run_outcome(dry: DryRun, *, clock: Clock = SYSTEM_CLOCK, level: int = verbosity.VERBOSE) -> Outcome:
    """Run the local job; return how it ended (exit code: the first failing rank's, or 128+N for signal N).
    ``level``: the status line's output level (core/verbosity.py; ``SubmitOptions.verbosity``)."""
    spec = json.loads(dry.files[0][1])
    refuse_unstartable(dry.job, spec["program"], dry.request.cwd)
    write_files(dry)
    progress = StatusLine(clock=clock, level=level)
    progress.note(f"local: {dry.request.ranks} rank(s) on this machine")
    req = dry.request
    failure = Path(req.failure_file)
    attempts = []
    started = time.time()

    def attempt(n: int) -> int:
        # A report left by an earlier run must not be taken for this one's.
        failure.unlink(missing_ok=True)
        (failure.parent / "timeline.json").unlink(missing_ok=True)
        (failure.parent / RESULT_FILE).unlink(missing_ok=True)
        if latch.received:   # stopped between attempts: nothing more is started
            stops.append(signal_stop(latch.received))
            return stops[-1].exit_code
        attempts.append(n)
        return follow_launcher(start_launcher(req, clock=clock), req, clock=clock, stops=stops, latch=latch)

    stops: list[Stop] = []
    # Installed before the first attempt: a SIGHUP, SIGTERM or Ctrl-C at any time stops the launcher (never
    # orphaned: it runs in its own session and gets SIGTERM should we die) and is never retried.
    with SignalLatch() as latch:
        code = retrying(attempt, req.retries, progress, permanent=STOPPED | {ExitCode.for_signal(1)})
    received = [s.signal for s in stops if s.signal]
    text = failure.read_text(errors="replace") if code != 0 and failure.is_file() else None
    # The whole result beside the failure file (failures, hang, tail, the uncut reason), not the file's head.
    return outcome_of("local", dry.job, code, failure_text=text, failure_file=str(failure) if text else None,
                      interrupted=received[0] if received else None, attempts=len(attempts), started=started,
                      ended=time.time(), hosts={"localhost": code}, launch=launch_timeline(failure.parent),
                      result=read_result_file(failure.parent / RESULT_FILE))


def run(dry: DryRun, *, clock: Clock = SYSTEM_CLOCK) -> int:
    """Run the local job; returns its exit code (the first failing rank's, or 128+N for signal N)."""
    return run_outcome(dry, clock=clock).exit_code


class LocalTarget(Target[LocalRequest]):
    name = "local"
    request_type = LocalRequest

    def python(self, job) -> str:
        return sys.executable   # the ranks run on this machine, in this interpreter's venv

    def choices(self, compiled, opts: SubmitOptions) -> dict:
        from ..spec.compile import output_path

        # The record's run directory, never reused (records/); a dry run has none yet and shows where it would be.
        run_dir = Path(opts.run_dir) if opts.run_dir else Path(output_path(compiled.job)).resolve() / DRY_RUN_DIR
        return {"run_dir": run_dir, "python": self.python(compiled.job),
                "result_port": free_port(), "verbose": opts.verbosity >= verbosity.VERBOSE,
                "quiet": opts.verbosity <= verbosity.QUIET}

    def dryrun(self, compiled, **choices) -> DryRun:
        return dryrun(compiled, **choices)

    def start(self, dry: DryRun, opts: SubmitOptions = SubmitOptions()) -> Started:
        """The launcher started on this machine for ``dry`` (the program checked, the files written), at once."""
        refuse_unstartable(dry.job, json.loads(dry.files[0][1])["program"], dry.request.cwd)
        write_files(dry)
        return start_launcher(dry.request)

    def run(self, dry: DryRun, opts: SubmitOptions = SubmitOptions(), *, started: float | None = None) -> Outcome:
        return run_outcome(dry, level=opts.verbosity)


TARGET = LocalTarget()
