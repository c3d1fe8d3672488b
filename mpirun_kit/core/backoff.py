"""One backoff for every retry loop: jittered exponential pauses on the injected clock, bounded by a deadline.

Place in the data flow: whatever retries until a deadline (connecting to ssh hosts, to the master's
result channel, a rank to its wrapper's channel, waiting for sshd) asks a ``Backoff`` for its pause.
The pause starts at ``first_s`` and doubles to ``max_s``; each is drawn from [half, whole] of the
current step ("equal jitter"), so many hosts starting together do not retry in lockstep, and it never
runs past the deadline.  The random source is passed in (never the global ``random``) so a test can
fix it.  Stdlib only, like core/clock.py: the rank side uses it.
"""
from __future__ import annotations

import random

from .clock import Clock, Deadline

#: the first pause and the longest (seconds): short enough that a host that comes up is found at once,
#: long enough that a thousand retrying hosts do not flood the one they wait for.
FIRST_S, MAX_S = 0.1, 1.0


class Backoff:
    """Pauses between tries: ``pause()`` gives the next one (and advances), ``wait()`` sleeps it on the clock."""

    __slots__ = ("clock", "deadline", "rng", "step", "max_s")

    def __init__(self, clock: Clock, deadline: Deadline, rng: random.Random | None = None, *,
                 first_s: float = FIRST_S, max_s: float = MAX_S):
        self.clock, self.deadline = clock, deadline
        self.rng = rng if rng is not None else random.Random()
        self.step, self.max_s = first_s, max_s

    def pause(self) -> float:
        """The next pause in seconds (0 once the deadline has passed); the step after it doubles."""
        pause = min(self.deadline.remaining(), self.step * self.rng.uniform(0.5, 1.0))
        self.step = min(self.max_s, self.step * 2)
        return pause

    def wait(self) -> bool:
        """Sleep the next pause; False (without sleeping) when the deadline has passed: stop retrying."""
        if self.deadline.expired():
            return False
        self.clock.sleep(self.pause())
        return True
