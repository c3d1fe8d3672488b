"""Run a short command for its output: the one process runner that reading this machine is handed.

Place in the data flow: cluster/local.py (``Machine``) and cluster/probe.py read this machine's facts
(``mpirun --version``, ``fi_info -p efa``) but sit below exec/ in the layers, so they take the
runner as an argument (``cluster.local.Runner``: argv -> combined output); the CLI and the
entrypoint build it here with ``command_runner``.  Every run has a deadline on the injected clock
and may be cancelled (the entrypoint passes its SignalLatch): the child is killed at once and
``Cancelled`` raised, so a SIGTERM during ``mpirun --version`` is not held for its deadline.
"""
from __future__ import annotations

import subprocess
from typing import Callable, Sequence

from ..core.clock import SYSTEM_CLOCK, Clock, Deadline

#: how long a machine-reading command may take (``mpirun --version`` of a broken install can hang).
COMMAND_TIMEOUT_S = 30.0
#: how often a running command is checked for a cancel and its deadline.
POLL_S = 0.1


class Cancelled(Exception):
    """``cancelled()`` was true while the command ran; it was killed."""


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


def command_runner(*, timeout_s: float = COMMAND_TIMEOUT_S, cancelled: Callable[[], object] = lambda: None,
                   clock: Clock = SYSTEM_CLOCK) -> Callable[[Sequence[str]], str]:
    """``run_for_output`` with its deadline, cancel and clock bound: the ``Runner`` cluster/local.py takes."""
    return lambda argv: run_for_output(argv, timeout_s=timeout_s, cancelled=cancelled, clock=clock)
