"""Test helpers for the result channel (mpirun_kit/exec/channel/): a server on 127.0.0.1 and each kind of client.

Real sockets and the package's own ends (RankLink, MasterLink); ``raw`` gives an attacker's plain socket.
"""
import os
import socket

from mpirun_kit.exec.channel import wire
from mpirun_kit.exec.channel.keys import remove_key_dir, write_key_dir
from mpirun_kit.exec.channel.link import MasterLink
from mpirun_kit.exec.channel.rank_link import RankLink
from mpirun_kit.exec.channel.server import ResultServer
from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline
from mpirun_kit.plan.contract import RESULT_ADDR_VAR, RUN_NONCE_VAR

JOB = "test-job"
WORKER_KEY = os.urandom(32)


def make_server(rank_hosts, workers=(), **kw) -> ResultServer:
    args = dict(job=JOB, run_key=os.urandom(32), worker_key=WORKER_KEY, rank_hosts=rank_hosts, workers=workers)
    return ResultServer("127.0.0.1", kw.pop("port", 0), **{**args, **kw}).start()


def rank_link(server, rank, key=None, timeout=5.0) -> RankLink:
    return RankLink(f"127.0.0.1:{server.port}", rank, key or server.rank_key(rank), server.job, timeout)


def worker_link(server, host="algo-2", key=None, **kw) -> MasterLink:
    return MasterLink.connect("127.0.0.1", server.port, host, Deadline(SYSTEM_CLOCK, 5.0),
                              key=WORKER_KEY if key is None else key, job=server.job, **kw)


def rank_env(server, ranks=None) -> dict:
    """What a rank wrapper needs from its host: the key files written (as the host's entrypoint does) and the
    environment mpirun forwards.  ``ranks``: the ranks that will start (default: every rank the server
    knows); a host's wrappers wait, up to 10 s, for the key files of its other ranks to be taken."""
    by_host = {}
    for r, h in server.rank_hosts.items():
        if ranks is None or r in ranks:
            by_host.setdefault(h, []).append(r)
    server.test_key_dirs = [write_key_dir(server.run_nonce.hex(), h, server.host_seed(h), server.job, ranks)
                            for h, ranks in by_host.items()]
    return {RESULT_ADDR_VAR: f"127.0.0.1:{server.port}", RUN_NONCE_VAR: server.run_nonce.hex()}


def remove_keys(server) -> None:
    for d in getattr(server, "test_key_dirs", ()):
        remove_key_dir(d)


def raw(server, source="127.0.0.1", greet=True, timeout=5.0):
    """(plain socket, session from its greeting, or None) from ``source``: an attacker's connection."""
    s = socket.socket()
    s.bind((source, 0))
    s.settimeout(timeout)
    s.connect(("127.0.0.1", server.port))
    if not greet:
        return s, None
    buf = b""
    while b"\n" not in buf:
        buf += s.recv(256)
    run, conn = wire.parse_greeting(buf.split(b"\n", 1)[0])
    return s, wire.Session(server.job, run, conn, master_end=False)
