"""The master's result channel: one TCP server, one event loop, signed JSON lines.

It runs on the master from before mpirun starts until every worker has the result:

* ranks (through mpirun_kit/rank.py) send ``{"type": "rank", "event": "start"|"exit", ...}``,
  signed with the ranks' key (random per run, handed to ranks by mpirun's ``-x``);
* workers send ``{"type": "hello", "host": ...}``, then ``{"type": "heartbeat"}`` every
  ``HEARTBEAT_S`` and, at the end, ``{"type": "ack"}``, signed with the workers' key
  (derived from the job secret);
* the master sends each worker ``{"type": "heartbeat"}`` every ``heartbeat_s`` and
  finally ``{"type": "result", "exit_code": N, "summary": "..."}``.

The cluster network is shared with other jobs (every member of the security group
reaches every port), so the server trusts nothing it has not checked: peers must
come from one of the plan's host addresses, every line must carry a valid MAC
(checked before any JSON is parsed), every field is validated against the plan
(rank in range and on its planned host, worker a planned host, exit code 0-255,
signal a real name, finite time), each (rank, event) counts once, connections
are capped, and a connection that says nothing valid within ``first_message_s``
is closed.  A rejected message is logged (rate-limited), kept in ``rejected()``,
and dropped: it never changes or loses the job's result.

One thread runs a ``selectors`` loop for every connection (no thread per peer, so
thousands of ranks cost file descriptors, not threads); sends never block (a peer
that stops reading is dropped).  Every timer (heartbeats, first-message timeouts,
worker silence) reads the injected clock.  A worker silent for ``worker_silence_s``
is reported by ``lost_workers()``: its host is gone or cut off (no FIN ever comes).

``MasterLink`` is the worker's end, ``send_rank_event`` (report.py) the rank's.
"""
from __future__ import annotations

import collections
import errno
import hashlib
import hmac
import json
import logging
import math
import os
import random
import selectors
import signal
import socket
import threading
from dataclasses import dataclass
from typing import Callable, Collection, Mapping

from .clock import SYSTEM_CLOCK, Clock, Deadline
from ..errors import LaunchError, MasterLostError
from .report import MAX_LINE, encode, send_rank_event, verify  # noqa: F401  (send_rank_event: re-exported)
from .result import JobResult, RankFailure, rank_failure_from_report
from ..observe.timeline import clean_records

log = logging.getLogger(__name__)

#: how often a worker tells the master it is alive.
HEARTBEAT_S = 1.0
#: a connection that sends no valid message this long after connecting is closed.
FIRST_MESSAGE_S = 10.0
#: while accept() fails for lack of file descriptors, retry it this often.
ACCEPT_RETRY_S = 0.1
#: log at most this many rejected messages in full, then one in every ``_LOG_EVERY``.
_LOG_FIRST, _LOG_EVERY = 20, 100
_SIGNAL_NAMES = frozenset(s.name for s in signal.Signals)
_LABEL_WORKERS = b"mpirun_kit result channel workers v1"


# -- keys -----------------------------------------------------------------------------
def worker_key_from_secret(secret: bytes) -> bytes:
    """The workers' channel key: HMAC of the job secret under its own label (never the ssh keys)."""
    return hmac.new(secret, _LABEL_WORKERS, hashlib.sha256).digest()


def worker_key_without_secret(hosts: Collection[str], port: int) -> bytes:
    """The workers' key when the job has no secret: derived from public facts, so it only
    keeps out peers that do not know the job's hosts.  Ranks stay authenticated (their key
    is random per run); the entrypoint warns that worker messages are not."""
    return hashlib.sha256(_LABEL_WORKERS + b"\0public\0" + ",".join(sorted(hosts)).encode()
                          + b"\0" + str(port).encode()).digest()


def new_rank_key() -> bytes:
    return os.urandom(32)


