"""Run the launcher (mpirun): stream its output with rank/host prefixes, forward signals, stop with a grace period.

mpirun runs in its own session (process group), so a final SIGKILL can take
the launcher and every local rank at once, by process group id, never by name.
SIGTERM/SIGINT received by the entrypoint go to mpirun first: it forwards them
to every rank on every host; only if the job is still there after the grace
period does the group get SIGKILL.  Output lines tagged by mpirun
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
from typing import BinaryIO, Callable, Mapping, Sequence

from .clock import SYSTEM_CLOCK, Clock, Deadline
from ..errors import LaunchError
from .signals import signal_name

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LauncherExit:
    returncode: int | None        # None when the launcher died by a signal
    signal: str | None
    tail: tuple[str, ...]         # last lines it printed (prefixes rewritten)
    timed_out: bool = False
    interrupted_by: str | None = None


def retag(line: str, tag_re: re.Pattern, rank_hosts: Mapping[int, str]) -> str:
    """``[1,3]<stdout>:text`` -> ``[3 algo-2] text``; other lines unchanged."""
    m = tag_re.match(line)
    if not m:
        return line
    rank = int(m.group("rank"))
    return f"[{rank} {rank_hosts.get(rank, '?')}] {line[m.end():]}"


class Retagger:
    """Rebuilds each rank's lines from the launcher's tagged output.

    Open MPI tags every *write* of a rank, not every line: a rank that prints
    one line in two writes ("rank", " 0 of 2\n") arrives as one physical line
    with a second tag inside it, and another rank's write can land between the
    two halves.  So a physical line is split at every tag, and each
    (rank, stream) keeps its unfinished text until a segment ends the line.
    Only tags that name the stream (``[1,3]<stdout>:``) are looked for inside a
    line: a bare ``[3]`` (MPICH) is too likely to be the program's own text.
    """

    def __init__(self, tag_re: re.Pattern, rank_hosts: Mapping[int, str]):
        self.tag_re = tag_re
        self.rank_hosts = rank_hosts
        self.inner_re = re.compile(tag_re.pattern.lstrip("^")) if "stream" in tag_re.groupindex else None
        self.partial: dict[tuple[str, str], str] = {}

    def _label(self, rank: str) -> str:
        return f"[{int(rank)} {self.rank_hosts.get(int(rank), '?')}] "

    def feed(self, line: str) -> list[str]:
        """One physical line (no newline) in, the complete lines it finishes out."""
        if self.inner_re is None or not self.tag_re.match(line):
            return [retag(line, self.tag_re, self.rank_hosts)]
        tags = list(self.inner_re.finditer(line))
        out = []
        for i, m in enumerate(tags):
            key = (m.group("rank"), m.group("stream"))
            text = line[m.end():tags[i + 1].start() if i + 1 < len(tags) else len(line)]
            if i + 1 < len(tags):
                self.partial[key] = self.partial.get(key, "") + text
            else:
                out.append(self._label(key[0]) + self.partial.pop(key, "") + text)
        return out

    def flush(self) -> list[str]:
        """Text of ranks that ended without a final newline."""
        out = [self._label(rank) + text for (rank, _), text in sorted(self.partial.items()) if text]
        self.partial.clear()
        return out


def _pump(src: BinaryIO, dst: BinaryIO, tag_re: re.Pattern, rank_hosts: Mapping[int, str],
          tail: collections.deque, lock: threading.Lock) -> None:
    r"""Copy the launcher's output to ``dst``, each rank's bytes exactly as it wrote them behind ``[rank host]``.

    Bytes that are not UTF-8 survive the round trip (surrogateescape), and only the one newline that
    ends a physical line is taken off: a ``\r`` before it, tabs and trailing spaces are the program's.
    A last line without a newline comes out with one, so the next prefix starts a line.
    """
    retagger = Retagger(tag_re, rank_hosts)
    for raw in iter(src.readline, b""):
        text = raw.decode(errors="surrogateescape")
        _emit(retagger.feed(text[:-1] if text.endswith("\n") else text), dst, tail, lock)
    _emit(retagger.flush(), dst, tail, lock)


def _emit(lines: list[str], dst: BinaryIO, tail: collections.deque, lock: threading.Lock) -> None:
    for line in lines:
        # Open MPI frames its messages with rulers; they only waste the 1024-char failure text.
        data = line.encode(errors="surrogateescape")
        if line.strip("- \t"):
            with lock:
                # The failure text is stored and sent as UTF-8: undecodable bytes become U+FFFD there only.
                tail.append(data.decode(errors="replace"))
        try:
            dst.write(data + b"\n")
            dst.flush()
        except (OSError, ValueError):
            pass


def run_launcher(argv: Sequence[str], env: Mapping[str, str], *, rank_hosts: Mapping[int, str], tag_regex: str,
                 cancelled: Callable[[], str | None], grace_s: float, job_timeout_s: float | None = None,
                 cwd: str | None = None, clock: Clock = SYSTEM_CLOCK, stdout: BinaryIO | None = None,
                 stderr: BinaryIO | None = None, tail_lines: int = 12,
                 on_start: Callable[[subprocess.Popen], None] | None = None,
                 parent_death_signal: int | None = None) -> LauncherExit:
    """Run ``argv`` to the end and return how it ended.

    Args:
        cancelled: returns the name of a signal the caller received (to forward), or None.
        grace_s: after forwarding SIGTERM (or the job deadline), SIGKILL the process group this much later.
        job_timeout_s: the job's own deadline; None = none.

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
    pumps = [threading.Thread(target=_pump, args=(s, d, tag_re, rank_hosts, tail, lock), daemon=True)
             for s, d in ((proc.stdout, stdout), (proc.stderr, stderr))]
    for t in pumps:
        t.start()
    job_deadline = Deadline(clock, job_timeout_s)
    kill_deadline: Deadline | None = None
    interrupted: str | None = None
    timed_out = False
    while True:
        try:
            proc.wait(timeout=0.05)
            break
        except subprocess.TimeoutExpired:
            pass
        if kill_deadline is None:
            sig = cancelled()
            if sig is not None:
                interrupted = sig
            elif job_deadline.expired():
                timed_out = True
            if interrupted or timed_out:
                why = interrupted or f"job deadline of {job_timeout_s:g} s"
                log.warning("%s: sending SIGTERM to mpirun (pid %d), SIGKILL in %g s", why, proc.pid, grace_s)
                _signal_pid(proc.pid, signal.SIGTERM)
                kill_deadline = Deadline(clock, grace_s)
        elif kill_deadline.expired():
            log.warning("mpirun still running %g s after SIGTERM: killing its process group %d", grace_s, proc.pid)
            _signal_group(proc.pid, signal.SIGKILL)
            kill_deadline = Deadline(clock, None)
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
