"""A worker's end of the result channel: one connection to the master, from hello to the result.

Place in the data flow: the worker's entrypoint (entrypoint/worker.py) connects at start, sends its
hello, heartbeats and finally its ack; the master's server (server.py) sends back this host's seed for
its ranks' keys, sealed to the workers' key and this connection (keys.py ``seal_seed``; opened here and
handed to ``on_keys``), heartbeats and the job's result.  Lines are framed
and checked by wire.py: the master's greeting binds every MAC to this run and this connection.
"""
from __future__ import annotations

import logging
import random
import socket
from typing import Callable

from ...core.backoff import Backoff
from ...core.clock import SYSTEM_CLOCK, Clock, Deadline
from ...errors import MasterLostError
from . import wire
from .keys import seal_seed
from .protocol import valid_from_master

log = logging.getLogger(__name__)


def read_greeting(sock: socket.socket, timeout: float) -> tuple[tuple[bytes, bytes] | None, bytes]:
    """((run nonce, connection nonce) or None, bytes read past the greeting) from a fresh connection."""
    sock.settimeout(max(0.001, timeout))
    buf = b""
    while b"\n" not in buf:
        if len(buf) > 256:
            return None, b""
        chunk = sock.recv(256)
        if not chunk:
            return None, b""
        buf += chunk
    line, rest = buf.split(b"\n", 1)
    return wire.parse_greeting(line), rest


class MasterLink:
    """Worker side: one connection to the master's result channel, signed with the workers' key."""

    def __init__(self, sock: socket.socket, master: str, key: bytes, session: wire.Session, run_nonce: bytes,
                 buf: bytes = b"", on_keys: Callable[[bytes, bytes], None] | None = None, *,
                 conn_nonce: bytes = b"", me: str = ""):
        self.sock = sock
        self.conn_nonce, self.me = conn_nonce, me
        self.master = master
        self.key = key
        self.session = session
        self.run_nonce = run_nonce
        self.buf = buf
        self.on_keys = on_keys
        self.seed: bytes | None = None
        self.rejected = 0

    @classmethod
    def connect(cls, master: str, port: int, me: str, deadline: Deadline, *, key: bytes, job: str,
                clock: Clock = SYSTEM_CLOCK, cancelled: Callable[[], bool] = lambda: False,
                rng: random.Random | None = None, sshd_up: bool = False,
                on_keys: Callable[[bytes, bytes], None] | None = None) -> "MasterLink":
        """Connect with jittered backoff (0.1 s -> 1 s) until ``deadline``, read the greeting, say hello.

        ``sshd_up``: this host's sshd answers locally; the hello says so, and the master stops waiting for it.
        ``on_keys(seed, run_nonce)``: called once, from ``recv``, when the master's seed for this host's ranks
        arrives (keys.py).

        Raises:
            MasterLostError: the master never accepted a connection before the deadline.
        """
        backoff, last_err = Backoff(clock, deadline, rng), "no attempt made"
        while True:
            if cancelled():
                raise MasterLostError(f"stopped while connecting to master {master}:{port}")
            sock = None
            try:
                wait = max(0.1, min(3.0, deadline.remaining()))
                sock = socket.create_connection((master, port), timeout=wait)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                try:
                    nonces, rest = read_greeting(sock, wait)
                except socket.timeout:
                    raise OSError(f"it accepted the connection but sent no greeting within {wait:.3g} s") from None
                if nonces is None:
                    raise OSError(f"it did not greet as the result channel ({wire.PROTOCOL.decode()})")
                session = wire.Session(job, *nonces, master_end=False)
                sock.sendall(session.seal({"type": "hello", "host": me, **({"sshd": True} if sshd_up else {})},
                                          key, wire.WORKER_SENDER))
                return cls(sock, master, key, session, nonces[0], rest, on_keys, conn_nonce=nonces[1], me=me)
            except OSError as exc:
                last_err = exc.strerror or str(exc)
                if sock is not None:
                    sock.close()
            if deadline.remaining() <= 0:
                raise MasterLostError(
                    f"master {master} never opened its result channel on port {port} within {deadline.seconds:g} s "
                    f"(last error: {last_err}); the master may have failed to start: check its log, or raise "
                    "timeouts.master_connect_s")
            backoff.wait()

    def recv(self, timeout: float) -> dict | None:
        """The next valid message, or None when none arrives within ``timeout`` (or it was invalid).  The
        master's seed for this host's ranks is not returned: it goes to ``on_keys``, and reading goes on.

        Raises:
            EOFError: the master closed the connection (it died or exited).
        """
        while True:
            while b"\n" not in self.buf:
                if len(self.buf) > wire.MAX_LINE:
                    raise EOFError(f"line longer than {wire.MAX_LINE} bytes from the master")
                self.sock.settimeout(max(0.001, timeout))
                try:
                    chunk = self.sock.recv(65536)
                except socket.timeout:
                    return None
                except OSError as exc:
                    raise EOFError(str(exc)) from exc
                if not chunk:
                    raise EOFError("connection closed")
                self.buf += chunk
            line, self.buf = self.buf.split(b"\n", 1)
            body = self.session.open(line, self.key, wire.MASTER_SENDER)
            msg, why = wire.decode_object(body) if body is not None else (None, "bad MAC")
            if msg is None or not valid_from_master(msg):
                self.rejected += 1
                log.warning("dropped a message from master %s: %s", self.master, why or "invalid fields")
                return None
            if msg["type"] != "keys":
                return msg
            if self.seed is None:
                self.seed = seal_seed(bytes.fromhex(msg["seed"]), self.key, self.run_nonce, self.conn_nonce, self.me)
                if self.on_keys is not None:
                    self.on_keys(self.seed, self.run_nonce)

    def send(self, msg: dict) -> None:
        try:
            self.sock.sendall(self.session.seal(msg, self.key, wire.WORKER_SENDER))
        except OSError:
            pass

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
