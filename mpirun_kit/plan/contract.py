"""The rank environment contract: what the plan sets for each rank, and who a rank is.

Place in the data flow: plan/launch_plan.py puts these variables into mpirun's
environment (``-x NAME``); the rank wrapper (rank/wrapper.py) and pinning (rank/pinning.py)
read them inside each rank, the doctor's all-reduce (workloads/) its local rank.  The MPI's own rank variables are parsed here and
only here, with one precedence (Open MPI, then PMIx, then MPICH/PMI, then the
torch-style names a user or scheduler may have set).

Stdlib only, nothing of the package (setup.cfg's import contracts check it): the plan writes these
names, and every rank imports this module at start (plan/__init__.py imports nothing eagerly).
"""
from __future__ import annotations

import socket
from collections.abc import Mapping  # not typing: ~2-7 ms less per rank at start

#: where rank reports go (host:port of the master's result channel).
RESULT_ADDR_VAR = "MPIRUN_KIT_RESULT_ADDR"
#: the plan's placement, ``algo-1:2,algo-2:2`` (plan.ranks.encode_host_slots).
HOSTS_VAR = "MPIRUN_KIT_HOSTS"
#: read by rank.pinning in each rank ("auto" | "none").
PINNING_VAR = "MPIRUN_KIT_PINNING"
#: host of rank 0, for frameworks that rendezvous there (torch.distributed's
#: MASTER_ADDR; the training module reads it).  A name from the cluster's own
#: host list, so every host resolves it, unlike rank 0's own FQDN.
RENDEZVOUS_VAR = "MPIRUN_KIT_MASTER_ADDR"
#: the run nonce of the master's result channel (hex), made per run and forwarded by name: it names the
#: directory of the ranks' key files (exec/channel/keys.py).  No secret: the keys are in the files.
RUN_NONCE_VAR = "MPIRUN_KIT_RUN_NONCE"

#: global rank and world size, first one present wins.
RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "RANK")
SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE")
#: (local rank, local size) variable pairs, by launcher; first one present wins.
LOCAL_RANK_VARS = (
    ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),  # Open MPI
    ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),                         # MPICH hydra
    ("LOCAL_RANK", "LOCAL_WORLD_SIZE"),                             # torchrun style
)


class RankVariableError(ValueError):
    """A local-rank variable is present but not an integer (``.var``, ``.value`` name it)."""

    def __init__(self, var: str, value: str | None, size_var: str, size_value: str | None):
        super().__init__(f"{var}={value!r} / {size_var}={size_value!r}: expected integers (set by mpirun)")
        self.var, self.value = var, value


def host_of_rank(encoded: str, rank: int) -> tuple[str, int] | None:
    """(host, local_rank) of ``rank`` in ``algo-1:2,algo-2:2`` (plan.ranks.encode_host_slots); None if absent."""
    start = 0
    for item in encoded.split(","):
        host, _, n = item.rpartition(":")
        if not host or not n.isdigit():
            return None
        if rank < start + int(n):
            return host, rank - start
        start += int(n)
    return None


def _first_int(env: Mapping[str, str], names, default: int = -1) -> int:
    for n in names:
        v = env.get(n, "")
        if v.lstrip("-").isdigit():
            return int(v)
    return default


def local_rank_of(env: Mapping[str, str]) -> tuple[int, int] | None:
    """(local rank, local size) from the first launcher's pair present; None outside a launcher.

    Raises:
        RankVariableError: the variable is present but not an integer.
    """
    for rank_var, size_var in LOCAL_RANK_VARS:
        if rank_var in env:
            try:
                rank = int(env[rank_var])
                size = int(env.get(size_var, rank + 1))
            except ValueError:
                raise RankVariableError(rank_var, env[rank_var], size_var, env.get(size_var)) from None
            return rank, max(size, rank + 1)
    return None


def local_size_text(env: Mapping[str, str]) -> str | None:
    """The launcher's local size as it set it (first pair whose rank variable is present)."""
    for rank_var, size_var in LOCAL_RANK_VARS:
        if env.get(size_var):
            return env[size_var]
    return None


def rank_identity(env: Mapping[str, str]) -> tuple[int, str, int, int]:
    """(rank, host, local_rank, world_size) from an environment mapping; -1 / 0 where unknown.

    The host comes from the plan's placement (``MPIRUN_KIT_HOSTS``), not from
    gethostname(), which on some platforms is not the cluster name.
    """
    rank = _first_int(env, RANK_VARS)
    placed = host_of_rank(env.get(HOSTS_VAR, ""), rank) if rank >= 0 else None
    if placed:
        host, local = placed
    else:
        host, local = socket.gethostname(), _first_int(env, (r for r, _ in LOCAL_RANK_VARS), 0)
    return rank, host, local, _first_int(env, SIZE_VARS, 0)
