"""How a submitted job ended, as values: the ``Outcome`` (a run's end), the ``JobStatus`` (a recorded job's state
now) and the classification that makes them; both wrap the one end value, exec/result.py's ``JobResult``.

Place in the data flow: every target's ``run`` ends in ``outcome_of(...)``, a pure function of
what the target saw (the exit code, the master's whole result from exec/result.py where the target
can read it, else the failure file's head, a signal submit received, the platform's reason);
``submit --json`` prints the ``Outcome`` as its last line and the run directory keeps it as
``outcome.json``; ``describe`` answers with a ``JobStatus`` carrying the same result.  It says who
decided the code (the job, the launcher or the platform) and why, so scripts need not guess from the
number.  The ``Target`` interface itself is in base.py, which the lifecycle defaults (supervised.py)
never import: both take these values from here.
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import EXIT_CODE_TEXT, ExitCode, SpecError
from ..exec.result import JobResult, result_from_failure
from ..records import JobState

#: codes mpirun_kit itself exits with when the job did not decide; a job may exit with the same numbers,
#: which is why an Outcome says who decided (``source``) instead of leaving scripts to guess from the code.
#: Their meanings are errors.py's one table.
LAUNCHER_CODES = {c: EXIT_CODE_TEXT[c] for c in (ExitCode.BAD_INPUT, ExitCode.UNREACHABLE, ExitCode.LAUNCH_FAILED,
                                                  ExitCode.HOST_LOST, ExitCode.MASTER_LOST, ExitCode.HUNG,
                                                  ExitCode.TIMEOUT)}
SOURCES = ("job", "launcher", "platform", "user", "channel")


@dataclass(frozen=True)
class Outcome:
    """How a submitted job ended, for scripts: ``submit --json`` prints ``to_json()`` as its last stdout line.

    ``source``: ``job`` (the program's own code: it succeeded, a rank exited non-zero or was killed),
    ``launcher`` (mpirun_kit or mpirun chose the code: bad input, unreachable host, launcher failure,
    lost host/master, deadline, a hang) or ``platform`` (SageMaker/AWS decided), or ``user`` (a person stopped
    it: a signal to submit such as Ctrl-C or a closed terminal, or ``cancel``; no rank is blamed), or ``channel``
    (mpirun exited 0 but a rank never reported its exit to the result channel: its fate is unknown).
    """

    target: str | None                  # None: the spec never compiled
    job: str | None
    exit_code: int
    source: str
    reason: str
    root_cause: dict | None = None      # first failing rank: rank, host, exit_code, signal
    failure_file: str | None = None     # the full failure report, on this machine
    attempts: int = 1
    timeline: dict | None = None        # started_at, ended_at (UTC), duration_s, per-host exit codes
    #: the whole JobResult the master wrote (exec/result.py), wrapped, when the target could reach it (local,
    #: sim): failures, hang, mpirun's tail and the uncut reason; ``exit_code`` .. ``root_cause`` above are its
    #: summary for scripts (and the only account where no result was reachable: a platform's reason).
    result: JobResult | None = None

    def to_dict(self) -> dict:
        """The Outcome as JSON: its own fields, and the result through its one serializer (``JobResult.to_dict``)."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "result"}
        return {**own, "result": None if self.result is None else self.result.to_dict()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


@dataclass(frozen=True)
class JobStatus:
    """What ``describe`` says about a job: its state, and once it ended, its result as ``submit --json`` has it
    (exit code, source, reason, root cause).  ``native``: the target's own name for the job."""

    job_id: str
    name: str
    target: str
    state: JobState
    exit_code: int | None = None
    source: str | None = None
    reason: str | None = None
    root_cause: dict | None = None
    native: str | None = None
    run_dir: str | None = None
    spec: str | None = None
    created_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    detail: str | None = None           # the platform's own words (SageMaker's secondary status), if any
    nodes: int | None = None            # the hosts the job was planned on (the record's; None: recorded before)
    user: str | None = None             # who submitted it (the record's)
    #: the whole JobResult of an ended job, wrapped, where the run directory's outcome file holds one (exec/result.py)
    result: JobResult | None = None

    def to_dict(self) -> dict:
        """The status as JSON (``status --json``): its own fields, and the result through ``JobResult.to_dict``."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "result"}
        return {**own, "state": self.state.value, "result": None if self.result is None else self.result.to_dict()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def launch_timeline(output_dir: Path) -> dict | None:
    """The master's ``timeline.json`` in ``output_dir`` as seconds per phase (launch, run, shutdown, total)
    and the file's path; None when it wrote none (it failed before, or an older launcher)."""
    from ..observe import timeline

    path = Path(output_dir) / "timeline.json"
    if not path.is_file():
        return None
    try:
        s = timeline.summary(timeline.load(path))
    except SpecError:
        return None
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in s.items() if k != "startup_cpu_s"} | {
        "file": str(path)}


def root_cause_of(head: dict | None) -> dict | None:
    """The first failing rank of a result's JSON (exec/result.py, ``JobResult.head`` or ``to_dict``): rank, host,
    exit_code, signal; None when no rank failed first (launcher failures)."""
    root = (head or {}).get("root_cause")
    if not isinstance(root, dict):
        return None
    return {k: root.get(k) for k in ("rank", "host", "exit_code", "signal")}


def outcome_of(target: str | None, job: str | None, exit_code: int, *, failure_text: str | None = None,
               failure_file: str | None = None, interrupted: str | None = None, platform_reason: str | None = None,
               attempts: int = 1, started: float | None = None, ended: float | None = None,
               hosts: dict[str, int] | None = None, error: tuple[str, str] | None = None,
               launch: dict | None = None, result: JobResult | None = None) -> Outcome:
    """Who decided ``exit_code`` and why, from what the target saw (pure).

    Args:
        failure_text: the master's failure file (or SageMaker's FailureReason), when read: only its first line,
            the result's JSON head (exec/result.py, ``result_from_failure``), is read; the rest is for people.
        interrupted: the signal name submit itself received (Ctrl-C: SIGINT), if it stopped the job.
        platform_reason: set when the platform (SageMaker/AWS) ended the job without a report of ours.
        started, ended: wall-clock seconds; hosts: each host's exit code (multi-host targets).
        error: (source, message) when submit itself ended in an error (bad spec, unreachable host, AWS).
        launch: the launcher's own timeline summary (``launch_timeline``), when it wrote one.
        result: the whole JobResult the master wrote (exec/result.py ``read_result_file``), when the target could
            read it; it wins over ``failure_text`` (whose head cuts the reason) and is wrapped in the Outcome.
    """
    if result is not None and result.exit_code != exit_code:
        result = None   # a result of another attempt or run than the code the target saw: not this end's
    if result is not None:
        head = {**result.head(), "reason": result.headline()} if result.exit_code else None
    else:
        head = result_from_failure(failure_text) if failure_text else None
    # A stop's rank deaths (ours, the deadline's, the platform's) are its consequences, not a cause.
    cause = root_cause_of(head) if head is not None and head["source"] == "job" and not interrupted else None
    if error is not None:
        source, reason = error
    elif interrupted:
        # submit itself received the signal: a person stopped the job (Ctrl-C, a closed terminal, cancel).
        source, reason = "user", f"stopped by {interrupted}: SIGTERM to every rank, SIGKILL after the grace period"
    elif exit_code == 0:
        source, reason = "job", "the job succeeded"
    elif cause is not None:
        how = f"was killed by {cause['signal']}" if cause["signal"] else f"exited with code {cause['exit_code']}"
        source, reason = "job", f"rank {cause['rank']} on {cause['host']} {how}"
    elif platform_reason:
        source, reason = "platform", platform_reason
    elif head is not None:
        source, reason = head["source"], head.get("reason") or LAUNCHER_CODES.get(exit_code, "the launcher failed")
    elif exit_code in LAUNCHER_CODES:
        source, reason = "launcher", LAUNCHER_CODES[exit_code] + " (from the exit code; no failure report was read)"
    else:
        how = f"ended by signal {exit_code - 128}" if exit_code > 128 else f"exited with code {exit_code}"
        source, reason = "job", f"the job {how} (from the exit code; no failure report was read)"
    timeline = None
    if started is not None and ended is not None:
        stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))  # noqa: E731
        timeline = {"started_at": stamp(started), "ended_at": stamp(ended),
                    "duration_s": round(ended - started, 3), "hosts": dict(hosts or {})}
        if launch:
            timeline["launch"] = launch
    return Outcome(target, job, int(exit_code), source, reason, cause, failure_file, attempts, timeline, result)


def error_outcome(target: str | None, job: str | None, exc, started: float, source: str = "launcher") -> Outcome:
    """The Outcome of a submit that ended in ``exc``, an error of ours; ``source`` decided its code."""
    return outcome_of(target, job, int(exc.exit_code), error=(source, str(exc).split("\n", 1)[0] or type(exc).__name__),
                      started=started, ended=time.time(), hosts={})
