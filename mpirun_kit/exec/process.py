"""Run processes under supervision: the launcher (mpirun) with its output retagged, or any one process.

Both run under the one supervisor (supervisor.py: the phases, the deadline, TERM, grace, KILL, drain);
this module says what a stop means for them.  ``run_launcher`` runs mpirun (``LauncherChild``): its
output is streamed with rank/host prefixes (output.py), a stop goes through the ranks first.
``supervise`` runs one process (the local target's launcher) in its own session, forwarding the
SIGINT/SIGTERM (a SIGHUP as SIGTERM) its caller received through a SignalLatch.

mpirun runs in its own session (process group), so a final SIGKILL can take
the launcher and every local rank at once, by process group id, never by name.
A stop (SIGTERM/SIGINT received by the entrypoint, the caller's own reason, the
job deadline) goes to the ranks first when a ``rank_stop`` is given (the result
channel, rank_stop.py): every rank's wrapper signals its program and holds its
own exit, and mpirun is left alone until every rank asked has exited or the
grace period is over, because Open MPI's mpirun SIGKILLs every rank 1 s after
its own SIGTERM.  Then mpirun gets SIGTERM (at once, without a ``rank_stop``
or with no rank reachable) and the wrappers are released: mpirun forwards the
SIGTERM to every rank on every host; only if the job is still there after the
grace period does the group get SIGKILL.  When every rank of the job has
exited, mpirun gets no SIGTERM at all: the released wrappers' exits end it
(SIGTERM while it is ending can crash Open MPI 4's mpirun in PMIx_Finalize, and
its SIGTERM path sleeps its 1-s kill timeout).  Output lines tagged by mpirun
(``[1,3]<stdout>:``) are rewritten to ``[3 algo-2]`` using the plan's placement.
"""
from __future__ import annotations

import collections
import enum
import logging
import math
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, replace
from typing import BinaryIO, Callable, Collection, Mapping, Protocol, Sequence

from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..errors import ExitCode, LaunchError
from .output import pump_tagged
from .signals import SignalLatch, signal_name
from .supervisor import ProcessChild, Stop, Supervisor, signal_pid, signal_stop, start_process

log = logging.getLogger(__name__)

#: after a stop through the ranks (``rank_stop``), mpirun's process group gets SIGKILL at most this long after
#: mpirun's SIGTERM (or grace_s, when shorter): mpirun only has its own 1-s kill and its exit left, and the
#: workers wait grace_s + 3 s for the result (entrypoint/worker.py STOP_MARGIN_S).
KILL_AFTER_STOP_S = 2.0


class RankStopper(Protocol):
    """Stops ranks before their launcher is signalled (rank_stop.RankStop)."""

    def begin(self, signal_name: str) -> Collection[int]: ...
    def pending(self) -> Collection[int]: ...
    def all_exited(self) -> bool: ...
    def release(self) -> None: ...


@dataclass(frozen=True)
class LauncherExit:
    returncode: int | None        # None when the launcher died by a signal
    signal: str | None
    tail: tuple[str, ...]         # last lines it printed (prefixes rewritten)
    timed_out: bool = False
    interrupted_by: str | None = None
    stop: Stop | None = None      # the stop the supervisor made (who asked, why), None: it ended on its own


