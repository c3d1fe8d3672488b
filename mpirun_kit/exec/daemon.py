"""Worker side: find the MPI daemon mpirun started on this host, and see it end.

The daemon's name is flavour data (``orted``, ``prted``, ``hydra_pmi_proxy``).
``psutil`` lists processes; matching is on the process name or the basename of
argv[0], because a daemon started through a wrapper script can show either.
"""
from __future__ import annotations

import os
from typing import Iterable, Sequence

import psutil


def find_daemons(names: Sequence[str]) -> tuple[int, ...]:
    """PIDs of running processes called one of ``names`` (zombies excluded)."""
    wanted = set(names)
    found = []
    for p in psutil.process_iter(["name", "cmdline", "status"]):
        try:
            info = p.info
            if info["status"] == psutil.STATUS_ZOMBIE:
                continue
            argv0 = os.path.basename(info["cmdline"][0]) if info.get("cmdline") else ""
            if info["name"] in wanted or argv0 in wanted:
                found.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, IndexError):
            continue
    return tuple(sorted(found))


def alive(pids: Iterable[int]) -> tuple[int, ...]:
    """Those of ``pids`` still running (not zombies)."""
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            continue
    return tuple(out)


def signal_pids(pids: Iterable[int], signum: int) -> None:
    """Send ``signum`` to each pid that still exists (by pid, never by name)."""
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            continue
