"""Issue 23's channel findings, each as the attack that worked before (proven on 127.0.0.1 against a3ea99b, see
the commit message) and now fails: replayed hellos and heartbeats, reordered lines, a forged exit for another rank,
a rank's connection taken over, hellos from the wrong address, a flood hiding forgeries, outsiders' connections.

Real server, real sockets on 127.0.0.1; a second loopback address (127.0.0.2) plays another host."""
import os
import socket
import time

import pytest

from channel_kit import WORKER_KEY, make_server, rank_link, raw, worker_link
from mpirun_kit.exec.channel import wire
from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline
from mpirun_kit.exec.result import RankFailure, job_result

pytestmark = pytest.mark.timeout(60)

RANK_HOSTS = {0: "algo-1", 1: "algo-1", 2: "algo-2", 3: "algo-2"}
WORKERS = ["algo-2", "algo-3"]
#: algo-1 (the master's host) connects from 127.0.0.1; algo-2 and algo-3 from 127.0.0.2.
ADDRESSES = {"algo-1": {"127.0.0.1"}, "algo-2": {"127.0.0.2"}, "algo-3": {"127.0.0.2"}}


def until(pred, timeout=5.0, what="condition never held"):
    deadline = Deadline(SYSTEM_CLOCK, timeout)
    while not pred():
        assert not deadline.expired(), what
        time.sleep(0.01)


def kinds(server):
    return [r.kind for r in server.rejected()]


def hello_line(session, host="algo-2"):
    return session.seal({"type": "hello", "host": host}, WORKER_KEY, "w")


def is_closed(sock, timeout=5.0) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            if sock.recv(65536) == b"":
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


# -- replays and reorders --------------------------------------------------------------------------------------
def test_a_replayed_hello_is_refused_and_the_real_worker_keeps_its_connection():
    """Before: the replayed hello replaced the live connection (channel.py:598) and the real worker was dropped."""
    with make_server(RANK_HOSTS, WORKERS) as server:
        real, session = raw(server)
        line = hello_line(session)
        real.sendall(line)
        until(lambda: server.connected_workers() == {"algo-2"})
        replayer, _ = raw(server)
        replayer.sendall(line)                            # the same bytes, on a connection of its own
        until(lambda: "mac" in kinds(server))
        assert is_closed(replayer)
        assert not is_closed(real, 0.3)                   # the real worker was not dropped ...
        assert server.closed_workers() == frozenset()
        real.sendall(session.seal({"type": "heartbeat"}, WORKER_KEY, "w"))
        real.sendall(session.seal({"type": "ack", "host": "algo-2"}, WORKER_KEY, "w"))
        assert server.wait_acks({"algo-2"}, 5.0) == frozenset()   # ... and is still heard


def test_replayed_heartbeats_do_not_keep_a_dead_worker_alive():
    """Before: replaying a worker's hello and heartbeats from another connection kept lost_workers() empty 4 s past
    a 2 s silence limit.  Now every replayed line fails its MAC, and the silent worker is lost on time."""
    with make_server(RANK_HOSTS, WORKERS, worker_silence_s=0.5) as server:
        dead, session = raw(server)
        recorded = [hello_line(session), session.seal({"type": "heartbeat"}, WORKER_KEY, "w"),
                    session.seal({"type": "heartbeat"}, WORKER_KEY, "w")]
        dead.sendall(b"".join(recorded))                  # then nothing more: its host died (no FIN comes)
        deadline = Deadline(SYSTEM_CLOCK, 1.5)
        while not deadline.expired():                     # the attacker replays what it recorded, again and again
            s, _ = raw(server)
            s.sendall(b"".join(recorded))
            s.close()
            time.sleep(0.1)
        assert "algo-2" in server.lost_workers()
        assert "mac" in kinds(server)
        dead.close()


def test_a_heartbeat_replayed_on_its_own_connection_is_refused():
    with make_server(RANK_HOSTS, WORKERS) as server:
        s, session = raw(server)
        hello = hello_line(session)
        beat = session.seal({"type": "heartbeat"}, WORKER_KEY, "w")
        s.sendall(hello)
        until(lambda: server.connected_workers() == {"algo-2"})
        s.sendall(beat)   # sealed as line 1, and line 1 it is: ok
        s.sendall(beat)   # line 1 again where line 2 is due
        until(lambda: kinds(server) == ["mac"])
        assert kinds(server) == ["mac"], "the replayed heartbeat must be refused as a bad MAC, the first one not"
        s.close()


