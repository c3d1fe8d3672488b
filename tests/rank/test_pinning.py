"""Rank-side pinning: recorded topologies are injected (no GPU here); sched_setaffinity is a
recording callable on GPU topologies (this host's 2 CPUs cannot take a p4d CPU set), and the
real topology reader runs against this host and a fake sysfs tree."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.rank.pinning import apply_rank_pinning
from mpirun_kit.cluster.topology import Gpu, NumaNode, Topology
from mpirun_kit.cluster.probe import detect_efa, read_cpu_layout, read_gpus, read_topology

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


def _write(path: Path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_sysfs_layout_and_nvml_read_from_a_fake_tree(tmp_path):
    """A sysfs tree written in tmp and a stand-in for the pynvml module (no GPU driver here)."""
    _write(tmp_path / "devices/system/cpu/online", "0-3\n")
    _write(tmp_path / "devices/system/node/node0/cpulist", "0-1\n")
    _write(tmp_path / "devices/system/node/node1/cpulist", "2-3\n")
    for c, sib in {0: "0-1", 1: "0-1", 2: "2-3", 3: "2-3"}.items():
        _write(tmp_path / f"devices/system/cpu/cpu{c}/topology/thread_siblings_list", sib)
    _write(tmp_path / "bus/pci/devices/0000:a0:1c.0/numa_node", "1\n")
    assert read_cpu_layout(tmp_path) == ((NumaNode(0, (0, 1)), NumaNode(1, (2, 3))), ((0, 1), (2, 3)))

    class FakeNvml:
        class NVMLError(Exception):
            pass

        class _Pci:
            busId = b"00000000:A0:1C.0"

        def nvmlInit(self): pass
        def nvmlShutdown(self): pass
        def nvmlDeviceGetCount(self): return 1
        def nvmlDeviceGetHandleByIndex(self, i): return i
        def nvmlDeviceGetName(self, h): return b"NVIDIA A100-SXM4-40GB"
        def nvmlDeviceGetPciInfo(self, h): return self._Pci()

    assert read_gpus(tmp_path, FakeNvml()) == (Gpu(0, "NVIDIA A100-SXM4-40GB", "00000000:A0:1C.0", 1),)


def _rdma_device(root, name, driver):
    _write(root / f"class/infiniband/{name}/ports/1/state", "4: ACTIVE\n")
    (root / f"bus/pci/drivers/{driver}").mkdir(parents=True, exist_ok=True)
    (root / f"class/infiniband/{name}/device").mkdir(parents=True, exist_ok=True)
    (root / f"class/infiniband/{name}/device/driver").symlink_to(root / f"bus/pci/drivers/{driver}")


def test_detect_efa(tmp_path):
    _rdma_device(tmp_path, "rdmap16s27", "efa")
    # An InfiniBand HCA on the same host is not EFA.
    _rdma_device(tmp_path, "mlx5_0", "mlx5_core")
    info = detect_efa(tmp_path, run=lambda argv: 0 if argv == ["fi_info", "-p", "efa"] else 1)
    assert (info.devices, info.fi_info_ok, info.present) == (("rdmap16s27",), True, True)
    none = detect_efa(tmp_path / "empty", run=lambda argv: 1)
    assert (none.devices, none.fi_info_ok, none.present) == ((), False, False)
