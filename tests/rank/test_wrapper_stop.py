"""The rank wrapper's part in a stop through the result channel (exec/channel/stop.py): a real wrapper process
(``python -m mpirun_kit.rank``, started the way an MPI daemon starts it, without mpirun: what is tested is the
wrapper between its program and the channel) and a real ResultServer on 127.0.0.1 playing the master.

On the master's signed ``{"type": "signal"}`` request the wrapper signals its program, reports the program's
exit, and holds its own exit until the master's release, ``hold_s``, a signal to the wrapper, or the channel's
end; without a request it exits as soon as its program does (mpirun's failure fan-out stays as it was).
The hostile-input cases drive the relay's channel reader directly over a socketpair."""
import contextlib
import os
import signal
import socket
import subprocess
import sys

import pytest

from channel_kit import make_server, rank_env, remove_keys
from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline
from mpirun_kit.exec.channel import wire
from mpirun_kit.exec.channel.rank_link import RankLink
from mpirun_kit.observe.relay import Relay

pytestmark = pytest.mark.timeout(60)
PY = sys.executable
#: a program that says it is ready, then on SIGTERM says so and exits 3 at once.
#: (os.write, not print: the signal may come while print('ready') is still inside the buffered writer.)
TRAPS = ("import os, signal, sys, time\n"
         "signal.signal(signal.SIGTERM, lambda *a: (os.write(1, b'handler ran\\n'), sys.exit(3)))\n"
         "print('ready', flush=True)\n"
         "time.sleep(60)\n")
#: a program with no handler: SIGTERM kills it.
NO_HANDLER = "import time; print('ready', flush=True); time.sleep(60)"


@pytest.fixture
def server():
    s = make_server({0: "hostx"})
    yield s
    s.close()
    remove_keys(s)