def test_reordered_lines_are_refused():
    """An ack moved before the heartbeat sealed ahead of it fails; the heartbeat, in its place, counts."""
    with make_server(RANK_HOSTS, WORKERS) as server:
        s, session = raw(server)
        hello = hello_line(session)
        beat = session.seal({"type": "heartbeat"}, WORKER_KEY, "w")
        ack = session.seal({"type": "ack", "host": "algo-2"}, WORKER_KEY, "w")
        s.sendall(hello + ack + beat)
        until(lambda: kinds(server) == ["mac"])
        assert server.wait_acks({"algo-2"}, 0.3) == {"algo-2"}
        s.close()


def test_a_line_sent_back_the_other_way_is_refused():
    """The master's heartbeat to a worker, reflected to the master on the same connection, fails (direction)."""
    with make_server(RANK_HOSTS, WORKERS, heartbeat_s=0.05) as server:
        link = worker_link(server)
        until(lambda: server.connected_workers() == {"algo-2"})
        link.sock.settimeout(5)
        buf = b""
        while buf.count(b"\n") < 3:                       # keys, a heartbeat, another heartbeat
            buf += link.sock.recv(65536)
        master_line = buf.split(b"\n")[1] + b"\n"
        link.sock.sendall(master_line.replace(b" m ", b" w ", 1))
        until(lambda: kinds(server) == ["mac"])
        assert kinds(server) == ["mac"], "the reflected master line must be refused as a bad MAC"
        link.close()


# -- a rank's identity ------------------------------------------------------------------------------------------
def exit_report(rank, code, t=2.0):
    return {"event": "exit", "rank": rank, "host": RANK_HOSTS[rank], "exit_code": code, "signal": None, "t": t}


def test_a_forged_exit_0_cannot_hide_a_ranks_real_failure():
    """Before: any holder of the ranks' shared key (every program could read it from /proc/$PPID/environ) sent
    'exit 0' for rank 1 first; the real exit 3 became a "second exit report" and rank_failures() was empty.
    Now the forger holds at most its own rank's key, which signs for no other rank."""
    with make_server(RANK_HOSTS, WORKERS) as server:
        real = rank_link(server, 1)
        assert real.send({"event": "start", "rank": 1, "host": "algo-1", "t": 1.0})
        forger = rank_link(server, 0)                      # rank 0's program, had it stolen its wrapper's key
        forger.send(exit_report(1, 0))
        until(lambda: kinds(server) == ["identity"])
        assert server.rejected()[0].reason == "rank 0's connection sent a report for rank '1'"
        sneaky = rank_link(server, 0, key=server.rank_key(0))
        sneaky.sender = "r1"                               # rank 0's key, claiming to be rank 1
        sneaky.send(exit_report(1, 0))
        until(lambda: kinds(server) == ["identity", "mac"])
        real.send(exit_report(1, 3))
        until(lambda: server.rank_failures() == (RankFailure(1, "algo-1", 3, None, 2.0),))
        for c in (real, forger, sneaky):
            c.close()


def test_a_leaked_rank_key_cannot_take_over_the_ranks_connection():
    """Before: any valid message, even progress, made its connection _rank_peer[rank], so the master's stop went to
    the forger.  Now a rank keeps its first connection: a second one with the same key is refused."""
    got = []
    with make_server(RANK_HOSTS, WORKERS, check_other=lambda m, rh: ({"event": "progress", "rank": m["rank"]}, ""),
                     on_rank_event=got.append) as server:
        real = rank_link(server, 1)
        real.send({"event": "start", "rank": 1, "host": "algo-1", "t": 1.0})
        until(lambda: server.connected_ranks([1]) == {1})
        thief = rank_link(server, 1)                       # the key leaked: same key, its own connection
        assert thief.send({"event": "progress", "rank": 1, "host": "algo-1", "step": 5, "t": 1.0})
        until(lambda: kinds(server) == ["identity"])
        assert server.rejected()[0].reason.startswith("rank 1 already has an open connection")
        assert [e for e in got if e["event"] == "progress"] == []   # the thief's progress never counted
        assert server.send_to_ranks([1], {"type": "stacks"}) == [1]
        real.sock.settimeout(5)
        assert real.read() == [{"type": "stacks"}]         # the request reached the real wrapper
        for c in (real, thief):
            c.close()


