"""Host discovery for pinning and tuning: GPUs (NVML), NUMA/CPU layout and EFA (sysfs, fi_info).

Place in the data flow: this is a discovery module, one of the few allowed to
read the machine.  It returns plain values (``cluster.topology.Topology``,
``EfaInfo``) that the pure planners consume; nothing else here decides.

GPUs come from NVML (nvidia-ml-py) in NVML's PCI-bus order; without a driver or
library the GPU list is empty, which is a normal answer, not an error.  CPU and
NUMA facts come from sysfs under a configurable root so tests can point it at a
recorded tree.
"""
from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .topology import Gpu, NumaNode, Topology, parse_cpu_list

log = logging.getLogger(__name__)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def read_cpu_layout(sys_root: Path = Path("/sys")) -> tuple[tuple[NumaNode, ...], tuple[tuple[int, ...], ...]]:
    """NUMA nodes and SMT sibling groups from sysfs; one node with all online CPUs if NUMA is absent."""
    online = parse_cpu_list(_read(sys_root / "devices/system/cpu/online") or "")
    nodes = []
    node_dir = sys_root / "devices/system/node"
    for d in sorted(node_dir.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        cpus = tuple(c for c in parse_cpu_list(_read(d / "cpulist") or "") if not online or c in online)
        if cpus:
            nodes.append(NumaNode(int(d.name[4:]), cpus))
    if not nodes and online:
        nodes.append(NumaNode(0, online))
    cores: dict[tuple[int, ...], None] = {}
    for node in nodes:
        for c in node.cpus:
            sib = _read(sys_root / f"devices/system/cpu/cpu{c}/topology/thread_siblings_list")
            cores[parse_cpu_list(sib) if sib else (c,)] = None
    return tuple(nodes), tuple(cores)


def _pci_numa_node(bus_id: str, sys_root: Path) -> int | None:
    # NVML reports "00000000:10:1C.0"; sysfs names it "0000:10:1c.0".
    short = bus_id.lower()[-12:]
    text = _read(sys_root / "bus/pci/devices" / short / "numa_node")
    if text is None or not text.lstrip("-").isdigit() or int(text) < 0:
        return None
    return int(text)


def read_gpus(sys_root: Path = Path("/sys"), nvml=None) -> tuple[Gpu, ...]:
    """GPUs via NVML; ``()`` when there is no NVML library or driver.

    Args:
        sys_root: sysfs root, for each GPU's NUMA node.
        nvml: the ``pynvml`` module (injected in tests); imported when None.
    """
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError:
            return ()
    try:
        nvml.nvmlInit()
    except (nvml.NVMLError, OSError) as exc:  # no driver / no library: a normal "no GPUs"
        log.debug("NVML unavailable (%s): no GPUs", exc)
        return ()
    try:
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            name = nvml.nvmlDeviceGetName(h)
            bus = nvml.nvmlDeviceGetPciInfo(h).busId
            name = name.decode() if isinstance(name, bytes) else str(name)
            bus = bus.decode() if isinstance(bus, bytes) else str(bus)
            gpus.append(Gpu(i, name, bus, _pci_numa_node(bus, sys_root)))
        return tuple(gpus)
    finally:
        nvml.nvmlShutdown()


def read_topology(sys_root: Path = Path("/sys"), nvml=None) -> Topology:
    """This host's topology: NVML GPUs (possibly none) plus the sysfs CPU layout."""
    nodes, cores = read_cpu_layout(sys_root)
    return Topology(read_gpus(sys_root, nvml), nodes, cores, source="read on this host")


@dataclass(frozen=True)
class EfaInfo:
    """EFA facts of one host."""

    #: RDMA devices under /sys/class/infiniband bound to the ``efa`` kernel driver.
    devices: tuple[str, ...]
    #: True/False when ``fi_info -p efa`` ran, None when it is not installed.
    fi_info_ok: bool | None

    @property
    def present(self) -> bool:
        return bool(self.devices) or bool(self.fi_info_ok)


def _driver_name(dev: Path) -> str | None:
    try:
        return os.path.basename(os.readlink(dev / "device" / "driver"))
    except OSError:
        return None


def detect_efa(sys_root: Path = Path("/sys"), run: Callable[[list[str]], str] | None = None) -> EfaInfo:
    """Look for EFA devices in sysfs and ask libfabric, where installed.

    Args:
        sys_root: sysfs root.
        run: the process runner (cluster/local.py ``Runner``: argv -> output; exec/command.py makes the
            real one, tests a fake).  None, or no ``fi_info`` on PATH: libfabric is not asked
            (``fi_info_ok`` None).
    """
    ib = sys_root / "class/infiniband"
    # A host may also carry InfiniBand HCAs (mlx5_*): only devices whose driver is
    # ``efa`` count, judged by the driver symlink rather than the device name.
    devices = tuple(sorted(p.name for p in ib.glob("*") if _driver_name(p) == "efa")) if ib.is_dir() else ()
    fi_ok: bool | None = None
    if run is not None and shutil.which("fi_info"):
        try:
            # fi_info lists each provider it can use as "provider: NAME"; without EFA it prints
            # "fi_getinfo: -61 (No data available)" instead.
            fi_ok = "provider: efa" in run(["fi_info", "-p", "efa"])
        except OSError:   # TimeoutError included: a libfabric that hangs is not one that works
            fi_ok = False
    return EfaInfo(devices, fi_ok)
