"""The result channel's server over real loopback sockets: rank reports, worker hello/heartbeat/result/ack, master
loss, and the hostile peers of issue 12 (forged, malformed, unauthenticated, idle and flooding connections).
The replays, reorders and identity checks of issue 23 are in test_server_trust.py."""
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

pytestmark = pytest.mark.timeout(60)

from channel_kit import JOB, WORKER_KEY, rank_link, worker_link
from channel_kit import make_server as _make_server
from channel_kit import raw as raw_session
from mpirun_kit.errors import MasterLostError
from mpirun_kit.exec.channel import wire
from mpirun_kit.exec.channel.link import MasterLink
from mpirun_kit.exec.channel.server import ResultServer
from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline
from mpirun_kit.exec.result import JobResult, RankFailure

RANK_HOSTS = {0: "h", 1: "h", 2: "algo-2", 3: "algo-2"}
WORKERS = [f"algo-{i}" for i in range(2, 10)]


def make_server(**kw):
    return _make_server(RANK_HOSTS, WORKERS, **{"heartbeat_s": 0.05, **kw})


@pytest.fixture
def server():
    s = make_server()
    yield s
    s.close()


def connect_worker(server, host="algo-2", key=WORKER_KEY):
    return worker_link(server, host, key)


def raw(server, *lines: bytes) -> socket.socket:
    s, _ = raw_session(server)
    for line in lines:
        s.sendall(line)
    return s


def signed(server, msg, key, sender="r1"):
    """A raw connection whose first line is ``msg``, sealed for it with ``key`` as ``sender``."""
    s, session = raw_session(server)
    s.sendall(session.seal(msg, key, sender))
    return s


def exit_report(rank=1, host="h", **kw):
    return {"event": "exit", "rank": rank, "host": host, "exit_code": 3, "signal": None, "t": 2.0, **kw}


def wait_rejected(server, n, timeout=5.0):
    deadline = Deadline(SYSTEM_CLOCK, timeout)
    while len(server.rejected()) < n and not deadline.expired():
        time.sleep(0.01)
    return [r.reason for r in server.rejected()]


