"""Progress, stacks and timelines through the real result channel (loopback sockets): what the master's
hang monitor and timeline receive, and what a hostile or broken peer cannot make it record."""
import time

import pytest

from channel_kit import make_server, rank_link, worker_link
from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline
from mpirun_kit.exec.result import JobResult
from mpirun_kit.observe.hang import check_observe_report
from mpirun_kit.observe.timeline import clean_records

pytestmark = pytest.mark.timeout(60)

RANK_HOSTS = {0: "h", 1: "h", 2: "algo-2", 3: "algo-2"}


@pytest.fixture
def server():
    got = []
    s = make_server(RANK_HOSTS, ["algo-2"], heartbeat_s=0.05, on_rank_event=got.append,
                    check_other=check_observe_report, clean_timeline=clean_records)
    s.got = got
    yield s
    s.close()


def rank_conn(server, rank=1, host="h"):
    link = rank_link(server, rank)
    assert link.send({"event": "start", "rank": rank, "host": host, "t": time.time()})
    return link


def until(pred, timeout=5.0):
    deadline = Deadline(SYSTEM_CLOCK, timeout)
    while not pred():
        assert not deadline.expired(), "condition never held"
        time.sleep(0.01)


def test_progress_reaches_the_monitor_and_bad_steps_are_dropped(server):
    s = rank_conn(server)
    for step in (1, -5, "7", 2):
        s.send({"event": "progress", "rank": 1, "host": "h", "step": step, "t": time.time()})
    until(lambda: [e.get("step") for e in server.got if e["event"] == "progress"] == [1, 2])
    reasons = [r.reason for r in server.rejected()]
    assert "progress step -5 is not a non-negative integer" in reasons
    assert "progress step '7' is not a non-negative integer" in reasons
    s.send({"event": "progress", "rank": 1, "host": "algo-2", "step": 3, "t": 1.0})
    until(lambda: any("rank 1 reported host 'algo-2'" in r.reason for r in server.rejected()))
    assert [e["step"] for e in server.got if e["event"] == "progress"] == [1, 2]


def test_stacks_request_reaches_the_rank_and_its_reply_comes_back(server):
    s = rank_conn(server, 3, "algo-2")
    until(lambda: any(e["event"] == "start" for e in server.got))
    assert server.send_to_ranks([3, 0], {"type": "stacks"}) == [3]
    s.sock.settimeout(5)
    assert s.read() == [{"type": "stacks"}]
    frames = [{"name": "f", "file": "p.py", "line": 3}]
    s.send({"event": "stacks", "rank": 3, "host": "algo-2", "t": time.time(),
            "threads": [{"thread": "MainThread", "frames": frames}], "how": "py-spy"})
    until(lambda: any(e["event"] == "stacks" for e in server.got))
    reply = next(e for e in server.got if e["event"] == "stacks")
    assert reply["threads"] == [{"thread": "MainThread", "frames": frames}] and reply["rank"] == 3


def test_worker_timeline_kept_with_its_ack_and_hostile_ones_dropped(server):
    link = worker_link(server, "algo-2")
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
