"""One host's hardware as values: GPUs, NUMA nodes, cores (no I/O here).

Place in the data flow: ``cluster.probe`` reads NVML and sysfs into these values
on a host; plan/gpu.py turns a ``Topology`` into each local rank's GPU and CPU
set; doctor and the rank wrapper's pinning use the same values.  Kept apart from
the probe so plan/ can import the types without importing discovery.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from ..errors import SpecError


@dataclass(frozen=True)
class Gpu:
    """One GPU as NVML reports it; ``index`` is in PCI bus order (NVML's order)."""

    index: int
    name: str
    pci_bus_id: str
    #: NUMA node of the GPU's PCI root; None when the kernel reports -1 (no NUMA).
    numa_node: int | None


@dataclass(frozen=True)
class NumaNode:
    id: int
    cpus: tuple[int, ...]


@dataclass(frozen=True)
class Topology:
    """What pinning needs to know about one host."""

    gpus: tuple[Gpu, ...] = ()
    numa_nodes: tuple[NumaNode, ...] = ()
    #: groups of logical CPUs that are SMT siblings of one physical core.
    cores: tuple[tuple[int, ...], ...] = ()
    #: free-form provenance, e.g. "recorded on p4d.24xlarge".
    source: str = ""

    @property
    def cpus(self) -> tuple[int, ...]:
        return tuple(sorted(c for node in self.numa_nodes for c in node.cpus))

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, raw: dict, source: str = "topology") -> "Topology":
        """Build from the JSON shape ``to_json`` writes.

        Raises:
            SpecError: a missing or mistyped field (names the field).
        """
        try:
            gpus = tuple(Gpu(int(g["index"]), str(g["name"]), str(g["pci_bus_id"]),
                             None if g.get("numa_node") is None else int(g["numa_node"]))
                         for g in raw.get("gpus", ()))
            nodes = tuple(NumaNode(int(n["id"]), tuple(int(c) for c in n["cpus"]))
                          for n in raw.get("numa_nodes", ()))
            cores = tuple(tuple(int(c) for c in core) for core in raw.get("cores", ()))
        except (KeyError, TypeError, ValueError) as exc:
            raise SpecError(f"{source}: malformed topology ({exc!r}); expected the shape Topology.to_json writes") from exc
        return cls(gpus, nodes, cores, str(raw.get("source", "")))


def format_cpu_list(cpus: tuple[int, ...]) -> str:
    """``(0,1,2,5)`` -> ``"0-2,5"`` (the kernel's cpulist format)."""
    out, run = [], []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """``"0-2,5"`` -> ``(0, 1, 2, 5)``; empty text -> ``()``.

    Raises:
        SpecError: not a cpulist.
    """
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = part.split("-", 1)
                cpus.extend(range(int(lo), int(hi) + 1))
            else:
                cpus.append(int(part))
        except ValueError as exc:
            raise SpecError(f"cpu list {text!r} is malformed; expected the kernel's format like '0-23,48-71'") from exc
    return tuple(sorted(set(cpus)))
