"""Host discovery for pinning and tuning (mpirun_kit/cluster/probe.py): sysfs read from a fake tree written
in tmp, NVML through a stand-in module (no GPU driver here), EFA devices told apart from other RDMA devices."""
from __future__ import annotations

from pathlib import Path

from mpirun_kit.cluster.probe import detect_efa, read_cpu_layout, read_gpus
from mpirun_kit.cluster.topology import Gpu, NumaNode


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


def test_detect_efa(tmp_path, monkeypatch):
    _rdma_device(tmp_path, "rdmap16s27", "efa")
    # An InfiniBand HCA on the same host is not EFA.
    _rdma_device(tmp_path, "mlx5_0", "mlx5_core")
    # fi_info is asked through the runner (exec/command.py's, cluster/local.py Runner) only where installed.
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")
    found = "provider: efa\n    fabric: efa\n"
    info = detect_efa(tmp_path, run=lambda argv: found if argv == ["fi_info", "-p", "efa"] else "")
    assert (info.devices, info.fi_info_ok, info.present) == (("rdmap16s27",), True, True)
    none = detect_efa(tmp_path / "empty", run=lambda argv: "fi_getinfo: -61 (No data available)\n")
    assert (none.devices, none.fi_info_ok, none.present) == ((), False, False)

    def hangs(argv):
        raise TimeoutError("fi_info -p efa gave no answer within 10 s")

    assert detect_efa(tmp_path / "empty", run=hangs).fi_info_ok is False
    assert detect_efa(tmp_path / "empty").fi_info_ok is None   # no runner: libfabric not asked
