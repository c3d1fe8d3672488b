"""The rank wrapper's side of progress and stacks: program -> pipe -> wrapper -> signed channel.

The rank wrapper (rank/wrapper.py) calls ``prepare`` before it starts the program (a pipe whose
write end the program inherits as ``MPIRUN_KIT_PROGRESS_FD``; mpirun_kit.progress writes
step numbers to it), then runs a ``Relay`` thread next to ``child.wait()``.  The thread

* forwards the program's latest step to the master as ``{"event": "progress", "step": N}``,
  at most every ``PROGRESS_EVERY_S`` (the last step before a pause is always sent);
* answers the master's ``{"type": "stacks"}`` request, sent on the wrapper's own channel
  connection, with the program's Python stacks: ``py-spy dump`` (no cooperation needed;
  the wrapper is the program's parent, so ptrace is allowed), else, if the program
  uses mpirun_kit.progress, its faulthandler dump on SIGUSR1; else a reason why not.
  A dump runs on a thread of its own (one at a time; py-spy may take up to ``DUMP_TIMEOUT_S``),
  so a stop or release that arrives meanwhile is handled at once;
* takes the master's stop, ``{"type": "signal", "signal": "SIGTERM", "hold_s": H}``
  (exec/channel/stop.py): it signals the program and notes that the wrapper must hold its exit
  once the program has ended (``hold``) until the master's ``{"type": "release"}``, H seconds,
  a signal to the wrapper, or the channel's end, so that mpirun sees no rank exit (and starts
  no 1-s kill of the others) while other ranks still run their SIGTERM handlers.

* watches the program from outside (``Sampler``), once the master's ``{"type": "watch", "stall_s": S}``
  came (the master sends it when the rank starts): while the program reports no step and reads or
  writes nothing (``/proc/<pid>/io``: its output, files, sockets), it reads the program's stacks at a
  low rate (observe/stacks.py: py-spy with native frames and locals, else eu-stack/gdb) and sends
  ``{"event": "sample", "quiet_s", "sig", "frames", "how"}``: how long nothing changed (no step, no
  I/O, the same stack signature), and where the main thread waits.  The rate is bounded by the
  sampling's own cost (``Sampler.interval``), so it stays below 1 % of a core;
* answers the master's ``{"type": "finish"}`` (a rank that called exit and sits in ``MPI_Finalize``
  while the others wait, observe/hang.py) by letting the program's exit go on (``stacks.finish_exit``)
  and reports ``{"event": "finish", "found", "code", "returned", "why"}``.

The program never holds the rank's key: the wrapper took it from its key file and signs
(exec/channel/rank_link.py).  Stdlib only (it is imported by every rank, on the launch's critical path).
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable  # not typing: every rank imports this module at start

from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..exec.channel.rank_link import RankLink
from ..exec.channel.wire import MAX_LINE
from ..progress import PROGRESS_FD_VAR, STACK_FILE_VAR
from . import stacks as stack_tools

#: a progress report goes out at most this often per rank (the master's loop sees a few a second).
PROGRESS_EVERY_S = 0.5
#: how long one stack dump may take.
DUMP_TIMEOUT_S = 8.0
#: what a stacks reply may carry (it must fit one channel line).
MAX_THREADS, MAX_FRAMES = 16, 40
#: the signals the master may ask a wrapper to send its program, and the longest hold it may ask for.
STOP_SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT, "SIGHUP": signal.SIGHUP}
MAX_HOLD_S = 3600.0
#: how often a holding wrapper checks for a signal or its parent's death between channel reads.
HOLD_POLL_S = 0.05


#: sampling: at least this long between two reads of a quiet program's stacks, and at most the sampling's
#: own CPU cost times ``COST_FACTOR`` (1 %): a costly read waits longer (``Sampler.interval``).
MIN_SAMPLE_S, COST_FACTOR = 1.0, 100.0
#: this many wake-ups of the program between two reads, outside MPI, count as a change (``stacks.wakeups``).
WAKEUPS = 3


#: the prefix of a wrapper's stack file (``<prefix><wrapper pid>.<random>`` in the temporary directory).
STACK_FILE_PREFIX = "mpirun_kit-stacks."


def find_pyspy(path_var: str | None = None) -> str | None:
    """py-spy next to this Python (a venv's bin/) or in an absolute PATH entry.

    Relative PATH entries (``.``, ``bin``, an empty entry) are skipped: they name whatever directory
    the wrapper happens to run in, and the wrapper runs py-spy as the program's tracer.
    A plain loop rather than shutil.which: every rank calls this at start, and shutil (with bz2 and lzma)
    costs a few ms per rank on the launch path.
    """
    path_var = os.environ.get("PATH", "") if path_var is None else path_var
    for d in [os.path.dirname(sys.executable), *path_var.split(os.pathsep)]:
        if not os.path.isabs(d):
            continue
        path = os.path.join(d, "py-spy")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def remove_stale_stack_files(directory: str) -> list[str]:
    """Remove stack files whose wrapper is gone (one SIGKILLed never removed its own); returns them."""
    removed = []
    try:
        names = [n for n in os.listdir(directory) if n.startswith(STACK_FILE_PREFIX)]
    except OSError:
        return removed
    for name in names:
        pid_text = name[len(STACK_FILE_PREFIX):].split(".", 1)[0]
        if not pid_text.isdigit():
            continue
        try:
            os.kill(int(pid_text), 0)
            continue                       # its wrapper still runs
        except ProcessLookupError:
            pass
        except OSError:
            continue                       # alive, someone else's
        try:
            os.unlink(os.path.join(directory, name))
            removed.append(name)
        except OSError:
            pass
    return removed


def prepare(env: dict) -> tuple[dict, int, int, str | None]:
    """(program env, read fd, write fd to pass to the program, stack file or None).

    The stack file is only offered when py-spy is missing: it is where the program's
    faulthandler writes on SIGUSR1.
    """
    r, w = os.pipe()
    os.set_blocking(r, False)
    env = {**env, PROGRESS_FD_VAR: str(w)}
    stack_file = None
    if find_pyspy() is None:
        import tempfile

        remove_stale_stack_files(tempfile.gettempdir())
        fd, stack_file = tempfile.mkstemp(prefix=f"{STACK_FILE_PREFIX}{os.getpid()}.")
        os.close(fd)
        env[STACK_FILE_VAR] = stack_file
    return env, r, w, stack_file


def _frames_from_faulthandler(text: str) -> list[dict]:
    """faulthandler's dump: 'Thread 0x... (most recent call first):' then '  File "f", line N in name'."""
    threads: list[dict] = []
    for line in text.splitlines():
        if line.startswith(("Thread ", "Current thread ")):
            threads.append({"thread": line.split(" (")[0][:80], "frames": []})
        elif line.strip().startswith("File ") and threads:
            try:
                path, rest = line.strip()[6:].split('", line ', 1)
                num, _, name = rest.partition(" in ")
                threads[-1]["frames"].append({"name": name[:120], "file": path[-200:], "line": int(num)})
            except ValueError:
                continue
    return [{"thread": t["thread"], "frames": t["frames"][:MAX_FRAMES]} for t in threads[:MAX_THREADS]]


def read_threads(pid: int, *, local_values: bool = False) -> tuple[list[dict], str]:
    """(threads, how) from py-spy (native frames between the Python ones), else from a native stack tool
    (eu-stack, gdb: a program that is not Python, or an interpreter already finalizing in an exit hook);
    ([], why not) when neither reads it.  Each thread: ``{"thread", "main", "frames", "locals"}``."""
    path_var = os.environ.get("PATH", "")
    pyspy = find_pyspy(path_var)
    why = "py-spy is not installed (pip install py-spy)"
    if pyspy:
        threads, why = stack_tools.pyspy_threads(pyspy, pid, local_values=local_values)
        if threads:
            return threads, "py-spy"
    threads, why_native, how = stack_tools.native_threads(pid, path_var)
    return (threads, how) if threads else ([], f"{why}; {why_native}")


def collect_stacks(pid: int, stack_file: str | None, faulthandler_ready: bool,
                   clock: Clock = SYSTEM_CLOCK) -> tuple[list[dict], str]:
    """(threads with frames innermost first, how), or ([], why not).

    py-spy first; without it, the program's own faulthandler dump when it uses mpirun_kit.progress (Python
    frames), else a native stack tool; the wait for that dump (2 s) is on ``clock``."""
    pyspy = find_pyspy()
    if pyspy or not (stack_file and faulthandler_ready):
        threads, how = read_threads(pid)
        if threads or pyspy:
            return [{"thread": t["thread"], "frames": t["frames"]} for t in threads], how
        if not (stack_file and faulthandler_ready):
            return [], ("no stack source: py-spy is not installed (pip install 'mpirun_kit[stacks]') and the "
                        "program does not use mpirun_kit.progress; " + how.split("; ", 1)[-1])
    before = os.path.getsize(stack_file) if os.path.exists(stack_file) else 0
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError as exc:
        return [], f"cannot signal the program ({exc.strerror})"
    deadline = Deadline(clock, 2.0)
    while not deadline.expired():
        clock.sleep(0.05)
        size = os.path.getsize(stack_file) if os.path.exists(stack_file) else 0
        if size > before:
            clock.sleep(0.1)  # let faulthandler finish writing every thread
            with open(stack_file, errors="replace") as f:
                f.seek(before)
                return _frames_from_faulthandler(f.read()), "faulthandler"
    return [], "the program did not write its stacks within 2 s of SIGUSR1"


class Sampler:
    """When and how a quiet program's stacks are read, and how long nothing changed (the wrapper's view).

    ``tick`` (the relay thread, every ``PROGRESS_EVERY_S``) looks at the program's step and I/O counters;
    any change is activity.  Once the program has been quiet for an interval, ``due`` says a sample is due;
    ``record`` takes a read's main thread: a new signature (frames, and for Python their locals) is a
    change too.  ``quiet_s`` is how long no step, no I/O and no new signature was seen, as of the last
    sample: the master compares it with ``stall_s`` (observe/hang.py).
    """

    def __init__(self, stall_s: float, now: float):
        self.stall_s = float(stall_s)
        self.cost_s = 0.0               # CPU seconds the last read cost (py-spy/eu-stack and their pause)
        self.last_change = now          # monotonic: the last step, I/O or new signature seen
        self.next_at = now + self.interval()
        self.sig: str | None = None
        self.sent_quiet = False         # the last sample sent said "quiet": activity must be sent at once
        self.wakeups_after: int | None = None     # the program's wake-ups when the last read ended
        self.samples = 0
        self._io: tuple[int, int] | None = None
        self._step: int | None = None

    def interval(self) -> float:
        """Seconds between two reads: a fifth of stall_s (several reads per stall_s), at least MIN_SAMPLE_S,
        and at least COST_FACTOR times what the last read cost (the 1 % bound), up to half of stall_s."""
        return max(self.stall_s / 5, MIN_SAMPLE_S, min(COST_FACTOR * self.cost_s, self.stall_s / 2))

    def tick(self, now: float, step: int | None, io: tuple[int, int] | None) -> bool:
        """True when the program showed activity since the last tick (a new step, bytes read or written)."""
        active = (step != self._step) or (io is not None and self._io is not None and io != self._io)
        self._step, self._io = step, io if io is not None else self._io
        if active:
            self.last_change = now
            self.next_at = max(self.next_at, now + self.interval())
        return active

    def due(self, now: float) -> bool:
        return now >= self.next_at and now - self.last_change >= self.interval()

    def record(self, started: float, now: float, sig: str, cost_s: float, woke: bool = False) -> float:
        """A read started at ``started`` gave ``sig``; ``woke``: outside MPI, the program slept and woke since
        the last read (``stacks.wakeups``): a loop that sleeps between steps at a line it always passes.  Returns
        quiet_s.  The next read is an interval away, with a random part (+-20 %) so that reads do not lock onto
        a loop's period."""
        if sig != self.sig or woke:
            self.sig, self.last_change = sig, started
        self.cost_s = cost_s
        self.samples += 1
        self.next_at = now + self.interval() * (0.8 + 0.4 * os.urandom(1)[0] / 255)
        return max(0.0, now - self.last_change)


def _children_cpu_s() -> float:
    t = os.times()
    return t.children_user + t.children_system


class Relay:
    """The wrapper's thread: drains the progress pipe, forwards steps, answers stack and stop requests."""

    def __init__(self, link: RankLink | None, ident: dict, read_fd: int, stack_file: str | None = None,
                 clock: Clock = SYSTEM_CLOCK):
        self.link, self.ident = link, dict(ident)
        self.read_fd, self.stack_file = read_fd, stack_file
        self.clock = clock
        self.pid: int | None = None
        self.step: int | None = None
        self.sent_step: int | None = None
        self.last_sent = 0.0
        self.faulthandler_ready = False
        self.hold_until: float | None = None      # monotonic; set by the master's stop request
        self.released = False                     # the master's release came
        self._signal_program: Callable[[int], None] | None = None
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()     # stop() wakes the thread's select at once
        self._send_lock = threading.Lock()        # stop() may send while the thread still does
        self._thread = threading.Thread(target=self._run, daemon=True, name="mpirun_kit-relay")
        self._dumping: threading.Thread | None = None   # the stack dump in progress, if any
        self._pipebuf = b""
        self.sampler: Sampler | None = None       # set by the master's "watch" request
        self._sampling: threading.Thread | None = None
        self._sample_lock = threading.Lock()      # the sampler's state: the relay thread and a sample's thread
        self._ptrace = threading.Lock()           # one tracer at a time (py-spy, eu-stack, gdb)

    def start(self, pid: int, signal_program: Callable[[int], None] | None = None) -> "Relay":
        """Run the thread for program ``pid``; ``signal_program(signum)`` carries out the master's stop."""
        self.pid = pid
        self._signal_program = signal_program
        self._thread.start()
        return self

    def stop(self) -> None:
        """Flush the last step, end the thread (the exit report then goes out on the same link)."""
        self._stop.set()
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=2.0)
        self._drain_pipe()
        self._send_progress(force=True)
        for fd in (self.read_fd, self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.stack_file:
            try:
                os.unlink(self.stack_file)
            except OSError:
                pass

    def hold(self, interrupted: Callable[[], bool]) -> str:
        """After ``stop()`` and the exit report: while the master's stop asked for it, wait for its release.

        Returns why the hold ended ("no stop", "released", "hold_s over", "signalled", "channel closed").
        """
        why = "no stop" if self.hold_until is None else None
        while why is None:
            if self.released:
                why = "released"
            elif interrupted():
                why = "signalled"
            elif self.clock.monotonic() >= self.hold_until:
                why = "hold_s over"
            elif self.link is None or self.link.sock is None:
                why = "channel closed"
            else:
                try:
                    ready, _, _ = select.select([self.link.sock], [], [], HOLD_POLL_S)
                except (OSError, ValueError):
                    ready = [self.link.sock]
                if ready and not self._on_channel():
                    why = "channel closed"
        return why

    def _send(self, msg: dict) -> None:
        if self.link is not None:
            with self._send_lock:
                self.link.send({**self.ident, **msg, "t": time.time()})

    def _send_progress(self, force: bool = False) -> None:
        if self.step is None or self.step == self.sent_step:
            return
        now = self.clock.monotonic()
        if force or now - self.last_sent >= PROGRESS_EVERY_S:
            self._send({"event": "progress", "step": self.step})
            self.sent_step, self.last_sent = self.step, now

    def _drain_pipe(self) -> bool:
        """Read what the program wrote; False once it closed its end."""
        while True:
            try:
                chunk = os.read(self.read_fd, 65536)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not chunk:
                return False
            self._pipebuf += chunk
            *lines, self._pipebuf = self._pipebuf.split(b"\n")
            self._pipebuf = self._pipebuf[-64:]
            for line in lines:
                if line == b"F":
                    self.faulthandler_ready = True
                elif line.isdigit() and len(line) < 19:
                    self.step = int(line)

    def _on_channel(self) -> bool:
        """Handle what the master sent on this rank's connection; False once it closed."""
        msgs = self.link.read() if self.link is not None else None
        if msgs is None:
            return False
        for msg in msgs:
            if msg.get("type") in ("signal", "release"):
                self._on_stop(msg)
            elif msg.get("type") == "stacks" and self.pid is not None:
                self._start_dump()
            elif msg.get("type") == "watch":
                stall_s = msg.get("stall_s")
                if isinstance(stall_s, (int, float)) and not isinstance(stall_s, bool) and 0.5 <= stall_s <= 1e7:
                    with self._sample_lock:
                        self.sampler = Sampler(stall_s, self.clock.monotonic())
            elif msg.get("type") == "finish" and self.pid is not None:
                threading.Thread(target=self._finish, daemon=True, name="mpirun_kit-finish").start()
        return True

    def _watch(self) -> None:
        """The relay thread's look at a quiet program: activity out at once, a sample when one is due."""
        if self.sampler is None or self.pid is None:
            return
        now = self.clock.monotonic()
        with self._sample_lock:
            active = self.sampler.tick(now, self.step, stack_tools.io_counters(self.pid))
            tell, due = active and self.sampler.sent_quiet, not active and self.sampler.due(now)
            if tell:
                self.sampler.sent_quiet = False
        if tell:
            self._send({"event": "sample", "quiet_s": 0.0, "sig": "", "frames": [], "how": "activity"})
        if due and (self._sampling is None or not self._sampling.is_alive()):
            self._sampling = threading.Thread(target=self._sample, daemon=True, name="mpirun_kit-sample")
            self._sampling.start()

    def _sample(self) -> None:
        """Read the program's stacks once (a thread of its own, like a dump) and send what changed."""
        try:
            self._sample_once()
        except Exception as exc:  # noqa: BLE001 (best effort, never the program's problem)
            self.sampler = None
            print(f"mpirun_kit.rank: watching the program stopped: {exc!r}", file=sys.stderr, flush=True)

    def _sample_once(self) -> None:
        if not self._ptrace.acquire(blocking=False):
            return              # a dump or a finish is tracing the program; the next tick tries again
        try:
            started, cpu0, woke0 = self.clock.monotonic(), _children_cpu_s(), stack_tools.wakeups(self.pid)
            threads, how = read_threads(self.pid, local_values=True)
            cost, woke1 = _children_cpu_s() - cpu0, stack_tools.wakeups(self.pid)   # a read wakes it twice
        finally:
            self._ptrace.release()
        main = threads[0] if threads else {"frames": [], "locals": []}
        sig = stack_tools.signature(main["frames"], main["locals"]) if threads else "none"
        outside_mpi = stack_tools.classify(main["frames"])[0] == "run"
        with self._sample_lock:
            before = self.sampler.wakeups_after
            woke = outside_mpi and None not in (before, woke0) and woke0 - before >= WAKEUPS
            self.sampler.wakeups_after = woke1
            quiet = self.sampler.record(started, self.clock.monotonic(), sig, cost, woke)
            self.sampler.sent_quiet = quiet > 0
        self._send({"event": "sample", "quiet_s": round(quiet, 2), "sig": sig, "frames": main["frames"][:12],
                    "how": how[:300]})

    def _finish(self) -> None:
        """The master's finish: let a program that called exit leave MPI_Finalize; report what happened."""
        with self._ptrace:
            got, why = stack_tools.finish_exit(self.pid, os.environ.get("PATH", ""))
        self._send({"event": "finish", "found": bool(got.get("found")), "code": got.get("code"),
                    "returned": bool(got.get("returned")), "why": why[:300]})

    def _start_dump(self) -> None:
        """Dump the program's stacks on a thread of its own: a stop must never wait behind py-spy."""
        if self._dumping is not None and self._dumping.is_alive():
            return      # one at a time: its reply answers this request too
        self._dumping = threading.Thread(target=self._dump, daemon=True, name="mpirun_kit-stacks")
        self._dumping.start()

    def _dump(self) -> None:
        with self._ptrace:
            threads, how = collect_stacks(self.pid, self.stack_file, self.faulthandler_ready, self.clock)
        reply = {"event": "stacks", "threads": threads, "how": how[:300]}
        while len(json.dumps(reply)) > MAX_LINE - 400 and any(t["frames"] for t in threads):
            for t in threads:
                t["frames"] = t["frames"][:max(1, len(t["frames"]) // 2)]
            threads[:] = threads[:max(1, len(threads) // 2)]
        self._send(reply)

    def _on_stop(self, msg: dict) -> None:
        """The master's stop request (signal the program, hold the exit) or its release."""
        if msg["type"] == "release":
            self.released = True
            return
        name = msg.get("signal")
        signum = STOP_SIGNALS.get(name) if isinstance(name, str) else None
        hold_s = msg.get("hold_s")
        if signum is None or isinstance(hold_s, bool) or not isinstance(hold_s, (int, float)) \
                or not 0 <= hold_s <= MAX_HOLD_S:   # NaN fails both comparisons
            return
        # The hold is armed before the signal: the program may exit at once, and its exit must be held.
        if self.hold_until is None:
            self.hold_until = self.clock.monotonic() + hold_s
        if self._signal_program is not None:
            self._signal_program(signum)

    def _run(self) -> None:
        pipe_open = True
        closed: socket.socket | None = None    # the connection that ended (a later report may open a new one)
        while not self._stop.is_set():
            current = self.link.sock if self.link is not None else None
            sock = current if current is not None and current is not closed else None
            fds = [self._wake_r, *([self.read_fd] if pipe_open else []), *([sock] if sock else [])]
            try:
                ready, _, _ = select.select(fds, [], [], PROGRESS_EVERY_S)
            except (OSError, ValueError):
                return
            if self.read_fd in ready:
                pipe_open = self._drain_pipe()
            if sock is not None and sock in ready and not self._on_channel():
                closed = sock
            self._send_progress()
            try:
                self._watch()
            except Exception as exc:  # noqa: BLE001 (watching is best effort: this thread also carries the stop)
                self.sampler = None
                print(f"mpirun_kit.rank: watching the program stopped: {exc!r}", file=sys.stderr, flush=True)
