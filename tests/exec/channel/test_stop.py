"""RankStop against a real ResultServer on 127.0.0.1, the ranks played by real sockets that report the way the
rank wrapper does (RankLink): who is asked to stop, who is waited for, who is released.  A lost host is
played by a stand-in channel (the server declares a worker lost only after seconds of silence)."""
import socket

import pytest

from channel_kit import make_server, rank_link
from mpirun_kit.exec.channel.stop import RankStop
from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline

pytestmark = pytest.mark.timeout(60)
RANK_HOSTS = {0: "algo-1", 1: "algo-1", 2: "algo-2", 3: "algo-2"}


@pytest.fixture
def server():
    s = make_server(RANK_HOSTS)
    yield s
    s.close()


def report(server, rank, event, sock=None, **fields):
    """Send one report on ``sock`` (a RankLink), a new link when None; returns the link."""
    msg = {"event": event, "rank": rank, "host": RANK_HOSTS[rank], "t": 1.0, **fields}
    if event == "start":
        msg.update(local_rank=0, pid=100 + rank, program_pid=200 + rank)
    else:
        msg.update(exit_code=0, signal=None)
    link = sock or rank_link(server, rank)
    assert link.send(msg)
    return link


def eventually(cond, what):
    d = Deadline(SYSTEM_CLOCK, 10)
    while not cond():
        assert not d.expired(), what
        SYSTEM_CLOCK.sleep(0.02)


def received(link) -> list[dict]:
    link.sock.settimeout(5)
    got = []
    while not got:
        got = link.read()
        assert got is not None, "connection closed"
    return got


def test_asks_the_running_ranks_waits_for_their_exits_and_releases_them(server):
    s0 = report(server, 0, "start")
    s1 = report(server, 1, "start")
    report(server, 1, "exit", sock=s1)                   # rank 1 had ended already: nothing to ask
    s3 = report(server, 3, "start")
    # rank 2's wrapper never connected (no key, or it failed before reporting)
    eventually(lambda: server.connected_ranks(RANK_HOSTS) == {0, 1, 3} and server.exited_ranks() == {1},
               "reports not in")
    stop = RankStop(server, RANK_HOSTS, hold_s=12.5)
    assert stop.begin("SIGTERM") == {0, 3}
    for s in (s0, s3):
        assert received(s) == [{"type": "signal", "signal": "SIGTERM", "hold_s": 12.5}]
    assert stop.pending() == {0, 3}
    report(server, 0, "exit", sock=s0)                   # its handler is done; its wrapper holds
    eventually(lambda: stop.pending() == {3}, "rank 0's exit not seen")
    s3.close()                                           # rank 3's wrapper died without a report
    eventually(lambda: stop.pending() == frozenset(), "rank 3's closed connection not seen")
    assert not stop.all_exited()                         # ranks 2 and 3 never said: mpirun's SIGTERM must reach them
    report(server, 2, "exit")
    report(server, 3, "exit")
    eventually(stop.all_exited, "every rank's exit seen")
    stop.release()
    assert received(s0) == [{"type": "release"}]
    stop.release()                                       # once only
    s0.sock.settimeout(0.3)
    with pytest.raises((socket.timeout, BlockingIOError)):
        s0.sock.recv(100)
    s0.close()


def test_nobody_reachable_means_nobody_to_wait_for(server):
    stop = RankStop(server, RANK_HOSTS, hold_s=10)
    assert stop.begin("SIGTERM") == frozenset()
    assert stop.pending() == frozenset()
    stop.release()


class LostHostChannel:
    """The server's answers for a job whose worker algo-2 is declared lost (mid-stop, in the second case)."""

    def __init__(self, lost=("algo-2",)):
        self.lost = {h: 12.0 for h in lost}
        self.sent = []

    def send_to_ranks(self, ranks, msg):
        self.sent.append((sorted(ranks), msg["type"]))
        return list(ranks)

    def connected_ranks(self, ranks):
        return frozenset(ranks)

    def exited_ranks(self):
        return frozenset()

    def lost_workers(self):
        return dict(self.lost)


def test_ranks_on_a_lost_host_are_neither_asked_nor_waited_for():
    ch = LostHostChannel()
    stop = RankStop(ch, RANK_HOSTS, hold_s=10)
    assert stop.begin("SIGTERM") == {0, 1}
    assert stop.pending() == {0, 1}
    ch.lost["algo-1"] = 3.0                              # lost during the stop
    assert stop.pending() == frozenset()
    stop.release()
    assert ch.sent == [([0, 1], "signal"), ([0, 1], "release")]
