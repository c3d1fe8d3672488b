"""The one supervisor: run a child until it ends, stop it on a request or a deadline, then drain its output.

Place in the data flow: every target (local, sim, ssh) and the master entrypoint (mpirun) hand their
running job to ``Supervisor.run``; what differs between them is the ``Child`` (how to poll it, how a
stop begins, how it is killed, whose output to drain), never the loop.  The loop is an explicit state
machine (torch elastic's ``WorkerState`` plays the same part), one ``Phase`` at a time:

``STARTING``  the child is being started (``Supervisor.phase`` before ``run``);
``RUNNING``   polled every tick; a stop is asked for (``request_stop``, a signal through ``requested``)
              or the deadline passes -> ``STOPPING``;
``STOPPING``  ``Child.terminate`` began the stop (SIGTERM to a process group, to the master entrypoint,
              a remote cancel); ``Child.stopping`` is called each tick (a stop in several steps advances
              there and may move the kill deadline); once the grace period is over, ``Child.kill``
              (SIGKILL to the process group); a child that outlives even that for KILL_WAIT_S is given up;
``DRAINING``  the child ended: ``Child.drain`` reads what is left of its output, within DRAIN_S;
``DONE``      ``run`` returns an ``Ended`` (the return code, the ``Stop`` if one was made, whether it was
              killed).

Every wait takes the injected clock (core/clock.py) and has a deadline.  Who asked for a stop is data
(``Stop.source``): ``user`` (a signal to the process a person runs: Ctrl-C, a closed terminal, SIGTERM,
``mpirun_kit cancel``) or ``launcher`` (a deadline of ours, a lost host, a hang); the results built from
an ``Ended`` say so instead of blaming the rank the stop killed.

The stop/cancel entry points for other components:

* ``Supervisor.request_stop(stop)``: thread- and signal-safe; the running loop begins the stop sequence
  at its next tick (the lifecycle's ``cancel`` for a job supervised in this process).
* ``stop_process_group(pid, grace_s, clock=...)``: the same sequence (SIGTERM to the group, wait up to
  ``grace_s``, SIGKILL, wait) for a process this one did not start, e.g. a job record's supervisor found
  by pid (``mpirun_kit cancel ID``); returns how it ended as a ``GroupStop``.
* ``stop_process(pid, grace_s)``: the same for one process by pid (the ssh target's remote cancel).
* ``signal_stop(name)``: the ``Stop`` a received signal means (``user``, 128+N).
"""
from __future__ import annotations

import enum
import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..errors import ExitCode
from .pdeathsig import with_parent_death_signal

#: how often the loop looks at the child (and at stop requests).
TICK_S = 0.05
#: after SIGKILL, how long the child may take to be reaped before the supervisor gives it up.
KILL_WAIT_S = 10.0
#: after the child ended, how long its output may take to be read to the end.
DRAIN_S = 5.0


