"""exec/remote.py's work on every host at once: per-host results as data, concurrency, retries to a deadline.

The sessions themselves are exercised against real sshd by tests/targets/test_ssh.py (simulated
hosts); here ``connect`` is injected so that a host that refuses, one with a bad key and one that
answers late can be had on one machine without a network.
"""
from __future__ import annotations

import threading

import paramiko
import pytest

from mpirun_kit.exec.remote import PARALLEL_HOSTS, command_line, connect_hosts, on_every_host, write_argv

from clock_kit import FakeClock


def test_on_every_host_runs_them_at_once_and_keeps_each_result():
    hosts = [f"h{i}" for i in range(8)]
    # Every call waits for all the others: a one-at-a-time loop would break the barrier.
    barrier = threading.Barrier(len(hosts), timeout=30)

    def fn(host: str, item: int) -> str:
        barrier.wait()
        return f"{host}:{item}"

    assert on_every_host([(h, i) for i, h in enumerate(hosts)], fn) == {h: f"{h}:{i}" for i, h in enumerate(hosts)}
    assert on_every_host([], fn) == {}
    assert PARALLEL_HOSTS >= len(hosts)


def test_connect_hosts_sorts_hosts_into_ready_unreachable_and_bad_keys():
    clock = FakeClock(wall=0.0)
    calls: dict[str, int] = {}
    lines: list[str] = []

    # The hosts' threads share the fake clock, and every backoff of "down" moves it on: were "down" to run
    # many rounds before "late" ran its third, the 5 s would be spent and "late" never connect (1 run in ~6).
    # "down" answers once "late" has connected, so the order is the test's, not the scheduler's.
    late_connected = threading.Event()

    def connect(host: str):
        calls[host] = calls.get(host, 0) + 1
        if host == "late" and calls[host] < 3:
            raise ConnectionRefusedError("Connection refused")
        if host == "late":
            late_connected.set()
        if host == "down":
            assert late_connected.wait(30), "'late' never connected"
            raise OSError("No route to host")
        if host == "stranger":
            raise paramiko.SSHException("Server 'stranger' not found in known_hosts")
        return f"client-{host}"

    clients, unreachable, bad_keys = connect_hosts(["up", "late", "down", "stranger"], connect, 5.0, clock=clock,
                                                   status=lines.append, name=lambda h: f"root@{h}:22")
    assert clients == {"up": "client-up", "late": "client-late"}
    assert unreachable == {"down": "No route to host"}
    assert bad_keys == {"stranger": "Server 'stranger' not found in known_hosts"}
    assert calls["stranger"] == 1                        # a key problem is not retried
    assert calls["late"] == 3 and calls["down"] > 3      # the others are, until the deadline
    assert clock.now >= 5.0
    assert any(line.startswith("ssh: ") and "waiting for root@down:22 (attempt 1): No route to host" in line
               for line in lines)


def test_a_remote_command_is_an_argv_joined_in_one_place():
    """Issue 31 item 8: no shell snippet is sent; the argv's words reach the host as they are."""
    argv = write_argv("/opt/py 3/bin/python", "/w/run 1/launch-spec.json")
    assert argv == ["/opt/py 3/bin/python", "-m", "mpirun_kit.exec.remote_host", "write", "/w/run 1/launch-spec.json"]
    assert command_line(argv) == ("'/opt/py 3/bin/python' -m mpirun_kit.exec.remote_host write "
                                  "'/w/run 1/launch-spec.json'")
    assert command_line(["sh", "-c", "echo $$; rm -rf /"]) == "sh -c 'echo $$; rm -rf /'"


@pytest.mark.parametrize("n", [1, PARALLEL_HOSTS + 3])
def test_on_every_host_visits_every_host(n):
    seen = on_every_host([(f"h{i}", i) for i in range(n)], lambda host, i: i * 2)
    assert seen == {f"h{i}": i * 2 for i in range(n)}


def test_a_bounded_command_ends_itself_on_its_host_past_the_margin():
    """``bounded``: the host's coreutils ``timeout`` kills the command ``margin_s`` after our deadline, since
    neither a closed session nor ssh's signal request ends a root login's command (session 7's notes)."""
    import subprocess

    from mpirun_kit.exec.remote import HOST_TIMEOUT_MARGIN_S, bounded

    assert bounded(["sbatch", "--parsable", 3], 60) == ["timeout", "--signal=KILL", f"{60 + HOST_TIMEOUT_MARGIN_S:g}",
                                                         "sbatch", "--parsable", "3"]
    assert bounded(["x"], 2.5, 0.5)[:3] == ["timeout", "--signal=KILL", "3"]
    # run here as a host would: a command that would sleep 60 s is killed, and ``timeout`` with it (it signals
    # its own process group), so the shell or sshd above sees SIGKILL
    res = subprocess.run(bounded(["sleep", "60"], 0.1, 0.2), timeout=30)
    assert res.returncode == -9


def test_every_remote_command_of_the_slurm_runner_and_the_doctor_is_bounded(monkeypatch):
    """The Slurm target's login-node runner and doctor's gather start their remote commands under ``bounded``
    with their own deadlines (the ssh target's preflight already was)."""
    from mpirun_kit.doctor import coordinate
    from mpirun_kit.exec import remote
    from mpirun_kit.targets.slurm.runner import SshRunner
    from mpirun_kit.targets.ssh import PREFLIGHT_MARGIN_S, preflight_command

    started = []

    class _Proc:
        returncode, channel = 0, None

        def communicate(self, timeout=None):
            return "", ""

    def fake_start(settings, host, command, **kwargs):
        started.append((host, command))
        return _Proc()

    monkeypatch.setattr(remote, "start_remote", fake_start)
    SshRunner({"host": "login1", "port": 22}).run(["squeue", "--json"], timeout=30)
    req = coordinate.DoctorRequest(hosts=("algo-1", "algo-2"), local_host="algo-1", python="/usr/bin/python3",
                                   timeout_s=40)
    coordinate._start(req, "algo-2", ["/usr/bin/python3", "-m", "mpirun_kit.doctor", "gather"])
    assert started == [("login1", remote.bounded(["squeue", "--json"], 30)),
                       ("algo-2", remote.bounded(["/usr/bin/python3", "-m", "mpirun_kit.doctor", "gather"], 40))]
    assert preflight_command("/usr/bin/python3", 25)[:3] == ["timeout", "--signal=KILL", f"{25 + PREFLIGHT_MARGIN_S:g}"]
