"""The worker role as a real process against a master stand-in on loopback: it never hangs.

The master side is the real ResultServer (or a bare socket that never speaks);
the MPI daemon is /bin/sleep run through a symlink named ``prted`` (the
openmpi5 flavour's daemon, which nothing else on this machine runs).
"""
import os
import socket
import subprocess
import threading
import time

import pytest

from mpirun_kit.exec.channel.keys import worker_key_from_secret
from mpirun_kit.exec.channel.server import ResultServer
from mpirun_kit.exec.result import JobResult
from mpirun_kit.spec.launch_spec import LaunchSpec, Timeouts

from result_kit import code_and_text
from entrypoint_helpers import CLI, free_port, write_spec

pytestmark = pytest.mark.timeout(120)


SECRET = bytes(range(32))


def master(port, heartbeat_s=0.2, **kw):
    """The real ResultServer as the master would run it for hosts 127.0.0.1 (master) and localhost."""
    # job "": the worker is given no --job and no TRAINING_JOB_NAME.
    return ResultServer("127.0.0.1", port, job="", run_key=os.urandom(32), worker_key=worker_key_from_secret(SECRET, ""),
                        rank_hosts={0: "127.0.0.1"}, workers=["localhost"], heartbeat_s=heartbeat_s, **kw)


def start_worker(tmp_path, port, secret=SECRET, **timeouts):
    spec = LaunchSpec(program=("true",), mpi_flavour="openmpi5", result_port=port,
                      timeouts=Timeouts(**{"master_connect_s": 10.0, "master_silence_s": 10.0,
                                           "daemon_wait_s": 60.0, "daemon_wait_per_host_s": 0.0, **timeouts}))
    args = ["entrypoint", "--role", "worker", "--no-sshd", "--hosts", "127.0.0.1,localhost",
            "--current-host", "localhost", "--opt-ml", str(tmp_path / "opt_ml"),
            "--spec", str(write_spec(tmp_path / "spec.json", spec))]
    if secret is not None:
        (tmp_path / "job-secret").write_text(secret.hex() + "\n")
        args += ["--secret-file", str(tmp_path / "job-secret")]
    return subprocess.Popen(CLI + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def failure(tmp_path):
    return (tmp_path / "opt_ml" / "output" / "failure").read_text()


def wait_connected(server, host="localhost", timeout=30.0):
    assert server.wait_rank_events(lambda _: host in server.connected_workers(), timeout)


def test_follows_daemon_then_exits_with_masters_code(tmp_path):
    port = free_port()
    daemon = tmp_path / "prted"
    os.symlink("/bin/sleep", daemon)
    with master(port) as server:
        w = start_worker(tmp_path, port)
        wait_connected(server)
        d = subprocess.Popen([str(daemon), "1"])
        d.wait(30)
        time.sleep(0.5)  # let the worker see the daemon end (it scans every 0.2 s)
        server.publish(JobResult(3, reason="root cause: rank 5 on algo-3 exited with code 3"))
        out, err = w.communicate(timeout=30)
    assert w.returncode == 3, err
    assert "job result from master: exit code 3" in err
    assert code_and_text(failure(tmp_path)) == "exit_code=3\nroot cause: rank 5 on algo-3 exited with code 3\n"


def test_master_connection_closed_exit_75(tmp_path):
    port = free_port()
    with master(port) as server:
        w = start_worker(tmp_path, port)
        wait_connected(server)
    out, err = w.communicate(timeout=30)
    assert w.returncode == 75
    msg = ("worker localhost: master 127.0.0.1 closed the result channel before sending a result "
           "(MPI daemon waiting); the master entrypoint died or was killed: see its log")
    assert f"mpirun_kit: error: {msg}" in err
    assert code_and_text(failure(tmp_path)) == f"exit_code=75\nworker localhost: {msg}\n"


def test_master_silent_exit_75(tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    conns = []
    threading.Thread(target=lambda: conns.append(srv.accept()), daemon=True).start()
    try:
        w = start_worker(tmp_path, srv.getsockname()[1], master_silence_s=1.0, master_connect_s=1.0)
        out, err = w.communicate(timeout=60)
    finally:
        srv.close()
    assert w.returncode == 75
    # Issue 23: a master greets every connection first (exec/channel/wire.py); one that never does is not one.
    # (Its last error is the connect's own timeout: this stand-in's backlog of 1 is full by then.)
    assert "master 127.0.0.1 never opened its result channel on port" in err


def test_master_never_up_exit_75(tmp_path):
    port = free_port()
    w = start_worker(tmp_path, port, master_connect_s=0.5)
    out, err = w.communicate(timeout=60)
    assert w.returncode == 75
    assert f"master 127.0.0.1 never opened its result channel on port {port} within 0.5 s" in err
    assert "raise timeouts.master_connect_s" in failure(tmp_path)


def test_daemon_never_starts_exit_70(tmp_path):
    port = free_port()
    with master(port):
        w = start_worker(tmp_path, port, daemon_wait_s=0.5)
        out, err = w.communicate(timeout=60)
    assert w.returncode == 70
    assert ("worker localhost: the MPI daemon (prted) never started here within 0.5 s although master 127.0.0.1 "
            "is alive") in err


def test_sigterm_to_worker_without_result_143(tmp_path):
    """No result after grace_s + STOP_MARGIN_S: the worker stops its MPI daemon itself and exits 143."""
    port = free_port()
    daemon = tmp_path / "prted"
    os.symlink("/bin/sleep", daemon)
    with master(port) as server:
        w = start_worker(tmp_path, port, grace_s=0.5)
        wait_connected(server)
        d = subprocess.Popen([str(daemon), "60"])
        try:
            time.sleep(0.5)  # the worker sees the daemon (it scans every 0.2 s)
            w.send_signal(15)
            out, err = w.communicate(timeout=30)
            assert d.wait(10) == -15, "the worker did not stop its MPI daemon after the deadline"
        finally:
            d.kill()
    assert w.returncode == 143
    assert (f"worker localhost stopped by SIGTERM; the master sent no result within 3.5 s (grace_s + 3 s), so this "
            f"host's MPI daemon(s) {d.pid} were sent SIGTERM") in failure(tmp_path)


def test_sigterm_to_worker_leaves_the_ranks_to_the_masters_mpirun(tmp_path):
    """Every host gets SIGTERM at once on SageMaker: the worker does not stop its MPI daemon under the ranks
    (their SIGTERM handlers' output goes through it); it exits with the result the master sends."""
    port = free_port()
    daemon = tmp_path / "prted"
    os.symlink("/bin/sleep", daemon)
    with master(port) as server:
        w = start_worker(tmp_path, port, grace_s=5.0)
        wait_connected(server)
        d = subprocess.Popen([str(daemon), "60"])
        try:
            time.sleep(0.5)
            w.send_signal(15)
            time.sleep(1.0)    # the old worker sent its daemon SIGTERM at once
            assert d.poll() is None, "the worker stopped its MPI daemon under the ranks"
            server.publish(JobResult(143, reason="the job was stopped by SIGTERM sent to the master entrypoint"))
            out, err = w.communicate(timeout=30)
            assert d.poll() is None
        finally:
            d.kill()
    assert w.returncode == 143, err
    assert "job result from master: exit code 143" in err
    assert "the master stops the ranks here (SIGTERM to each program, up to 5 s for its handler, then mpirun ends)" in err


def test_worker_heartbeats_keep_it_alive_and_its_silence_is_noticed(tmp_path):
    """Issue 12 finding 2: the master hears from the worker; a stopped worker goes silent and is lost."""
    port = free_port()
    with master(port, worker_silence_s=2.0) as server:
        w = start_worker(tmp_path, port)
        wait_connected(server)
        time.sleep(3.0)  # longer than worker_silence_s: only heartbeats keep it from being lost
        assert server.lost_workers() == {}
        w.send_signal(19)  # SIGSTOP: the process is there, its heartbeats stop (like a cut network)
        try:
            assert server.wait_rank_events(lambda _: "localhost" in server.lost_workers(), 30.0)
        finally:
            w.send_signal(18)
            server.publish(JobResult(0))
            w.communicate(timeout=30)


def test_wrong_secret_is_never_served(tmp_path):
    """A worker (or anyone) with another job's secret is not a worker of this job."""
    port = free_port()
    with master(port) as server:
        w = start_worker(tmp_path, port, secret=bytes(32), master_silence_s=2.0)
        out, err = w.communicate(timeout=60)
        assert server.connected_workers() == frozenset()
        assert any(r.kind == "mac" for r in server.rejected())
    assert w.returncode == 75  # the master never speaks to it: it gives up after master_silence_s


def test_flavour_is_detected_beside_the_sshd_wait(tmp_path):
    """Issue 14 item 1: `mpirun --version` runs beside the worker's sshd wait, not before it, and the flavour
    it finds still decides the daemon the worker follows.  Both are stand-ins on loopback: the sshd is a
    listener that answers an SSH banner (the worker's start_sshd finds it answering and starts none), and
    mpirun's --version answers only once that sshd has been probed, else after 20 s: run one after the
    other, as before, the probe came only after the answer."""
    fake = tmp_path / "bin"
    fake.mkdir()
    probed, order = tmp_path / "sshd-probed", tmp_path / "order"
    (fake / "mpirun").write_text(
        f"#!/bin/sh\nfor i in $(seq 200); do [ -e {probed} ] && break; sleep 0.1; done\n"
        f"if [ -e {probed} ]; then echo beside > {order}; else echo before > {order}; fi\n"
        "echo 'mpirun (Open MPI) 4.1.4'\n")
    (fake / "mpirun").chmod(0o755)
    sshd = socket.socket()
    sshd.bind(("127.0.0.1", 0))
    sshd.listen(8)

    def answer():
        while True:
            try:
                conn, _ = sshd.accept()
            except OSError:
                return
            probed.touch()
            with conn:
                conn.sendall(b"SSH-2.0-OpenSSH_stand-in\r\n")
    threading.Thread(target=answer, daemon=True).start()
    port = free_port()
    spec = LaunchSpec(program=("true",), result_port=port, ssh_port=sshd.getsockname()[1],
                      timeouts=Timeouts(master_connect_s=30.0, master_silence_s=30.0, daemon_wait_s=60.0))
    (tmp_path / "job-secret").write_text(SECRET.hex() + "\n")
    args = ["entrypoint", "--role", "worker", "--hosts", "127.0.0.1,localhost", "--current-host", "localhost",
            "--opt-ml", str(tmp_path / "opt_ml"), "--spec", str(write_spec(tmp_path / "spec.json", spec)),
            "--secret-file", str(tmp_path / "job-secret")]
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    try:
        with master(port) as server:
            w = subprocess.Popen(CLI + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            wait_connected(server)
            server.publish(JobResult(0))
            out, err = w.communicate(timeout=60)
    finally:
        sshd.close()
    assert w.returncode == 0, err
    assert order.read_text() == "beside\n"
    assert "worker localhost: connected to master 127.0.0.1; waiting for orted" in err   # openmpi4's daemon