class Phase(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    DRAINING = "draining"
    DONE = "done"


#: who asked for a stop: a person (a signal to the process they run, ``cancel``) or mpirun_kit itself.
STOP_SOURCES = ("user", "launcher")


@dataclass(frozen=True)
class Stop:
    """Why a job is being stopped, as data.

    ``source``: ``user`` or ``launcher``; ``signal``: the signal received (``SIGINT``), None for a stop of ours;
    ``why``: for people (``the job ran past its deadline of 60 s``); ``exit_code``: what the job exits with
    because of the stop (128+N for signal N, 124 for a deadline).
    """

    source: str
    why: str
    exit_code: int
    signal: str | None = None


def signal_stop(name: str) -> Stop:
    """The stop a received signal asks for (a person's: ``user``), exiting 128+N."""
    try:
        num = signal.Signals[name].value
    except KeyError:
        num = signal.SIGTERM.value
    why = {"SIGINT": "interrupted (Ctrl-C)", "SIGHUP": "the terminal closed (SIGHUP)"}.get(name, f"received {name}")
    return Stop("user", why, ExitCode.for_signal(num), name)


def deadline_stop(seconds: float, what: str = "the job") -> Stop:
    """The stop a deadline of ours asks for (``launcher``, exit 124)."""
    return Stop("launcher", f"{what} ran past its deadline of {seconds:g} s", ExitCode.TIMEOUT)


@dataclass(frozen=True)
class Ended:
    """How a supervised child ended: its return code (Popen's: -N for signal N; None when it had to be given
    up), the stop made (None: it ended on its own), whether it was SIGKILLed, and the last phase it reached."""

    returncode: int | None
    stop: Stop | None = None
    killed: bool = False
    abandoned: bool = False


class Child(Protocol):
    """What the supervisor drives.  Implementations: ``ProcessChild`` below, the master's mpirun
    (process.py), the sim hosts (targets/sim.py), the ssh sessions (targets/ssh.py)."""

    def poll(self) -> int | None:
        """The return code once it ended, else None."""

    def terminate(self, stop: Stop) -> float | None:
        """Begin the stop (e.g. SIGTERM); returns seconds until ``kill`` (None: the supervisor's grace)."""

    def stopping(self) -> float | None:
        """Called each tick while stopping: a stop in steps advances here; a number moves ``kill`` to that many
        seconds from now."""

    def kill(self) -> None:
        """The last resort (SIGKILL to everything it started)."""

    def drain(self, deadline: Deadline) -> None:
        """After the end: read its remaining output and reap what it left, within ``deadline``."""

    def wait(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the next tick (through the injected clock), returning early if it ends."""


class Supervisor:
    """Runs one ``Child`` through the phases (module docstring).

    Args:
        child: what is supervised.
        deadline_s: stop it (``deadline_stop``) once it ran this long; None: no deadline.
        grace_s: from the stop's start to ``Child.kill`` (unless ``Child.terminate`` says otherwise).
        requested: asked each tick while running: a ``Stop`` someone wants (a signal latch), or None.
        on_tick: called each tick with the phase (pump output, redraw a status line).
        clock: injected time; ``tick_s``: how often the loop looks.
        deadline_what: how the deadline's stop names what ran past it.
    """

    def __init__(self, child: Child, *, deadline_s: float | None = None, grace_s: float = 10.0,
                 requested: Callable[[], Stop | None] | None = None, on_tick: Callable[[Phase], None] | None = None,
                 clock: Clock = SYSTEM_CLOCK, tick_s: float = TICK_S, kill_wait_s: float = KILL_WAIT_S,
                 drain_s: float = DRAIN_S, deadline_what: str = "the job"):
        self.child = child
        self.deadline_s = deadline_s
        self.grace_s = grace_s
        self.requested = requested
        self.on_tick = on_tick
        self.clock = clock
        self.tick_s = tick_s
        self.kill_wait_s = kill_wait_s
        self.drain_s = drain_s
        self.deadline_what = deadline_what
        self.phase = Phase.STARTING
        self.stop: Stop | None = None
        self._asked: Stop | None = None
        self._lock = threading.Lock()

    def request_stop(self, stop: Stop) -> None:
        """Ask for a stop from any thread or a signal handler; the first request wins."""
        if self._asked is None:   # no lock: a signal handler must never wait on one
            self._asked = stop

    def run(self) -> Ended:
        """Supervise until the child is done (every wait bounded); how it ended."""
        self.phase = Phase.RUNNING
        deadline = Deadline(self.clock, self.deadline_s)
        kill_at: Deadline | None = None
        killed = abandoned = False
        code: int | None = None
        while True:
            code = self.child.poll()
            if code is not None:
                break
            if self.phase is Phase.RUNNING:
                stop = self._asked or (self.requested() if self.requested else None)
                if stop is None and deadline.expired():
                    stop = deadline_stop(self.deadline_s, self.deadline_what)
                if stop is not None:
                    self.stop = stop
                    self.phase = Phase.STOPPING
                    after = self.child.terminate(stop)
                    kill_at = Deadline(self.clock, self.grace_s if after is None else after)
            elif self.phase is Phase.STOPPING and not killed:
                moved = self.child.stopping()
                if moved is not None:
                    kill_at = Deadline(self.clock, moved)
                if kill_at is not None and kill_at.expired():
                    self.child.kill()
                    killed = True
                    kill_at = Deadline(self.clock, self.kill_wait_s)
            elif killed and kill_at is not None and kill_at.expired():
                abandoned = True    # not reaped even after SIGKILL (stuck in the kernel): give it up
                break
            if self.on_tick is not None:
                self.on_tick(self.phase)
            self.child.wait(self.tick_s)
        self.phase = Phase.DRAINING
        self.child.drain(Deadline(self.clock, self.drain_s))
        if self.on_tick is not None:
            self.on_tick(self.phase)
        self.phase = Phase.DONE
        return Ended(code, self.stop, killed, abandoned)


def start_process(argv: Sequence[str], *, env: dict | None = None, cwd: str | None = None,
                  parent_death_signal: int | None = None, **popen) -> subprocess.Popen:
    """Start ``argv`` in its own session (process group), so a stop reaches all it starts and a terminal's
    signals reach only us (we forward them); with ``parent_death_signal``, it gets that signal if we die
    (PR_SET_PDEATHSIG, pdeathsig.with_parent_death_signal).

    Raises:
        OSError: it cannot be started (missing, not executable).
    """
    full = list(argv)
    if parent_death_signal is not None:
        # No env: the child inherits ours, and shutil.which searches our PATH (path=None) as exec will.
        full = with_parent_death_signal(full, parent_death_signal, env.get("PATH") if env is not None else None)
    # start_new_session is done by subprocess's C code, not a Python preexec_fn: nothing Python runs
    # between fork and exec while other threads run.
    return subprocess.Popen(full, env=env, cwd=cwd, start_new_session=True, **popen)


class ProcessChild:
    """A local process started by ``start_process`` (its own process group).

    ``terminate`` sends ``stop_signal`` (SIGTERM by default; ``forward`` sends the signal received
    instead, for a child that handles Ctrl-C itself) to the process, or to its whole group with
    ``term_group``; ``kill`` SIGKILLs the group; ``drain`` SIGKILLs what is left in the group (never
    leave a rank behind) and joins the output threads.
    """

    def __init__(self, proc: subprocess.Popen, *, threads: Sequence[threading.Thread] = (),
                 term_group: bool = False, forward: bool = False, clock: Clock = SYSTEM_CLOCK):
        self.proc = proc
        self.threads = list(threads)
        self.term_group = term_group
        self.forward = forward
        self.clock = clock

    def poll(self) -> int | None:
        return self.proc.poll()

    def terminate(self, stop: Stop) -> float | None:
        # SIGHUP too: the launcher then records the stop as the signal submit got (129), not SIGTERM (issue #40)
        sig = signal.Signals[stop.signal] if self.forward and stop.signal in ("SIGINT", "SIGTERM", "SIGHUP") \
            else signal.SIGTERM
        if self.term_group:
            signal_group(self.proc.pid, sig)
        else:
            signal_pid(self.proc.pid, sig)
        return None

    def stopping(self) -> float | None:
        return None

    def kill(self) -> None:
        signal_group(self.proc.pid, signal.SIGKILL)

    def drain(self, deadline: Deadline) -> None:
        signal_group(self.proc.pid, signal.SIGKILL)
        join_all(self.threads, deadline, self.clock)

    def wait(self, seconds: float) -> None:
        if self.clock is not SYSTEM_CLOCK:
            self.clock.sleep(seconds)   # a test's clock: time moves only through it
            return
        try:
            # The real clock: the kernel says when it exits, so its end is seen at once, not up to a tick later
            # (mpirun's exit is on the launch's critical path: the shutdown the launch benchmark measures).
            self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            pass


def join_all(threads: Sequence[threading.Thread], deadline: Deadline, clock: Clock = SYSTEM_CLOCK) -> bool:
    """Wait for ``threads`` until ``deadline``; True when all ended."""
    for t in threads:
        while t.is_alive() and not deadline.expired():
            t.join(min(TICK_S, deadline.remaining()))
    return not any(t.is_alive() for t in threads)


def signal_pid(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass(frozen=True)
class GroupStop:
    """How ``stop_process_group`` ended: ``gone`` (nothing left), after SIGKILL (``killed``) or not."""

    gone: bool
    killed: bool
    seconds: float


def _pid_alive(pid: int) -> bool:
    """``pid`` runs (a zombie, exited but not yet reaped by its parent, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A group whose only members are zombies (exited, not reaped by their parent) counts as gone.
    import psutil

    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.NoSuchProcess, psutil.AccessDenied, OSError):
            continue
    return False


def stop_process_group(pgid: int, grace_s: float, *, clock: Clock = SYSTEM_CLOCK, first: int = signal.SIGTERM,
                       kill_wait_s: float = KILL_WAIT_S) -> GroupStop:
    """The stop sequence for a process group this process did not start (a job's supervisor, by its
    recorded pid, which leads its group): ``first`` (SIGTERM), wait up to ``grace_s`` for the group to
    go, SIGKILL, wait up to ``kill_wait_s``."""
    return _stop(pgid, grace_s, clock, first, kill_wait_s, signal_group, _group_alive)


def stop_process(pid: int, grace_s: float, *, clock: Clock = SYSTEM_CLOCK, first: int = signal.SIGTERM,
                 kill_wait_s: float = KILL_WAIT_S, alive: Callable[[int], bool] | None = None,
                 kill: Callable[[int], None] | None = None) -> GroupStop:
    """The same sequence for one process by pid (the ssh target's remote cancel, exec/remote_host.py: the
    entrypoint stops its own mpirun and ranks on the SIGTERM; ``cancel ID``: a job's supervisor).

    ``alive``: whether it still runs (default: the pid exists and is no zombie; a caller that knows the
    process's start time passes a check that a reused pid cannot pass); ``kill``: the last resort (default:
    SIGKILL to the pid; e.g. to its group when it leads one)."""
    send = signal_pid if kill is None else (lambda p, sig: kill(p) if sig == signal.SIGKILL else signal_pid(p, sig))
    return _stop(pid, grace_s, clock, first, kill_wait_s, send, alive or _pid_alive)


def _stop(target: int, grace_s: float, clock: Clock, first: int, kill_wait_s: float,
          send: Callable[[int, int], None], alive: Callable[[int], bool]) -> GroupStop:
    started = Deadline(clock, None)
    send(target, first)
    wait = Deadline(clock, grace_s)
    while alive(target) and not wait.expired():
        clock.sleep(min(TICK_S * 2, wait.remaining()))
    if not alive(target):
        return GroupStop(True, False, started.elapsed())
    send(target, signal.SIGKILL)
    wait = Deadline(clock, kill_wait_s)
    while alive(target) and not wait.expired():
        clock.sleep(min(TICK_S * 2, wait.remaining()))
    return GroupStop(not alive(target), True, started.elapsed())
