"""The one process runner for commands (supervised jobs start through supervisor.py's ``start_process``).

Every process mpirun_kit starts is started here or by the supervisor (tests/test_process_starts.py fails on
a ``Popen``/``subprocess.run``/``os.system`` anywhere else):

* ``run(argv, ...)``: a command to its end, for its exit code and output (``ip netns list``, ``sbatch``,
  ``py-spy dump``, ``mount``), within a deadline on the injected clock; ``check`` raises on a failure.
* ``spawn(argv, ...)``: a process this one talks to while it runs (the key hand-off's ssh sessions, a sim
  host's command, the rank wrapper's ptracer), handed back as the ``Popen`` the caller reads and reaps.
* ``run_for_output(argv)``: stdout and stderr together, cancellable: below.

Place in the data flow of ``run_for_output``: cluster/local.py (``Machine``) and cluster/probe.py read this machine's facts
(``mpirun --version``, ``fi_info -p efa``) but sit below exec/ in the layers, so they take the
runner as an argument (``cluster.local.Runner``: argv -> combined output); the CLI and the
entrypoint build it here with ``command_runner``.  Every run has a deadline on the injected clock
and may be cancelled (the entrypoint passes its SignalLatch): the child is killed at once and
``Cancelled`` raised, so a SIGTERM during ``mpirun --version`` is not held for its deadline.
"""
from __future__ import annotations

import subprocess
import threading
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence  # not typing: every rank wrapper imports this module

from ..core.clock import SYSTEM_CLOCK, Clock, Deadline

#: how long a machine-reading command may take (``mpirun --version`` of a broken install can hang).
COMMAND_TIMEOUT_S = 30.0
#: how often a running command is checked for a cancel and its deadline.
POLL_S = 0.1


class Cancelled(Exception):
    """``cancelled()`` was true while the command ran; it was killed."""


class Completed(namedtuple("Completed", "argv returncode stdout stderr")):
    """How ``run``'s command ended: ``argv`` (a tuple), ``returncode`` (Popen's: -N for signal N) and its
    ``stdout`` and ``stderr`` (text, or bytes with ``text=False``).  A named tuple, not a dataclass: every rank
    wrapper imports this module on the launch's critical path, and ``dataclasses`` costs ~7 ms of CPU there."""

    __slots__ = ()


class CommandFailed(OSError):
    """``run(..., check=True)``: the command exited non-zero; the ``Completed`` is ``.completed``."""

    def __init__(self, completed: Completed):
        err = completed.stderr if isinstance(completed.stderr, str) else completed.stderr.decode(errors="replace")
        super().__init__(f"{' '.join(completed.argv)} exited with code {completed.returncode}: "
                         f"{err.strip()[-400:] or 'no output on stderr'}")
        self.completed = completed


def spawn(argv: Sequence[str], **popen) -> subprocess.Popen:
    """Start ``argv`` and hand back its ``Popen`` (``popen``: Popen's own arguments, pipes, env, session).

    For a process the caller talks to while it runs; one run to its end is ``run``, a job under
    supervision is supervisor.start_process.

    Raises:
        OSError: it cannot be started (FileNotFoundError: no such program).
    """
    return subprocess.Popen(list(argv), **popen)


def run(argv: Sequence[str], *, input: str | bytes | None = None, timeout_s: float | None = COMMAND_TIMEOUT_S,
        env: Mapping[str, str] | None = None, cwd: str | None = None, text: bool = True, check: bool = False,
        stdout: int | None = subprocess.PIPE, stderr: int | None = subprocess.PIPE,
        clock: Clock = SYSTEM_CLOCK) -> Completed:
    """Run ``argv`` to its end: its exit code and output.

    ``input`` goes to its stdin (otherwise stdin is /dev/null); ``stdout``/``stderr``: PIPE (captured, the
    default), DEVNULL, or None (ours); ``timeout_s`` None: no deadline.

    Raises:
        FileNotFoundError: no such program (the caller names what to install).
        OSError: it could not be started.
        TimeoutError: it did not end within ``timeout_s`` on ``clock`` (killed).
        CommandFailed: ``check`` and it exited non-zero.
    """
    kw = {"text": True, "errors": "replace"} if text else {}
    proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                            stdout=stdout, stderr=stderr, env=dict(env) if env is not None else None, cwd=cwd, **kw)
    if input is not None:
        # communicate() cannot be polled with input (a second call may not pass it, and without it the rest of
        # the input is never sent): a thread of ours writes it and closes the pipe, and communicate only reads.
        pipe, proc.stdin = proc.stdin, None
        data = input.encode() if isinstance(input, str) else input
        threading.Thread(target=_feed, args=(pipe, data), daemon=True, name="command-input").start()
    deadline = Deadline(clock, timeout_s)
    while True:
        try:
            # A kernel wait, not a sleep: the command's end is seen at once; a retry after a timeout keeps
            # what was read so far (subprocess's documented contract).
            out, err = proc.communicate(timeout=POLL_S if timeout_s is not None else None)
            break
        except subprocess.TimeoutExpired:
            if deadline.expired():
                proc.kill()
                proc.communicate()
                raise TimeoutError(f"{' '.join(argv)} did not end within {timeout_s:g} s (killed)") from None
    empty = "" if text else b""
    done = Completed(tuple(argv), proc.returncode, out if out is not None else empty,
                     err if err is not None else empty)
    if check and done.returncode != 0:
        raise CommandFailed(done)
    return done


def run_for_output(argv: Sequence[str], *, timeout_s: float = COMMAND_TIMEOUT_S, cancelled: Callable[[], object] =
                   lambda: None, clock: Clock = SYSTEM_CLOCK) -> str:
    """``argv``'s stdout and stderr together, whatever its exit status (a ``--version`` may exit non-zero).

    Raises:
        FileNotFoundError: no such program (the caller names what to install).
        OSError: it could not be started.
        TimeoutError: it did not end within ``timeout_s`` on ``clock`` (killed).
        Cancelled: ``cancelled()`` became true while it ran (killed at once).
    """
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, errors="replace")
    deadline = Deadline(clock, timeout_s)
    while True:
        try:
            # A kernel wait, not a sleep: the command's end is seen at once.
            return proc.communicate(timeout=POLL_S)[0]
        except subprocess.TimeoutExpired:
            stop = bool(cancelled())
            if stop or deadline.expired():
                proc.kill()
                proc.communicate()
                if stop:
                    raise Cancelled(" ".join(argv)) from None
                raise TimeoutError(f"{' '.join(argv)} gave no answer within {timeout_s:g} s") from None


def _feed(pipe, data: bytes) -> None:
    """``data`` to the command's stdin, then EOF; a command that exits without reading it all is no error here."""
    try:
        getattr(pipe, "buffer", pipe).write(data)   # bytes, under a text-mode wrapper too
        getattr(pipe, "buffer", pipe).flush()
    except (BrokenPipeError, OSError, ValueError):
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def command_runner(*, timeout_s: float = COMMAND_TIMEOUT_S, cancelled: Callable[[], object] = lambda: None,
                   clock: Clock = SYSTEM_CLOCK) -> Callable[[Sequence[str]], str]:
    """``run_for_output`` with its deadline, cancel and clock bound: the ``Runner`` cluster/local.py takes."""
    return lambda argv: run_for_output(argv, timeout_s=timeout_s, cancelled=cancelled, clock=clock)
