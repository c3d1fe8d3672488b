"""Signals as data: a latch that records the first SIGTERM/SIGINT/SIGHUP and lets loops react.

Handlers only record (and optionally call a forwarder); the waiting loops read
``latch.received`` (or ``latch.stop()``, the supervisor's ``Stop`` it means) and
decide what to do, so no work happens inside a handler beyond forwarding a signal
by pid.  SIGHUP (the terminal closed) is a stop like the others: without a handler
it would end the process at once and orphan everything it started.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable  # not typing: the rank wrapper imports this module

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15; ``signal 99`` for a number with no name (failures carry names, not numbers)."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class SignalLatch:
    """Install with ``with SignalLatch() as latch:``; handlers are restored on exit."""

    def __init__(self, signals: Iterable[int] = FORWARDED, forward: Callable[[int], None] | None = None):
        self.signals = tuple(signals)
        self.forward = forward
        self.received: str | None = None
        self.event = threading.Event()
        self._old: dict[int, object] = {}

    def _handle(self, signum: int, frame) -> None:
        if self.received is None:
            self.received = signal.Signals(signum).name
        self.event.set()
        if self.forward is not None:
            self.forward(signum)

    def __enter__(self) -> "SignalLatch":
        if threading.current_thread() is threading.main_thread():
            for s in self.signals:
                self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)

    def stop(self):
        """The supervisor's ``Stop`` for the signal received (``user``, 128+N), or None (exec/supervisor.py)."""
        if self.received is None:
            return None
        from .supervisor import signal_stop

        return signal_stop(self.received)

    def __call__(self) -> bool:
        """True once a signal arrived (usable as a ``cancelled`` callable)."""
        return self.received is not None
