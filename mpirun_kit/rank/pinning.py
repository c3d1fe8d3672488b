"""Rank-side pinning: run inside each rank, before any CUDA work, to pick its GPU and CPUs.

Place in the data flow: mpirun starts ``python -m mpirun_kit.rank -- <program>``
on every rank; that wrapper calls ``apply_rank_pinning(os.environ)`` and execs
the program with the returned variables added.  CPU affinity set here with
``os.sched_setaffinity`` is inherited by the exec'd program; the GPU choice
travels as ``CUDA_VISIBLE_DEVICES``, because a process cannot change its
device set once CUDA is initialised (so it must happen before the program runs).

This is rank-side on purpose (DeepSpeed #7711): the local rank and local size
exist only in the rank's environment, set by mpirun, never on the launching host.

With pinning on, each rank sees exactly one GPU: programs should use
``cuda:0`` or ``torch.cuda.set_device(local_rank % torch.cuda.device_count())``.
"""
from __future__ import annotations

import logging
import os
from dataclasses import replace
from typing import Callable, Mapping

from ..cluster.topology import Topology
from ..errors import SpecError
from ..plan.gpu import pin_local_ranks
from ..plan import contract
from ..plan.contract import PINNING_VAR

log = logging.getLogger(__name__)

def local_rank_of(environ: Mapping[str, str]) -> tuple[int, int] | None:
    """(local rank, local size) from the rank's environment (contract.local_rank_of); None outside a launcher.

    Raises:
        SpecError: a variable is present but not an integer.
    """
    try:
        return contract.local_rank_of(environ)
    except contract.RankVariableError as exc:
        raise SpecError(str(exc)) from None


def apply_rank_pinning(environ: Mapping[str, str], *, topology: Topology | None = None,
                       setaffinity: Callable[[int, set[int]], None] | None = None) -> dict[str, str]:
    """Pin this rank to its GPU and that GPU's NUMA-local CPUs.

    Args:
        environ: the rank's environment (``os.environ`` in the wrapper); not modified.
        topology: the host topology; read with NVML/sysfs when None.
        setaffinity: ``os.sched_setaffinity`` (injected in tests).

    Returns:
        Variables to add to the program's environment: ``CUDA_VISIBLE_DEVICES``,
        ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (so CUDA numbers GPUs as NVML does),
        ``MPIRUN_KIT_GPU`` and ``MPIRUN_KIT_CPUS``.  Empty when there is no GPU,
        no local rank, or pinning is off: then nothing was changed.
    """
    if environ.get(PINNING_VAR, "auto") == "none":
        return {}
    where = local_rank_of(environ)
    if where is None:
        return {}
    local_rank, local_size = where
    if topology is None:
        from ..cluster.probe import read_topology
        topology = read_topology()
    if not topology.gpus:
        return {}
    visible = [v for v in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if visible:
        # The user (or a scheduler) already narrowed the GPU set: choose within it,
        # and pin CPUs only when the entry is an NVML index we can place.
        if local_rank >= len(visible):
            raise SpecError(f"local rank {local_rank} but CUDA_VISIBLE_DEVICES={','.join(visible)!r} lists "
                            f"{len(visible)} GPU(s); list one GPU per local rank or lower processes_per_host")
        visible = [v.strip() for v in visible]
        choice = visible[local_rank]
        by_index = {str(g.index): g for g in topology.gpus}
        pins = ()
        if all(v in by_index for v in visible):
            # Renumber in the listed order so block i of the CPUs goes with entry i.
            gpus = tuple(replace(by_index[v], index=i) for i, v in enumerate(visible))
            pins = pin_local_ranks(Topology(gpus, topology.numa_nodes, topology.cores), local_size)
    else:
        choice = None
        pins = pin_local_ranks(topology, local_size)
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if pins:
        pin = pins[local_rank]
        gpu = choice if choice is not None else str(pin.gpu)
        env["CUDA_VISIBLE_DEVICES"] = gpu
        env["MPIRUN_KIT_GPU"] = gpu
        if pin.cpus:
            (setaffinity or os.sched_setaffinity)(0, set(pin.cpus))
            env["MPIRUN_KIT_CPUS"] = pin.cpu_list()
    else:
        env["CUDA_VISIBLE_DEVICES"] = choice
        env["MPIRUN_KIT_GPU"] = choice
    log.debug("local rank %d/%d pinned: %s", local_rank, local_size, env)
    return env
