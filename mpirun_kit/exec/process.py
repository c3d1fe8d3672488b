"""Run processes under supervision: the launcher (mpirun) with its output retagged, or any one process.

``run_launcher`` runs mpirun: its output is streamed with rank/host prefixes
(output.py), signals forwarded, and it is stopped with a grace period.
``supervise`` runs one process the same way without the retagging (the local
target's launcher), forwarding SIGTERM/SIGINT through a SignalLatch.

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
import errno
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Collection, Mapping, Protocol, Sequence

from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..errors import ExitCode, LaunchError
from ..core import verbosity
from .output import pump_tagged
from .signals import SignalLatch, signal_name

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


def run_launcher(argv: Sequence[str], env: Mapping[str, str], *, rank_hosts: Mapping[int, str], tag_regex: str,
                 cancelled: Callable[[], str | None], grace_s: float, job_timeout_s: float | None = None,
                 cwd: str | None = None, clock: Clock = SYSTEM_CLOCK, stdout: BinaryIO | None = None,
                 stderr: BinaryIO | None = None, tail_lines: int = 12,
                 on_start: Callable[[subprocess.Popen], None] | None = None,
                 parent_death_signal: int | None = None, rank_stop: RankStopper | None = None) -> LauncherExit:
    """Run ``argv`` to the end and return how it ended.

    Args:
        cancelled: returns the name of a signal the caller received (to forward), or None.
        grace_s: after forwarding SIGTERM (or the job deadline), SIGKILL the process group this much later;
            with ``rank_stop``, the longest the ranks asked get before mpirun is signalled.
        job_timeout_s: the job's own deadline; None = none.
        rank_stop: on a stop, asks the ranks first (module docstring); None = SIGTERM to mpirun at once.

    Raises:
        LaunchError: the launcher could not be started (missing, not executable).
    """
    stdout = stdout or sys.stdout.buffer
    stderr = stderr or sys.stderr.buffer
    try:
        full = list(argv)
        if parent_death_signal is not None:
            full = with_parent_death_signal(full, parent_death_signal, env.get("PATH"))
        # start_new_session is done by subprocess's C code, not a Python preexec_fn: nothing
        # Python runs between fork and exec while the result channel's thread is running.
        proc = subprocess.Popen(full, env=dict(env), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        raise LaunchError(f"cannot start {argv[0]!r}: {exc.strerror}; install the MPI launcher or fix PATH "
                          f"(argv: {' '.join(argv[:3])} ...)") from exc
    if on_start:
        on_start(proc)
    tag_re = re.compile(tag_regex)
    tail: collections.deque = collections.deque(maxlen=tail_lines)
    lock = threading.Lock()
    # -q: Open MPI's banners that only restate a rank's exit are left out (the failure summary names it).
    quiet = verbosity.LEVEL <= verbosity.QUIET
    pumps = [threading.Thread(target=pump_tagged, args=(s, d, tag_re, rank_hosts, tail, lock),
                              kwargs={"drop_rank_exit_banners": quiet}, daemon=True)
             for s, d in ((proc.stdout, stdout), (proc.stderr, stderr))]
    for t in pumps:
        t.start()
    job_deadline = Deadline(clock, job_timeout_s)
    kill_deadline: Deadline | None = None
    drain: Deadline | None = None        # set while the ranks asked over the channel run their handlers
    settling: Deadline | None = None     # since the release, when every rank exited: mpirun gets no SIGTERM
    released = False
    termed: Deadline | None = None       # mpirun's SIGTERM (its start) and SIGKILL (its end)
    interrupted: str | None = None
    timed_out = False
    why = ""
    while True:
        try:
            proc.wait(timeout=0.05)
            break
        except subprocess.TimeoutExpired:
            pass
        if kill_deadline is None and drain is None:
            sig = cancelled()
            if sig is not None:
                interrupted = sig
            elif job_deadline.expired():
                timed_out = True
            if interrupted or timed_out:
                why = interrupted or f"job deadline of {job_timeout_s:g} s"
                # grace_s = 0 asks for no clean-up time at all: nothing to ask the ranks for.
                asked = rank_stop.begin("SIGTERM") if rank_stop is not None and grace_s > 0 else ()
                if asked:
                    log.warning("%s: asked %d rank(s) to stop (SIGTERM to each program); mpirun gets SIGTERM once "
                                "they have exited, at most %g s from now", why, len(asked), grace_s)
                    drain = Deadline(clock, grace_s)
                else:
                    kill_deadline = termed = _terminate(proc.pid, why, grace_s, clock)
        elif kill_deadline is None:
            left = rank_stop.pending()
            if not left or drain.expired():
                if left:
                    log.warning("%d rank(s) still running %g s after they were asked to stop (ranks %s)", len(left),
                                grace_s, ", ".join(map(str, sorted(left)[:10])) + (" ..." if len(left) > 10 else ""))
                if not left and rank_stop.all_exited():
                    settling = Deadline(clock, None)
                    kill_deadline = Deadline(clock, _kill_after(drain, grace_s))
                    log.info("%s: every rank exited; mpirun ends once their wrappers are released (its process "
                             "group gets SIGKILL in %.3g s if not)", why, kill_deadline.seconds)
                else:
                    # SIGTERM first, so mpirun is already stopping the job when a released rank's exit reaches it.
                    kill_deadline = termed = _terminate(
                        proc.pid, f"{why} ({'grace over' if left else 'the ranks asked exited'})",
                        _kill_after(drain, grace_s), clock)
                rank_stop.release()
                released = True
        elif kill_deadline.expired():
            log.warning("mpirun still running %.3g s after %s: killing its process group %d", kill_deadline.seconds,
                        "SIGTERM" if termed is not None else "every rank exited", proc.pid)
            _signal_group(proc.pid, signal.SIGKILL)
            kill_deadline = Deadline(clock, None)
    if rank_stop is not None and drain is not None and not released:
        rank_stop.release()   # mpirun ended on its own during the stop: the wrappers have nobody to wait for
    if termed is not None:
        log.info("mpirun exited %.2f s after its SIGTERM", termed.elapsed())
    elif settling is not None:
        log.info("mpirun ended %.2f s after the ranks were released", settling.elapsed())
    # Local ranks may outlive mpirun only if it died abruptly; never leave them behind.
    _signal_group(proc.pid, signal.SIGKILL)
    for t in pumps:
        t.join(timeout=2.0)
    rc = proc.returncode
    with lock:
        lines = tuple(tail)
    if rc < 0:
        return LauncherExit(None, signal_name(-rc), lines, timed_out, interrupted)
    return LauncherExit(rc, None, lines, timed_out, interrupted)


def exit_code_of(returncode: int) -> int:
    """Popen returncode -> shell-style exit code (-N for signal N -> 128+N)."""
    return 128 - returncode if returncode < 0 else returncode


def supervise(argv: Sequence[str], cwd: str | None = None, *, deadline_s: float | None = None,
              grace_s: float = 10.0, clock: Clock = SYSTEM_CLOCK) -> tuple[int, str | None]:
    """Run one process to its end, forwarding SIGTERM/SIGINT to it; (exit code, first signal forwarded).

    Past ``deadline_s`` it gets SIGTERM, then SIGKILL ``grace_s`` + 10 s later, and the code is
    ExitCode.TIMEOUT.  Its output goes where ours goes (the process writes it itself).
    """
    proc = subprocess.Popen(list(argv), cwd=cwd)
    deadline = Deadline(clock, deadline_s)

    def forward(signum: int) -> None:
        # The process (the local target's launcher) turns this into SIGTERM for every rank, then grace, then SIGKILL.
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    with SignalLatch(forward=forward) as latch:
        while proc.poll() is None:
            if deadline.expired():
                proc.terminate()
                try:
                    proc.wait(timeout=grace_s + 10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                return ExitCode.TIMEOUT, latch.received
            clock.sleep(min(0.2, deadline.remaining()))
    return exit_code_of(proc.returncode), latch.received


#: a last resort where util-linux's setpriv is missing: pdeathsig.py run as a script sets the
#: signal, checks the parent is still the one that started it, then execs the launcher.
_PDEATHSIG_SCRIPT = str(Path(__file__).with_name("pdeathsig.py"))


def with_parent_death_signal(argv: list[str], signum: int, path: str | None) -> list[str]:
    """``argv`` run so that it gets ``signum`` when this process dies (PR_SET_PDEATHSIG).

    Set by a tiny exec helper rather than a ``preexec_fn``: Python code between fork and
    exec in a multi-threaded parent can deadlock (a lock held by another thread at fork).
    ``setpriv --pdeathsig`` (util-linux, in every Debian/Ubuntu image) is a C binary that
    costs ~1 ms; the Python helper is the fallback.  The launcher is looked up on PATH
    first so a missing one still fails as an OSError, not as the helper's exit 127.

    Raises:
        FileNotFoundError: ``argv[0]`` is not found on ``path``.
    """
    if shutil.which(argv[0], path=path) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv[0])
    setpriv = shutil.which("setpriv")
    if setpriv is not None:
        return [setpriv, "--pdeathsig", signal.Signals(signum).name, "--", *argv]
    return [sys.executable, "-I", "-S", _PDEATHSIG_SCRIPT, str(int(signum)), str(os.getpid()), *argv]


def _kill_after(drain: Deadline, grace_s: float) -> float:
    """After a stop through the ranks: the group's SIGKILL comes when it would have without it (grace_s after
    the stop began), or, if the ranks took all of it, a short bound later: mpirun only tears down now."""
    return max(drain.remaining(), min(grace_s, KILL_AFTER_STOP_S))


def _terminate(pid: int, why: str, kill_after_s: float, clock: Clock) -> Deadline:
    """SIGTERM to mpirun; returns when its process group gets SIGKILL."""
    log.warning("%s: sending SIGTERM to mpirun (pid %d), SIGKILL in %.3g s", why, pid, kill_after_s)
    _signal_pid(pid, signal.SIGTERM)
    return Deadline(clock, kill_after_s)


def _signal_pid(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass
