"""The channel's line format (exec/channel/wire.py): what a MAC is bound to, and what is read before it is checked."""
import os

from mpirun_kit.exec.channel import wire

KEY, RUN, CONN = b"k" * 32, b"r" * 16, b"c" * 16


def pair(job="job", run=RUN, conn=CONN):
    return wire.Session(job, run, conn, master_end=False), wire.Session(job, run, conn, master_end=True)


def test_a_line_opens_once_in_order_at_its_own_end():
    worker, master = pair()
    a, b = worker.seal({"n": 1}, KEY, "w"), worker.seal({"n": 2}, KEY, "w")
    line = a.rstrip(b"\n")
    assert master.open(b.rstrip(b"\n"), KEY, "w") is None          # out of order
    assert master.open(line, KEY, "w") == b'{"n":1}'
    assert master.open(line, KEY, "w") is None                      # replayed
    assert master.open(b.rstrip(b"\n"), KEY, "w") == b'{"n":2}'
    assert worker.open(master.seal({"n": 3}, KEY, "m").rstrip(b"\n"), KEY, "m") == b'{"n":3}'
    back = wire.Session("job", RUN, CONN, master_end=False)
    assert back.open(line, KEY, "w") is None                        # sent back the other way


def test_the_mac_binds_job_run_connection_sender_and_key():
    line = pair()[0].seal({"n": 1}, KEY, "r3").rstrip(b"\n")
    for other in (pair(job="other")[1], pair(run=os.urandom(16))[1], pair(conn=os.urandom(16))[1]):
        assert other.open(line, KEY, "r3") is None
    assert pair()[1].open(line, os.urandom(32), "r3") is None
    assert pair()[1].open(line, KEY, "r4") is None
    assert pair()[1].open(line, KEY, "r3") == b'{"n":1}'


def test_sender_and_greeting_parsing_never_trust_the_rest():
    assert wire.sender_of(b"0" * 64 + b" r12 {}") == "r12"
    assert wire.sender_of(b"0" * 64 + b' {"type":1}') is None
    assert wire.sender_of(b"short") is None
    assert wire.sender_of(b"0" * 64 + b" " + b"r" * 40 + b" {}") is None
    g = wire.greeting(RUN, CONN)
    assert wire.parse_greeting(g.rstrip(b"\n")) == (RUN, CONN)
    assert wire.parse_greeting(b"mpirun_kit-channel/1 00 00") is None
    assert wire.parse_greeting(b"mpirun_kit-channel/2 zz " + CONN.hex().encode()) is None
