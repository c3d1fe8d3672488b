"""The tool's own lines (issue 16, defect 5): one format, warnings and errors by default,
-v / -vv for more, -q for only the result, and a live status line on waits that names what
it waits for and the last error seen -- drawn only on a terminal."""
from __future__ import annotations

import io
import logging
import threading

import pytest

from mpirun_kit.exec import verbosity
from mpirun_kit.targets import base


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class FakeClock:
    """Time moves only when something sleeps (threads share it)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.lock = threading.Lock()

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1e9 + self.now

    def sleep(self, s: float) -> None:
        with self.lock:
            self.now += s


@pytest.fixture
def chatty(monkeypatch):
    """`validate` replaced by a command that logs at every level, waits with a status line and prints a result."""
    from mpirun_kit.cli import validate

    def talk(args) -> int:
        log = logging.getLogger("mpirun_kit.example")
        log.debug("detail")
        log.info("progress")
        log.warning("careful")
        p = base.Progress(clock=FakeClock())
        p.update("waiting for sshd on algo-2")
        p.note("sshd up on algo-2")
        p.done("retrying after a failure")
        print("RESULT")
        return 0
    monkeypatch.setattr(validate, "_validate", talk)


def test_default_prints_warnings_and_the_result_only(cli, chatty):
    r = cli("validate", "x")
    assert (r.rc, r.out) == (0, "RESULT\n")
    # not a terminal: no status line; no info or debug lines
    assert r.err == "mpirun_kit: warning: careful\nmpirun_kit: retrying after a failure (at 0.0s)\n"


def test_v_adds_progress_and_vv_debug_lines_with_their_module(cli, chatty):
    assert cli("validate", "x", "-v").err == (
        "mpirun_kit: progress\nmpirun_kit: warning: careful\nmpirun_kit: [0s] waiting for sshd on algo-2\n"
        "mpirun_kit: sshd up on algo-2 (at 0.0s)\nmpirun_kit: retrying after a failure (at 0.0s)\n")
    assert cli("-vv", "validate", "x").err.startswith(
        "mpirun_kit: debug: mpirun_kit.example: detail\nmpirun_kit: progress\n")


def test_q_prints_only_the_result(cli, chatty):
    r = cli("-q", "validate", "x")
    assert (r.rc, r.out, r.err) == (0, "RESULT\n", "")


def test_library_default_is_unchanged_after_a_command(cli, chatty):
    """The CLI's choice lasts one command: library callers (and other tests) keep every line."""
    handlers = list(logging.getLogger().handlers)
    cli("-q", "validate", "x")
    assert verbosity.LEVEL == verbosity.VERBOSE
    assert logging.getLogger().handlers == handlers


def test_status_line_is_redrawn_in_place_on_a_terminal(monkeypatch):
    monkeypatch.setattr(verbosity, "LEVEL", verbosity.DEFAULT)
    tty, clock = Tty(), FakeClock()
    p = base.Progress(stream=tty, clock=clock)
    p.update("ssh: waiting for root@algo-2:22: Connection refused")
    clock.sleep(3)
    p.update("ssh: waiting for root@algo-2:22: timed out")
    p.done("ssh: all 2 host(s) ready")
    assert tty.getvalue() == ("\r\033[Kmpirun_kit: [0s] ssh: waiting for root@algo-2:22: Connection refused"
                              "\r\033[Kmpirun_kit: [3s] ssh: waiting for root@algo-2:22: timed out"
                              "\r\033[Kmpirun_kit: ssh: all 2 host(s) ready (at 3.0s)\n")


def test_ssh_wait_names_the_host_and_the_last_error(monkeypatch):
    """While a host refuses connections the status line says which and why (it said nothing for minutes)."""
    from mpirun_kit.targets.ssh import connect_all

    monkeypatch.setattr(verbosity, "LEVEL", verbosity.DEFAULT)
    tries = {"algo-1": 0, "algo-2": 0}

    def connect(req, host):
        tries[host] += 1
        if host == "algo-2" and tries[host] < 4:
            raise ConnectionRefusedError(111, "Connection refused")
        return object()
    tty, clock = Tty(), FakeClock()
    req = {"hosts": [{"name": "algo-1"}, {"name": "algo-2"}], "ready_timeout_s": 60, "user": "ubuntu", "port": 2222}
    clients = connect_all(req, connect=connect, clock=clock, progress=base.Progress(stream=tty, clock=clock))
    assert set(clients) == {"algo-1", "algo-2"}
    assert ("/2 host(s) ready; waiting for ubuntu@algo-2:2222 (attempt 3): [Errno 111] Connection refused"
            in tty.getvalue())
