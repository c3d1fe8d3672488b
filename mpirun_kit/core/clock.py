"""Injected time: every wait in mpirun_kit takes a Clock so tests can drive it.

``Deadline`` turns "wait at most T seconds" into a value that loops can ask
``remaining()`` of; nothing in the package calls ``time.sleep`` directly with a
fixed duration.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...
    def time(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


SYSTEM_CLOCK = SystemClock()


@dataclass
class Deadline:
    """A point in monotonic time; ``None`` seconds means no deadline."""

    clock: Clock
    seconds: float | None
    start: float = 0.0

    def __post_init__(self) -> None:
        self.start = self.clock.monotonic()

    def elapsed(self) -> float:
        return self.clock.monotonic() - self.start

    def remaining(self) -> float:
        if self.seconds is None:
            return float("inf")
        return max(0.0, self.seconds - self.elapsed())

    def expired(self) -> bool:
        return self.remaining() <= 0.0
