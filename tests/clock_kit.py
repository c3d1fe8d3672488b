"""The one fake clock of the tests (mpirun_kit/core/clock.py's Clock): time moves only when the code under test
sleeps or the test moves it, so no test waits for real and none asserts a timing.

``FakeClock(now=..., wall=...)``: ``monotonic()`` is ``now``, ``time()`` is ``wall + now``; ``sleep(s)`` records
``s`` in ``sleeps`` and moves ``now`` by it (by at least ``min_sleep``, so a loop that sleeps 0 still advances).
``jump``: every look at ``monotonic()`` is that much later (a deadline that passes at the first check).
``frozen``: time never moves by itself (only ``advance`` moves it); ``sleep`` yields the thread for a real
millisecond, so a loop on a frozen clock still lets other threads run.  Threads may share one.
"""
from __future__ import annotations

import threading
import time


class FakeClock:
    def __init__(self, now: float = 0.0, *, wall: float = 1e9, min_sleep: float = 0.0, jump: float = 0.0,
                 frozen: bool = False):
        self.now, self.wall, self.min_sleep, self.jump, self.frozen = now, wall, min_sleep, jump, frozen
        self.sleeps: list[float] = []
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        with self._lock:
            self.now += self.jump
            return self.now

    def time(self) -> float:
        return self.wall + self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            if not self.frozen:
                self.now += max(seconds, self.min_sleep)
        if self.frozen:
            time.sleep(0.001)

    def advance(self, seconds: float) -> None:
        """The test moves time (what another thread's waiting would have done)."""
        with self._lock:
            self.now += seconds
