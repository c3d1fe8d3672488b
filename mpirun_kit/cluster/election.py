"""Master election: a pure function of the host names, so every host agrees without talking.

SageMaker names hosts algo-1..algo-N and the platform's own tooling treats
algo-1 as the leader, so a cluster named that way elects the lowest N compared as
numbers (algo-10 sorts after algo-9, not after algo-1).  Any other naming elects
``sorted(names)[0]``: plain string order, identical on every host.
"""
from __future__ import annotations

import re
from typing import Iterable

from ..errors import SpecError

_ALGO_RE = re.compile(r"^algo-(\d+)$")


def election_key(name: str) -> tuple:
    """Sort key: algo-N names first, by N as a number; any other name after, by string."""
    m = _ALGO_RE.match(name)
    return (0, int(m.group(1)), name) if m else (1, 0, name)


def elect_master(names: Iterable[str]) -> str:
    """Return the master among ``names`` (see the module docstring for the rule).

    Raises:
        SpecError: ``names`` is empty.
    """
    names = list(names)
    if not names:
        raise SpecError("cannot elect a master from an empty host list; the cluster source listed no hosts")
    if all(_ALGO_RE.match(n) for n in names):
        return min(names, key=election_key)
    return sorted(names)[0]
