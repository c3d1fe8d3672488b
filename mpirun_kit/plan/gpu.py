"""GPU pinning as a pure function: topology value -> each local rank's GPU and CPU set.

Place in the data flow: ``topology.read_topology`` (the only reader of NVML and
sysfs) produces a ``Topology``; ``pin_local_ranks`` turns it into one
``RankPinning`` per local rank.  ``plan`` prints the map (rank -> host -> GPU ->
CPU set) and ``pinning.apply_rank_pinning`` applies one entry inside each rank
before any CUDA work.  Recorded topologies (p4d.24xlarge, p5.48xlarge, a
single-GPU box, no GPU) live as JSON under tests/plan/topologies/.

Policy ("socket_unique_contiguous" in NVIDIA's gpu_affinity.py, the one it
recommends on DGX-like boxes): local rank i gets GPU i; the CPUs of that GPU's
NUMA node are split into disjoint contiguous blocks of physical cores (with
their SMT siblings), one block per rank sharing the node.  Disjoint sets keep
two ranks' data-loader threads from fighting over one core; NUMA-local sets
keep host<->device copies off the inter-socket link.
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


@dataclass(frozen=True)
class RankPinning:
    """Where one local rank runs.  ``gpu`` None: no GPU; ``cpus`` empty: leave affinity alone."""

    local_rank: int
    gpu: int | None
    numa_node: int | None
    cpus: tuple[int, ...]

    def cpu_list(self) -> str:
        return format_cpu_list(self.cpus)


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


def _split(items: list, parts: int, which: int) -> list:
    """The ``which``-th of ``parts`` contiguous, near-equal blocks of ``items``."""
    base, extra = divmod(len(items), parts)
    start = which * base + min(which, extra)
    return items[start:start + base + (1 if which < extra else 0)]


def pin_local_ranks(topology: Topology, local_size: int) -> tuple[RankPinning, ...]:
    """Pin ``local_size`` ranks on one host.

    Args:
        topology: the host's topology (recorded or read).
        local_size: ranks on this host.

    Returns:
        One RankPinning per local rank, in local-rank order.  With no GPUs every
        rank gets ``gpu=None`` and an empty CPU set (no pinning: with no GPU
        there is no locality to gain and the OS scheduler does better).

    Raises:
        SpecError: more ranks than GPUs on a GPU host.
    """
    if local_size < 1:
        raise SpecError(f"processes per host is {local_size}; expected at least 1")
    if not topology.gpus:
        return tuple(RankPinning(r, None, None, ()) for r in range(local_size))
    gpus = sorted(topology.gpus, key=lambda g: g.index)
    if local_size > len(gpus):
        raise SpecError(
            f"{local_size} processes per host but this host has {len(gpus)} GPU(s); "
            f"set resources.processes_per_host to at most {len(gpus)}, or set pinning: none "
            "to run several ranks per GPU"
        )
    nodes = {n.id: n for n in topology.numa_nodes}
    core_of = {c: core for core in topology.cores for c in core}
    # Ranks sharing a NUMA node, in local-rank order, so each gets its own block.
    sharing: dict[int | None, list[int]] = {}
    for r in range(local_size):
        sharing.setdefault(gpus[r].numa_node, []).append(r)
    out = []
    for r in range(local_size):
        gpu = gpus[r]
        node = nodes.get(gpu.numa_node) if gpu.numa_node is not None else None
        node_cpus = node.cpus if node is not None else topology.cpus
        # Physical cores of the node in order of their first logical CPU, each with siblings.
        cores: list[tuple[int, ...]] = []
        seen: set[int] = set()
        for c in sorted(node_cpus):
            if c in seen:
                continue
            core = tuple(sorted(x for x in core_of.get(c, (c,)) if x in node_cpus))
            seen.update(core)
            cores.append(core)
        peers = sharing[gpu.numa_node]
        block = _split(cores, len(peers), peers.index(r)) if len(cores) >= len(peers) else cores
        cpus = tuple(sorted(c for core in block for c in core))
        out.append(RankPinning(r, gpu.index, gpu.numa_node, cpus))
    return tuple(out)
