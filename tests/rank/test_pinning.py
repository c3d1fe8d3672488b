"""Rank-side pinning: recorded topologies are injected (no GPU here); sched_setaffinity is a
recording callable on GPU topologies (this host's 2 CPUs cannot take a p4d CPU set), and the
real topology reader runs against this host (its sysfs/NVML readers: tests/cluster/test_probe.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.rank.pinning import apply_rank_pinning
from mpirun_kit.cluster.probe import read_topology
from mpirun_kit.cluster.topology import Topology

TOPO = Path(__file__).resolve().parents[1] / "plan" / "topologies"


def load(name: str) -> Topology:
    return Topology.from_dict(json.loads((TOPO / f"{name}.json").read_text()), name)


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, pid, cpus):
        self.calls.append((pid, sorted(cpus)))


def test_p4d_local_rank_5_gets_gpu_5_and_its_cpus():
    rec = Recorder()
    env = apply_rank_pinning({"OMPI_COMM_WORLD_LOCAL_RANK": "5", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"},
                             topology=load("p4d.24xlarge"), setaffinity=rec)
    assert env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "5", "MPIRUN_KIT_GPU": "5",
                   "MPIRUN_KIT_CPUS": "30-35,78-83"}
    assert rec.calls == [(0, list(range(30, 36)) + list(range(78, 84)))]


def test_p5_mpich_variables():
    rec = Recorder()
    env = apply_rank_pinning({"MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "8"}, topology=load("p5.48xlarge"),
                             setaffinity=rec)
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["MPIRUN_KIT_CPUS"] == "0-11,96-107"


def test_existing_cuda_visible_devices_is_respected():
    rec = Recorder()
    env = apply_rank_pinning({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "CUDA_VISIBLE_DEVICES": "6,7"},
                             topology=load("p4d.24xlarge"), setaffinity=rec)
    assert env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "7", "MPIRUN_KIT_GPU": "7",
                   "MPIRUN_KIT_CPUS": "36-47,84-95"}


def test_too_few_visible_devices_message():
    with pytest.raises(SpecError, match=r"local rank 2 but CUDA_VISIBLE_DEVICES='0,1' lists 2 GPU\(s\)"):
        apply_rank_pinning({"LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "3", "CUDA_VISIBLE_DEVICES": "0,1"},
                           topology=load("p4d.24xlarge"), setaffinity=Recorder())


def test_single_gpu():
    rec = Recorder()
    env = apply_rank_pinning({"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"},
                             topology=load("single-gpu"), setaffinity=rec)
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and rec.calls == [(0, [0, 1, 2, 3])]


@pytest.mark.parametrize("environ", [
    {"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},  # no GPU
    {},  # not under a launcher
])
def test_no_gpu_or_no_launcher_is_a_no_op(environ):
    rec = Recorder()
    assert apply_rank_pinning(environ, topology=load("no-gpu"), setaffinity=rec) == {}
    assert rec.calls == []


def test_pinning_none_is_a_no_op():
    rec = Recorder()
    assert apply_rank_pinning({"LOCAL_RANK": "0", "MPIRUN_KIT_PINNING": "none"},
                              topology=load("p4d.24xlarge"), setaffinity=rec) == {}
    assert rec.calls == []


def test_bad_local_rank_message():
    with pytest.raises(SpecError, match=r"OMPI_COMM_WORLD_LOCAL_RANK='x' / OMPI_COMM_WORLD_LOCAL_SIZE='2': "
                                        r"expected integers"):
        apply_rank_pinning({"OMPI_COMM_WORLD_LOCAL_RANK": "x", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
                           topology=load("no-gpu"))


def test_real_host_without_gpu_is_a_no_op():
    """This machine has no GPU and no NVML driver: the real reader must say so and pinning must do nothing."""
    topo = read_topology()
    assert topo.gpus == () and topo.cpus
    assert apply_rank_pinning({"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"}) == {}
