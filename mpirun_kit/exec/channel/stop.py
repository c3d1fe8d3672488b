"""Stopping a job through the result channel, so every rank's SIGTERM handler gets the whole grace period.

Used by the master's ``run_launcher`` (process.py) when the job must stop (the entrypoint got
SIGTERM/SIGINT, a worker host was lost, the hang monitor aborts, the job deadline passed).
Open MPI 4's mpirun, on SIGTERM, forwards it to its ranks and SIGKILLs them
``odls_base_sigkill_timeout`` (1 s) later, whatever ``timeouts.grace_s`` says, and one rank
exiting early makes it kill the rest the same way.  So the master does not start with mpirun:

1. ``begin``: every rank's wrapper still running is asked, on its own signed channel
   connection, ``{"type": "signal", "signal": "SIGTERM", "hold_s": H}``: it signals its
   program, reports the program's exit as usual, and then holds its own exit (so mpirun sees
   no rank end) until the master says ``{"type": "release"}``, H seconds pass, a signal
   reaches it, or the channel closes (rank/wrapper.py, observe/relay.py);
2. ``pending``: the ranks asked that have neither reported their exit, nor lost their
   connection, nor sit on a host the channel declared lost: the master waits while this is
   not empty, at most ``grace_s``;
3. ``release``: every wrapper asked is let go, just after mpirun's SIGTERM (as before), or, when
   every rank of the job reported its exit (``all_exited``), with no SIGTERM at all: the wrappers'
   exits end mpirun, whose SIGTERM path would sleep its 1-s kill timeout, and which a SIGTERM
   while it ends can crash (Open MPI 4.1, SIGSEGV in PMIx_Finalize).

Ranks the channel cannot reach (no key, wrapper never connected, host lost) are not waited
for: mpirun's SIGTERM reaches them in step 3.
"""
from __future__ import annotations

import logging
from typing import Collection, Mapping, Protocol

log = logging.getLogger(__name__)

#: how much longer than grace_s a wrapper holds its exit before it gives up on the master's release.
HOLD_MARGIN_S = 5.0


class RankChannel(Protocol):
    """What RankStop needs of the result channel (server.ResultServer)."""

    def send_to_ranks(self, ranks: Collection[int], msg: dict) -> list[int]: ...
    def connected_ranks(self, ranks: Collection[int]) -> frozenset[int]: ...
    def exited_ranks(self) -> frozenset[int]: ...
    def lost_workers(self) -> dict[str, float]: ...


class RankStop:
    """One stop of one job: ask, wait, release (see the module docstring).

    Args:
        channel: the master's result channel.
        rank_hosts: the plan's placement, rank -> host.
        hold_s: the longest a wrapper holds its exit (grace_s + HOLD_MARGIN_S).
    """

    def __init__(self, channel: RankChannel, rank_hosts: Mapping[int, str], hold_s: float):
        self.channel = channel
        self.rank_hosts = dict(rank_hosts)
        self.hold_s = float(hold_s)
        self.asked: frozenset[int] = frozenset()
        self._waiting: set[int] = set()
        self._released = False

    def _gone(self) -> set[int]:
        """Ranks there is no point waiting for: exited, or on a host the channel lost."""
        lost = set(self.channel.lost_workers())
        return set(self.channel.exited_ranks()) | {r for r, h in self.rank_hosts.items() if h in lost}

    def begin(self, signal_name: str = "SIGTERM") -> frozenset[int]:
        """Ask every rank still running to send ``signal_name`` to its program; returns the ranks reached."""
        targets = sorted(set(self.rank_hosts) - self._gone())
        reached = self.channel.send_to_ranks(targets, {"type": "signal", "signal": signal_name,
                                                       "hold_s": self.hold_s})
        self.asked = frozenset(reached)
        self._waiting = set(reached)
        missed = len(targets) - len(reached)
        if missed:
            log.warning("stop: %d of %d running rank(s) cannot be reached on the result channel; mpirun's SIGTERM "
                        "will reach them once the others have exited", missed, len(targets))
        return self.asked

    def pending(self) -> frozenset[int]:
        """The ranks asked that may still be running their handlers."""
        if self._waiting:
            self._waiting -= self._gone()
            self._waiting &= self.channel.connected_ranks(self._waiting)
        return frozenset(self._waiting)

    def all_exited(self) -> bool:
        """Every rank of the job reported its exit (nothing is left for mpirun's SIGTERM to reach)."""
        return set(self.rank_hosts) <= self.channel.exited_ranks()

    def release(self) -> None:
        """Let every wrapper asked exit (once; later calls do nothing)."""
        if self._released or not self.asked:
            self._released = True
            return
        self._released = True
        self.channel.send_to_ranks(sorted(self.asked), {"type": "release"})
