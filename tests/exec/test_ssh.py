"""Parallel sshd readiness: real banner servers on loopback, and an injected probe for timing-free logic."""
import socket
import threading

import pytest

pytestmark = pytest.mark.timeout(60)

from mpirun_kit.errors import SSHUnreachableError
from mpirun_kit.exec.ssh import banner_probe, wait_reachable


def banner_server(payload=b"SSH-2.0-OpenSSH_9.2\r\n"):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            c.sendall(payload)
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_banner_probe_real_sockets():
    good, bad = banner_server(), banner_server(b"HTTP/1.1 400 Bad\r\n")
    try:
        assert banner_probe("127.0.0.1", good.getsockname()[1], 2.0) is None
        assert banner_probe("127.0.0.1", bad.getsockname()[1], 2.0).startswith("answered without an SSH banner")
        assert banner_probe("127.0.0.1", free_port(), 2.0) == "Connection refused"
        assert banner_probe("no-such-host.invalid", 22, 2.0).startswith("name does not resolve")
    finally:
        good.close()
        bad.close()


def test_all_hosts_probed_in_parallel_until_ready():
    calls = {}
    lock = threading.Lock()

    def probe(host, port, timeout):
        with lock:
            calls[host] = calls.get(host, 0) + 1
            n = calls[host]
        # algo-3 needs three tries; the others answer at once.
        return None if host != "algo-3" or n >= 3 else "Connection refused"

    ready = wait_reachable(["algo-2", "algo-3", "algo-4"], 22, 30.0, probe=probe)
    assert set(ready) == {"algo-2", "algo-3", "algo-4"}
    assert calls == {"algo-2": 1, "algo-3": 3, "algo-4": 1}


def test_error_names_every_missing_host():
    srv = banner_server()
    port = srv.getsockname()[1]

    def probe(host, p, timeout):
        return banner_probe("127.0.0.1", port, timeout) if host == "algo-2" else "Connection refused"

    try:
        with pytest.raises(SSHUnreachableError) as e:
            wait_reachable(["algo-2", "algo-3", "algo-4"], port, 0.5, probe=probe)
    finally:
        srv.close()
    assert e.value.hosts == ("algo-3", "algo-4")
    assert e.value.exit_code == 69
    assert str(e.value) == (f"sshd on 2 of 3 worker host(s) never answered on port {port} within 0.5 s: "
                            "algo-3: Connection refused; algo-4: Connection refused. Check that those hosts started "
                            "and run sshd, that their names resolve, or raise timeouts.ssh_ready_s")


def test_cancelled_stops_waiting():
    with pytest.raises(SSHUnreachableError, match=r"within 60 s \(stopped by a signal\)"):
        wait_reachable(["algo-2"], 22, 60.0, probe=lambda *a: "refused", cancelled=lambda: True)


def test_progress_names_pending_hosts():
    start = {}
    seen = []

    def probe(host, port, timeout):
        import time

        start.setdefault(host, time.monotonic())
        # algo-3 answers only after 0.5 s of trying
        return None if host != "algo-3" or time.monotonic() - start[host] > 0.5 else "Connection refused"

    ready = wait_reachable(["algo-2", "algo-3"], 22, 30.0, probe=probe,
                           progress=lambda pending, t: seen.append(pending), progress_every_s=0.1)
    assert set(ready) == {"algo-2", "algo-3"}
    assert seen and set(seen) == {("algo-3",)}


def test_pushed_readiness_ends_the_wait_without_a_probe_answer():
    """Issue 14 item 1: a worker's hello says its sshd answers; the master needs no probe to succeed for it.
    algo-3 runs no entrypoint (nothing pushed) and is found by the probe as before."""
    told = threading.Event()
    asked = []

    def pushed(host, seconds):
        asked.append(host)
        return host == "algo-2" and told.wait(seconds)

    def probe(host, port, timeout):
        if host == "algo-2":
            told.set()          # algo-2's hello arrives while its probe still fails
            return "Connection refused"
        return None

    ready = wait_reachable(["algo-2", "algo-3"], 22, 30.0, probe=probe, pushed=pushed)
    assert set(ready) == {"algo-2", "algo-3"}
    assert "algo-2" in asked
