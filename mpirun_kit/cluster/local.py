"""This machine's facts for planning a job here: MPI flavour, GPUs, topology, EFA, CPUs, root.

Place in the data flow: discovery, the one reader of this machine's facts (``Machine``).  Both
users read through it: the CLI (cli/resolve.py: ``read_local_facts`` -> a ``LocalFacts`` for the
compiler, which plan/jobplan.py places local and simulated ranks with) and the entrypoint on every
host (entrypoint/main.py ``HostProbe``: the flavour when the spec leaves it ``auto``, the GPU count,
CPUs, root).  Commands (``mpirun --version``, ``fi_info``) run through the injected ``Runner``:
cluster/ sits below exec/ in the layers, so the CLI and the entrypoint hand in
exec/command.py's runner (a deadline on the injected clock; the entrypoint's is cancelled by a
signal).  Not to be confused with the doctor's ``doctor.facts.HostFacts`` (what the doctor reads
on every host, through cluster/probe.py as well).
"""
from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..errors import LaunchError

#: argv -> its stdout and stderr together.  Raises FileNotFoundError (no such program), TimeoutError
#: (no answer by the runner's deadline), OSError (could not run); whatever else it raises (the
#: entrypoint's cancel) passes through.  exec/command.py ``command_runner`` makes the real one.
Runner = Callable[[Sequence[str]], str]


@dataclass(frozen=True)
class LocalFacts:
    """What this machine contributes to a plan (read once, by ``read_local_facts``)."""

    topology: object
    gpus: int
    efa: bool | None
    flavour: str
    cpu_count: int
    run_as_root: bool


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


class Machine:
    """This machine, each fact read at most once and only when asked (the entrypoint asks for few: NVML
    and ``mpirun --version`` are on the launch's critical path).

    Args:
        run: the process runner (``Runner``); every command of this machine's reading goes through it.
        launcher: the MPI launcher whose ``--version`` names the flavour.
        sys_root, dev: sysfs and /dev roots (tests point them at a recorded tree).
    """

    def __init__(self, run: Runner, *, launcher: str = "mpirun", sys_root: Path = Path("/sys"),
                 dev: Path = Path("/dev")) -> None:
        self._run, self._launcher, self._sys, self._dev = run, launcher, sys_root, dev
        self._cache: dict[str, object] = {}

    def _once(self, key: str, read: Callable[[], object]):
        if key not in self._cache:
            self._cache[key] = read()
        return self._cache[key]

    def flavour(self, fallback: str | None = "openmpi4") -> str:
        """The MPI flavour from ``LAUNCHER --version`` (a key of ``plan.mpi.FLAVOURS``).

        ``fallback`` (this project's Open MPI 4) is answered when there is no launcher, it hangs or
        its output is unknown; None raises instead.

        Raises:
            LaunchError: only with ``fallback=None``: the launcher is missing, gave no answer by the
                runner's deadline, could not run, or printed no known MPI.
        """
        try:
            return self._once("flavour", self._read_flavour)
        except LaunchError:
            if fallback is None:
                raise
            return fallback

    def _read_flavour(self) -> str:
        argv = [self._launcher, "--version"]
        try:
            text = self._run(argv)
        except FileNotFoundError:
            raise LaunchError(f"{self._launcher!r} not found on PATH; install Open MPI (apt-get install openmpi-bin) "
                              "or put the venv's bin directory on PATH") from None
        except TimeoutError as exc:
            raise LaunchError(f"{exc}; the MPI installation is broken or its launcher hangs: set mpi_flavour "
                              "explicitly (openmpi4, openmpi5, mpich) to skip detection") from None
        except OSError as exc:
            raise LaunchError(f"cannot run {self._launcher!r}: {exc.strerror or exc}; check the MPI installation "
                              "or set mpi_flavour explicitly (openmpi4, openmpi5, mpich)") from None
        return flavour_of_version(text)

    def gpu_count(self) -> int:
        """GPUs visible through NVML; 0 where there is no driver.  The topology's count once that was read,
        else NVML's device count alone (no PCI or NUMA reads: what the entrypoint needs)."""
        if "topology" in self._cache:
            return len(self.topology().gpus)
        return self._once("gpus", lambda: _nvml_count(self._dev))

    def topology(self):
        """GPUs (NVML) and the CPU/NUMA layout (sysfs): a ``cluster.topology.Topology``."""
        from .probe import read_topology

        return self._once("topology", lambda: read_topology(self._sys))

    def efa(self):
        """EFA devices (sysfs) and libfabric's answer (``fi_info -p efa`` through the runner): ``probe.EfaInfo``."""
        from .probe import detect_efa

        return self._once("efa", lambda: detect_efa(self._sys, run=self._run))

    def library_cache(self) -> str:
        """The dynamic loader's cache, ``ldconfig -p`` through the runner (the doctor's library facts); empty
        where ldconfig is missing, hangs or cannot run (the doctor then sees only LD_LIBRARY_PATH's libraries)."""

        def read() -> str:
            ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
            try:
                return self._run([ldconfig, "-p"])
            except (OSError, TimeoutError):
                return ""

        return self._once("library_cache", read)

    def cpu_count(self) -> int:
        return os.cpu_count() or 1

    def run_as_root(self) -> bool:
        return os.geteuid() == 0


def _nvml_count(dev: Path) -> int:
    if not (dev / "nvidiactl").exists():
        # No NVIDIA driver loaded: skip loading NVML (~0.1 s on the launch path).
        return 0
    try:
        import pynvml
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # driver present but NVML unusable (e.g. a container without libnvidia-ml)
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


def read_local_facts(machine: Machine) -> LocalFacts:
    """Everything a job planned here needs from ``machine`` (NVML/sysfs, mpirun, fi_info, CPU count, euid)."""
    topo = machine.topology()
    return LocalFacts(topo, machine.gpu_count(), machine.efa().present or None, machine.flavour(),
                      machine.cpu_count(), machine.run_as_root())
