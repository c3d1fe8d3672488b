"""exec/remote_host.py, the host side of the ssh target's commands, run here as real processes (the same argv
ssh would run there): start records the exec'd program's own pid, cancel stops it by that pid (SIGTERM,
grace, SIGKILL), write is atomic, read is bounded.  Over real sshd: tests/targets/test_ssh.py."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from mpirun_kit.exec import remote_host

pytestmark = pytest.mark.timeout(60)


def run(*args: str, stdin: bytes | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(remote_host.argv(sys.executable, *args), input=stdin, capture_output=True, timeout=30, **kw)


def wait_for(path, timeout=10.0):
    end = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < end:
        time.sleep(0.02)
    assert path.exists()


def test_write_is_atomic_makes_parents_and_keeps_bytes(tmp_path):
    target = tmp_path / "a b" / "launch-spec.json"
    r = run("write", str(target), stdin=b'{"x": "\xc3\xa9"}\n')
    assert r.returncode == 0, r.stderr
    assert target.read_bytes() == b'{"x": "\xc3\xa9"}\n'
    assert [p.name for p in target.parent.iterdir()] == ["launch-spec.json"]   # no temporary file left


def test_read_is_bounded_and_silent_when_there_is_no_file(tmp_path):
    (tmp_path / "failure").write_bytes(b"x" * 100)
    r = run("read", str(tmp_path / "failure"), "--limit", "10")
    assert (r.returncode, r.stdout) == (0, b"x" * 10)
    r = run("read", str(tmp_path / "none"), "--limit", "10")
    assert (r.returncode, r.stdout) == (0, b"")


def test_start_records_the_pid_of_the_program_it_becomes(tmp_path):
    pid_file = tmp_path / "algo-1.pid"
    proc = subprocess.Popen(remote_host.argv(sys.executable, "start", "--pid-file", str(pid_file), "--dir",
                                             str(tmp_path / "algo-1"), "--", "sh", "-c", "pwd; exec sleep 30"),
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == str(tmp_path / "algo-1")   # made and entered
        assert int(pid_file.read_text()) == proc.pid                        # exec'd: the same process
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("stubborn", [False, True])
def test_cancel_stops_the_recorded_process_sigterm_then_sigkill(tmp_path, stubborn):
    pid_file = tmp_path / "h.pid"
    trap = "trap '' TERM; " if stubborn else ""
    proc = subprocess.Popen(["sh", "-c", f"{trap}echo $$ > {pid_file}; while :; do sleep 0.05; done"])
    try:
        wait_for(pid_file)
        r = run("cancel", "--pid-file", str(pid_file), "--grace", "1", "--wait", "5")
        assert (r.returncode, r.stdout.decode().strip()) == (0, "gone"), r.stderr
        assert proc.wait(timeout=10) == (-9 if stubborn else -15)
    finally:
        proc.kill()


def test_cancel_without_a_pid_file_says_so_with_its_own_code(tmp_path):
    r = run("cancel", "--pid-file", str(tmp_path / "none.pid"), "--grace", "1", "--wait", "0.3")
    assert (r.returncode, r.stdout.decode().strip()) == (remote_host.NO_PID_FILE, "no-pid-file")
