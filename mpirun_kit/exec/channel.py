"""The master's result channel: a small TCP server speaking JSON lines.

It runs on the master from before mpirun starts until every worker has the result:

* ranks (through mpirun_kit/rank.py) send ``{"type": "rank", "event": "start"|"exit", ...}``;
* workers send ``{"type": "hello", "host": ...}`` and, at the end, ``{"type": "ack"}``;
* the master sends each worker ``{"type": "heartbeat"}`` every ``heartbeat_s`` and
  finally ``{"type": "result", "exit_code": N, "summary": "..."}``.

A worker that hears nothing for ``master_silence_s`` (or sees the connection
close) knows its master is gone; a worker that connects after the result was
published gets it at once.  ``MasterLink`` is the worker's end, ``send_rank_event`` (report.py)
the rank's.
"""
from __future__ import annotations

import json
import random
import socket
import threading
from typing import Callable

from ..clock import SYSTEM_CLOCK, Clock, Deadline
from ..errors import MasterLostError
from .report import encode, send_rank_event  # noqa: F401  (send_rank_event: re-exported)
from .result import JobResult, RankFailure, rank_failure_from_report

_MAX_LINE = 1 << 20


_encode = encode


class _LineReader:
    """Split a socket's byte stream into JSON messages."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""

    def read(self) -> dict | None:
        """The next message; None on a clean close.  Raises socket.timeout when none arrives in time."""
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
            if len(self.buf) > _MAX_LINE:
                raise ValueError("line too long on result channel")
        line, self.buf = self.buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            return {"type": "garbage"}
        return msg if isinstance(msg, dict) else {"type": "garbage"}


def _shut(sock: socket.socket) -> None:
    """Shut down, then close: close() alone neither wakes a thread blocked in recv nor sends FIN."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class _Peer:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.lock = threading.Lock()
        self.host: str | None = None
        self.alive = True

    def send(self, msg: dict) -> bool:
        """Send without ever blocking: a peer whose socket buffer is full has stopped
        reading, and must not stall heartbeats (or the result) to everyone else."""
        data = _encode(msg)
        with self.lock:
            if not self.alive:
                return False
            try:
                while data:
                    data = data[self.sock.send(data, socket.MSG_DONTWAIT):]
                return True
            except OSError:  # BlockingIOError included
                self.alive = False
                return False


