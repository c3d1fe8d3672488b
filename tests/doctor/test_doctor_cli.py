"""`mpirun_kit doctor` on this machine (real processes): GPU/EFA rows report "absent",
a stale variable or a bad key mode fails with exit 1, bad input exits 64, and the
request's commands print as whole values."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mpirun_kit.doctor.coordinate import DoctorRequest
from mpirun_kit.errors import ClusterError, SpecError

PY = sys.executable


def doctor(*args: str, env_extra: dict | None = None, home=None) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "HOME": str(home or "/nonexistent")}
    env.update(env_extra or {})
    # "localhost": a name /etc/hosts answers on any machine (an unknown one would go to DNS).
    return subprocess.run([PY, "-m", "mpirun_kit.cli.main", "doctor", "--as-host", "localhost", *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_healthy_cpu_host_json(tmp_path):
    proc = doctor("--json", "--mount", str(tmp_path), "--min-free-gb", "0.001", "--no-allreduce")
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    rows = {c["name"]: c for c in rep["checks"]}
    assert rep["ok"] is True
    assert rows["gpus"]["status"] == "absent" and rows["efa"]["status"] == "absent"
    assert rows["stale-env"]["status"] == "ok"
    assert rows["disk"]["status"] == "ok"
    assert rep["facts"][0]["host"] == "localhost"


def test_stale_nccl_proto_fails_with_exit_1():
    proc = doctor("--no-allreduce", env_extra={"NCCL_PROTO": "simple"})
    assert proc.returncode == 1
    assert "stale-env     FAIL    NCCL_PROTO=simple is stale (warning)" in proc.stdout
    assert "fix: unset NCCL_PROTO (or pass --allow-stale NCCL_PROTO if it is on purpose)" in proc.stdout
    assert "mpirun_kit: error: doctor: 1 check(s) failed: localhost/stale-env: NCCL_PROTO=simple" in proc.stderr
    allowed = doctor("--no-allreduce", "--allow-stale", "NCCL_PROTO", env_extra={"NCCL_PROTO": "simple"})
    assert allowed.returncode == 0, allowed.stderr


def test_private_key_readable_by_others_warns_on_a_single_host_run(tmp_path):
    """Only multi-host jobs use ssh: on one host a loose key is worth fixing, not a failed doctor."""
    ssh = tmp_path / ".ssh"
    ssh.mkdir(mode=0o700)
    (ssh / "id_ed25519").write_text("k")
    os.chmod(ssh / "id_ed25519", 0o644)
    proc = doctor("--no-allreduce", home=tmp_path)
    assert proc.returncode == 0, proc.stdout
    assert (f"ssh-keys      WARN    {ssh}/id_ed25519 is 644, expected 600 or 400 (only multi-host jobs use ssh)"
            in proc.stdout)


def test_two_local_ranks_run_the_allreduce():
    proc = doctor("--json", "--ranks-per-host", "2", "--allreduce-mb", "1", "--allreduce-port", "29531",
                  "--timeout", "120", "-v")  # -v: progress lines
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["allreduce"]["backend"] == "gloo" and rep["allreduce"]["world_size"] == 2
    assert rep["allreduce"]["busbw_gbps"] > 0
    assert "doctor: allreduce smoke test, 2 ranks on 1 host(s)" in proc.stderr


@pytest.mark.parametrize("args, message", [
    (("--hosts", ","), "--hosts ',': expected host names separated by commas"),
    (("--hosts", "a,a"), "doctor: host(s) ['a'] listed twice in --hosts; name each host once"),
    (("--ranks-per-host", "0"), "doctor: --ranks-per-host 0: expected 1 or more"),
    (("--max-parallel", "0"), "doctor: --max-parallel 0: expected 1 or more"),
])
def test_bad_input_exits_64(args, message):
    proc = doctor(*args)
    assert proc.returncode == 64
    assert message in proc.stderr


def test_unreachable_host_exits_69():
    # Nothing listens on 127.0.0.1:1: the ssh connection fails at once, the host is reported unreachable.
    proc = doctor("--hosts", "localhost,127.0.0.1", "--ssh-port", "1", "--timeout", "60")
    assert proc.returncode == 69
    assert "reach         FAIL    could not gather facts: ssh to 127.0.0.1:1 failed: " in proc.stdout
    assert "doctor: could not gather facts from 127.0.0.1 (ssh to 127.0.0.1:1 failed: " in proc.stderr


def test_request_commands_are_the_dry_run():
    req = DoctorRequest(hosts=("algo-1", "algo-2"), local_host="algo-1", python="/py", mounts=("/fsx",),
                        allreduce_bytes=1024, timeout_s=30)
    assert req.commands() == [
        "# algo-1: gather facts in-process",
        "ssh -p 22 algo-2 (paramiko; host key checked against /root/.ssh/known_hosts) -- \'/py -m mpirun_kit.cli.main doctor "
        "--gather-only --as-host algo-2 --hosts algo-1,algo-2 --ssh-dir /root/.ssh --ssh-port 22 --mount /fsx'",
        "/py -m mpirun_kit.workloads.allreduce --rank 0 --world-size 2 --local-rank 0 --master algo-1 --port 29499 "
        "--bytes 1024 --iters 5 --timeout 30",
        "ssh -p 22 algo-2 (paramiko; host key checked against /root/.ssh/known_hosts) -- \'/py -m mpirun_kit.workloads.allreduce --rank 1 "
        "--world-size 2 --local-rank 0 --master algo-1 --port 29499 --bytes 1024 --iters 5 --timeout 30'",
    ]
    proc = doctor("--hosts", "localhost,algo-2", "--dry-run", "--remote-python", "/opt/conda/bin/python")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[0] == "# localhost: gather facts in-process"
    assert lines[1].startswith("ssh -p 22 algo-2 (paramiko; host key checked against ")
    assert "/known_hosts) -- '/opt/conda/bin/python -m mpirun_kit.cli.main doctor --gather-only --as-host algo-2 " in lines[1]
    assert lines[2].startswith(f"{PY} -m mpirun_kit.workloads.allreduce --rank 0 ")


def test_request_rejects_no_hosts():
    with pytest.raises(SpecError, match="doctor: no hosts; pass --hosts algo-1,algo-2"):
        DoctorRequest(hosts=(), local_host="x", python="py")


def test_hosts_and_paths_from_a_job_spec(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("apiVersion: mpirun_kit/v1\nkind: Job\nname: doc\ntarget:\n  type: sim\n"
                    "resources:\n  hosts: 2\nprogram:\n  command: [\"true\"]\n"
                    "checkpoint:\n  local_path: /fsx/ckpt\n")
    proc = doctor(str(spec), "--dry-run", "--no-allreduce")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1] == (
        "ssh -p 22 algo-1 (paramiko; host key checked against /nonexistent/.ssh/known_hosts) -- '" + PY +
        " -m mpirun_kit.cli.main doctor "
        "--gather-only --as-host algo-1 --hosts algo-1,algo-2 --ssh-dir /nonexistent/.ssh --ssh-port 22 "
        "--mount /fsx/ckpt'")
    both = doctor(str(spec), "--hosts", "a")
    assert both.returncode == 64
    assert f"doctor: got both --hosts and {spec}; the job spec names the hosts" in both.stderr


def test_gather_all_reads_each_hosts_last_line_and_names_failures():
    """The ssh step is replaced by a real shell printing what a remote host would (no hosts to ssh to here)."""
    from mpirun_kit.doctor.coordinate import gather_all
    from mpirun_kit.doctor.facts import HostFacts

    remote = HostFacts(host="algo-2", time=5.0, nvml="absent: no driver")
    req = DoctorRequest(hosts=("algo-1", "algo-2", "algo-3"), local_host="algo-1", python="py")

    def start(req_, host, argv):
        assert argv[:5] == ["py", "-m", "mpirun_kit.cli.main", "doctor", "--gather-only"]
        if host == "algo-3":  # what exec/remote.start_remote raises for a refused connection
            raise ClusterError("ssh to algo-3:22 failed: [Errno 111] Connection refused")
        script = f"echo 'Welcome to algo-2'; echo '{remote.to_json()}'"
        return subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    local = HostFacts(host="algo-1", time=1.0, nvml="ok")
    facts, unreachable, windows = gather_all(req, lambda: local, start=start)
    assert facts == {"algo-1": local, "algo-2": remote}
    assert unreachable == {"algo-3": "ssh to algo-3:22 failed: [Errno 111] Connection refused"}
    assert set(windows) == {"algo-2"} and windows["algo-2"][0] <= windows["algo-2"][1]
