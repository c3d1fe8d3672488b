"""Progress reports from any Python program run by mpirun_kit: two lines.

    from mpirun_kit import progress
    progress.step(n)          # after each training step (n: the step counter)

The master keeps each rank's last step and when it advanced; a job where no rank
advanced for ``timeouts.stall_s`` (or one rank fell ``stall_s`` behind the others) gets a
hang report naming the rank, its host, its last step and the frames it waits in
(observe/hang.py).  A program that never calls ``step`` is judged from outside instead: its rank
wrapper samples its stacks while it does no I/O (observe/relay.py), at a coarser grain.

Data flow: ``step`` writes one short line to a pipe the rank wrapper (rank/wrapper.py,
observe/relay.py) handed this process as ``MPIRUN_KIT_PROGRESS_FD``; the wrapper signs
it with the channel key the program never sees and forwards it to the master,
coalesced to a few reports a second (a pipe write costs about a microsecond).  ``step`` never blocks (the pipe is
non-blocking: a full pipe drops the report), never raises into the program, and is a
no-op outside mpirun_kit (no such variable).  Stdlib only, imported in microseconds.
"""
from __future__ import annotations

import os

PROGRESS_FD_VAR = "MPIRUN_KIT_PROGRESS_FD"
#: set by the wrapper when it cannot read stacks without the program's help (no py-spy):
#: the program then writes its stacks there on SIGUSR1 (faulthandler) when the wrapper asks.
STACK_FILE_VAR = "MPIRUN_KIT_STACK_FILE"
_fd: int | None = None
_ready = False
_last: int | None = None


def _open() -> None:
    global _fd, _ready
    _ready = True
    raw = os.environ.get(PROGRESS_FD_VAR, "")
    if not raw.isdigit():
        return
    fd = int(raw)
    try:
        os.set_blocking(fd, False)
        os.set_inheritable(fd, False)  # the program's own children do not report as this rank
    except OSError:
        return
    _fd = fd
    stack_file = os.environ.get(STACK_FILE_VAR)
    if stack_file:
        try:
            import faulthandler
            import signal

            f = open(stack_file, "w")  # noqa: SIM115 (kept open for faulthandler: it writes on the signal)
            faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)
            _write(b"F\n")             # tells the wrapper SIGUSR1 is now safe to send
        except (OSError, ValueError, RuntimeError, AttributeError):
            pass


def _write(data: bytes) -> bool:
    global _fd
    try:
        os.write(_fd, data)
        return True
    except BlockingIOError:
        return False                   # the wrapper is behind: drop this report, never wait
    except OSError:
        _fd = None                     # the wrapper is gone: stop trying
        return False


def step(n: int) -> None:
    """Report that this rank has reached step ``n`` (any non-negative int that grows as the job advances)."""
    global _last
    try:
        if not _ready:
            _open()
        if _fd is None:
            return
        n = int(n)
        if n != _last and _write(b"%d\n" % n):
            _last = n
    except Exception:  # noqa: BLE001  (a progress report must never break the program it observes)
        return
