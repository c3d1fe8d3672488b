"""GPU pinning as a pure function: topology value -> each local rank's GPU and CPU set.

Place in the data flow: ``cluster.probe.read_topology`` (the only reader of NVML and
sysfs) produces a ``Topology`` (the value types live in cluster/topology.py); ``pin_local_ranks`` turns it into one
``RankPinning`` per local rank.  ``plan`` prints the map (rank -> host -> GPU ->
CPU set) and ``rank.pinning.apply_rank_pinning`` applies one entry inside each rank
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

from dataclasses import dataclass

from ..cluster.topology import Topology, format_cpu_list
from ..errors import SpecError


@dataclass(frozen=True)
class RankPinning:
    """Where one local rank runs.  ``gpu`` None: no GPU; ``cpus`` empty: leave affinity alone."""

    local_rank: int
    gpu: int | None
    numa_node: int | None
    cpus: tuple[int, ...]

    def cpu_list(self) -> str:
        return format_cpu_list(self.cpus)


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