def test_a_forged_early_failure_cannot_choose_the_jobs_exit_code():
    """Before: a forged early exit of rank 2 (code 9, the earliest) became the job's root cause and exit code."""
    with make_server(RANK_HOSTS, WORKERS) as server:
        forger = rank_link(server, 0)
        forger.send({**exit_report(2, 9, t=0.5), "host": "algo-2"})
        until(lambda: kinds(server) == ["identity"])
        real = rank_link(server, 2)
        real.send(exit_report(2, 4, t=3.0))
        until(lambda: len(server.rank_failures()) == 1)
        result = job_result(1, None, server.rank_failures())
        assert (result.exit_code, result.root_cause) == (4, RankFailure(2, "algo-2", 4, None, 3.0))
        for c in (forger, real):
            c.close()


def test_a_ranks_connection_must_come_from_its_planned_host():
    with make_server(RANK_HOSTS, WORKERS, host_addresses=ADDRESSES) as server:
        s, session = raw(server, source="127.0.0.1")       # rank 2 lives on algo-2 (127.0.0.2)
        s.sendall(session.seal({"type": "rank", **exit_report(2, 0)}, server.rank_key(2), "r2"))
        assert is_closed(s)
        assert [r.reason for r in server.rejected()] == ["rank 2 connected from 127.0.0.1; the plan places it on algo-2"]
        s, session = raw(server, source="127.0.0.2")
        s.sendall(session.seal({"type": "rank", **exit_report(2, 5)}, server.rank_key(2), "r2"))
        until(lambda: len(server.rank_failures()) == 1)
        s.close()


def test_a_hello_must_come_from_its_hosts_address_and_never_replaces_a_live_connection():
    with make_server(RANK_HOSTS, WORKERS, host_addresses=ADDRESSES) as server:
        wrong, session = raw(server, source="127.0.0.1")
        wrong.sendall(hello_line(session))                 # the workers' key, but algo-1's address
        assert is_closed(wrong)
        assert [r.reason for r in server.rejected()] == [
            "hello for worker algo-2 from 127.0.0.1, which is not algo-2's address"]
        real, session = raw(server, source="127.0.0.2")
        real.sendall(hello_line(session))
        until(lambda: server.connected_workers() == {"algo-2"})
        second, session2 = raw(server, source="127.0.0.2")
        second.sendall(hello_line(session2))               # valid, fresh, from the right address: still refused
        assert is_closed(second)
        assert server.rejected()[-1].reason.startswith("hello for worker algo-2, which already has a live connection")
        assert not is_closed(real, 0.3) and server.closed_workers() == frozenset()
        real.close()


# -- keys --------------------------------------------------------------------------------------------------------
def test_another_job_or_run_cannot_speak_on_this_channel():
    """The worker key derives with the job name, and every MAC holds the job: a worker of another job with the same
    secret (or the same key) is refused."""
    from mpirun_kit.exec.channel.keys import worker_key_from_secret

    secret = os.urandom(32)
    assert worker_key_from_secret(secret, "job-a") != worker_key_from_secret(secret, "job-b")
    with make_server(RANK_HOSTS, WORKERS, worker_key=worker_key_from_secret(secret, "job-a")) as server:
        s, _ = raw(server)
        other = wire.Session("job-b", server.run_nonce, os.urandom(16), master_end=False)
        s.sendall(other.seal({"type": "hello", "host": "algo-2"}, worker_key_from_secret(secret, "job-a"), "w"))
        assert is_closed(s)
        assert kinds(server) == ["mac"] and server.connected_workers() == frozenset()


# -- counting, and outsiders -------------------------------------------------------------------------------------
def test_rejections_are_counted_per_kind_and_a_flood_hides_no_forgery(caplog):
    """Before: one log limit for every reason (20, then one in 100): 100 junk connections first, and the forgery
    after them was never logged.  Now each kind has its own limit, and every rejection is counted."""
    with make_server(RANK_HOSTS, WORKERS) as server:
        for _ in range(100):
            s, _ = raw(server)
            s.sendall(b"junk\n")
            s.close()
        until(lambda: server.rejection_counts().get("malformed") == 100)
        forger = rank_link(server, 0)
        forger.send(exit_report(1, 0))
        until(lambda: server.rejection_counts().get("identity") == 1)
        assert server.rejection_counts() == {"malformed": 100, "identity": 1}
        assert "rank 0's connection sent a report for rank '1' (1 of kind identity" in caplog.text
        forger.close()


def test_outside_connections_are_dropped_before_their_handshake():
    """The kernel filter (filter.py): a SYN from an address that is none of the job's hosts gets no answer."""
    with make_server(RANK_HOSTS, WORKERS, allowed_peers={"127.0.0.1"}) as server:
        outsider = socket.socket()
        outsider.bind(("127.0.0.2", 0))
        outsider.settimeout(1.0)
        with pytest.raises(socket.timeout):
            outsider.connect(("127.0.0.1", server.port))
        outsider.close()
        link = worker_link(server)                         # a job host still gets in
        until(lambda: server.connected_workers() == {"algo-2"})
        link.close()



