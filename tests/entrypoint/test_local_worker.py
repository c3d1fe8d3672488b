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

from mpirun_kit.exec.channel import ResultServer
from mpirun_kit.exec.result import JobResult
from mpirun_kit.model import LaunchSpec, Timeouts

from entrypoint_helpers import CLI, free_port, write_spec

pytestmark = pytest.mark.timeout(120)


def start_worker(tmp_path, port, **timeouts):
    spec = LaunchSpec(program=("true",), mpi_flavour="openmpi5", result_port=port,
                      timeouts=Timeouts(**{"master_connect_s": 10.0, "master_silence_s": 10.0,
                                           "daemon_wait_s": 60.0, "daemon_wait_per_host_s": 0.0, **timeouts}))
    args = ["entrypoint", "--role", "worker", "--no-sshd", "--hosts", "127.0.0.1,localhost",
            "--current-host", "localhost", "--opt-ml", str(tmp_path / "opt_ml"),
            "--spec", str(write_spec(tmp_path / "spec.json", spec))]
    return subprocess.Popen(CLI + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def failure(tmp_path):
    return (tmp_path / "opt_ml" / "output" / "failure").read_text()


def wait_connected(server, host="localhost", timeout=30.0):
    assert server.wait_rank_events(lambda _: host in server.connected_workers(), timeout)


def test_follows_daemon_then_exits_with_masters_code(tmp_path):
    port = free_port()
    daemon = tmp_path / "prted"
    os.symlink("/bin/sleep", daemon)
    with ResultServer("127.0.0.1", port, heartbeat_s=0.2) as server:
        w = start_worker(tmp_path, port)
        wait_connected(server)
        d = subprocess.Popen([str(daemon), "1"])
        d.wait(30)
        time.sleep(0.5)  # let the worker see the daemon end (it scans every 0.2 s)
        server.publish(JobResult(3, summary="root cause: rank 5 on algo-3 exited with code 3"))
        out, err = w.communicate(timeout=30)
    assert w.returncode == 3, err
    assert "MPI daemon up" in err and "job result from master: exit code 3" in err
    assert failure(tmp_path) == "root cause: rank 5 on algo-3 exited with code 3\n"


def test_master_connection_closed_exit_75(tmp_path):
    port = free_port()
    with ResultServer("127.0.0.1", port, heartbeat_s=0.2) as server:
        w = start_worker(tmp_path, port)
        wait_connected(server)
    out, err = w.communicate(timeout=30)
    assert w.returncode == 75
    msg = ("worker localhost: master 127.0.0.1 closed the result channel before sending a result "
           "(MPI daemon waiting); the master entrypoint died or was killed: see its log")
    assert f"mpirun_kit: error: {msg}" in err
    assert failure(tmp_path) == f"worker localhost: {msg}\n"


def test_master_silent_exit_75(tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    conns = []
    threading.Thread(target=lambda: conns.append(srv.accept()), daemon=True).start()
    try:
        w = start_worker(tmp_path, srv.getsockname()[1], master_silence_s=1.0)
        out, err = w.communicate(timeout=60)
    finally:
        srv.close()
    assert w.returncode == 75
    assert ("worker localhost: no heartbeat from master 127.0.0.1 for 1 s (MPI daemon waiting); the master host "
            "is gone or unreachable; raise timeouts.master_silence_s if its network is slow") in err


def test_master_never_up_exit_75(tmp_path):
    port = free_port()
    w = start_worker(tmp_path, port, master_connect_s=0.5)
    out, err = w.communicate(timeout=60)
    assert w.returncode == 75
    assert f"master 127.0.0.1 never opened its result channel on port {port} within 0.5 s" in err
    assert "raise timeouts.master_connect_s" in failure(tmp_path)


def test_daemon_never_starts_exit_70(tmp_path):
    port = free_port()
    with ResultServer("127.0.0.1", port, heartbeat_s=0.2):
        w = start_worker(tmp_path, port, daemon_wait_s=0.5)
        out, err = w.communicate(timeout=60)
    assert w.returncode == 70
    assert ("worker localhost: the MPI daemon (prted) never started here within 0.5 s although master 127.0.0.1 "
            "is alive") in err


def test_sigterm_to_worker_without_result_143(tmp_path):
    port = free_port()
    with ResultServer("127.0.0.1", port, heartbeat_s=0.2) as server:
        w = start_worker(tmp_path, port, grace_s=0.5)
        wait_connected(server)
        w.send_signal(15)
        out, err = w.communicate(timeout=30)
    assert w.returncode == 143
    assert "worker localhost stopped by SIGTERM; the master sent no result within the 0.5 s grace period" in \
        failure(tmp_path)
