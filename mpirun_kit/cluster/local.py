"""This machine's facts for planning a job here: topology, GPUs, EFA, MPI flavour, CPUs, root.

Place in the data flow: discovery (like cluster/discover.py, the machine is read
here and nowhere else); cli/resolve.py hands a ``LocalFacts`` to the compiler and
plan/jobplan.py places local and simulated ranks with it.  Not to be confused with
the doctor's ``doctor.facts.HostFacts`` (what the doctor reads on every host).
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from typing import Callable, Sequence

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
    """``argv``'s combined output (for ``detect_with``).

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


def flavour_of_version(version_text: str) -> str:
    """Name the MPI flavour (a key of ``plan.mpi.FLAVOURS``) from ``mpirun --version`` output.

    Raises:
        LaunchError: the output matches no known MPI.
    """
    m = re.search(r"\(Open MPI\)\s+(\d+)\.", version_text)
    if m:
        major = int(m.group(1))
        return "openmpi5" if major >= 5 else "openmpi4"
    if re.search(r"HYDRA|MPICH|Intel\(R\) MPI", version_text, re.IGNORECASE):
        return "mpich"
    first = version_text.strip().splitlines()[:1]
    raise LaunchError(f"`mpirun --version` printed {first!r}, which is no known MPI; expected Open MPI 4/5 or "
                      "MPICH/Hydra; set mpi_flavour explicitly (openmpi4, openmpi5, mpich)")


def detect_with(runner: Callable[[Sequence[str]], str], launcher: str = "mpirun") -> str:
    """Run ``launcher --version`` through ``runner`` (argv -> combined output) and detect.

    Raises:
        LaunchError: the launcher is missing or its output is unknown.
    """
    try:
        text = runner([launcher, "--version"])
    except FileNotFoundError:
        raise LaunchError(f"{launcher!r} not found on PATH; install Open MPI (apt-get install openmpi-bin) "
                          "or put the venv's bin directory on PATH") from None
    return flavour_of_version(text)


def detect_flavour(runner=run_version, fallback: str | None = "openmpi4") -> str:
    """The local MPI flavour from ``mpirun --version`` (``detect_with``, the one detector).

    ``fallback`` (this project's Open MPI 4) is answered when there is no mpirun or its output
    is unknown; None raises instead.

    Raises:
        LaunchError: only with ``fallback=None``.
    """
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
