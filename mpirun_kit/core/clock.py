"""Injected time: every wait in mpirun_kit takes a Clock so tests can drive it.

``Deadline`` turns "wait at most T seconds" into a value that loops can ask
``remaining()`` of, and ``core/backoff.py`` spaces retries on the same clock; nothing
else in the package calls ``time.sleep`` or reads ``time.monotonic`` (a test greps for it:
tests/core/test_clock.py).  Tests drive one fake clock (tests/clock_kit.py).

Stdlib ``time`` only, no ``typing`` or ``dataclasses``: every rank imports this module at start
(rank/wrapper.py, exec/channel/rank_link.py, observe/relay.py), on the launch's critical path.
"""
from __future__ import annotations

import time


class Clock:
    """What a clock offers: monotonic seconds, wall-clock seconds, and sleeping.  Any object with these three
    methods is one (duck-typed: a test's fake clock need not subclass it)."""

    def monotonic(self) -> float:
        raise NotImplementedError

    def time(self) -> float:
        raise NotImplementedError

    def sleep(self, seconds: float) -> None:
        raise NotImplementedError


class SystemClock(Clock):
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


SYSTEM_CLOCK = SystemClock()


class Deadline:
    """A point in monotonic time; ``None`` seconds means no deadline."""

    __slots__ = ("clock", "seconds", "start")

    def __init__(self, clock: Clock, seconds: float | None):
        self.clock, self.seconds = clock, seconds
        self.start = clock.monotonic()

    def __repr__(self) -> str:
        return f"Deadline(seconds={self.seconds!r}, elapsed={self.elapsed():.3f})"

    def elapsed(self) -> float:
        return self.clock.monotonic() - self.start

    def remaining(self) -> float:
        if self.seconds is None:
            return float("inf")
        return max(0.0, self.seconds - self.elapsed())

    def expired(self) -> bool:
        return self.remaining() <= 0.0
