"""The doctor's pure checks on recorded facts (tests/doctor/facts/*.json): no mocks,
whole rows compared, every failing row's text asserted."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mpirun_kit.doctor.checks import (CLUSTER, AllreduceResult, Check, Expectations, check_allreduce,
                                      check_cluster, check_efa, check_env, check_gpus, check_host, check_libraries,
                                      check_mounts, check_resolution, check_ssh, skew_lower_bound)
from mpirun_kit.doctor.coordinate import (DoctorCheckFailed, DoctorReport, DoctorUnreachableError,
                                          raise_for_status)
from mpirun_kit.doctor.facts import FileMode, GpuFact, HostFacts, LibFact, Listener, MountFact, Resolution
from mpirun_kit.errors import SpecError

P4D = HostFacts.from_json((Path(__file__).parent / "facts" / "p4d_algo1.json").read_text(), "p4d_algo1.json")
TWO = Expectations(hosts=("algo-1", "algo-2"), min_free_bytes=100 * 2**30)
# A CPU machine like this one: no NVML, no EFA, no NCCL.
CPU = HostFacts(host="vm", time=0.0, nvml="absent: NVML could not be loaded (NVML Shared Library Not Found)")


def replace(f: HostFacts, **kw) -> HostFacts:
    return dataclasses.replace(f, **kw)


def statuses(rows):
    return [(c.name, c.status) for c in rows]


def test_recorded_p4d_host_is_healthy():
    rows = check_host(P4D, TWO)
    assert all(c.status == "ok" for c in rows), [c for c in rows if c.status != "ok"]
    assert statuses(rows) == [
        ("gpus", "ok"), ("gpu-ecc", "ok"), ("nvlink", "ok"), ("gpu-numa", "ok"), ("efa", "ok"),
        ("nccl", "ok"), ("aws-ofi-nccl", "ok"), ("libfabric", "ok"), ("stale-env", "ok"),
        ("ssh-keys", "ok"), ("sshd", "ok"), ("resolve", "ok"), ("disk", "ok")]


def test_facts_json_round_trip():
    assert HostFacts.from_json(P4D.to_json()) == P4D


def test_facts_json_errors():
    with pytest.raises(SpecError, match=r"facts from algo-2: not valid JSON .*expected the output of "
                                        r"`mpirun_kit doctor --gather-only`"):
        HostFacts.from_json("Warning: Permanently added", "facts from algo-2")
    with pytest.raises(SpecError, match=r"unknown key\(s\) \['gpu_count'\], missing key\(s\) \['nvml'\]; "
                                        r"the hosts run different mpirun_kit versions\?"):
        HostFacts.from_dict({"host": "a", "time": 1, "gpu_count": 8})


def test_gpu_rows_on_p4d():
    assert check_gpus(P4D) == [
        Check("gpus", "algo-1", "ok", "8 x NVIDIA A100-SXM4-40GB, 40960 MiB each"),
        Check("gpu-ecc", "algo-1", "ok", "no uncorrected ECC errors"),
        Check("nvlink", "algo-1", "ok", "96 links up"),
        Check("gpu-numa", "algo-1", "ok", "node 0: GPU 0,1,2,3, node 1: GPU 4,5,6,7"),
    ]


def test_no_nvml_is_absent_not_failed():
    assert check_gpus(CPU) == [
        Check("gpus", "vm", "absent", "no GPUs (NVML could not be loaded (NVML Shared Library Not Found))")]


def test_ecc_errors_and_nvlink_down_fail():
    gpus = list(P4D.gpus)
    gpus[3] = dataclasses.replace(gpus[3], ecc_uncorrected=2, nvlink_active=10, nvlink_inactive=2)
    rows = {c.name: c for c in check_gpus(replace(P4D, gpus=tuple(gpus)))}
    assert rows["gpu-ecc"] == Check("gpu-ecc", "algo-1", "fail",
                                    "GPU 3 (00000000:20:1D.0): 2 uncorrected ECC errors",
                                    "drain this host: reset the GPU (nvidia-smi -r -i N) or replace the instance")
    assert rows["nvlink"].status == "fail"
    assert rows["nvlink"].detail == "GPU 3: 2 of 12 links down"


def test_gpu_without_numa_node_warns():
    gpus = tuple(dataclasses.replace(g, numa_node=None) for g in P4D.gpus[:2])
    row = check_gpus(replace(P4D, gpus=gpus))[-1]
    assert (row.status, row.detail) == ("warn", "node ?: GPU 0,1")
    assert "pinning cannot bind" in row.fix


def test_efa_devices_without_libfabric_fail():
    assert check_efa(replace(P4D, fi_info_efa=False)) == [Check(
        "efa", "algo-1", "fail", "EFA devices rdmap16s27, rdmap32s27, rdmap144s27, rdmap160s27 but "
        "`fi_info -p efa` fails",
        "libfabric cannot open the devices: use the EFA installer's libfabric, run the container with the EFA "
        "devices, and let the security group allow all traffic to itself")]
    assert check_efa(replace(P4D, fi_info_efa=None))[0].detail.endswith("but fi_info is not installed")
    assert check_efa(CPU) == [Check("efa", "vm", "absent", "no EFA devices in /sys/class/infiniband")]


def test_efa_host_without_ofi_plugin_fails():
    libs = tuple(l for l in P4D.libs if l.name != "aws-ofi-nccl")
    rows = {c.name: c for c in check_libraries(replace(P4D, libs=libs))}
    assert rows["aws-ofi-nccl"].status == "fail"
    assert rows["aws-ofi-nccl"].detail == "no aws-ofi-nccl library found"
    assert "NCCL silently falls back to TCP sockets" in rows["aws-ofi-nccl"].fix
    # On a CPU machine a missing library is merely absent.
    assert statuses(check_libraries(CPU)) == [("nccl", "absent"), ("aws-ofi-nccl", "absent"), ("libfabric", "absent")]


def test_two_nccl_versions_warn():
    libs = P4D.libs + (LibFact("nccl", "/usr/lib/x86_64-linux-gnu/libnccl.so.2", "2.18.3"),)
    row = check_libraries(replace(P4D, libs=libs))[0]
    assert row.status == "warn"
    assert row.fix == "several nccl versions on the loader path; the first one found wins"


def test_stale_nccl_proto_fails_unless_allowed():
    f = replace(P4D, env=(("NCCL_PROTO", "simple"),))
    [row] = check_env(f)
    assert row.status == "fail"
    assert row.detail.startswith("NCCL_PROTO=simple is stale (warning): NCCL_PROTO=simple was only needed")
    assert row.fix == "unset NCCL_PROTO (or pass --allow-stale NCCL_PROTO if it is on purpose)"
    assert check_env(f, allow=("NCCL_PROTO",))[0].status == "warn"
    # Other values of NCCL_PROTO are a choice, not a stale preset.
    assert check_env(replace(P4D, env=(("NCCL_PROTO", "LL128"),)))[0].status == "ok"


def test_bad_private_key_mode_fails():
    files = tuple(dataclasses.replace(m, mode=0o644) if m.kind == "private-key" else m for m in P4D.ssh_files)
    row = check_ssh(replace(P4D, ssh_files=files), TWO)[0]
    assert (row.name, row.status) == ("ssh-keys", "fail")
    assert row.detail == "/root/.ssh/id_ed25519 is 644, expected 600 or 400"
    files = tuple(dataclasses.replace(m, mode=0o755) if m.kind == "dir" else m for m in P4D.ssh_files)
    assert check_ssh(replace(P4D, ssh_files=files), TWO)[0].detail == "/root/.ssh is 755, expected 700"


def test_loose_ssh_modes_only_warn_on_a_single_host_run():
    """A one-host job never uses ssh: loose ~/.ssh modes are worth fixing, not a reason to fail (issue 16)."""
    files = tuple(dataclasses.replace(m, mode=0o755) if m.kind == "dir" else m for m in P4D.ssh_files)
    row = check_ssh(replace(P4D, ssh_files=files), Expectations(hosts=("algo-1",)))[0]
    assert (row.name, row.status) == ("ssh-keys", "warn")
    assert row.detail == "/root/.ssh is 755, expected 700 (only multi-host jobs use ssh)"
    assert check_ssh(replace(P4D, ssh_files=files), TWO)[0].status == "fail"


def test_missing_keys_fail_only_on_multi_host():
    files = (FileMode("/root/.ssh", None, "dir"), FileMode("/root/.ssh/authorized_keys", None, "authorized_keys"))
    f = replace(P4D, ssh_files=files, ssh_listeners=())
    multi = check_ssh(f, TWO)
    assert statuses(multi) == [("ssh-keys", "fail"), ("sshd", "fail")]
    assert multi[0].detail == "missing /root/.ssh, /root/.ssh/authorized_keys"
    assert multi[1].detail == "nothing listens on port 22"
    assert multi[1].fix == ("start sshd on the cluster interface: /usr/sbin/sshd -D -e -p 22 "
                            "-o ListenAddress=<cluster address>")
    assert statuses(check_ssh(f, Expectations(hosts=("algo-1",)))) == [("ssh-keys", "skip"), ("sshd", "skip")]


def test_sshd_on_every_interface_warns():
    row = check_ssh(replace(P4D, ssh_listeners=(Listener("0.0.0.0", 22),)), TWO)[1]
    assert (row.status, row.detail) == ("warn", "sshd listens on every interface (0.0.0.0:22)")


def test_unresolvable_and_loopback_peers_fail():
    f = replace(P4D, resolutions=(Resolution("algo-1", ("10.0.1.23",)),
                                  Resolution("algo-2", (), "Name or service not known"),
                                  Resolution("algo-3", ("127.0.1.1",))))
    assert check_resolution(f) == [
        Check("resolve", "algo-1", "fail", "cannot resolve peer algo-2 (Name or service not known)",
              "add algo-2 to /etc/hosts or DNS on algo-1; mpirun and NCCL reach peers by name"),
        Check("resolve", "algo-1", "fail", "peer algo-3 resolves to loopback (127.0.1.1)",
              "fix /etc/hosts on algo-1: algo-3 must map to its cluster address"),
    ]


def test_disk_rows():
    low = replace(P4D, mounts=(MountFact("/fsx", 5 * 2**30, 1200 * 2**30, required=True),
                               MountFact("/ckpt", error="No such file or directory", required=True),
                               MountFact("/opt/ml/checkpoints", error="Permission denied", required=False)))
    assert check_mounts(low, TWO) == [
        Check("disk", "algo-1", "fail", "/fsx: 5.0 GiB free, expected at least 100.0 GiB",
              "free space on /fsx or lower --min-free-gb"),
        Check("disk", "algo-1", "fail", "/ckpt: No such file or directory", "mount /ckpt (FSx/EFS) or fix the path"),
        Check("disk", "algo-1", "warn", "/opt/ml/checkpoints: Permission denied",
              "mount /opt/ml/checkpoints (FSx/EFS) or fix the path"),
    ]
    assert check_mounts(CPU, TWO)[0].status == "skip"


def test_skew_lower_bound():
    assert skew_lower_bound(100.5, 100.0, 101.0) == 0.0     # inside the window: no certain skew
    assert skew_lower_bound(98.0, 100.0, 101.0) == 2.0      # behind
    assert skew_lower_bound(104.0, 100.0, 101.0) == 3.0     # ahead


def test_cluster_rows_skew_unreachable_and_gpu_mismatch():
    algo2 = replace(P4D, host="algo-2", time=1000.0, gpus=P4D.gpus[:7])
    expect = Expectations(hosts=("algo-1", "algo-2", "algo-3"), max_skew_s=1.0)
    rows = check_cluster({"algo-1": P4D, "algo-2": algo2}, {"algo-3": "exit 255: Connection refused"},
                         {"algo-2": (997.0, 997.5)}, expect)
    assert rows == [
        Check("clock-skew", "algo-2", "fail", "clock differs from the coordinator's by at least 2.50 s (limit 1 s)",
              "run chrony/NTP on every host (Amazon Time Sync: 169.254.169.123)"),
        Check("reach", "algo-3", "fail", "could not gather facts: exit 255: Connection refused",
              "check that algo-3 is up and its sshd accepts the job's key (ssh algo-3 true)"),
        Check("gpu-uniform", CLUSTER, "fail",
              "hosts differ in GPUs: algo-1: 8 x NVIDIA A100-SXM4-40GB; algo-2: 7 x NVIDIA A100-SXM4-40GB",
              "use one instance type for every host; replace hosts with missing GPUs"),
    ]


def test_allreduce_rows():
    ok = AllreduceResult(16, "nccl", 8 << 20, 0.002, 4.194304, 7.864)
    assert check_allreduce(ok).detail == ("nccl, 16 ranks, 8 MiB: busbw 7.864 GB/s (algbw 4.194 GB/s, "
                                          "2.0 ms per allreduce)")
    bad = check_allreduce(AllreduceResult(3, "gloo", error="rank 2 on algo-3 exited 1: Connection refused"))
    assert (bad.status, bad.detail) == ("fail", "gloo allreduce over 3 ranks failed: rank 2 on algo-3 exited 1: "
                                                "Connection refused")
    assert check_allreduce(None).status == "skip"


def test_raise_for_status_messages_and_codes():
    fail = Check("resolve", "algo-2", "fail", "cannot resolve peer algo-3 (x)", "add algo-3 to /etc/hosts")
    with pytest.raises(DoctorCheckFailed, match=r"doctor: 1 check\(s\) failed: algo-2/resolve: cannot resolve "
                                                r"peer algo-3 \(x\) -> add algo-3 to /etc/hosts") as e:
        raise_for_status(DoctorReport((fail,)))
    assert e.value.exit_code == 1
    with pytest.raises(DoctorUnreachableError, match=r"could not gather facts from algo-3 \(exit 255\)") as e:
        raise_for_status(DoctorReport((fail,), unreachable=(("algo-3", "exit 255"),)))
    assert e.value.exit_code == 69
    raise_for_status(DoctorReport((Check("gpus", "vm", "absent", "no GPUs"),)))


def test_ssh_client_files_writable_by_others_fail():
    files = P4D.ssh_files + (FileMode("/root/.ssh/config", 0o666, "config"),)
    row = check_ssh(replace(P4D, ssh_files=files), TWO)[0]
    assert (row.status, row.detail) == ("fail", "/root/.ssh/config is 666, expected no group/other write (644 or 600)")
    assert check_ssh(P4D, TWO)[0].detail == ".ssh 700, id_ed25519 600, authorized_keys 600"
