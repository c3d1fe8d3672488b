"""progress.step in a real program -> the wrapper's Relay -> a signed line on a real socket; stack requests.

The master's end is a plain listening socket here (the channel's own tests cover the
server); the program is a real Python process, its stacks are read with py-spy (or
faulthandler when py-spy is absent).
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from mpirun_kit.exec.channel import wire
from mpirun_kit.exec.channel.rank_link import RankLink
from mpirun_kit.observe import relay as relay_mod
from mpirun_kit.observe.relay import Relay, prepare

KEY = b"k" * 32
JOB = "test-job"
PROGRAM = """
import sys, time
from mpirun_kit import progress
def waits_here():
    open(sys.argv[1], "w").close()
    time.sleep(60)
for i in range(5):
    progress.step(i)
    time.sleep(0.05)
progress.step("not a number")   # never raises into the program
waits_here()
"""


class Master:
    """The master's end, bare: greets the one connection (wire.py), checks each line's MAC, seals its requests."""

    def __init__(self, sender="r3"):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.conn = None
        self.buf = b""
        self.sender = sender
        run, conn = os.urandom(16), os.urandom(16)
        self.session = wire.Session(JOB, run, conn, master_end=True)
        self.accepted = threading.Event()

        def accept():
            self.conn, _ = self.listener.accept()
            self.conn.sendall(wire.greeting(run, conn))
            self.accepted.set()

        threading.Thread(target=accept, daemon=True).start()

    def send(self, msg, key=KEY):
        assert self.accepted.wait(20)
        self.conn.sendall(self.session.seal(msg, key, "m"))

    def messages(self, until, timeout=20.0):
        end = time.monotonic() + timeout
        got = []
        assert self.accepted.wait(timeout)
        while time.monotonic() < end:
            self.conn.settimeout(max(0.01, end - time.monotonic()))
            try:
                chunk = self.conn.recv(65536)
            except socket.timeout:
                break
            self.buf += chunk
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                body = self.session.open(line, KEY, self.sender)
                assert body is not None, line
                got.append(json.loads(body))
            if until(got):
                return got
        raise AssertionError(f"timed out; got {got}")


def start_wrapped(tmp_path, rank=3, host="algo-2"):
    """Start PROGRAM behind a Relay the way rank/wrapper.py does: (master, relay, child, ready file, stack file)."""
    master = Master(f"r{rank}")
    link = RankLink(master.addr, rank, KEY, JOB)
    assert link.send({"rank": rank, "host": host, "event": "start", "t": time.time()})   # as the wrapper does
    env, r, w, stack_file = prepare(dict(os.environ))
    ready = tmp_path / "ready"
    child = subprocess.Popen([sys.executable, "-c", PROGRAM, str(ready)], env=env, pass_fds=(w,))
    os.close(w)
    rel = Relay(link, {"rank": rank, "host": host}, r, stack_file).start(child.pid)
    return master, rel, child, ready, stack_file


@pytest.fixture
def wrapped(tmp_path):
    master, rel, child, ready, _ = start_wrapped(tmp_path)
    yield master, rel, child, ready
    child.kill()
    child.wait()
    rel.stop()


def wait_file(path, timeout=20.0):
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.05)


def test_steps_arrive_signed_and_the_last_one_is_sent(wrapped):
    master, rel, child, ready = wrapped
    got = master.messages(lambda g: any(m.get("step") == 4 for m in g))
    got = [m for m in got if m["event"] != "start"]
    assert all(m["type"] == "rank" and m["event"] == "progress" and m["rank"] == 3 and m["host"] == "algo-2"
               for m in got)
    steps = [m["step"] for m in got]
    assert steps == sorted(steps) and steps[-1] == 4


def ask_stacks(master, ready):
    """Once the program waits in waits_here(): the master's stacks request, and the wrapper's reply."""
    wait_file(ready)
    master.messages(lambda g: any(m.get("step") == 4 for m in g))
    master.send({"type": "stacks"})
    got = master.messages(lambda g: any(m.get("event") == "stacks" for m in g))
    reply = next(m for m in got if m["event"] == "stacks")
    return reply, [f["name"] for t in reply["threads"] for f in t["frames"]]


def test_stack_request_answered_with_the_programs_frames(wrapped):
    master, rel, child, ready = wrapped
    reply, names = ask_stacks(master, ready)
    assert reply["how"] == "py-spy", reply
    assert "waits_here" in names, reply


def test_stacks_by_faulthandler_without_pyspy(tmp_path, monkeypatch):
    monkeypatch.setattr(relay_mod, "find_pyspy", lambda: None)
    master, rel, child, ready, stack_file = start_wrapped(tmp_path, 0, "algo-1")
    assert stack_file and os.path.exists(stack_file)
    try:
        reply, names = ask_stacks(master, ready)
        assert reply["how"] == "faulthandler", reply
        assert "waits_here" in names, reply
        assert child.poll() is None   # SIGUSR1 went to faulthandler, not the default action
    finally:
        child.kill()
        child.wait()
        rel.stop()


def test_forged_stack_request_is_ignored(wrapped):
    master, rel, child, ready = wrapped
    master.messages(lambda g: any(m.get("step") == 4 for m in g))
    master.send({"type": "stacks"}, key=b"x" * 32)
    with pytest.raises(AssertionError, match="timed out"):
        master.messages(lambda g: any(m.get("event") == "stacks" for m in g), timeout=2.0)


def test_step_is_a_noop_outside_mpirun_kit():
    env = {k: v for k, v in os.environ.items() if k != "MPIRUN_KIT_PROGRESS_FD"}
    out = subprocess.run([sys.executable, "-c", "from mpirun_kit import progress\n"
                          "for i in range(3): progress.step(i)\nprint('ok', progress._fd)"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == "ok None\n", out.stderr


def test_step_never_blocks_when_nobody_reads():
    """The wrapper stops reading: 100k steps still finish (the pipe fills, reports are dropped)."""
    r, w = os.pipe()
    env = {**os.environ, "MPIRUN_KIT_PROGRESS_FD": str(w)}
    out = subprocess.run([sys.executable, "-c", "from mpirun_kit import progress\n"
                          "for i in range(100000): progress.step(i)\nprint('done')"],
                         env=env, pass_fds=(w,), capture_output=True, text=True, timeout=60)
    os.close(w)
    os.close(r)
    assert out.returncode == 0 and out.stdout == "done\n", out.stderr


def test_stop_wakes_the_thread(tmp_path, monkeypatch):
    """The wrapper's exit waits for stop(): it wakes the thread instead of waiting out its select
    (made a minute long here, so a stop that did not wake it would leave the thread running)."""
    monkeypatch.setattr(relay_mod, "PROGRESS_EVERY_S", 60.0)
    master, rel, child, ready, _ = start_wrapped(tmp_path)
    try:
        wait_file(ready)              # the program now sleeps: nothing more arrives on the pipe
        master.messages(lambda g: any(m.get("step") == 0 for m in g))
        rel.stop()
        assert not rel._thread.is_alive()
    finally:
        child.kill()
        child.wait()


def test_find_pyspy_takes_only_absolute_path_entries(tmp_path, monkeypatch):
    """Issue 23: a relative PATH entry ("bin", "." or empty) names whatever directory the wrapper runs in; before,
    py-spy was taken from there, and run as the program's tracer."""
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "py-spy"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    assert relay_mod.find_pyspy("bin::.") is None
    assert relay_mod.find_pyspy(f"bin:{tmp_path / 'bin'}") == str(fake)