def run_launcher(argv: Sequence[str], env: Mapping[str, str], *, rank_hosts: Mapping[int, str], tag_regex: str,
                 cancelled: Callable[[], str | None], grace_s: float, job_timeout_s: float | None = None,
                 cwd: str | None = None, clock: Clock = SYSTEM_CLOCK, stdout: BinaryIO | None = None,
                 stderr: BinaryIO | None = None, tail_lines: int = 12,
                 on_start: Callable[[subprocess.Popen], None] | None = None,
                 parent_death_signal: int | None = None, rank_stop: RankStopper | None = None,
                 stop_source: Callable[[], str] | None = None, quiet: bool = False) -> LauncherExit:
    """Run ``argv`` to the end under the supervisor (supervisor.py) and return how it ended.

    Args:
        cancelled: returns the name of a signal the caller received (to forward), or None.
        grace_s: after forwarding SIGTERM (or the job deadline), SIGKILL the process group this much later;
            with ``rank_stop``, the longest the ranks asked get before mpirun is signalled.
        job_timeout_s: the job's own deadline; None = none.
        rank_stop: on a stop, asks the ranks first (module docstring); None = SIGTERM to mpirun at once.
        stop_source: who asked for a stop ``cancelled`` reported (``user`` or ``launcher``); default ``user``.
        quiet: -q: leave out Open MPI's banners that only restate a rank's exit (the entrypoint's level).

    Raises:
        LaunchError: the launcher could not be started (missing, not executable).
    """
    stdout = stdout or sys.stdout.buffer
    stderr = stderr or sys.stderr.buffer
    try:
        proc = start_process(argv, env=dict(env), cwd=cwd, parent_death_signal=parent_death_signal,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise LaunchError(f"cannot start {argv[0]!r}: {exc.strerror}; install the MPI launcher or fix PATH "
                          f"(argv: {' '.join(argv[:3])} ...)") from exc
    if on_start:
        on_start(proc)
    tag_re = re.compile(tag_regex)
    tail: collections.deque = collections.deque(maxlen=tail_lines)
    lock = threading.Lock()
    # quiet (-q, passed down by entrypoint/master.py): Open MPI's banners that only restate a rank's exit are
    # left out (the failure summary names it).
    pumps = [threading.Thread(target=pump_tagged, args=(s, d, tag_re, rank_hosts, tail, lock),
                              kwargs={"drop_rank_exit_banners": quiet}, daemon=True)
             for s, d in ((proc.stdout, stdout), (proc.stderr, stderr))]
    for t in pumps:
        t.start()

    def requested() -> Stop | None:
        name = cancelled()
        if name is None:
            return None
        stop = signal_stop(name)
        return replace(stop, source=stop_source()) if stop_source is not None else stop

    child = LauncherChild(proc, pumps, grace_s, rank_stop, clock)
    ended = Supervisor(child, deadline_s=job_timeout_s, grace_s=grace_s, requested=requested, clock=clock).run()
    rc = proc.returncode if ended.returncode is not None else -signal.SIGKILL
    with lock:
        lines = tuple(tail)
    stop = ended.stop
    timed_out = stop is not None and stop.signal is None and stop.exit_code == ExitCode.TIMEOUT
    interrupted = stop.signal if stop is not None else None
    if rc < 0:
        return LauncherExit(None, signal_name(-rc), lines, timed_out, interrupted, stop)
    return LauncherExit(rc, None, lines, timed_out, interrupted, stop)


class StopStep(enum.Enum):
    """Where a stop of mpirun stands (``LauncherChild``): the supervisor's STOPPING phase, in steps."""

    ASKING = "the ranks asked over the channel run their handlers; mpirun is left alone"
    SETTLING = "every rank exited and the wrappers are released: mpirun ends by itself, no SIGTERM"
    TERMED = "mpirun got SIGTERM (it stops every rank on every host); its group gets SIGKILL at the kill deadline"


class LauncherChild(ProcessChild):
    """mpirun under the supervisor: a stop goes through the ranks first when ``rank_stop`` is given
    (module docstring), then SIGTERM to mpirun, then SIGKILL to its process group; ``step`` says where it is."""

    def __init__(self, proc: subprocess.Popen, pumps: Sequence[threading.Thread], grace_s: float,
                 rank_stop: RankStopper | None, clock: Clock):
        super().__init__(proc, threads=pumps, clock=clock)
        self.grace_s = grace_s
        self.rank_stop = rank_stop
        self.why = ""
        self.step: StopStep | None = None
        self.since: Deadline | None = None     # when the current step began
        self.asked: Deadline | None = None     # the ranks' grace period, from the moment they were asked

    def _enter(self, step: StopStep) -> None:
        self.step, self.since = step, Deadline(self.clock, None)

    def terminate(self, stop: Stop) -> float | None:
        self.why = stop.signal or stop.why
        # grace_s = 0 asks for no clean-up time at all: nothing to ask the ranks for.
        asked = self.rank_stop.begin("SIGTERM") if self.rank_stop is not None and self.grace_s > 0 else ()
        if asked:
            log.warning("%s: asked %d rank(s) to stop (SIGTERM to each program); mpirun gets SIGTERM once "
                        "they have exited, at most %g s from now", self.why, len(asked), self.grace_s)
            self.asked = Deadline(self.clock, self.grace_s)
            self._enter(StopStep.ASKING)
            return math.inf     # no SIGKILL while the ranks are asked (stopping() sets it when they are released)
        self._sigterm(self.why, self.grace_s)
        return self.grace_s

    def stopping(self) -> float | None:
        if self.step is not StopStep.ASKING:
            return None
        left = self.rank_stop.pending()
        if left and not self.asked.expired():
            return None
        if left:
            log.warning("%d rank(s) still running %g s after they were asked to stop (ranks %s)", len(left),
                        self.grace_s, ", ".join(map(str, sorted(left)[:10])) + (" ..." if len(left) > 10 else ""))
        after = _kill_after(self.asked, self.grace_s)
        if not left and self.rank_stop.all_exited():
            self._enter(StopStep.SETTLING)
            log.info("%s: every rank exited; mpirun ends once their wrappers are released (its process "
                     "group gets SIGKILL in %.3g s if not)", self.why, after)
        else:
            # SIGTERM first, so mpirun is already stopping the job when a released rank's exit reaches it.
            self._sigterm(f"{self.why} ({'grace over' if left else 'the ranks asked exited'})", after)
        self.rank_stop.release()
        return after

    def kill(self) -> None:
        log.warning("mpirun still running after %s: killing its process group %d",
                    "every rank exited" if self.step is StopStep.SETTLING else "its SIGTERM", self.proc.pid)
        super().kill()

    def drain(self, deadline: Deadline) -> None:
        if self.step is StopStep.ASKING:
            self.rank_stop.release()   # mpirun ended on its own during the stop: the wrappers have nobody to wait for
        elif self.step is StopStep.TERMED:
            log.info("mpirun exited %.2f s after its SIGTERM", self.since.elapsed())
        elif self.step is StopStep.SETTLING:
            log.info("mpirun ended %.2f s after the ranks were released", self.since.elapsed())
        # Local ranks may outlive mpirun only if it died abruptly; never leave them behind (ProcessChild.drain).
        super().drain(deadline)

    def _sigterm(self, why: str, kill_after_s: float) -> None:
        log.warning("%s: sending SIGTERM to mpirun (pid %d), SIGKILL in %.3g s", why, self.proc.pid, kill_after_s)
        signal_pid(self.proc.pid, signal.SIGTERM)
        self._enter(StopStep.TERMED)


def exit_code_of(returncode: int) -> int:
    """Popen returncode -> shell-style exit code (-N for signal N -> 128+N)."""
    return 128 - returncode if returncode < 0 else returncode


def supervise(argv: Sequence[str], cwd: str | None = None, *, deadline_s: float | None = None,
              grace_s: float = 10.0, clock: Clock = SYSTEM_CLOCK, latch: SignalLatch | None = None,
              parent_death_signal: int | None = signal.SIGTERM, margin_s: float = 10.0) -> tuple[int, Stop | None]:
    """Run one process (the local target's launcher) to its end under the supervisor; (exit code, the stop made).

    It runs in its own session, so a terminal's signals reach only us; a SIGINT or SIGTERM received
    (``latch``; one is installed when not given) is forwarded as it is, a SIGHUP as SIGTERM: the process
    (the launcher) stops every rank with its grace period.  SIGKILL to its group comes ``grace_s +
    margin_s`` after the stop began.  Past ``deadline_s`` the same stop happens and the code is
    ExitCode.TIMEOUT.  If this process dies, the child gets SIGTERM (``parent_death_signal``).  Its output
    goes where ours goes (the process writes it itself).
    """
    own = latch is None
    latch = latch or SignalLatch()
    if own:
        latch.__enter__()
    try:
        proc = start_process(argv, cwd=cwd, parent_death_signal=parent_death_signal)
        return follow(ProcessChild(proc, forward=True, clock=clock), deadline_s=deadline_s, grace_s=grace_s,
                      clock=clock, latch=latch, margin_s=margin_s)
    finally:
        if own:
            latch.__exit__(None, None, None)


def follow(child: ProcessChild, *, deadline_s: float | None = None, grace_s: float = 10.0,
           clock: Clock = SYSTEM_CLOCK, latch: SignalLatch | None = None,
           margin_s: float = 10.0) -> tuple[int, Stop | None]:
    """``supervise``'s second half, for a process already started (a target's ``start``): the supervisor follows
    ``child`` to its end, stopping it on ``latch``'s signal or past ``deadline_s``; (exit code, the stop made)."""
    ended = Supervisor(child, deadline_s=deadline_s, grace_s=grace_s + margin_s,
                       requested=latch.stop if latch is not None else None, clock=clock, tick_s=0.1,
                       deadline_what="the launcher").run()
    if ended.stop is not None:
        return ended.stop.exit_code, ended.stop
    return exit_code_of(ended.returncode if ended.returncode is not None else -signal.SIGKILL), None


def _kill_after(drain: Deadline, grace_s: float) -> float:
    """After a stop through the ranks: the group's SIGKILL comes when it would have without it (grace_s after
    the stop began), or, if the ranks took all of it, a short bound later: mpirun only tears down now."""
    return max(drain.remaining(), min(grace_s, KILL_AFTER_STOP_S))
