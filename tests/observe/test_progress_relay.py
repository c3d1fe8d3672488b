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
