"""Rank placement: which global rank runs on which host with which local rank.

mpirun is always run with ``--map-by slot`` (fill each host's slots in host
order), so this table is exactly what mpirun does; the plan prints it and the
per-rank wrapper uses the same rule to name a rank's host in failure reports.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..errors import SpecError



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
    """``algo-1:2,algo-2:2``: how the rank wrapper learns the placement (``rank.host_of_rank`` reads it)."""
    return ",".join(f"{h}:{n}" for h, n in host_slots)
