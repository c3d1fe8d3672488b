"""The lifecycle of a job supervised by a process on this machine: local, sim and ssh (base.Target's defaults).

Place in the data flow: ``submit`` (in the foreground, or its detached copy) is the job's
supervisor; its pid and start time are in the job's record, its output in the run directory
(records.RUN_FILES), how it ended in ``outcome.json`` (``result.json`` in a run directory made before).  From those alone:

* ``describe``: the record's state, unless its supervisor is gone: then the result it left, or
  ``lost`` when it left none (SIGKILL, a reboot);
* ``cancel``: SIGTERM to the supervisor, which stops the job as it stops it on Ctrl-C (every rank
  on every host gets SIGTERM, the spec's grace, then SIGKILL, and the target tears down what it
  brought up); a supervisor that outlives the grace period and a margin is SIGKILLed with its
  process group;
* ``logs``: ``output.log``, every line behind ``[rank host]``, one rank's on request.
"""
from __future__ import annotations

import json
import os
import re
import signal
from typing import Iterator

from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..core.private import open_private, read_private
from ..errors import ClusterError, ExitCode, SpecError
from ..exec.result import JobResult
from ..exec.supervisor import stop_process
from ..records import OTHER_USER, SUPERVISOR_CMD, JobRecord, JobState, supervisor_problem
from .outcome import JobStatus

#: seconds past the job's grace period a supervisor may take to stop its job (the launcher's report, a sim
#: cluster's tear-down) before ``cancel`` SIGKILLs it.
CANCEL_MARGIN_S = 60.0
DEFAULT_GRACE_S = 10.0
#: how often ``logs --follow`` looks for new lines.
FOLLOW_POLL_S = 0.2


def supervisor_alive(record: JobRecord) -> bool:
    """The process recorded as the job's supervisor still runs (same pid, same start time) and proves it is one:
    this user's mpirun_kit process (records.supervisor_problem: a record may name any pid of the host)."""
    return supervisor_problem(record.supervisor_pid, record.supervisor_start,
                              record.details.get(SUPERVISOR_CMD)) is None


def state_of(exit_code: int, *, cancelled: bool) -> JobState:
    """The state a job that ended with ``exit_code`` is in; ``cancelled``: a cancel or signal stopped it."""
    if exit_code == 0:
        return JobState.SUCCEEDED
    if cancelled or exit_code in (ExitCode.INTERRUPTED, ExitCode.SIGTERM, ExitCode.for_signal(signal.SIGHUP)):
        return JobState.CANCELLED
    return JobState.FAILED


def read_result(record: JobRecord) -> dict | None:
    """The Outcome the supervisor left in the run directory (``submit --json``'s line), None if none: its
    ``outcome.json``, else the ``result.json`` a run directory made before the rename holds."""
    if record.run_dir is None:
        return None
    for key in ("outcome", "result"):
        try:
            # never through a link, only a file of this user's (core/private.py): else the status shown is forged
            return json.loads(read_private(record.path(key), "job's result"))
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            return None
    return None


def job_result(outcome: dict | None) -> JobResult | None:
    """The JobResult an outcome file wraps (exec/result.py), None when it holds none (a platform's end, an older file)."""
    try:
        return JobResult.from_dict((outcome or {}).get("result"))
    except (ValueError, TypeError, KeyError):
        return None


def describe(record: JobRecord) -> JobStatus:
    state, result = record.state, None
    if state.terminal and state != JobState.LOST:
        return status_of(record, state, result=job_result(read_result(record)))
    if not state.terminal and not supervisor_alive(record):
        result = read_result(record)
        if result is None:
            state = JobState.LOST
        else:
            state = state_of(result["exit_code"], cancelled=record.cancel_requested)
    if state == JobState.LOST:
        return status_of(record, state, reason="its supervisor (pid "
                       f"{record.supervisor_pid}) ended without a result: killed, or the machine restarted")
    if result is not None:
        return status_of(record, state, exit_code=result["exit_code"], source=result.get("source"),
                         reason=result.get("reason"), root_cause=result.get("root_cause"), result=job_result(result))
    return status_of(record, state)


def status_of(record: JobRecord, state: JobState, **result) -> JobStatus:
    fields = {"exit_code": record.exit_code, "source": record.source, "reason": record.reason,
              "root_cause": record.root_cause, **result}
    return JobStatus(record.job_id, record.name, record.target, state, native=record.native,
                     run_dir=record.run_dir, spec=record.spec, created_at=record.created_at,
                     started_at=record.started_at, ended_at=record.ended_at, **fields)


def cancel(record: JobRecord, *, clock: Clock = SYSTEM_CLOCK) -> JobStatus:
    """SIGTERM to the job's supervisor, which stops the job on every host; SIGKILL to its process group if it
    is still there ``grace_s + CANCEL_MARGIN_S`` later.  Returns the job's status once the supervisor is gone."""
    problem = None if record.state.terminal else supervisor_problem(record.supervisor_pid, record.supervisor_start,
                                                                    record.details.get(SUPERVISOR_CMD))
    if problem and problem[0] == OTHER_USER:   # another user's job: say so, signal nothing
        raise SpecError(f"job {record.job_id}: {problem[1]}")
    if record.state.terminal or problem:
        return describe(record)
    pid = record.supervisor_pid
    grace = float(record.details.get("grace_s") or DEFAULT_GRACE_S)
    # The one stop sequence (exec/supervisor.py): SIGTERM, grace + margin, SIGKILL (to its group when it leads one).
    res = stop_process(pid, grace + CANCEL_MARGIN_S, clock=clock, alive=lambda _: supervisor_alive(record),
                       kill=_kill_group)
    if not res.gone:
        raise ClusterError(f"job {record.job_id}: its supervisor (pid {pid}) survived SIGKILL; check `ps -p {pid}`")
    return describe(record)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _kill_group(pid: int) -> None:
    """SIGKILL the supervisor, and its process group when it leads one (a detached supervisor does: its own
    session); a foreground submit's group is the user's shell job, so only the process itself."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
            return
    except ProcessLookupError:
        return
    _signal(pid, signal.SIGKILL)


def rank_filter(rank: int | None):
    """A predicate on output lines: the line came from ``rank`` (behind ``[rank host]``, after any host prefix)."""
    if rank is None:
        return lambda line: True
    pattern = re.compile(rf"^(?:\[[^\]]*\] )?\[{int(rank)} [^\]]+\]")
    return lambda line: bool(pattern.match(line))


def logs(record: JobRecord, *, rank: int | None = None, follow: bool = False,
         clock: Clock = SYSTEM_CLOCK) -> Iterator[str]:
    """The lines of the run directory's ``output.log``; with ``follow``, new ones until the supervisor is gone."""
    path = record.path("output")
    keep = rank_filter(rank)
    pos, buf = 0, b""
    limit = record.details.get("deadline_s")
    deadline = Deadline(clock, float(limit) + CANCEL_MARGIN_S if limit else None)
    while True:
        running = follow and supervisor_alive(record) and not record.state.terminal
        try:
            with os.fdopen(open_private(path, "job's output"), "rb") as f:   # no link, only this user's file
                f.seek(pos)
                chunk = f.read()
        except FileNotFoundError:
            chunk = b""
        pos += len(chunk)
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            text = line.decode(errors="replace")
            if keep(text):
                yield text
        if not running or deadline.expired():
            if buf and keep(buf.decode(errors="replace")):
                yield buf.decode(errors="replace")
            return
        clock.sleep(FOLLOW_POLL_S)

