"""The rank environment contract (mpirun_kit/plan/contract.py): one precedence for who a rank is,
used by the wrapper, pinning and the allreduce workload alike."""
from __future__ import annotations

import socket

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.plan.contract import RankVariableError, local_rank_of, local_size_text, rank_identity
from mpirun_kit.rank.pinning import local_rank_of as pinning_local_rank_of


def test_open_mpi_wins_over_pmi_and_torch_names():
    env = {"OMPI_COMM_WORLD_RANK": "3", "PMI_RANK": "9", "RANK": "7", "OMPI_COMM_WORLD_SIZE": "4", "WORLD_SIZE": "8",
           "OMPI_COMM_WORLD_LOCAL_RANK": "1", "LOCAL_RANK": "5", "MPIRUN_KIT_HOSTS": "a:2,b:2"}
    assert rank_identity(env) == (3, "b", 1, 4)  # the host and local rank from the plan's placement
    assert local_rank_of(env) == (1, 2)          # no OMPI local size: at least rank + 1


def test_without_placement_the_launchers_local_rank_and_this_host():
    assert rank_identity({"PMI_RANK": "2", "PMI_SIZE": "3", "MPI_LOCALRANKID": "0"}) == (2, socket.gethostname(), 0, 3)
    assert rank_identity({"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"})[1:] == (socket.gethostname(), 1, 2)
    assert rank_identity({}) == (-1, socket.gethostname(), 0, 0)


def test_local_size_and_bad_values():
    assert local_size_text({"MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "4"}) == "4"
    assert local_size_text({}) is None
    assert local_rank_of({"LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4"}) == (2, 4)
    with pytest.raises(RankVariableError):
        local_rank_of({"OMPI_COMM_WORLD_LOCAL_RANK": "x"})
    with pytest.raises(SpecError, match=r"^OMPI_COMM_WORLD_LOCAL_RANK='x' / OMPI_COMM_WORLD_LOCAL_SIZE='2': "
                                        r"expected integers \(set by mpirun\)$"):
        pinning_local_rank_of({"OMPI_COMM_WORLD_LOCAL_RANK": "x", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"})
