"""The result channel over real loopback sockets: rank reports, worker hello/heartbeat/result/ack, master loss."""
import socket
import threading

import pytest

pytestmark = pytest.mark.timeout(60)

from mpirun_kit.clock import SYSTEM_CLOCK, Deadline
from mpirun_kit.errors import MasterLostError
from mpirun_kit.exec.channel import MasterLink, ResultServer, send_rank_event
from mpirun_kit.exec.result import JobResult, RankFailure


@pytest.fixture
def server():
    s = ResultServer("127.0.0.1", 0, heartbeat_s=0.05).start()
    yield s
    s.close()


def test_rank_reports_arrive(server):
    addr = f"127.0.0.1:{server.port}"
    sock = send_rank_event(addr, {"event": "start", "rank": 1, "host": "h", "t": 1.0})
    send_rank_event(addr, {"event": "exit", "rank": 1, "host": "h", "exit_code": 3, "signal": None, "t": 2.0},
                    sock=sock).close()
    assert server.wait_rank_events(lambda evs: len(evs) == 2, 5.0)
    assert server.rank_failures() == (RankFailure(1, "h", 3, None, 2.0),)


def test_unreachable_report_is_best_effort():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert send_rank_event(f"127.0.0.1:{port}", {"event": "start"}, timeout=0.5) is None


def test_worker_gets_heartbeats_then_result_and_acks(server):
    link = MasterLink.connect("127.0.0.1", server.port, "algo-2", Deadline(SYSTEM_CLOCK, 5.0))
    kinds = set()
    while "heartbeat" not in kinds:
        msg = link.recv(2.0)
        assert msg is not None
        kinds.add(msg["type"])
    assert Deadline(SYSTEM_CLOCK, 5).remaining() > 0 and server.connected_workers() == {"algo-2"}
    assert server.publish(JobResult(3, summary="rank 1 failed")) == 1
    while True:
        msg = link.recv(2.0)
        if msg and msg["type"] == "result":
            break
    assert (msg["exit_code"], msg["summary"]) == (3, "rank 1 failed")
    link.send({"type": "ack", "host": "algo-2"})
    assert server.wait_acks({"algo-2"}, 5.0) == frozenset()
    link.close()


def test_late_worker_gets_result_at_once(server):
    server.publish(JobResult(0))
    link = MasterLink.connect("127.0.0.1", server.port, "algo-3", Deadline(SYSTEM_CLOCK, 5.0))
    assert link.recv(5.0) == {"type": "result", "exit_code": 0, "summary": ""}
    link.close()


def test_master_close_is_eof(server):
    link = MasterLink.connect("127.0.0.1", server.port, "algo-2", Deadline(SYSTEM_CLOCK, 5.0))
    server.close()
    with pytest.raises(EOFError):
        for _ in range(100):
            link.recv(0.5)


def test_connect_deadline_message():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(MasterLostError) as e:
        MasterLink.connect("127.0.0.1", port, "algo-2", Deadline(SYSTEM_CLOCK, 0.3))
    assert str(e.value).startswith(f"master 127.0.0.1 never opened its result channel on port {port} within 0.3 s "
                                   "(last error: Connection refused)")
    assert str(e.value).endswith("check its log, or raise timeouts.master_connect_s")


def test_unacked_hosts_reported(server):
    assert server.wait_acks({"algo-9"}, 0.1) == {"algo-9"}


def test_many_workers_in_parallel(server):
    links = [MasterLink.connect("127.0.0.1", server.port, f"algo-{i}", Deadline(SYSTEM_CLOCK, 5.0))
             for i in range(2, 10)]
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
    from mpirun_kit.exec.channel import _Peer

    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    peer = _Peer(a)
    sent = 0
    while peer.send({"type": "heartbeat", "pad": "x" * 1000}):
        sent += 1
        assert sent < 100_000
    assert not peer.alive and not peer.send({"type": "result"})
    a.close()
    b.close()
