"""dist.py: rank/world/local rank and rendezvous from each launcher's variables (pure)."""
from __future__ import annotations

import pytest

from mpirun_kit.errors import LaunchError, SpecError
from mpirun_kit.maskrcnn.dist import DistInfo, Comm, read_dist_env, resolve_rendezvous


def test_single_process_without_launcher():
    assert read_dist_env({"PATH": "/bin"}) == DistInfo()


def test_open_mpi():
    env = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "8", "MASTER_ADDR": "algo-1", "MASTER_PORT": "29500",
           "RANK": "99", "WORLD_SIZE": "99"}  # Open MPI's own variables win over stale torch ones
    assert read_dist_env(env) == DistInfo(5, 16, 1, 8, "algo-1", 29500, "openmpi")


def test_mpich_pmi_with_launcher_provided_address():
    env = {"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2",
           "MPIRUN_KIT_MASTER_ADDR": "10.0.0.7:23456"}
    assert read_dist_env(env) == DistInfo(2, 4, 0, 2, "10.0.0.7", 23456, "pmi")


def test_torchrun():
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1234"}
    assert read_dist_env(env) == DistInfo(3, 4, 1, 2, "127.0.0.1", 1234, "torchrun")


def test_open_mpi_without_address_has_none_until_rendezvous():
    info = read_dist_env({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"})
    assert (info.master_addr, info.master_port, info.distributed, info.is_main) == (None, None, False, True)
    assert resolve_rendezvous(info) is info  # a world of one needs no rendezvous


def test_bad_values_name_the_variable():
    with pytest.raises(SpecError, match=r"environment variable OMPI_COMM_WORLD_RANK='x': expected an integer"):
        read_dist_env({"OMPI_COMM_WORLD_RANK": "x", "OMPI_COMM_WORLD_SIZE": "2"})
    with pytest.raises(SpecError, match=r"rank 4 is outside world size 2 \(torchrun variables\)"):
        read_dist_env({"RANK": "4", "WORLD_SIZE": "2"})


def test_torchrun_without_address_is_a_launch_error():
    info = read_dist_env({"RANK": "1", "WORLD_SIZE": "2"})
    with pytest.raises(LaunchError, match="rank 1 of 2 \\(torchrun\\) has no rendezvous address; expected MASTER_ADDR"):
        resolve_rendezvous(info)


def test_single_comm_is_identity():
    import torch

    c = Comm("none", 0, 1)
    t = torch.tensor([1.0, 2.0])
    assert torch.equal(c.allreduce_sum(t), t) and c.gather_object({"a": 1}) == [{"a": 1}]
    assert c.broadcast_object(5) == 5