class ResultServer:
    """Master side of the channel.  ``start()`` binds; ``close()`` releases everything."""

    def __init__(self, bind: str, port: int, heartbeat_s: float = 1.0, clock: Clock = SYSTEM_CLOCK,
                 on_rank_event: Callable[[dict], None] | None = None):
        self.bind, self.port, self.heartbeat_s, self.clock = bind, port, heartbeat_s, clock
        self.on_rank_event = on_rank_event
        # Re-entrant: wait_* predicates may call the query methods while holding it.
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._peers: list[_Peer] = []
        self._rank_events: list[dict] = []
        self._acks: set[str] = set()
        self._hellos: set[str] = set()
        self._result: dict | None = None
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []

    # -- life cycle -------------------------------------------------------------
    def start(self) -> "ResultServer":
        """Bind and listen.  Raises OSError when the address is taken or missing."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.bind, self.port))
        sock.listen(256)
        sock.settimeout(0.2)
        self._listener = sock
        self.port = sock.getsockname()[1]
        for target in (self._accept_loop, self._heartbeat_loop):
            t = threading.Thread(target=target, daemon=True, name=f"result-{target.__name__}")
            t.start()
            self._threads.append(t)
        return self

    def close(self) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            peers = list(self._peers)
        for p in peers:
            _shut(p.sock)

    def __enter__(self) -> "ResultServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- loops --------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = _Peer(conn)
            with self._lock:
                self._peers.append(peer)
            threading.Thread(target=self._read_loop, args=(peer,), daemon=True, name="result-peer").start()

    def _read_loop(self, peer: _Peer) -> None:
        reader = _LineReader(peer.sock)
        try:
            while not self._stop.is_set():
                msg = reader.read()
                if msg is None:
                    break
                self._handle(peer, msg)
        except (OSError, ValueError):
            pass
        finally:
            peer.alive = False
            with self._lock:
                if peer in self._peers:
                    self._peers.remove(peer)
            _shut(peer.sock)

    def _handle(self, peer: _Peer, msg: dict) -> None:
        kind = msg.get("type")
        if kind == "rank":
            with self._changed:
                self._rank_events.append(msg)
                self._changed.notify_all()
            if self.on_rank_event:
                self.on_rank_event(msg)
        elif kind == "hello":
            peer.host = str(msg.get("host"))
            with self._changed:
                self._hellos.add(peer.host)
                result = self._result
                self._changed.notify_all()
            # A worker that arrives after the result gets it straight away.
            peer.send({"type": "result", **result} if result else {"type": "heartbeat"})
        elif kind == "ack":
            with self._changed:
                self._acks.add(peer.host or "?")
                self._changed.notify_all()

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            for p in self._worker_peers():
                p.send({"type": "heartbeat", "t": self.clock.time()})

    def _worker_peers(self) -> list[_Peer]:
        with self._lock:
            return [p for p in self._peers if p.host is not None and p.alive]

    # -- queries --------------------------------------------------------------------
    def connected_workers(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._hellos)

    def rank_events(self) -> tuple[dict, ...]:
        with self._lock:
            return tuple(self._rank_events)

    def rank_failures(self) -> tuple[RankFailure, ...]:
        out = []
        for m in self.rank_events():
            if m.get("event") == "exit":
                f = rank_failure_from_report(m)
                if f is not None:
                    out.append(f)
        return tuple(out)

    def wait_rank_events(self, predicate: Callable[[tuple[dict, ...]], bool], timeout: float) -> bool:
        """Wait until ``predicate(events)`` holds, at most ``timeout`` seconds (event-driven, no polling)."""
        deadline = Deadline(self.clock, timeout)
        with self._changed:
            while not predicate(tuple(self._rank_events)):
                left = deadline.remaining()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.5))
        return True

    # -- the end --------------------------------------------------------------------
    def publish(self, result: JobResult) -> int:
        """Send the result to every connected worker in parallel; later hellos get it too.

        Returns the number of workers it was delivered to.
        """
        payload = {"exit_code": result.exit_code, "summary": result.summary}
        with self._lock:
            self._result = payload
        peers = self._worker_peers()
        if not peers:
            return 0
        from concurrent.futures import ThreadPoolExecutor  # master only; ranks import this module too

        with ThreadPoolExecutor(max_workers=min(32, len(peers))) as pool:
            sent = list(pool.map(lambda p: p.send({"type": "result", **payload}), peers))
        return sum(sent)

    def wait_acks(self, hosts: frozenset[str] | set[str], timeout: float) -> frozenset[str]:
        """Wait for ``hosts`` to acknowledge the result; return those that did not in time."""
        deadline = Deadline(self.clock, timeout)
        with self._changed:
            while not set(hosts) <= self._acks:
                left = deadline.remaining()
                if left <= 0:
                    break
                self._changed.wait(min(left, 0.2))
            return frozenset(set(hosts) - self._acks)


class MasterLink:
    """Worker side: one connection to the master's result channel."""

    def __init__(self, sock: socket.socket, master: str):
        self.sock = sock
        self.master = master
        self._reader = _LineReader(sock)

    @classmethod
    def connect(cls, master: str, port: int, me: str, deadline: Deadline, clock: Clock = SYSTEM_CLOCK,
                cancelled: Callable[[], bool] = lambda: False, rng: random.Random | None = None) -> "MasterLink":
        """Connect with jittered backoff (0.1 s -> 1 s) until ``deadline``, then say hello.

        Raises:
            MasterLostError: the master never accepted a connection before the deadline.
        """
        rng = rng or random.Random()
        delay, last_err = 0.1, "no attempt made"
        while True:
            if cancelled():
                raise MasterLostError(f"stopped while connecting to master {master}:{port}")
            try:
                sock = socket.create_connection((master, port), timeout=max(0.1, min(3.0, deadline.remaining())))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.sendall(_encode({"type": "hello", "host": me}))
                return cls(sock, master)
            except OSError as exc:
                last_err = exc.strerror or str(exc)
            if deadline.remaining() <= 0:
                raise MasterLostError(
                    f"master {master} never opened its result channel on port {port} within {deadline.seconds:g} s "
                    f"(last error: {last_err}); the master may have failed to start: check its log, or raise "
                    "timeouts.master_connect_s")
            clock.sleep(min(deadline.remaining(), delay * rng.uniform(0.5, 1.0)))
            delay = min(1.0, delay * 2)

    def recv(self, timeout: float) -> dict | None:
        """The next message, or None when none arrives within ``timeout``.

        Raises:
            EOFError: the master closed the connection (it died or exited).
        """
        self.sock.settimeout(max(0.001, timeout))
        try:
            msg = self._reader.read()
        except socket.timeout:
            return None
        except OSError as exc:
            raise EOFError(str(exc)) from exc
        if msg is None:
            raise EOFError("connection closed")
        return msg

    def send(self, msg: dict) -> None:
        try:
            self.sock.sendall(_encode(msg))
        except OSError:
            pass

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
