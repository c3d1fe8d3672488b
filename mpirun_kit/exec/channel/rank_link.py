"""A rank wrapper's end of the result channel (best effort): its reports out, the master's requests in.

Place in the data flow: the rank wrapper (rank/wrapper.py) and its relay thread (observe/relay.py) send
the rank's start, progress, stacks and exit through one ``RankLink``; the master's server (server.py)
answers on the same connection with stop, release and stacks requests.  The link signs with this rank's
own key (keys.py: the wrapper took it from its key file; the program never holds it) and frames every
line through wire.py, so the connection's first line makes it this rank's connection at the master.

Reports are best effort: a rank must run even where the channel is down (mpirun's own status still
reaches the master).  But a master that is up and refusing connections (at its cap, under a flood of
connections without keys) only delays a report: a connection closed before its greeting is retried with
jittered backoff until ``retry_s`` (the injected clock); only a refused connect (nothing listening) gives
up at once.  Stdlib only: every rank imports this at start, on the launch's critical path.
"""
from __future__ import annotations

import errno
import socket
import threading

from ...core.clock import SYSTEM_CLOCK, Clock, Deadline
from . import wire

#: how long a report is retried while the master accepts connections but closes them unanswered.
RETRY_S = 10.0


class RankLink:
    """One rank's connection to ``host:port``, opened on the first send (and again if it breaks)."""

    def __init__(self, addr: str, rank: int, key: bytes, job: str, timeout: float = 2.0, *,
                 retry_s: float = RETRY_S, clock: Clock = SYSTEM_CLOCK):
        self.addr, self.rank, self.key, self.job, self.timeout = addr, rank, key, job, timeout
        self.retry_s, self.clock = retry_s, clock
        self.sender = wire.rank_sender(rank)
        #: when the first connection was greeted (wall clock): the launch timeline's "channel hello" of this rank.
        self.connected_at: float | None = None
        self.sock: socket.socket | None = None
        self.session: wire.Session | None = None
        self._inbuf = b""
        # Sealed and sent under one lock: lines are numbered, and the wrapper's main thread, its relay thread
        # and a stack dump's thread all send.
        self._lock = threading.Lock()

    def _connect(self) -> bool | None:
        """True when connected and greeted; False when worth retrying (closed unanswered, timed out); None
        when nothing listens there (refused) or the address is malformed."""
        host, _, port = self.addr.rpartition(":")
        try:
            sock = socket.create_connection((host, int(port)), timeout=self.timeout)
        except ValueError:
            return None
        except OSError as exc:
            return None if exc.errno == errno.ECONNREFUSED else False
        try:
            buf = b""
            while b"\n" not in buf and len(buf) <= 256:
                chunk = sock.recv(256)
                if not chunk:
                    break
                buf += chunk
            line, _, rest = buf.partition(b"\n")
            nonces = wire.parse_greeting(line)
        except OSError:
            nonces = None
        if nonces is None:
            sock.close()
            return False
        self.sock, self.session, self._inbuf = sock, wire.Session(self.job, *nonces, master_end=False), rest
        if self.connected_at is None:
            self.connected_at = self.clock.time()
        return True

    def send(self, msg: dict) -> bool:
        """Send one report (``{"type": "rank", **msg}``); False when the master cannot be reached."""
        with self._lock:
            return self._send(msg)

    def _send(self, msg: dict) -> bool:
        backoff: Backoff | None = None
        while True:
            if self.sock is None:
                got = self._connect()
                if got is None:
                    return False
            if self.sock is not None:
                try:
                    self.sock.sendall(self.session.seal({"type": "rank", **msg}, self.key, self.sender))
                    return True
                except OSError:
                    self.close()
            # Refused unanswered or broken: the master is up but busy (its cap, a flood); retry until retry_s.
            if backoff is None:
                from ...core.backoff import Backoff    # only on a retry: every rank imports this module at start

                backoff = Backoff(self.clock, Deadline(self.clock, self.retry_s), first_s=0.05)
            if not backoff.wait():
                return False

    def read(self) -> list[dict] | None:
        """The master's valid messages that have arrived (one ``recv``); None once the connection closed.

        Lines that fail the MAC check, or are not JSON objects, are dropped.
        """
        if self.sock is None:
            return None
        try:
            chunk = self.sock.recv(65536)
        except (BlockingIOError, socket.timeout):
            return []
        except OSError:
            return None
        if not chunk:
            return None
        self._inbuf += chunk
        out = []
        while b"\n" in self._inbuf:
            line, self._inbuf = self._inbuf.split(b"\n", 1)
            body = self.session.open(line, self.key, wire.MASTER_SENDER)
            msg = wire.decode_object(body)[0] if body is not None else None
            if msg is not None:
                out.append(msg)
        if len(self._inbuf) > wire.MAX_LINE:
            self._inbuf = b""
        return out

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock, self.session = None, None