# -- issue 27: a holder of the workers' key, floods, the seed on the wire ------------------------------------------
def test_a_worker_key_holder_cannot_fill_the_connection_cap_for_good():
    """Issue 27 finding 4: one valid worker line took a connection out of the unauthenticated set for good; 67
    such connections and rank 0's exit report was refused (capacity).  Now a worker's connection is
    authenticated only by its hello: without one it is evicted at the cap and timed out like an outsider's."""
    with make_server(RANK_HOSTS, WORKERS, first_message_s=2.0) as server:
        held = []
        for _ in range(server.max_connections):             # the cap, full
            s, session = raw(server)
            s.sendall(session.seal({"type": "heartbeat", "host": "algo-2"}, WORKER_KEY, "w"))
            held.append(s)
        link = rank_link(server, 0)
        assert link.send({"event": "exit", "rank": 0, "host": "algo-1", "exit_code": 0, "signal": None, "t": 1.0})
        until(lambda: any(e["rank"] == 0 for e in server.rank_events()), what=f"rank 0's report refused: "
              f"{server.rejection_counts()}")
        # and the ones the cap did not evict are closed at the unauthenticated deadline
        assert is_closed(held[-1], timeout=10.0)
        link.close()
        for s in held:
            s.close()


def test_a_flood_without_keys_delays_reports_but_loses_none():
    """Issue 27 finding 7: a flood of connections without keys cost 1-2 of 32 start reports (send() returned
    False).  At the cap the server closes a connection before its greeting; the rank retries until RETRY_S."""
    import threading

    with make_server({r: "algo-1" for r in range(32)}, max_connections=4) as server:
        stop = threading.Event()

        def flood():
            held = []
            while not stop.is_set():
                try:
                    held.append(socket.create_connection(("127.0.0.1", server.port), timeout=1))
                except OSError:
                    pass
                if len(held) > 200:
                    for s in held[:100]:
                        s.close()
                    del held[:100]
            for s in held:
                s.close()

        flooders = [threading.Thread(target=flood, daemon=True) for _ in range(2)]
        for t in flooders:
            t.start()
        time.sleep(0.2)
        try:
            sent = [rank_link(server, r).send({"event": "start", "rank": r, "host": "algo-1", "t": 1.0})
                    for r in range(32)]
        finally:
            stop.set()
            for t in flooders:
                t.join(10)
        assert all(sent), sent.count(False)
        until(lambda: len(server.rank_events()) == 32, what=f"{len(server.rank_events())} of 32 start reports "
              f"arrived; refused {server.rejection_counts()}")


def test_the_seed_on_the_wire_is_not_the_seed():
    """Issue 27 finding 7: the host seed crossed the network in clear (a recording of the channel gave every
    rank key of that host).  The keys line carries it sealed; the worker's link opens it."""
    with make_server(RANK_HOSTS, WORKERS) as server:
        s, session = raw(server)
        s.sendall(hello_line(session))
        buf = b""
        while buf.count(b"\n") < 1:
            buf += s.recv(65536)
        seed = server.host_seed("algo-2")
        assert seed.hex().encode() not in buf and b'"keys"' in buf
        got = []
        link = worker_link(server, "algo-3", on_keys=lambda sd, nonce: got.append(sd))
        until(lambda: link.recv(0.1) is not None or bool(got))
        assert got == [server.host_seed("algo-3")]
        link.close()
        s.close()


def test_without_the_kernel_filter_the_master_warns_and_says_what_is_lost(monkeypatch, caplog):
    """Issue 27 finding 7: the BPF filter failed quietly for non-root (an INFO line).  Now a warning that names
    what is lost.  (The filter's failure is forced here: as root on this machine it attaches.)"""
    import logging

    from mpirun_kit.exec.channel import filter as peer_filter

    monkeypatch.setattr(peer_filter, "attach", lambda sock, peers: "SO_ATTACH_FILTER: Operation not permitted")
    with caplog.at_level(logging.WARNING, logger="mpirun_kit.exec.channel.server"):
        with make_server(RANK_HOSTS, WORKERS, allowed_peers={"127.0.0.1"}):
            pass
    assert ("result channel: no kernel filter for outside addresses (SO_ATTACH_FILTER: Operation not permitted): "
            "their connections now complete the TCP handshake and are refused at accept(), one by one, in the "
            "server's loop; a flood from outside the job's hosts costs the master CPU") in caplog.text
