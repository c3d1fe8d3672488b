"""The gatherer: its parsers on recorded /proc and ldconfig text, the NVML reader on a
stand-in NVML (no GPU exists on these machines; the one mock in this area, injected,
not patched), and a real gather of this machine."""
from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from mpirun_kit.doctor import gather
from mpirun_kit.doctor.facts import GpuFact, LibFact, Listener

# /proc/net/tcp of a host with sshd on 10.233.0.2:22 and 127.0.0.1:22, an established
# ssh session, and another listener on 29499.
PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0200E90A:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0100007F:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0
   2: 0200E90A:0016 0100E90A:D2F0 01 00000000:00000000 02:00097A1C 00000000     0        0 3 2 0 20 4 28 10 -1
   3: 00000000:733B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4 1 0 100 0 0 10 0
"""
PROC_NET_TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue
   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000
   1: 0000000000000000FFFF00000200E90A:0016 00000000000000000000000000000000:0000 0A 00000000:00000000
"""
LDCONFIG = """\
1234 libs found in cache `/etc/ld.so.cache'
	libnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2
	libnccl-net.so (libc6,x86-64) => /opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net.so
	libfabric.so.1 (libc6,x86-64) => /opt/amazon/efa/lib/libfabric.so.1
	libc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6
"""


def test_parse_proc_net_tcp_listeners_on_the_ssh_port_only():
    assert gather.parse_proc_net_tcp(PROC_NET_TCP, 22) == (Listener("10.233.0.2", 22), Listener("127.0.0.1", 22))
    assert gather.parse_proc_net_tcp(PROC_NET_TCP6, 22, v6=True) == (
        Listener("::", 22), Listener("::ffff:10.233.0.2", 22))
    assert gather.parse_proc_net_tcp(PROC_NET_TCP, 29499) == (Listener("0.0.0.0", 29499),)


def test_parse_ldconfig_and_classify():
    paths = gather.parse_ldconfig(LDCONFIG)
    assert paths[0] == "/usr/lib/x86_64-linux-gnu/libnccl.so.2"
    assert [(l.name, l.path) for l in gather.classify_libs(paths)] == [
        ("nccl", "/usr/lib/x86_64-linux-gnu/libnccl.so.2"),
        ("aws-ofi-nccl", "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net.so"),
        ("libfabric", "/opt/amazon/efa/lib/libfabric.so.1"),
    ]


def test_lib_version_follows_links(tmp_path):
    real = tmp_path / "libnccl.so.2.26.2"
    real.write_bytes(b"")
    (tmp_path / "libnccl.so.2").symlink_to(real.name)
    assert gather.lib_version(str(tmp_path / "libnccl.so.2")) == "2.26.2"
    # Two names for one file are one library.
    libs = gather.classify_libs([str(tmp_path / "libnccl.so.2"), str(real)])
    assert libs == (LibFact("nccl", str(tmp_path / "libnccl.so.2"), "2.26.2"),)


def test_ofi_nccl_version_from_the_efa_manifest(tmp_path):
    manifest = tmp_path / "efa_installed_packages"
    manifest.write_text("# EFA installer version: 1.38.1\nlibfabric-aws 1.22.0amzn4.0\nlibnccl-ofi 1.13.2-1\n")
    libs = (LibFact("aws-ofi-nccl", "/opt/amazon/ofi-nccl/lib/libnccl-net.so"),)
    assert gather._ofi_nccl_version(libs, manifest)[0].version == "1.13.2"
    assert gather._ofi_nccl_version(libs, tmp_path / "absent") == libs


def test_relevant_env_keeps_no_credentials():
    env = {"NCCL_DEBUG": "INFO", "FI_PROVIDER": "efa", "AWS_SECRET_ACCESS_KEY": "x", "PATH": "/bin",
           "RDMAV_FORK_SAFE": "1"}
    assert gather.relevant_env(env) == (("FI_PROVIDER", "efa"), ("NCCL_DEBUG", "INFO"), ("RDMAV_FORK_SAFE", "1"))


class FakeNVML(SimpleNamespace):
    """Stand-in for pynvml with two GPUs: GPU 1 has an ECC error and one NVLink down."""

    class NVMLError(Exception):
        pass

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_FEATURE_ENABLED = 1

    def nvmlInit(self): pass
    def nvmlShutdown(self): pass
    def nvmlDeviceGetCount(self): return 2
    def nvmlDeviceGetHandleByIndex(self, i): return i
    def nvmlDeviceGetName(self, h): return b"NVIDIA H100 80GB HBM3"
    def nvmlDeviceGetPciInfo(self, h): return SimpleNamespace(busId=f"00000000:{0x18 + h:02X}:00.0".encode())
    def nvmlDeviceGetMemoryInfo(self, h): return SimpleNamespace(total=81559 * 2**20)
    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter): return 3 if h == 1 else 0

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= 4:
            raise self.NVMLError("no such link")
        return 0 if (h == 1 and link == 0) else 1


def test_gpu_facts_from_nvml_with_numa_from_sysfs(tmp_path):
    for bus, node in (("0000:18:00.0", "0"), ("0000:19:00.0", "1")):
        d = tmp_path / "bus/pci/devices" / bus
        d.mkdir(parents=True)
        (d / "numa_node").write_text(node + "\n")
    state, gpus = gather._gpu_facts(tmp_path, FakeNVML())
    assert state == "ok"
    assert gpus == (
        GpuFact(0, "NVIDIA H100 80GB HBM3", "00000000:18:00.0", 0, 81559, 0, 4, 0),
        GpuFact(1, "NVIDIA H100 80GB HBM3", "00000000:19:00.0", 1, 81559, 3, 3, 1),
    )


def test_gather_this_machine(tmp_path):
    ssh = tmp_path / ".ssh"
    ssh.mkdir(mode=0o700)
    (ssh / "id_ed25519").write_text("k")
    os.chmod(ssh / "id_ed25519", 0o644)
    (ssh / "authorized_keys").write_text("")
    # Only names /etc/hosts answers: an unknown name would go to an outside DNS server
    # (the unresolvable case runs inside the simulated cluster, test_doctor_sim.py).
    f = gather.gather_host("me", peers=("localhost",), mounts=(str(tmp_path), "/no/such/dir"),
                           environ={"NCCL_PROTO": "simple", "HOME": "/root"}, ssh_dir=ssh, ssh_port=1)
    assert f.host == "me" and f.nvml.startswith("absent")  # no GPU on these machines
    assert f.env == (("NCCL_PROTO", "simple"),)
    modes = {Path(m.path).name: (m.kind, m.mode) for m in f.ssh_files}
    assert modes[".ssh"] == ("dir", 0o700)
    assert modes["id_ed25519"] == ("private-key", 0o644)
    assert f.resolutions[0].peer == "localhost" and "127.0.0.1" in f.resolutions[0].addresses
    assert f.mounts[0].free_bytes > 0 and f.mounts[0].required
    assert f.mounts[1].error == "No such file or directory"
    assert f.ssh_listeners == ()
