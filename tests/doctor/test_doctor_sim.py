"""`mpirun_kit doctor` across the simulated cluster (mpirun_kit.sim): the coordinator
runs on algo-1 and reaches algo-2/algo-3 over real ssh.  Each fault (a loose private
key, a peer that does not resolve, a stale NCCL_PROTO, a dead sshd) produces its
failing row and exit code; every fault is undone afterwards."""
from __future__ import annotations

import json
import os
import sys

import pytest

from mpirun_kit.sim import SimCluster

pytestmark = pytest.mark.sim

HOSTS = "algo-1,algo-2,algo-3"


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("the simulated cluster needs root (network namespaces); run the sim tests as root")
    with SimCluster(3, tmp_path_factory.mktemp("doctor-sim"), name="h7doc") as cluster:
        yield cluster


def doctor(sim, *args, env_extra=None):
    env = sim.default_env()
    env.update(env_extra or {})
    return sim.run("algo-1", [sys.executable, "-m", "mpirun_kit.cli.main", "doctor", "--hosts", HOSTS,
                              "--timeout", "90", *args], env=env, timeout=240)


def rows(proc):
    return {(c["host"], c["name"]): c for c in json.loads(proc.stdout)["checks"]}


def test_healthy_cluster_passes_with_allreduce(sim):
    proc = doctor(sim, "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    r = rows(proc)
    for host in ("algo-1", "algo-2", "algo-3"):
        assert r[(host, "ssh-keys")]["status"] == "ok"
        assert r[(host, "sshd")]["detail"] == f"listening on 10.233.0.{host[-1]}:22"
        assert r[(host, "resolve")]["status"] == "ok"
        assert r[(host, "gpus")]["status"] == "absent"
    assert r[("algo-2", "clock-skew")]["status"] == "ok"
    rep = json.loads(proc.stdout)["allreduce"]
    assert (rep["backend"], rep["world_size"], rep["error"]) == ("gloo", 3, None)
    assert rep["busbw_gbps"] > 0


def test_bad_key_mode_on_one_host(sim):
    key = sim.host("algo-2").ssh_dir / "id_ed25519"
    os.chmod(key, 0o644)
    try:
        proc = doctor(sim, "--no-allreduce")
    finally:
        os.chmod(key, 0o600)
    assert proc.returncode == 1, proc.stderr
    assert "algo-2   ssh-keys      FAIL    /root/.ssh/id_ed25519 is 644, expected 600 or 400" in proc.stdout
    assert "algo-1   ssh-keys      ok" in proc.stdout
    assert "doctor: 1 check(s) failed: algo-2/ssh-keys" in proc.stderr


def test_host_that_cannot_resolve_a_peer(sim, tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1\tlocalhost\n10.233.0.1\talgo-1\n10.233.0.2\talgo-2\n")
    # Bind-mounted in algo-2's own mount namespace only: the other hosts keep the full file.
    assert sim.run("algo-2", ["mount", "--bind", str(hosts), "/etc/hosts"]).returncode == 0
    try:
        proc = doctor(sim, "--no-allreduce")
    finally:
        sim.run("algo-2", ["umount", "/etc/hosts"])
    assert proc.returncode == 1, proc.stderr
    assert "algo-2   resolve       FAIL    cannot resolve peer algo-3" in proc.stdout
    assert "fix: add algo-3 to /etc/hosts or DNS on algo-2" in proc.stdout
    assert "algo-1   resolve       ok" in proc.stdout


def test_stale_nccl_proto(sim):
    proc = doctor(sim, "--no-allreduce", env_extra={"NCCL_PROTO": "simple"})
    assert proc.returncode == 1, proc.stderr
    assert "algo-1   stale-env     FAIL    NCCL_PROTO=simple is stale" in proc.stdout
    assert "doctor: 1 check(s) failed: algo-1/stale-env: NCCL_PROTO=simple" in proc.stderr


def test_host_whose_sshd_is_down_exits_69(sim):
    h = sim.host("algo-3")
    sim.stop_sshd("algo-3")
    try:
        proc = doctor(sim, "--json")
    finally:
        sim.popen("algo-3", ["/usr/sbin/sshd", "-D", "-e", "-f", str(h.sshd_config)],
                  log_path=h.dir / "sshd-restarted.log")
    assert proc.returncode == 69, proc.stderr
    r = rows(proc)
    assert r[("algo-3", "reach")]["status"] == "fail"
    assert r[("algo-3", "reach")]["detail"].startswith("could not gather facts: ssh to algo-3:22 failed: ")
    assert r[("cluster", "allreduce")]["detail"].endswith("failed: not run: algo-3 unreachable")
    assert "doctor: could not gather facts from algo-3" in proc.stderr