def start_wrapper(server, program):
    env = {"PATH": os.environ["PATH"], "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1",
           "MPIRUN_KIT_HOSTS": "hostx:1", "MPIRUN_KIT_PINNING": "none",
           **rank_env(server)}
    proc = subprocess.Popen([PY, "-m", "mpirun_kit.rank", "--", PY, "-c", program], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    assert server.wait_rank_events(lambda evs: any(e["event"] == "start" for e in evs), 10), proc.stderr.read()
    return proc


@contextlib.contextmanager
def running_wrapper(server, program):
    """A wrapper running ``program``, killed at the end whatever the test found."""
    proc = start_wrapper(server, program)
    try:
        yield proc
    finally:
        proc.kill()


def exit_reported(server):
    assert server.wait_rank_events(lambda evs: any(e["event"] == "exit" for e in evs), 10)
    return next(e for e in server.rank_events() if e["event"] == "exit")


def held(proc, for_s=0.5):
    """True if the wrapper is still there ``for_s`` seconds on (a state, not a timing: it never exits by itself)."""
    try:
        proc.wait(timeout=for_s)
    except subprocess.TimeoutExpired:
        return True
    return False


def stop(server, hold_s=30.0):
    assert server.send_to_ranks([0], {"type": "signal", "signal": "SIGTERM", "hold_s": hold_s}) == [0]


def test_stop_signals_the_program_and_holds_the_wrapper_until_released(server):
    with running_wrapper(server, TRAPS) as proc:
        stop(server)
        assert exit_reported(server)["exit_code"] == 3        # the program's exit reaches the master at once
        assert proc.stdout.readline() == "handler ran\n"
        assert held(proc)                                     # ... but mpirun would not see the rank end yet
        assert server.send_to_ranks([0], {"type": "release"}) == [0]
        # Released: 0 to mpirun, so it ends instead of aborting (the master has the 3 from the report).
        assert proc.wait(timeout=10) == 0


def test_a_program_killed_by_the_stop_is_reported_and_released_with_0(server):
    with running_wrapper(server, NO_HANDLER) as proc:
        stop(server)
        assert exit_reported(server)["signal"] == "SIGTERM"
        assert held(proc)
        server.send_to_ranks([0], {"type": "release"})
        assert proc.wait(timeout=10) == 0


def test_the_hold_ends_by_itself_after_hold_s(server):
    with running_wrapper(server, TRAPS) as proc:
        stop(server, hold_s=0.5)
        assert exit_reported(server)["exit_code"] == 3
        assert proc.wait(timeout=10) == 3                     # no release was ever sent


def test_a_signal_to_the_held_wrapper_ends_the_hold(server):
    """mpirun's own SIGTERM (or the MPI daemon's death) reaches a held wrapper: it exits at once."""
    with running_wrapper(server, TRAPS) as proc:
        stop(server)
        exit_reported(server)
        assert held(proc, 0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 3


def test_the_channels_end_ends_the_hold(server):
    with running_wrapper(server, TRAPS) as proc:
        stop(server)
        exit_reported(server)
        server.close()                                        # the master is gone
        assert proc.wait(timeout=10) == 3


def test_without_a_stop_the_wrapper_exits_with_its_program(server):
    """A rank failing on its own is no stop: mpirun must see it at once (and abort the others as before)."""
    with running_wrapper(server, TRAPS) as proc:
        program_pid = next(e for e in server.rank_events() if e["event"] == "start")["program_pid"]
        os.kill(program_pid, signal.SIGTERM)                  # its program ends, and no master asked for it
        assert proc.wait(timeout=10) == 3
        assert exit_reported(server)["exit_code"] == 3


# -- hostile or malformed requests: the relay's reader, fed over a socketpair --------------------------------

KEY = b"k" * 32
JOB, RUN, CONN = "test-job", b"r" * 16, b"c" * 16


def master_lines(*msgs, key=KEY):
    """Lines the master would send this rank's connection, numbered from its first."""
    session = wire.Session(JOB, RUN, CONN, master_end=True)
    return [session.seal(m, key, "m") for m in msgs]


def relay_with(lines):
    ours, theirs = socket.socketpair()
    r, w = os.pipe()
    os.close(w)
    signalled = []
    link = RankLink("127.0.0.1:1", 0, KEY, JOB)
    link.sock, link.session = ours, wire.Session(JOB, RUN, CONN, master_end=False)
    relay = Relay(link, {"rank": 0, "host": "hostx"}, r)
    relay.pid = 1
    relay._signal_program = signalled.append
    for line in lines:
        theirs.sendall(line)
    theirs.close()
    while relay._on_channel():
        pass
    return relay, signalled


@pytest.mark.parametrize("msg", [
    {"type": "signal", "signal": "SIGKILL", "hold_s": 5},            # not one a wrapper forwards
    {"type": "signal", "signal": "SIGTERM", "hold_s": -1},
    {"type": "signal", "signal": "SIGTERM", "hold_s": 1e9},
    {"type": "signal", "signal": "SIGTERM", "hold_s": "5"},
    {"type": "signal", "signal": "SIGTERM", "hold_s": True},
    {"type": "signal", "signal": "SIGTERM"},
    {"type": "signal", "signal": "SIGTERM", "hold_s": float("nan")},
    {"type": "signal", "signal": "SIGTERM", "hold_s": None},
    {"type": "signal", "signal": ["SIGTERM"], "hold_s": 5},
])
def test_malformed_stop_requests_are_ignored(msg):
    relay, signalled = relay_with(master_lines(msg))
    assert (signalled, relay.hold_until) == ([], None)


def test_stop_and_release_need_the_channel_key():
    other = b"x" * 32
    relay, signalled = relay_with(master_lines({"type": "signal", "signal": "SIGTERM", "hold_s": 5},
                                               {"type": "release"}, key=other) + [b"garbage\n"])
    assert (signalled, relay.hold_until, relay.released) == ([], None, False)
    relay, signalled = relay_with(master_lines({"type": "signal", "signal": "SIGTERM", "hold_s": 5},
                                               {"type": "release"}))
    assert (signalled, relay.hold_until is not None, relay.released) == ([signal.SIGTERM], True, True)
    assert relay.hold(lambda: False) == "released"


def test_hold_without_a_stop_returns_at_once():
    relay, _ = relay_with([])
    deadline = Deadline(SYSTEM_CLOCK, 5)
    assert relay.hold(lambda: False) == "no stop" and not deadline.expired()
