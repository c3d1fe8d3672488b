"""Progress, stacks and timelines through the real result channel (loopback sockets): what the master's
hang monitor and timeline receive, and what a hostile or broken peer cannot make it record."""
import os
import socket
import time

import pytest

from mpirun_kit.exec.clock import SYSTEM_CLOCK, Deadline
from mpirun_kit.exec.channel import MasterLink, ResultServer
from mpirun_kit.exec.report import encode, verify
from mpirun_kit.exec.result import JobResult
from mpirun_kit.observe.hang import check_observe_report

pytestmark = pytest.mark.timeout(60)

RANK_KEY, WORKER_KEY = os.urandom(32), os.urandom(32)
RANK_HOSTS = {0: "h", 1: "h", 2: "algo-2", 3: "algo-2"}


@pytest.fixture
def server():
    got = []
    s = ResultServer("127.0.0.1", 0, rank_key=RANK_KEY, worker_key=WORKER_KEY, rank_hosts=RANK_HOSTS,
                     workers=["algo-2"], heartbeat_s=0.05, on_rank_event=got.append,
                     check_other=check_observe_report).start()
    s.got = got
    yield s
    s.close()


def rank_conn(server, rank=1, host="h"):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    s.sendall(encode({"type": "rank", "event": "start", "rank": rank, "host": host, "t": time.time()}, RANK_KEY))
    return s


def until(pred, timeout=5.0):
    deadline = Deadline(SYSTEM_CLOCK, timeout)
    while not pred():
        assert not deadline.expired(), "condition never held"
        time.sleep(0.01)


def test_progress_reaches_the_monitor_and_bad_steps_are_dropped(server):
    s = rank_conn(server)
    for step in (1, -5, "7", 2):
        s.sendall(encode({"type": "rank", "event": "progress", "rank": 1, "host": "h", "step": step,
                          "t": time.time()}, RANK_KEY))
    until(lambda: [e.get("step") for e in server.got if e["event"] == "progress"] == [1, 2])
    reasons = [r.reason for r in server.rejected()]
    assert "progress step -5 is not a non-negative integer" in reasons
    assert "progress step '7' is not a non-negative integer" in reasons
    s.sendall(encode({"type": "rank", "event": "progress", "rank": 2, "host": "h", "step": 3, "t": 1.0}, RANK_KEY))
    until(lambda: any("rank 2 reported host 'h'" in r.reason for r in server.rejected()))
    assert [e["step"] for e in server.got if e["event"] == "progress"] == [1, 2]


def test_stacks_request_reaches_the_rank_and_its_reply_comes_back(server):
    s = rank_conn(server, 3, "algo-2")
    until(lambda: any(e["event"] == "start" for e in server.got))
    assert server.send_to_ranks([3, 0], {"type": "stacks"}) == [3]
    s.settimeout(5)
    line = s.recv(65536).split(b"\n")[0]
    assert verify(line, RANK_KEY) == b'{"type":"stacks"}'
    frames = [{"name": "f", "file": "p.py", "line": 3}]
    s.sendall(encode({"type": "rank", "event": "stacks", "rank": 3, "host": "algo-2", "t": time.time(),
                      "threads": [{"thread": "MainThread", "frames": frames}], "how": "py-spy"}, RANK_KEY))
    until(lambda: any(e["event"] == "stacks" for e in server.got))
    reply = next(e for e in server.got if e["event"] == "stacks")
    assert reply["threads"] == [{"thread": "MainThread", "frames": frames}] and reply["rank"] == 3


def test_worker_timeline_kept_with_its_ack_and_hostile_ones_dropped(server):
    link = MasterLink.connect("127.0.0.1", server.port, "algo-2", Deadline(SYSTEM_CLOCK, 5.0), key=WORKER_KEY)
    until(lambda: "algo-2" in server.connected_workers())
    server.publish(JobResult(0))
    rec = [{"phase": "started", "t": 1.0, "mono": 2.0, "cpu_s": 0.0}, {"phase": "acked", "t": 3.0, "mono": 4.0,
                                                                       "cpu_s": 0.1}]
    link.send({"type": "ack", "host": "algo-2", "timeline": [{"phase": "rm -rf", "t": 1, "mono": 1, "cpu_s": 0}]})
    assert server.wait_acks(["algo-2"], 5.0) == frozenset()   # the ack counts; the bad timeline does not
    assert server.worker_timelines() == {}
    link.send({"type": "ack", "host": "algo-2", "timeline": rec})
    until(lambda: server.worker_timelines() == {"algo-2": rec})
    link.close()
