"""core/backoff.py: one jittered backoff on the injected clock, bounded by its deadline (issue 31 item 3)."""
from __future__ import annotations

import random

from mpirun_kit.core.backoff import Backoff
from mpirun_kit.core.clock import Deadline

from clock_kit import FakeClock


def test_pauses_double_to_the_cap_each_drawn_from_its_upper_half():
    clock = FakeClock()
    b = Backoff(clock, Deadline(clock, 100.0), random.Random(7))
    pauses = [b.pause() for _ in range(8)]
    steps = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
    assert all(s / 2 <= p <= s for p, s in zip(pauses, steps)), pauses
    assert len(set(pauses)) == len(pauses)          # jittered, not lockstep


def test_the_same_rng_gives_the_same_pauses_and_two_hosts_differ():
    clock = FakeClock()
    one = [Backoff(clock, Deadline(clock, 100.0), random.Random(1)).pause() for _ in range(2)]
    assert one[0] == one[1]
    a, b = (Backoff(clock, Deadline(clock, 100.0), random.Random(s)) for s in (1, 2))
    assert a.pause() != b.pause()


def test_wait_sleeps_on_the_clock_and_stops_at_the_deadline():
    clock = FakeClock()
    b = Backoff(clock, Deadline(clock, 1.0), random.Random(0), first_s=0.4, max_s=0.4)
    waits = 0
    while b.wait():
        waits += 1
    assert waits == len(clock.sleeps) >= 3
    assert sum(clock.sleeps) == clock.now and abs(clock.now - 1.0) < 1e-9   # the last pause is cut to the deadline
    assert not b.wait() and b.pause() == 0.0


def test_never_the_global_random(monkeypatch):
    """Seeding or draining the process's global random (another library does) must not change the backoff, and the
    backoff must not draw from it."""
    def forbidden(*_a, **_k):
        raise AssertionError("the global random was used")

    monkeypatch.setattr(random, "uniform", forbidden)
    monkeypatch.setattr(random, "random", forbidden)
    clock = FakeClock()
    assert 0.05 <= Backoff(clock, Deadline(clock, 5.0)).pause() <= 0.1
