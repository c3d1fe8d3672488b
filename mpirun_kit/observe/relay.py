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

from ..exec.channel.rank_link import RankLink
from ..exec.channel.wire import MAX_LINE
from ..progress import PROGRESS_FD_VAR, STACK_FILE_VAR

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


def _frames_from_pyspy(text: str) -> list[dict]:
    threads = []
    for th in json.loads(text)[:MAX_THREADS]:
        frames = [{"name": str(f.get("name", "?"))[:120], "file": str(f.get("filename", "?"))[-200:],
                   "line": int(f.get("line") or 0)} for f in th.get("frames", [])[:MAX_FRAMES]]
        name = th.get("thread_name") or ("MainThread" if th.get("os_thread_id") == th.get("pid") else None)
        threads.append({"thread": str(name or th.get("thread_id"))[:80], "frames": frames})
    return threads


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


def collect_stacks(pid: int, stack_file: str | None, faulthandler_ready: bool) -> tuple[list[dict], str]:
    """(threads with frames innermost first, how), or ([], why not)."""
    pyspy = find_pyspy()
    if pyspy:
        import subprocess

        try:
            p = subprocess.run([pyspy, "dump", "--pid", str(pid), "--json"], capture_output=True, text=True,
                               timeout=DUMP_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return [], f"py-spy failed: {exc}"
        if p.returncode == 0:
            try:
                return _frames_from_pyspy(p.stdout), "py-spy"
            except (ValueError, TypeError, AttributeError) as exc:
                return [], f"py-spy's output was not understood ({exc})"
        return [], f"py-spy exited {p.returncode}: {p.stderr.strip()[-200:]}"
    if stack_file and faulthandler_ready:
        before = os.path.getsize(stack_file) if os.path.exists(stack_file) else 0
        try:
            os.kill(pid, signal.SIGUSR1)
        except OSError as exc:
            return [], f"cannot signal the program ({exc.strerror})"
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            time.sleep(0.05)
            size = os.path.getsize(stack_file) if os.path.exists(stack_file) else 0
            if size > before:
                time.sleep(0.1)  # let faulthandler finish writing every thread
                with open(stack_file, errors="replace") as f:
                    f.seek(before)
                    return _frames_from_faulthandler(f.read()), "faulthandler"
        return [], "the program did not write its stacks within 2 s of SIGUSR1"
    return [], ("no stack source: py-spy is not installed (pip install 'mpirun_kit[stacks]') and the program "
                "does not use mpirun_kit.progress")


class Relay:
    """The wrapper's thread: drains the progress pipe, forwards steps, answers stack and stop requests."""

    def __init__(self, link: RankLink | None, ident: dict, read_fd: int, stack_file: str | None = None):
        self.link, self.ident = link, dict(ident)
        self.read_fd, self.stack_file = read_fd, stack_file
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
            elif time.monotonic() >= self.hold_until:
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
        now = time.monotonic()
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
        return True

    def _start_dump(self) -> None:
        """Dump the program's stacks on a thread of its own: a stop must never wait behind py-spy."""
        if self._dumping is not None and self._dumping.is_alive():
            return      # one at a time: its reply answers this request too
        self._dumping = threading.Thread(target=self._dump, daemon=True, name="mpirun_kit-stacks")
        self._dumping.start()

    def _dump(self) -> None:
        threads, how = collect_stacks(self.pid, self.stack_file, self.faulthandler_ready)
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
            self.hold_until = time.monotonic() + hold_s
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