def parse_message(line: bytes, key: bytes) -> tuple[dict | None, str]:
    """(message, "") when ``line`` is signed with ``key`` and holds a JSON object, else (None, why)."""
    body = verify(line, key)
    if body is None:
        return None, "bad or missing MAC"
    try:
        msg = json.loads(body)
    except (ValueError, RecursionError):  # a MemoryError would be ours, not the peer's: let it raise
        return None, "malformed JSON"
    if not isinstance(msg, dict):
        return None, "not a JSON object"
    return msg, ""


def _is_time(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_rank_identity(msg: dict, rank_hosts: Mapping[int, str]) -> str:
    """Why ``msg`` does not come from a rank of this plan at a sane time; "" when it does."""
    rank, host, t = msg.get("rank"), msg.get("host"), msg.get("t")
    if not _is_int(rank) or rank not in rank_hosts:
        return f"rank {str(rank)[:40]!r} is not a rank of this job (0-{len(rank_hosts) - 1})"
    if host != rank_hosts[rank]:
        return f"rank {rank} reported host {str(host)[:80]!r}; the plan places it on {rank_hosts[rank]}"
    if not _is_time(t):
        return f"time {str(t)[:40]!r} is not a finite number"
    return ""


def check_rank_report(msg: dict, rank_hosts: Mapping[int, str]) -> tuple[dict | None, str]:
    """A start/exit report reduced to its known fields, or (None, why) when it does not fit the plan."""
    event = msg.get("event")
    if event not in ("start", "exit"):
        return None, f"unknown rank event {str(event)[:40]!r}"
    why = _check_rank_identity(msg, rank_hosts)
    if why:
        return None, why
    rank = msg["rank"]
    clean = {"type": "rank", "event": event, "rank": rank, "host": msg["host"], "t": float(msg["t"])}
    if event == "start":
        if _is_int(msg.get("local_rank")):
            clean["local_rank"] = msg["local_rank"]
        for name in ("pid", "program_pid"):        # the wrapper's and its program's
            if _is_int(msg.get(name)):
                clean[name] = msg[name]
        return clean, ""
    code, sig = msg.get("exit_code"), msg.get("signal")
    if (code is None) == (sig is None):
        return None, "an exit report needs exactly one of exit_code and signal"
    if code is not None and not (_is_int(code) and 0 <= code <= 255):
        return None, f"exit_code {str(code)[:40]!r} is not an integer 0-255"
    if sig is not None and sig not in _SIGNAL_NAMES:
        return None, f"signal {str(sig)[:40]!r} is not a signal name"
    clean.update(exit_code=code, signal=sig)
    return clean, ""


# -- the server -------------------------------------------------------------------------
def _raise_fd_limit(wanted: int) -> None:
    """Lift this process's soft open-file limit towards ``wanted`` (never past the hard limit):
    a 256-host x 8-GPU job holds ~2,300 connections, past the common soft default of 1024."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < wanted:
            target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
            if target > soft:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ImportError, ValueError, OSError) as exc:
        log.warning("result channel: could not raise the open-file limit to %d (%s)", wanted, exc)


def _shut(sock: socket.socket) -> None:
    """Shut down, then close: close() alone neither wakes a reader nor sends FIN."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class _Peer:
    """One connection.  ``role`` is set by its first valid message ("rank" or "worker")."""

    def __init__(self, sock: socket.socket, addr: str = "?", opened: float = 0.0):
        self.sock = sock
        self.addr = addr
        self.opened = opened
        self.buf = bytearray()
        self.lock = threading.Lock()
        self.role: str | None = None
        self.host: str | None = None
        self.alive = True

    def send_raw(self, data: bytes) -> bool:
        """Send without ever blocking: a peer whose socket buffer is full has stopped
        reading, and must not stall heartbeats (or the result) to everyone else."""
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


@dataclass(frozen=True)
class Rejected:
    """A message or connection the server refused: from where, and why."""

    peer: str
    reason: str


class ResultServer:
    """Master side of the channel.  ``start()`` binds; ``close()`` releases everything.

    Args:
        rank_key / worker_key: the two channel keys (see the module docstring).
        rank_hosts: the plan's placement, rank -> host; reports for other ranks are dropped.
        workers: the plan's worker hosts; hellos from other names are dropped.
        allowed_peers: IP addresses connections may come from (the plan's hosts); None = any.
        worker_silence_s: a worker that said hello and then nothing for this long is lost; None = never.
        max_connections: open connections at most; at the cap the oldest connection that has not
            authenticated yet is closed to make room, else the new one is refused.
        check_other: validates rank events other than start/exit (e.g. progress reports) once the MAC,
            rank, host and time were checked: ``(msg, rank_hosts) -> (clean, "")`` or ``(None, why)``.
            Valid ones go to ``on_rank_event`` only (not kept, not deduplicated).  None: rejected.
    """

    def __init__(self, bind: str, port: int, *, rank_key: bytes, worker_key: bytes,
                 rank_hosts: Mapping[int, str], workers: Collection[str] = (),
                 allowed_peers: Collection[str] | None = None, heartbeat_s: float = 1.0,
                 worker_silence_s: float | None = None, first_message_s: float = FIRST_MESSAGE_S,
                 max_connections: int | None = None, clock: Clock = SYSTEM_CLOCK,
                 on_rank_event: Callable[[dict], None] | None = None,
                 check_other: Callable[[dict, Mapping[int, str]], tuple[dict | None, str]] | None = None):
        self.bind, self.port, self.heartbeat_s, self.clock = bind, port, heartbeat_s, clock
        self.rank_key, self.worker_key = rank_key, worker_key
        self.rank_hosts = dict(rank_hosts)
        self.workers = frozenset(workers)
        self.allowed_peers = None if allowed_peers is None else frozenset(allowed_peers)
        self.worker_silence_s = worker_silence_s
        self.first_message_s = first_message_s
        self.max_connections = max_connections or (len(self.rank_hosts) + len(self.workers) + 64)
        self.on_rank_event = on_rank_event
        self.check_other = check_other
        # Re-entrant: wait_* predicates may call the query methods while holding it.
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._peers: dict[int, _Peer] = {}            # fileno -> peer (touched by the loop only)
        # Peers not authenticated yet, oldest first (insertion order = accept order): the loop's timers
        # look at these only, never at every connection (the loop wakes ~2,300 times a second at 256x8).
        self._unauthed: dict[_Peer, None] = {}
        self._rank_events: list[dict] = []
        self._seen: set[tuple[int, str]] = set()
        self._acks: set[str] = set()
        self._hellos: set[str] = set()
        self._sshd_up: set[str] = set()     # workers whose hello said their sshd answers (readiness pushed)
        self._last_heard: dict[str, float] = {}
        self._lost: dict[str, float] = {}               # host -> seconds it had been silent
        self._worker_peer: dict[str, _Peer] = {}
        self._rank_peer: dict[int, _Peer] = {}
        self._closed: set[str] = set()                  # workers whose connection closed
        self._timelines: dict[str, list] = {}          # worker -> its timeline records, sent with its ack
        self._result: dict | None = None
        self._rejected: collections.deque[Rejected] = collections.deque(maxlen=200)
        self._n_rejected = 0
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._sel: selectors.BaseSelector | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._accept_paused_until: float | None = None
        self._next_heartbeat = 0.0
        self._next_silence_check = 0.0                  # no worker can be lost before this (monotonic)

    # -- life cycle -------------------------------------------------------------
    def start(self) -> "ResultServer":
        """Bind and listen.

        Raises:
            OSError: the address is taken or missing.
            LaunchError: the server's thread could not be started.
        """
        _raise_fd_limit(self.max_connections + 256)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.bind, self.port))
            sock.listen(1024)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._listener = sock
        self.port = sock.getsockname()[1]
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(sock, selectors.EVENT_READ, "listen")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._next_heartbeat = self.clock.monotonic() + self.heartbeat_s
        self._thread = threading.Thread(target=self._loop, daemon=True, name="result-channel")
        try:
            self._thread.start()
        except RuntimeError as exc:  # "can't start new thread": out of threads or memory
            self._release()
            raise LaunchError(f"cannot start the result channel's thread ({exc}); the master host is out of "
                              "threads or memory: check its other processes") from exc
        return self

    def close(self) -> None:
        self._stop.set()
        self._wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        if self._thread is None or not self._thread.is_alive():
            self._release()

    def _release(self) -> None:
        for p in list(self._peers.values()):
            p.alive = False
            _shut(p.sock)
        self._peers.clear()
        self._unauthed.clear()
        for s in (self._listener, self._wake_r, self._wake_w):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass
        if self._sel is not None:
            self._sel.close()
            self._sel = None

    def _wake(self) -> None:
        try:
            if self._wake_w is not None:
                self._wake_w.send(b"x", socket.MSG_DONTWAIT)
        except OSError:
            pass

    def __enter__(self) -> "ResultServer":
        return self if self._listener is not None else self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the loop -------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                timeout = self._tick()
                events = self._sel.select(timeout)
            except Exception:  # never let the loop die: the job's result depends on it
                log.exception("result channel: unexpected error in the event loop; continuing")
                self.clock.sleep(0.05)
                continue
            for key, _ in events:
                try:
                    if key.data == "listen":
                        self._accept()
                    elif key.data == "wake":
                        key.fileobj.recv(4096)
                    else:
                        self._read(key.data)
                except Exception:
                    log.exception("result channel: unexpected error serving %s; dropping it",
                                  getattr(key.data, "addr", key.data))
                    if isinstance(key.data, _Peer):
                        self._drop(key.data)
        self._release()

    def _tick(self) -> float:
        """Run what is due; return the seconds until the next timer."""
        now = self.clock.monotonic()
        if self._accept_paused_until is not None and now >= self._accept_paused_until:
            self._accept_paused_until = None
            self._sel.register(self._listener, selectors.EVENT_READ, "listen")
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + self.heartbeat_s
            beat = encode({"type": "heartbeat", "t": self.clock.time()}, self.worker_key)
            for p in list(self._peers.values()):
                if p.role == "worker" and not p.send_raw(beat):
                    self._drop(p)
        while self._unauthed:
            p = next(iter(self._unauthed))
            if now - p.opened <= self.first_message_s:
                break   # the oldest is not due, so none is
            self._reject(p.addr, f"no valid message within {self.first_message_s:g} s of connecting")
            self._drop(p)
        self._check_silence(now)
        nxt = min(self._next_heartbeat - now, 0.25)
        if self._accept_paused_until is not None:
            nxt = min(nxt, self._accept_paused_until - now)
        return max(0.0, nxt)

    def _check_silence(self, now: float) -> None:
        """Declare lost the workers silent for ``worker_silence_s``.  Scans only when the earliest
        deadline is due: times heard only move later, and a new worker's deadline is past that one."""
        if self.worker_silence_s is None or now < self._next_silence_check:
            return
        with self._changed:
            if self._result is not None:
                return
            earliest = math.inf
            for host, last in self._last_heard.items():
                if host in self._lost:
                    continue
                if now - last > self.worker_silence_s:
                    self._lost[host] = now - last
                    log.error("result channel: worker %s silent for %.1f s (limit %g s): host lost",
                              host, now - last, self.worker_silence_s)
                    self._changed.notify_all()
                else:
                    earliest = min(earliest, last + self.worker_silence_s)
            self._next_silence_check = earliest

    def _accept(self) -> None:
        for _ in range(64):  # a burst at a time, so reads are not starved
            try:
                conn, addr = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.ECONNABORTED, errno.EINTR, errno.EPROTO):
                    continue
                # EMFILE/ENFILE/ENOBUFS: the backlog keeps the connection; try again shortly.
                self._reject("listener", f"accept failed ({exc.strerror}); retrying in {ACCEPT_RETRY_S:g} s")
                self._sel.unregister(self._listener)
                self._accept_paused_until = self.clock.monotonic() + ACCEPT_RETRY_S
                return
            ip = addr[0]
            if self.allowed_peers is not None and ip not in self.allowed_peers:
                self._reject(ip, "connection from an address that is not one of the job's hosts")
                _shut(conn)
                continue
            if len(self._peers) >= self.max_connections and not self._evict_one():
                self._reject(ip, f"connection refused: {self.max_connections} connections open (the cap)")
                _shut(conn)
                continue
            try:
                conn.setblocking(False)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                peer = _Peer(conn, ip, self.clock.monotonic())
                self._sel.register(conn, selectors.EVENT_READ, peer)
            except (OSError, ValueError) as exc:
                self._reject(ip, f"could not serve the connection ({exc})")
                _shut(conn)
                continue
            self._peers[conn.fileno()] = peer
            self._unauthed[peer] = None

    def _evict_one(self) -> bool:
        """Make room for one connection: the oldest that has not authenticated goes.  Each candidate's
        pending bytes are read first, so a rank whose report is already here is never the one evicted."""
        for p in list(self._unauthed):  # oldest first
            self._read(p)
            if not p.alive:
                return True  # it closed, or its line was refused: room made
            if p.role is None:
                self._reject(p.addr, "connection closed to make room: it had not authenticated")
                self._drop(p)
                return True
        return False

    def _drop(self, peer: _Peer, by_peer: bool = False) -> None:
        """Close ``peer``; ``by_peer``: it closed first (EOF or reset), not us."""
        peer.alive = False
        self._unauthed.pop(peer, None)
        try:
            fd = peer.sock.fileno()
            if fd >= 0:
                self._peers.pop(fd, None)
                self._sel.unregister(peer.sock)
        except (KeyError, ValueError, OSError):
            pass
        _shut(peer.sock)
        with self._lock:
            if peer.host is not None and self._worker_peer.get(peer.host) is peer:
                del self._worker_peer[peer.host]
                if by_peer:
                    self._closed.add(peer.host)

    def _read(self, peer: _Peer) -> None:
        try:
            chunk = peer.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            self._drop(peer, by_peer=True)
            return
        if not chunk:
            self._drop(peer, by_peer=True)
            return
        peer.buf += chunk
        while peer.alive:
            nl = peer.buf.find(b"\n")
            if nl < 0:
                break
            line = bytes(peer.buf[:nl])
            del peer.buf[:nl + 1]
            self._line(peer, line)
        if peer.alive and len(peer.buf) > MAX_LINE:
            self._reject(peer.addr, f"line longer than {MAX_LINE} bytes")
            self._drop(peer)

    def _line(self, peer: _Peer, line: bytes) -> None:
        role = peer.role
        msg, why = None, "bad or missing MAC"
        if role in (None, "rank"):
            msg, why = parse_message(line, self.rank_key)
            if msg is not None:
                role = "rank"
        if msg is None and role in (None, "worker") and why == "bad or missing MAC":
            msg, why = parse_message(line, self.worker_key)
            if msg is not None:
                role = "worker"
        if msg is None:
            self._reject(peer.addr, why)
            if peer.role is None:  # never authenticated: nothing of value on this connection
                self._drop(peer)
            return
        if peer.role is None:
            peer.role = role
            self._unauthed.pop(peer, None)
        kind = msg.get("type")
        if role == "rank":
            if kind != "rank":
                self._reject(peer.addr, f"rank connection sent a {str(kind)[:40]!r} message")
                return
            self._rank_report(peer, msg)
        elif kind in ("hello", "heartbeat", "ack"):
            self._worker_message(peer, kind, msg)
        else:
            self._reject(peer.addr, f"unknown message type {str(kind)[:40]!r}")

    def _rank_report(self, peer: _Peer, msg: dict) -> None:
        if msg.get("event") not in ("start", "exit") and self.check_other is not None:
            why = _check_rank_identity(msg, self.rank_hosts)
            clean, why = (None, why) if why else self.check_other(msg, self.rank_hosts)
            if clean is None:
                self._reject(peer.addr, why)
                return
            with self._lock:
                self._rank_peer[clean["rank"]] = peer
            self._notify(clean)
            return
        clean, why = check_rank_report(msg, self.rank_hosts)
        if clean is None:
            self._reject(peer.addr, why)
            return
        with self._lock:
            self._rank_peer[clean["rank"]] = peer
        key = (clean["rank"], clean["event"])
        with self._changed:
            if key in self._seen:
                dup = True
            else:
                dup = False
                self._seen.add(key)
                self._rank_events.append(clean)
                self._changed.notify_all()
        if dup:
            self._reject(peer.addr, f"second {clean['event']!r} report for rank {clean['rank']}")
            return
        self._notify(clean)

    def _notify(self, event: dict) -> None:
        """Hand a valid rank event to ``on_rank_event``; its errors are its own, never the rank's connection's."""
        if self.on_rank_event is None:
            return
        try:
            self.on_rank_event(event)
        except Exception:
            log.exception("result channel: on_rank_event failed for %s; continuing", event.get("event"))

    def _worker_message(self, peer: _Peer, kind: str, msg: dict) -> None:
        now = self.clock.monotonic()
        if kind == "hello":
            host = msg.get("host")
            if host not in self.workers:
                self._reject(peer.addr, f"hello from {str(host)[:80]!r}, which is not a worker of this job")
                return
            with self._changed:
                old = self._worker_peer.get(host)
                peer.host = host
                self._worker_peer[host] = peer
                self._closed.discard(host)
                self._hellos.add(host)
                if msg.get("sshd") is True:
                    self._sshd_up.add(host)
                self._last_heard[host] = now
                if self.worker_silence_s is not None:   # its deadline may be the earliest (the first hello's is)
                    self._next_silence_check = min(self._next_silence_check, now + self.worker_silence_s)
                result = self._result
                self._changed.notify_all()
            if old is not None and old is not peer:
                self._drop(old)
                with self._lock:
                    self._closed.discard(host)
            # A worker that arrives after the result gets it straight away.
            reply = {"type": "result", **result} if result else {"type": "heartbeat", "t": self.clock.time()}
            if not peer.send_raw(encode(reply, self.worker_key)):
                self._drop(peer)
            return
        if peer.host is None:
            self._reject(peer.addr, f"worker {kind!r} before hello")
            return
        with self._changed:
            self._last_heard[peer.host] = now
            if kind == "ack":
                self._acks.add(peer.host)
                recs = clean_records(msg.get("timeline"))   # observe/timeline.py: phases and finite times only
                if recs is not None:
                    self._timelines[peer.host] = recs
            self._changed.notify_all()

    def _reject(self, peer: str, reason: str) -> None:
        with self._lock:
            self._n_rejected += 1
            n = self._n_rejected
            self._rejected.append(Rejected(peer, reason))
        if n <= _LOG_FIRST or n % _LOG_EVERY == 0:
            log.warning("result channel: dropped from %s: %s (%d dropped so far)", peer, reason, n)

    # -- queries --------------------------------------------------------------------
    def connected_workers(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._hellos)

    def wait_sshd_up(self, host: str, timeout: float) -> bool:
        """Wait until ``host``'s worker said hello with its sshd answering; True if it did within ``timeout``.

        Readiness pushed by the worker the moment its sshd answers locally: the master's sshd wait
        (exec/ssh.py ``wait_reachable``) sleeps between probes on this instead of a timer.
        """
        deadline = Deadline(self.clock, timeout)
        with self._changed:
            while host not in self._sshd_up:
                left = deadline.remaining()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.5))
        return True

    def lost_workers(self) -> dict[str, float]:
        """Workers declared lost, host -> how long they had been silent (seconds)."""
        with self._lock:
            return dict(self._lost)

    def closed_workers(self) -> frozenset[str]:
        """Workers whose connection closed (FIN or RST: their entrypoint exited or was killed)."""
        with self._lock:
            return frozenset(self._closed)

    def rejected(self) -> tuple[Rejected, ...]:
        """The most recent refused messages and connections (at most 200)."""
        with self._lock:
            return tuple(self._rejected)

    def rank_events(self) -> tuple[dict, ...]:
        with self._lock:
            return tuple(self._rank_events)

    def rank_failures(self) -> tuple[RankFailure, ...]:
        out = []
        for m in self.rank_events():
            if m["event"] == "exit":
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

    def worker_timelines(self) -> dict[str, list]:
        """Each worker's timeline records, as sent with its ack (observe/timeline.py)."""
        with self._lock:
            return dict(self._timelines)

    def send_to_ranks(self, ranks: Collection[int], msg: dict) -> list[int]:
        """Send ``msg`` (signed with the ranks' key) on each rank's own connection; returns those reached."""
        data = encode(msg, self.rank_key)
        with self._lock:
            peers = [(r, self._rank_peer.get(r)) for r in ranks]
        return [r for r, p in peers if p is not None and p.send_raw(data)]

    def connected_ranks(self, ranks: Collection[int]) -> frozenset[int]:
        """Those of ``ranks`` whose own connection is open (a wrapper that died closed its connection)."""
        with self._lock:
            return frozenset(r for r in ranks if (p := self._rank_peer.get(r)) is not None and p.alive)

    def exited_ranks(self) -> frozenset[int]:
        """The ranks whose exit report arrived."""
        with self._lock:
            return frozenset(e["rank"] for e in self._rank_events if e["event"] == "exit")

    # -- the end --------------------------------------------------------------------
    def publish(self, result: JobResult) -> int:
        """Send the result to every connected worker; later hellos get it too.

        Sends never block, so one pass over the workers is as fast as a parallel one.
        Returns the number of workers it was delivered to.
        """
        payload = {"exit_code": int(result.exit_code), "summary": result.summary}
        data = encode({"type": "result", **payload}, self.worker_key)
        with self._lock:
            self._result = payload
            peers = list(self._worker_peer.values())
        return sum(p.send_raw(data) for p in peers)

    def wait_acks(self, hosts: Collection[str], timeout: float) -> frozenset[str]:
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
    """Worker side: one connection to the master's result channel, signed with the workers' key."""

    def __init__(self, sock: socket.socket, master: str, key: bytes):
        self.sock = sock
        self.master = master
        self.key = key
        self.buf = b""
        self.rejected = 0

    @classmethod
    def connect(cls, master: str, port: int, me: str, deadline: Deadline, *, key: bytes,
                clock: Clock = SYSTEM_CLOCK, cancelled: Callable[[], bool] = lambda: False,
                rng: random.Random | None = None, sshd_up: bool = False) -> "MasterLink":
        """Connect with jittered backoff (0.1 s -> 1 s) until ``deadline``, then say hello.

        ``sshd_up``: this host's sshd answers locally; the hello says so, and the master stops waiting for it.

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
                sock.sendall(encode({"type": "hello", "host": me, **({"sshd": True} if sshd_up else {})}, key))
                return cls(sock, master, key)
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
        """The next valid message, or None when none arrives within ``timeout`` (or it was invalid).

        Raises:
            EOFError: the master closed the connection (it died or exited).
        """
        while b"\n" not in self.buf:
            if len(self.buf) > MAX_LINE:
                raise EOFError(f"line longer than {MAX_LINE} bytes from the master")
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
        msg, why = parse_message(line, self.key)
        if msg is None or not _valid_from_master(msg):
            self.rejected += 1
            log.warning("dropped a message from master %s: %s", self.master, why or "invalid fields")
            return None
        return msg

    def send(self, msg: dict) -> None:
        try:
            self.sock.sendall(encode(msg, self.key))
        except OSError:
            pass

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _valid_from_master(msg: dict) -> bool:
    if msg.get("type") == "heartbeat":
        return True
    return (msg.get("type") == "result" and _is_int(msg.get("exit_code")) and 0 <= msg["exit_code"] <= 255
            and isinstance(msg.get("summary", ""), str))
