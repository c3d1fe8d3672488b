"""Rank placement: which global rank runs on which host with which local rank.

mpirun is always run with ``--map-by slot`` (fill each host's slots in host
order), so this table is exactly what mpirun does; the plan prints it and the
per-rank wrapper uses the same rule to name a rank's host in failure reports.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..errors import SpecError

#: env vars the plan sets for the rank wrapper (mpirun_kit/rank.py reads them); defined
#: here, in the lightest plan module, because every rank imports them at start.
RESULT_ADDR_VAR = "MPIRUN_KIT_RESULT_ADDR"
HOSTS_VAR = "MPIRUN_KIT_HOSTS"
#: read by mpirun_kit.pinning in each rank ("auto" | "none").
PINNING_VAR = "MPIRUN_KIT_PINNING"


@dataclass(frozen=True)
class RankSlot:
    rank: int
    host: str
    local_rank: int
    local_size: int


def assign_ranks(host_slots: Iterable[tuple[str, int]]) -> tuple[RankSlot, ...]:
    """Ranks in ``--map-by slot`` order over ``(host, slots)`` pairs.

    Raises:
        SpecError: a host has fewer than one slot.
    """
    out: list[RankSlot] = []
    for host, slots in host_slots:
        if not isinstance(slots, int) or slots < 1:
            raise SpecError(f"host {host!r} has {slots!r} slots; expected a positive integer "
                            "(set processes_per_host or the hostfile's slots=N)")
        out.extend(RankSlot(len(out), host, i, slots) for i in range(slots))
    return tuple(out)


def encode_host_slots(host_slots: Iterable[tuple[str, int]]) -> str:
    """``algo-1:2,algo-2:2``: how the rank wrapper learns the placement (env var)."""
    return ",".join(f"{h}:{n}" for h, n in host_slots)


def host_of_rank(encoded: str, rank: int) -> tuple[str, int] | None:
    """Inverse of ``encode_host_slots`` for one rank: (host, local_rank), None if out of range."""
    start = 0
    for item in encoded.split(","):
        host, _, n = item.rpartition(":")
        if not host or not n.isdigit():
            return None
        if rank < start + int(n):
            return host, rank - start
        start += int(n)
    return None