def test_stale_stack_files_of_dead_wrappers_are_removed(tmp_path):
    """Issue 23: a SIGKILLed wrapper never removes its stack file; the next wrapper's start removes it (and no live
    wrapper's, nor anyone else's file)."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"{relay_mod.STACK_FILE_PREFIX}{dead.pid}.abc"
    live = tmp_path / f"{relay_mod.STACK_FILE_PREFIX}{os.getpid()}.def"
    other = tmp_path / "unrelated.txt"
    for f in (stale, live, other):
        f.write_text("x")
    assert relay_mod.remove_stale_stack_files(str(tmp_path)) == [stale.name]
    assert not stale.exists() and live.exists() and other.exists()


def test_a_stop_is_handled_while_a_stack_dump_runs(tmp_path, monkeypatch):
    """Issue 23: the dump (py-spy, up to 8 s) ran inline in the relay thread, so a stop request behind it waited.
    Now it runs on its own thread: the stop's signal reaches the program while the dump is still going."""
    import threading as _threading

    dumping, finish = _threading.Event(), _threading.Event()

    def slow_dump(pid, stack_file, ready, clock):
        dumping.set()
        finish.wait(20)
        return [], "slow"

    monkeypatch.setattr(relay_mod, "collect_stacks", slow_dump)
    master, rel, child, ready, _ = start_wrapped(tmp_path)
    signalled = []
    rel._signal_program = signalled.append
    try:
        master.send({"type": "stacks"})
        assert dumping.wait(20)
        master.send({"type": "signal", "signal": "SIGTERM", "hold_s": 5})
        deadline = time.monotonic() + 20
        while not signalled and time.monotonic() < deadline:
            time.sleep(0.02)
        assert signalled == [15] and rel.hold_until is not None     # handled while the dump still runs
        finish.set()
        got = master.messages(lambda g: any(m.get("event") == "stacks" for m in g))
        assert next(m for m in got if m.get("event") == "stacks")["how"] == "slow"
    finally:
        finish.set()
        child.kill()
        child.wait()
        rel.stop()
