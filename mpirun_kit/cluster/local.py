"""This machine's facts for planning a job here: topology, GPUs, EFA, MPI flavour, CPUs, root.

Place in the data flow: discovery (like cluster/discover.py, the machine is read
here and nowhere else); spec/resolve.py hands a ``LocalFacts`` to the compiler and
plan/jobplan.py places local and simulated ranks with it.  Not to be confused with
the doctor's ``doctor.facts.HostFacts`` (what the doctor reads on every host).
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Sequence

from ..errors import LaunchError


@dataclass(frozen=True)
class LocalFacts:
    """What this machine contributes to a plan (read once, by ``read_local_facts``)."""

    topology: object
    gpus: int
    efa: bool | None
    flavour: str
    cpu_count: int
    run_as_root: bool


def run_version(argv: Sequence[str], timeout: float = 10.0) -> str:
    """``argv``'s combined output (for ``plan.mpi.detect_with``).

    Raises:
        FileNotFoundError: no such launcher (detect_with names it).
        LaunchError: it could not be run or did not answer within ``timeout`` seconds.
    """
    try:
        res = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LaunchError(f"`{' '.join(argv)}` did not answer within {timeout:g} s; check the MPI installation "
                          "or set mpi_flavour explicitly (openmpi4, openmpi5, mpich)") from None
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise LaunchError(f"cannot run {argv[0]!r}: {exc.strerror or exc}; check the MPI installation") from None
    return res.stdout + res.stderr


def detect_flavour(runner=run_version, fallback: str | None = "openmpi4") -> str:
    """The local MPI flavour from ``mpirun --version`` (plan.mpi.detect_with, the one detector).

    ``fallback`` (this project's Open MPI 4) is answered when there is no mpirun or its output
    is unknown; None raises instead.

    Raises:
        LaunchError: only with ``fallback=None``.
    """
    from ..plan.mpi import detect_with

    try:
        return detect_with(runner)
    except LaunchError:
        if fallback is None:
            raise
        return fallback


def read_local_facts() -> LocalFacts:
    """Read this machine (NVML/sysfs through cluster.probe, mpirun, CPU count, euid)."""
    from .probe import detect_efa, read_topology

    topo = read_topology()
    return LocalFacts(topo, len(topo.gpus), detect_efa().present or None, detect_flavour(),
                      os.cpu_count() or 1, os.geteuid() == 0)