def is_closed(sock, timeout=5.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_rank_reports_arrive(server):
    link = rank_link(server, 1)
    assert link.send({"event": "start", "rank": 1, "host": "h", "t": 1.0}) and link.send(exit_report())
    assert server.wait_rank_events(lambda evs: len(evs) == 2, 5.0)
    assert server.rank_failures() == (RankFailure(1, "h", 3, None, 2.0),)
    link.close()


def test_unreachable_report_is_best_effort():
    from mpirun_kit.exec.channel.rank_link import RankLink

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert RankLink(f"127.0.0.1:{port}", 0, os.urandom(32), JOB, timeout=0.5).send({"event": "start"}) is False


def test_worker_gets_heartbeats_then_result_and_acks(server):
    link = connect_worker(server)
    kinds = set()
    while "heartbeat" not in kinds:
        msg = link.recv(2.0)
        assert msg is not None
        kinds.add(msg["type"])
    assert server.connected_workers() == {"algo-2"}
    assert server.publish(JobResult(3, reason="rank 1 failed")) == 1
    while True:
        msg = link.recv(2.0)
        if msg and msg["type"] == "result":
            break
    assert (msg["exit_code"], msg["result"]["reason"], msg["result"]["exit_code"]) == (3, "rank 1 failed", 3)
    link.send({"type": "ack", "host": "algo-2"})
    assert server.wait_acks({"algo-2"}, 5.0) == frozenset()
    link.close()


def test_hello_pushes_sshd_readiness(server):
    """A worker whose sshd answers says so in its hello; the master's sshd wait ends on it (issue 14 item 1)."""
    assert not server.wait_sshd_up("algo-2", 0.05)
    plain = connect_worker(server, "algo-3")
    link = worker_link(server, "algo-2", sshd_up=True)
    assert server.wait_sshd_up("algo-2", 5.0)
    assert server.connected_workers() >= {"algo-3"} and not server.wait_sshd_up("algo-3", 0.05)
    link.close()
    plain.close()


def test_late_worker_gets_result_at_once(server):
    server.publish(JobResult(0))
    link = connect_worker(server, "algo-3")
    assert link.recv(5.0) == {"type": "result", "exit_code": 0, "result": JobResult(0).to_dict()}
    link.close()


def test_master_close_is_eof(server):
    link = connect_worker(server)
    server.close()
    with pytest.raises(EOFError):
        for _ in range(100):
            link.recv(0.5)


def test_connect_deadline_message():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(MasterLostError) as e:
        MasterLink.connect("127.0.0.1", port, "algo-2", Deadline(SYSTEM_CLOCK, 0.3), key=WORKER_KEY, job=JOB)
    assert str(e.value).startswith(f"master 127.0.0.1 never opened its result channel on port {port} within 0.3 s "
                                   "(last error: Connection refused)")
    assert str(e.value).endswith("check its log, or raise timeouts.master_connect_s")


def test_unacked_hosts_reported(server):
    assert server.wait_acks({"algo-9"}, 0.1) == {"algo-9"}


def test_many_workers_in_parallel(server):
    links = [connect_worker(server, h) for h in WORKERS]
    assert server.wait_rank_events(lambda _: len(server.connected_workers()) == 8, 5.0)
    got = []

    def read(link):
        while True:
            m = link.recv(5.0)
            if m and m["type"] == "result":
                got.append(m["exit_code"])
                return

    threads = [threading.Thread(target=read, args=(lk,)) for lk in links]
    for t in threads:
        t.start()
    assert server.publish(JobResult(7)) == 8
    for t in threads:
        t.join(10)
    assert got == [7] * 8
    for lk in links:
        lk.close()


def test_send_to_a_peer_that_stopped_reading_never_blocks():
    """A peer whose buffers are full is dropped at once; blocking there would stall every heartbeat."""
    from mpirun_kit.exec.channel.server import _Peer

    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    peer = _Peer(a, session=wire.Session(JOB, b"r" * 16, b"c" * 16, master_end=True))
    sent = 0
    while peer.send_msg({"type": "heartbeat", "pad": "x" * 1000}, WORKER_KEY):
        sent += 1
        assert sent < 100_000
    assert not peer.alive and not peer.send_raw(b"x\n")
    a.close()
    b.close()


# -- issue 12, finding 1: nobody without the job's key changes the result ------------------------------------
def test_unsigned_forged_failure_is_dropped(server):
    """The attack measured on the cluster: one plain JSON line turned a success into a failure."""
    line = (json.dumps({"type": "rank", "event": "exit", "rank": 1, "exit_code": 3, "host": "algo-1; any text",
                        "t": 1.0}) + "\n").encode()
    s = raw(server, line)
    assert is_closed(s)  # never authenticated: the connection is closed at once
    assert wait_rejected(server, 1) == ["not a signed line (no MAC and sender)"]
    assert server.rank_failures() == () and server.rank_events() == ()


def test_report_signed_with_another_key_is_dropped(server):
    assert rank_link(server, 1, key=os.urandom(32)).send(exit_report())
    assert wait_rejected(server, 1) == ["bad MAC (forged, replayed, reordered, or from another run or job)"]
    assert server.rank_failures() == ()
    assert server.rejection_counts() == {"mac": 1}


@pytest.mark.parametrize("fields, reason", [
    ({"exit_code": "x"}, "exit_code 'x' is not an integer 0-255"),
    ({"exit_code": 300}, "exit_code '300' is not an integer 0-255"),
    ({"exit_code": True}, "exit_code 'True' is not an integer 0-255"),
    ({"host": "algo-1; any text"}, "rank 1 reported host 'algo-1; any text'; the plan places it on h"),
    ({"rank": 99}, "rank 1's connection sent a report for rank '99'"),
    ({"rank": "1"}, "rank 1's connection sent a report for rank '1'"),
    ({"exit_code": None, "signal": "SIGFOO"}, "signal 'SIGFOO' is not a signal name"),
    ({"signal": "SIGKILL"}, "an exit report needs exactly one of exit_code and signal"),
    ({"t": float("nan")}, "time 'nan' is not a finite number"),
    ({"t": float("inf")}, "time 'inf' is not a finite number"),
    ({"event": "boom"}, "unknown rank event 'boom'"),
])
def test_signed_but_invalid_report_is_dropped_and_the_valid_one_counts(server, fields, reason):
    link = rank_link(server, 1)
    link.send(exit_report(**fields))
    assert wait_rejected(server, 1) == [reason]
    assert server.rank_events() == ()
    link.send(exit_report())  # same connection: still served
    assert server.wait_rank_events(lambda evs: len(evs) == 1, 5.0)
    assert server.rank_failures() == (RankFailure(1, "h", 3, None, 2.0),)
    link.close()


def test_one_event_per_rank_and_kind(server):
    link = rank_link(server, 1)
    link.send(exit_report(exit_code=0))
    link.send(exit_report(exit_code=3, t=1.0))  # a second exit (signed anew: a replayed one fails the MAC)
    assert wait_rejected(server, 1) == ["second 'exit' report for rank 1"]
    assert server.rank_failures() == () and len(server.rank_events()) == 1
    link.close()


@pytest.mark.parametrize("signed", [True, False])
def test_deeply_nested_json_never_kills_the_server(server, signed):
    import hmac

    body = b"[" * 200_00 + b"]" * 200_00
    s, session = raw_session(server)
    line = session.seal({"x": 1}, server.rank_key(1), "r1")[:64] + b" r1 " + body + b"\n"
    if signed:
        ctx = session._out + b"r1\0" + b"0\0" + body
        line = hmac.digest(server.rank_key(1), ctx, "sha256").hex().encode() + b" r1 " + body + b"\n"
    s.sendall(line)
    s.close()
    assert wait_rejected(server, 1) == ["malformed JSON" if signed else
                                        "bad MAC (forged, replayed, reordered, or from another run or job)"]
    link = rank_link(server, 1)
    link.send(exit_report())
    assert server.wait_rank_events(lambda evs: len(evs) == 1, 5.0)
    link.close()


def test_overlong_line_closes_the_connection(server):
    s = raw(server, b"0" * (100 * 1024))
    assert is_closed(s)
    assert wait_rejected(server, 1) == ["line longer than 65536 bytes"]


def test_worker_messages_need_the_worker_key_and_a_planned_host(server):
    link = signed(server, {"type": "hello", "host": "algo-2"}, server.rank_key(1))  # a rank's key: not a worker's
    forged = connect_worker(server, "not-a-host")
    reasons = wait_rejected(server, 2)
    assert "rank connection sent a 'hello' message" in reasons
    assert "hello from 'not-a-host', which is not a worker of this job" in reasons
    assert server.connected_workers() == frozenset()
    link.close()
    forged.close()


def test_worker_ignores_a_forged_result(tmp_path):
    """A master stand-in that speaks without the key: the worker never takes its 'result'."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    run, conn_nonce = os.urandom(16), os.urandom(16)

    def serve():
        conn, _ = srv.accept()
        conn.sendall(wire.greeting(run, conn_nonce))
        served.append(conn)

    served = []
    t = threading.Thread(target=serve)
    t.start()
    link = MasterLink.connect("127.0.0.1", srv.getsockname()[1], "algo-2", Deadline(SYSTEM_CLOCK, 5.0),
                              key=WORKER_KEY, job=JOB)
    t.join()
    conn = served[0]
    master = wire.Session(JOB, run, conn_nonce, master_end=True)
    other = wire.Session(JOB, run, conn_nonce, master_end=True)
    conn.sendall(b'{"type": "result", "exit_code": 0, "summary": ""}\n'
                 + other.seal({"type": "result", "exit_code": 0}, os.urandom(32), "m")
                 + master.seal({"type": "result", "exit_code": "0"}, WORKER_KEY, "m")
                 + master.seal({"type": "result", "exit_code": 5, "summary": "ok"}, WORKER_KEY, "m"))
    got = [link.recv(2.0) for _ in range(4)]
    assert got == [None, None, None, {"type": "result", "exit_code": 5, "summary": "ok"}]
    for s in (conn, srv):
        s.close()
    link.close()


def test_connections_from_other_addresses_are_refused_at_accept_when_no_kernel_filter(monkeypatch):
    from mpirun_kit.exec.channel import filter as peer_filter

    monkeypatch.setattr(peer_filter, "attach", lambda sock, addresses: "no kernel filter: test")
    with make_server(allowed_peers={"10.255.255.1"}) as server:
        s, _ = raw_session(server, greet=False)
        assert is_closed(s)
        assert wait_rejected(server, 1) == ["connection from an address that is not one of the job's hosts"]
        assert server.rejection_counts() == {"address": 1}


def test_silent_connection_closed_after_first_message_timeout():
    with make_server(first_message_s=0.3) as server:
        s = raw(server)
        assert is_closed(s)
        assert wait_rejected(server, 1) == ["no valid message within 0.3 s of connecting"]
        assert server.rejection_counts() == {"timeout": 1}


def test_idle_connections_cost_no_threads_and_cannot_crowd_out_workers():
    """300 idle connections (the measured attack) against a cap of 20: one thread, and a worker still gets in."""
    with make_server(max_connections=20) as server:
        before = threading.active_count()
        idle = [raw_session(server, greet=False)[0] for _ in range(300)]
        assert threading.active_count() == before
        link = connect_worker(server, "algo-2")
        assert server.wait_rank_events(lambda _: server.connected_workers() == {"algo-2"}, 10.0)
        server.publish(JobResult(0))
        while (m := link.recv(5.0)) is None or m["type"] != "result":
            pass
        assert m["exit_code"] == 0
        assert any("connection closed to make room" in r.reason for r in server.rejected())
        for s in idle:
            s.close()
        link.close()


_EMFILE_SERVER = r"""
import os, resource, sys, time
from mpirun_kit.exec.channel.server import ResultServer
from mpirun_kit.exec.result import JobResult
key = bytes.fromhex(sys.argv[1])
n = len(os.listdir("/proc/self/fd"))
resource.setrlimit(resource.RLIMIT_NOFILE, (n + 24, n + 24))
s = ResultServer("127.0.0.1", 0, job="test-job", run_key=os.urandom(32), worker_key=key, rank_hosts={0: "h"},
                 workers=["algo-2"], first_message_s=1.5, max_connections=1000).start()
s.publish(JobResult(9))
print(s.port, flush=True)
sys.stdin.read()
print("rejected:", "; ".join(sorted({r.reason for r in s.rejected()})), flush=True)
"""


def test_accept_survives_running_out_of_file_descriptors():
    """EMFILE in accept() used to end the accept loop for good; now it backs off and serves again."""
    p = subprocess.Popen([sys.executable, "-c", _EMFILE_SERVER, WORKER_KEY.hex()], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        port = int(p.stdout.readline())
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(60)]  # far past the fd limit
        link = MasterLink.connect("127.0.0.1", port, "algo-2", Deadline(SYSTEM_CLOCK, 10.0), key=WORKER_KEY, job=JOB)
        # the idle ones time out (1.5 s), descriptors come back, the worker's connection is accepted
        msg = link.recv(20.0)
        assert (msg["type"], msg["exit_code"], msg["result"]["cause"]) == ("result", 9, "launch_failed")
        for s in idle:
            s.close()
        link.close()
        out, _ = p.communicate("", timeout=20)
        assert "accept failed (Too many open files); retrying in 0.1 s" in out
    finally:
        p.kill()


# -- issue 12, finding 2: the master hears from its workers too ---------------------------------------------
def test_silent_worker_is_lost_and_a_talking_one_is_not():
    with make_server(worker_silence_s=0.5) as server:
        quiet = connect_worker(server, "algo-2")
        talker = connect_worker(server, "algo-3")
        deadline = Deadline(SYSTEM_CLOCK, 10.0)
        while not server.lost_workers() and not deadline.expired():
            talker.send({"type": "heartbeat"})
            time.sleep(0.1)
        assert list(server.lost_workers()) == ["algo-2"]
        quiet.close()
        talker.close()


def test_no_loss_declared_after_the_result():
    with make_server(worker_silence_s=0.2) as server:
        link = connect_worker(server, "algo-2")
        server.publish(JobResult(0))
        time.sleep(0.6)
        assert server.lost_workers() == {}
        link.close()


def test_other_rank_events_go_through_the_checker_and_the_master_can_answer_a_rank():
    """The hook issue 14's progress reports use: same MAC and placement checks, then the caller's validator."""
    got = []

    def check(msg, rank_hosts):
        step = msg.get("step")
        return ({"event": "progress", "rank": msg["rank"], "step": step}, "") if isinstance(step, int) \
            else (None, "bad step")

    with make_server(check_other=check, on_rank_event=got.append) as server:
        link = rank_link(server, 1)
        link.send({"event": "progress", "rank": 1, "host": "h", "step": 5, "t": 1.0})
        link.send({"event": "progress", "rank": 1, "host": "algo-2", "step": 6, "t": 1.0})
        link.send({"event": "progress", "rank": 1, "host": "h", "step": "x", "t": 1.0})
        assert wait_rejected(server, 2) == ["rank 1 reported host 'algo-2'; the plan places it on h", "bad step"]
        assert got == [{"event": "progress", "rank": 1, "step": 5}] and server.rank_events() == ()
        assert server.send_to_ranks([1, 2], {"type": "stacks"}) == [1]
        link.sock.settimeout(5)
        assert link.read() == [{"type": "stacks"}]
        link.close()


def test_a_worker_that_closed_its_connection_is_lost_and_said_so():
    with make_server(worker_silence_s=0.3) as server:
        connect_worker(server, "algo-4").close()
        assert server.wait_rank_events(lambda _: "algo-4" in server.lost_workers(), 10.0)
        assert server.closed_workers() == {"algo-4"}


def test_a_failing_on_rank_event_never_costs_the_report():
    def boom(event):
        raise RuntimeError("observer bug")

    with make_server(on_rank_event=boom) as server:
        link = rank_link(server, 1)
        link.send({"event": "start", "rank": 1, "host": "h", "t": 1.0})
        link.send(exit_report())
        assert server.wait_rank_events(lambda evs: len(evs) == 2, 5.0)
        assert server.rank_failures() == (RankFailure(1, "h", 3, None, 2.0),)


def test_thread_start_failure_is_a_launch_error_and_releases_the_port(monkeypatch):
    """Running out of threads cannot be provoked safely in a shared test process, so Thread.start is made to
    fail the way CPython does ("can't start new thread"); the port must be free again afterwards."""
    from mpirun_kit.errors import LaunchError

    def no_threads(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", no_threads)
    server = ResultServer("127.0.0.1", 0, job=JOB, run_key=os.urandom(32), worker_key=WORKER_KEY,
                          rank_hosts=RANK_HOSTS)
    with pytest.raises(LaunchError) as e:
        server.start()
    assert str(e.value) == ("cannot start the result channel's thread (can't start new thread); the master host is "
                            "out of threads or memory: check its other processes")
    monkeypatch.undo()
    with socket.socket() as s:
        s.bind(("127.0.0.1", server.port))  # released
