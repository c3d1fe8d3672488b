"""The master's end of the result channel: one TCP server, one event loop, every line checked before it counts.

Place in the data flow: the master's entrypoint (entrypoint/master.py) starts it before mpirun; workers
(link.py) and rank wrappers (rank_link.py) connect to it; its queries feed the job's result
(exec/result.py), the stop through the ranks (stop.py) and the hang monitor (observe/hang.py, injected).

The cluster network is shared with other jobs (every member of the security group reaches every port),
so the server trusts nothing it has not checked:

* a connection from an address that is none of the plan's hosts is dropped in the kernel before its
  handshake where the platform allows (``filter.py``), and refused at ``accept()`` anyway;
* every line carries a MAC bound to this run, this connection, its direction and its number (wire.py):
  replays and reorders fail; the key is picked by the line's sender token: the workers' key, or the
  sender rank's own key (keys.py);
* a connection belongs to the sender of its first valid line: a rank's connection must come from the
  rank's planned host's address, and a rank keeps its first connection while that one is open (a second
  one, or another rank's line on it, is refused); a worker's hello must come from its host's planned
  address and never replaces a live authenticated connection of that host;
* every field is validated against the plan (protocol.py), each (rank, event) counts once,
  connections are capped, and a connection that is not authenticated within ``first_message_s`` is closed
  (a worker's connection is authenticated by its hello, not by its first signed line: a holder of the
  workers' key that never says hello is timed out and evicted like an outsider);
* authenticated connections are capped per source address (its hosts' ranks, plus one per worker, plus
  ``PER_HOST_SLACK``), so even a holder of a key cannot fill the server's cap from one host.

A refused message is counted by reason (``rejection_counts()``), logged (rate-limited per reason, so a
flood of one kind hides no other), kept in ``rejected()``, and dropped: it never changes the job's result.

One thread runs a ``selectors`` loop for every connection (no thread per peer, so thousands of ranks cost
file descriptors, not threads); sends never block (a peer that stops reading is dropped).  Every timer
(heartbeats, first-message timeouts, worker silence) reads the injected clock.  A worker silent for
``worker_silence_s`` is reported by ``lost_workers()``: its host is gone or cut off (no FIN ever comes).
"""
from __future__ import annotations

import collections
import errno
import logging
import math
import os
import selectors
import socket
import threading
from dataclasses import dataclass
from typing import Callable, Collection, Mapping

from ...core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..result import JobResult, RankFailure, rank_failure_from_report
from ...errors import LaunchError
from . import filter as peer_filter
from . import wire
from .keys import host_seed, rank_key, seal_seed
from .protocol import check_rank_identity, check_rank_report

log = logging.getLogger(__name__)

#: a connection that sends no valid message this long after connecting is closed.
FIRST_MESSAGE_S = 10.0
#: a connection younger than this is never evicted to make room (its first line may be on its way).
EVICT_GRACE_S = 0.5
#: authenticated connections one address may hold beyond its hosts' ranks and workers (a rank's reconnect).
PER_HOST_SLACK = 2
#: while accept() fails for lack of file descriptors, retry it this often.
ACCEPT_RETRY_S = 0.1
#: per reason, log at most this many rejected messages in full, then one in every ``_LOG_EVERY``.
_LOG_FIRST, _LOG_EVERY = 20, 100


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
    """One connection.  ``sender`` is set by its first valid line (``w`` or ``r<N>``, wire.py) and never
    changes; ``role`` is "worker" or "rank" accordingly, ``rank`` the rank's number, ``host`` a worker's host."""

    def __init__(self, sock: socket.socket, addr: str = "?", opened: float = 0.0,
                 session: wire.Session | None = None, conn_nonce: bytes = b""):
        self.sock = sock
        self.conn_nonce = conn_nonce      # the greeting's (the seed is sealed to it, keys.py)
        self.addr = addr
        self.opened = opened
        self.session = session
        self.buf = bytearray()
        self.lock = threading.Lock()
        self.sender: str | None = None
        self.tag_sp = b""                 # the sender token and its space, once bound (the hot path's check)
        self.key = b""                    # the bound sender's key
        self.role: str | None = None
        self.rank: int | None = None
        self.host: str | None = None
        self.alive = True
        self.counted = False              # counted in its address's authenticated connections

    def send_msg(self, msg: dict, key: bytes) -> bool:
        """Seal ``msg`` as this connection's next master line and send it (never blocking)."""
        return self.send_msgs((msg,), key)

    def send_msgs(self, msgs, key: bytes) -> bool:
        """Seal ``msgs`` as this connection's next master lines and send them in one write.  Sealed and
        sent under one lock: lines are numbered, so they must leave in the order they were sealed."""
        with self.lock:
            return self.alive and self._send(b"".join(self.session.seal(m, key, wire.MASTER_SENDER) for m in msgs))

    def send_raw(self, data: bytes) -> bool:
        """Send without ever blocking: a peer whose socket buffer is full has stopped
        reading, and must not stall heartbeats (or the result) to everyone else."""
        with self.lock:
            return self.alive and self._send(data)

    def _send(self, data: bytes) -> bool:
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
    #: the reason's kind, the key of ``ResultServer.rejection_counts()``: address, mac, malformed,
    #: identity, plan, duplicate, timeout, capacity, oversize, accept.
    kind: str = "plan"


class ResultServer:
    """Master side of the channel.  ``start()`` binds; ``close()`` releases everything.

    Args:
        job: the job's name (inside every MAC, wire.py).
        run_key: made per run (keys.py ``new_run_key``); each rank's key and each host's seed derive from it.
        worker_key: the workers' key (keys.py).
        run_nonce: made per run when not given (inside every MAC; the ranks' key directory is named by it).
        rank_hosts: the plan's placement, rank -> host; reports for other ranks are dropped.
        workers: the plan's worker hosts; hellos from other names are dropped.
        allowed_peers: IP addresses connections may come from (the plan's hosts); None = any.
        host_addresses: host -> the addresses it connects from; a hello, or a rank's connection, must come
            from its host's.  None = not checked (every host on one address, as in tests on 127.0.0.1).
        clean_timeline: reduces the timeline records a worker sends with its ack (observe/timeline.py);
            None = records are not kept.
        worker_silence_s: a worker that said hello and then nothing for this long is lost; None = never.
        max_connections: open connections at most; at the cap the oldest connection that has not
            authenticated yet is closed to make room, else the new one is refused.
        check_other: validates rank events other than start/exit (e.g. progress reports) once the MAC,
            rank, host and time were checked: ``(msg, rank_hosts) -> (clean, "")`` or ``(None, why)``.
            Valid ones go to ``on_rank_event`` only (not kept, not deduplicated).  None: rejected.
    """

    def __init__(self, bind: str, port: int, *, job: str, run_key: bytes, worker_key: bytes,
                 rank_hosts: Mapping[int, str], workers: Collection[str] = (), run_nonce: bytes | None = None,
                 allowed_peers: Collection[str] | None = None,
                 host_addresses: Mapping[str, Collection[str]] | None = None,
                 clean_timeline: Callable[[object], list | None] | None = None, heartbeat_s: float = 1.0,
                 worker_silence_s: float | None = None, first_message_s: float = FIRST_MESSAGE_S,
                 max_connections: int | None = None, clock: Clock = SYSTEM_CLOCK,
                 on_rank_event: Callable[[dict], None] | None = None,
                 check_other: Callable[[dict, Mapping[int, str]], tuple[dict | None, str]] | None = None):
        self.bind, self.port, self.heartbeat_s, self.clock = bind, port, heartbeat_s, clock
        self.job, self.run_key, self.worker_key = job, run_key, worker_key
        self.run_nonce = run_nonce if run_nonce is not None else os.urandom(wire.NONCE_BYTES)
        self.rank_hosts = dict(rank_hosts)
        self.workers = frozenset(workers)
        self.allowed_peers = None if allowed_peers is None else frozenset(allowed_peers)
        self.host_addresses = None if host_addresses is None else {h: frozenset(a) for h, a in host_addresses.items()}
        self.clean_timeline = clean_timeline
        hosts = set(self.rank_hosts.values()) | set(self.workers)
        self._seeds = {h: host_seed(run_key, job, h) for h in hosts}
        self._rank_keys = {r: rank_key(self._seeds[h], job, r) for r, h in self.rank_hosts.items()}
        self._senders = {wire.rank_sender(r): r for r in self.rank_hosts}
        self.worker_silence_s = worker_silence_s
        self.first_message_s = first_message_s
        self.max_connections = max_connections or (len(self.rank_hosts) + len(self.workers) + 64)
        self._addr_cap = self._per_address_caps()
        self._authed_by_addr: collections.Counter[str] = collections.Counter()
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
        self._rejection_counts: collections.Counter[str] = collections.Counter()
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._sel: selectors.BaseSelector | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._accept_paused_until: float | None = None
        self._next_heartbeat = 0.0
        self._next_silence_check = 0.0                  # no worker can be lost before this (monotonic)

    def _per_address_caps(self) -> dict[str, int]:
        """Authenticated connections each address may hold: the ranks and workers of the hosts that connect
        from it, plus PER_HOST_SLACK.  Without ``host_addresses`` every connection comes from anywhere: the
        whole plan's count."""
        per_host = collections.Counter(self.rank_hosts.values())
        for w in self.workers:
            per_host[w] += 1
        if self.host_addresses is None:
            return collections.defaultdict(lambda: sum(per_host.values()) + PER_HOST_SLACK)
        caps: dict[str, int] = collections.defaultdict(lambda: PER_HOST_SLACK)
        for host, addrs in self.host_addresses.items():
            for a in addrs:
                caps[a] = caps[a] + per_host.get(host, 0)
        return caps

    def _authenticated(self, peer: _Peer) -> bool:
        """Move ``peer`` out of the unauthenticated set, when its address is under its cap; False (refused,
        dropped) when the address already holds as many authenticated connections as its hosts need."""
        if self._authed_by_addr[peer.addr] >= self._addr_cap[peer.addr]:
            self._reject(peer.addr, f"{self._addr_cap[peer.addr]} authenticated connections already open from "
                                    f"{peer.addr} (its hosts' ranks and workers, plus {PER_HOST_SLACK})", "capacity")
            self._drop(peer)
            return False
        self._authed_by_addr[peer.addr] += 1
        peer.counted = True
        self._unauthed.pop(peer, None)
        return True

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
            if self.allowed_peers is not None:
                # Outsiders' SYNs are dropped before any handshake where the kernel allows (filter.py).
                why = peer_filter.attach(sock, self.allowed_peers)
                if why:
                    # Said as a warning, with what is lost: without the filter an outsider's connection is refused
                    # only after its handshake, so a flood of them costs the server accept()s and, until each
                    # is refused, nothing else (they never count against the connection cap).
                    log.warning("result channel: no kernel filter for outside addresses (%s): their connections "
                                "now complete the TCP handshake and are refused at accept(), one by one, in the "
                                "server's loop; a flood from outside the job's hosts costs the master CPU", why)
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
            beat = {"type": "heartbeat", "t": self.clock.time()}
            for p in list(self._peers.values()):
                if p.role == "worker" and p.host is not None and not p.send_msg(beat, self.worker_key):
                    self._drop(p)
        while self._unauthed:
            p = next(iter(self._unauthed))
            if now - p.opened <= self.first_message_s:
                break   # the oldest is not due, so none is
            self._reject(p.addr, f"no valid message within {self.first_message_s:g} s of connecting", "timeout")
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
                self._reject("listener", f"accept failed ({exc.strerror}); retrying in {ACCEPT_RETRY_S:g} s",
                             "accept")
                self._sel.unregister(self._listener)
                self._accept_paused_until = self.clock.monotonic() + ACCEPT_RETRY_S
                return
            ip = addr[0]
            if self.allowed_peers is not None and ip not in self.allowed_peers:
                self._reject(ip, "connection from an address that is not one of the job's hosts", "address")
                _shut(conn)
                continue
            if len(self._peers) >= self.max_connections and not self._evict_one():
                self._reject(ip, f"connection refused: {self.max_connections} connections open (the cap)",
                             "capacity")
                _shut(conn)
                continue
            try:
                conn.setblocking(False)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn_nonce = os.urandom(wire.NONCE_BYTES)
                peer = _Peer(conn, ip, self.clock.monotonic(),
                             wire.Session(self.job, self.run_nonce, conn_nonce, master_end=True), conn_nonce)
                # The greeting: the nonces every MAC on this connection is bound to (wire.py).
                if not peer.send_raw(wire.greeting(self.run_nonce, conn_nonce)):
                    raise OSError("the greeting could not be sent")
                self._sel.register(conn, selectors.EVENT_READ, peer)
            except (OSError, ValueError) as exc:
                self._reject(ip, f"could not serve the connection ({exc})", "accept")
                _shut(conn)
                continue
            self._peers[conn.fileno()] = peer
            self._unauthed[peer] = None

    def _evict_one(self) -> bool:
        """Make room for one connection: the oldest that has not authenticated goes (a worker's connection
        without its hello included).  Each candidate's pending bytes are read first, so a rank whose report
        is already here is never the one evicted."""
        now = self.clock.monotonic()
        for p in list(self._unauthed):  # oldest first
            self._read(p)
            if not p.alive:
                return True  # it closed, or its line was refused: room made
            if now - p.opened < EVICT_GRACE_S:
                # The oldest is this young, so all are: one may be a rank whose line is on its way, which would be
                # lost although its send() succeeded.  The newcomer is refused instead, before its greeting, which
                # a rank sees and retries (rank_link.py): a flood delays reports, never loses one.
                return False
            if p in self._unauthed:
                self._reject(p.addr, "connection closed to make room: it had not authenticated", "capacity")
                self._drop(p)
                return True
        return False

    def _drop(self, peer: _Peer, by_peer: bool = False) -> None:
        """Close ``peer``; ``by_peer``: it closed first (EOF or reset), not us."""
        peer.alive = False
        self._unauthed.pop(peer, None)
        if peer.counted:
            peer.counted = False
            self._authed_by_addr[peer.addr] -= 1
        try:
            fd = peer.sock.fileno()
            if fd >= 0:
                self._peers.pop(fd, None)
                self._sel.unregister(peer.sock)
        except (KeyError, ValueError, OSError):
            pass
        _shut(peer.sock)
        with self._lock:
            if peer.role == "worker" and peer.host is not None and self._worker_peer.get(peer.host) is peer:
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
        if peer.alive and len(peer.buf) > wire.MAX_LINE:
            self._reject(peer.addr, f"line longer than {wire.MAX_LINE} bytes", "oversize")
            self._drop(peer)

    def _key_for(self, sender: str) -> bytes | None:
        if sender == wire.WORKER_SENDER:
            return self.worker_key
        rank = self._senders.get(sender)
        return None if rank is None else self._rank_keys[rank]

    def _refuse(self, peer: _Peer, reason: str, kind: str) -> None:
        """Reject a line; a connection that never authenticated holds nothing of value, so it goes too."""
        self._reject(peer.addr, reason, kind)
        if peer.sender is None:
            self._drop(peer)

    def _line(self, peer: _Peer, line: bytes) -> None:
        if peer.tag_sp and line[wire.MAC_HEX + 1:wire.MAC_HEX + 1 + len(peer.tag_sp)] == peer.tag_sp:
            # A bound connection's own sender (nearly every line): its key is known, nothing to parse first.
            body = peer.session.open_tagged(line, peer.key, peer.tag_sp)
            if body is None:
                self._reject(peer.addr, "bad MAC (forged, replayed, reordered, or from another run or job)", "mac")
                return
            msg, why = wire.decode_object(body)
            if msg is None:
                self._reject(peer.addr, why, "malformed")
                return
            self._dispatch(peer, msg)
            return
        sender = wire.sender_of(line)
        if sender is None:
            self._refuse(peer, "not a signed line (no MAC and sender)", "malformed")
            return
        if peer.sender is not None and sender != peer.sender:
            self._reject(peer.addr, f"a line signed as {sender[:12]!r} on the connection of {peer.sender!r}",
                         "identity")
            return
        key = self._key_for(sender)
        if key is None:
            self._refuse(peer, f"sender {sender[:12]!r} is no rank of this job and not a worker", "identity")
            return
        body = peer.session.open(line, key, sender)
        if body is None:
            self._refuse(peer, "bad MAC (forged, replayed, reordered, or from another run or job)", "mac")
            return
        msg, why = wire.decode_object(body)
        if msg is None:
            self._refuse(peer, why, "malformed")
            return
        if peer.sender is None:
            if not self._bind(peer, sender):
                return
            peer.tag_sp, peer.key = sender.encode() + b" ", key
        self._dispatch(peer, msg)

    def _dispatch(self, peer: _Peer, msg: dict) -> None:
        kind = msg.get("type")
        if peer.role == "rank":
            if kind != "rank":
                self._reject(peer.addr, f"rank connection sent a {str(kind)[:40]!r} message", "plan")
                return
            if msg.get("rank") != peer.rank:
                self._reject(peer.addr, f"rank {peer.rank}'s connection sent a report for rank "
                                        f"{str(msg.get('rank'))[:40]!r}", "identity")
                return
            self._rank_report(peer, msg)
        elif kind in ("hello", "heartbeat", "ack"):
            self._worker_message(peer, kind, msg)
        else:
            self._reject(peer.addr, f"unknown message type {str(kind)[:40]!r}", "plan")

    def _bind(self, peer: _Peer, sender: str) -> bool:
        """Make ``peer`` the connection of ``sender`` (its first valid line); False when it may not be."""
        if sender == wire.WORKER_SENDER:
            # Its host is bound by its hello, and only the hello authenticates it: until then it stays among
            # the unauthenticated (first-message deadline, eviction at the cap).
            peer.sender, peer.role = sender, "worker"
            return True
        rank = self._senders[sender]
        host = self.rank_hosts[rank]
        if self.host_addresses is not None and peer.addr not in self.host_addresses.get(host, ()):
            self._refuse(peer, f"rank {rank} connected from {peer.addr}; the plan places it on {host}", "address")
            return False
        with self._lock:
            old = self._rank_peer.get(rank)
            if old is not None and old.alive and old is not peer:
                taken = True
            else:
                taken = False
                self._rank_peer[rank] = peer
        if taken:
            # The rank keeps its first connection: a second one (a leaked key, a replay) changes nothing.
            self._refuse(peer, f"rank {rank} already has an open connection (from {old.addr}); this one is "
                               "refused", "identity")
            return False
        if not self._authenticated(peer):
            with self._lock:
                if self._rank_peer.get(rank) is peer:
                    del self._rank_peer[rank]
            return False
        peer.sender, peer.role, peer.rank = sender, "rank", rank
        return True

    def _rank_report(self, peer: _Peer, msg: dict) -> None:
        if msg.get("event") not in ("start", "exit") and self.check_other is not None:
            why = check_rank_identity(msg, self.rank_hosts)
            clean, why = (None, why) if why else self.check_other(msg, self.rank_hosts)
            if clean is None:
                self._reject(peer.addr, why, "plan")
                return
            self._notify(clean)
            return
        clean, why = check_rank_report(msg, self.rank_hosts)
        if clean is None:
            self._reject(peer.addr, why, "plan")
            return
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
            self._reject(peer.addr, f"second {clean['event']!r} report for rank {clean['rank']}", "duplicate")
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

    def _hello(self, peer: _Peer, msg: dict) -> bool:
        """Bind ``peer`` to the host its hello names, when it may be; False (rejected) when not."""
        host = msg.get("host")
        if host not in self.workers:
            self._reject(peer.addr, f"hello from {str(host)[:80]!r}, which is not a worker of this job", "plan")
            return False
        if peer.host is not None:
            self._reject(peer.addr, f"second hello on the connection of worker {peer.host}", "duplicate")
            return False
        if self.host_addresses is not None and peer.addr not in self.host_addresses.get(host, ()):
            self._reject(peer.addr, f"hello for worker {host} from {peer.addr}, which is not {host}'s address",
                         "address")
            self._drop(peer)
            return False
        with self._lock:
            old = self._worker_peer.get(host)
            taken = old is not None and old.alive and old is not peer
        if taken:
            # Never replace a live authenticated connection: the real worker keeps its own.
            self._reject(peer.addr, f"hello for worker {host}, which already has a live connection (from "
                                    f"{old.addr}); refused", "identity")
            self._drop(peer)
            return False
        return True

    def _worker_message(self, peer: _Peer, kind: str, msg: dict) -> None:
        now = self.clock.monotonic()
        if kind == "hello":
            if not self._hello(peer, msg) or not self._authenticated(peer):
                return
            host = msg["host"]
            with self._changed:
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
            # The host's seed, for its ranks' keys, sealed to the workers' key and this connection (keys.py): a
            # recording of the traffic does not hold it.  Then a worker that arrives after the result gets it.
            reply = {"type": "result", **result} if result else {"type": "heartbeat", "t": self.clock.time()}
            sealed = seal_seed(self._seeds[host], self.worker_key, self.run_nonce, peer.conn_nonce, host)
            if not peer.send_msgs(({"type": "keys", "seed": sealed.hex()}, reply), self.worker_key):
                self._drop(peer)
            return
        if peer.host is None:
            self._reject(peer.addr, f"worker {kind!r} before hello", "plan")
            return
        with self._changed:
            self._last_heard[peer.host] = now
            if kind == "ack":
                self._acks.add(peer.host)
                recs = self.clean_timeline(msg.get("timeline")) if self.clean_timeline is not None else None
                if recs is not None:
                    self._timelines[peer.host] = recs
            self._changed.notify_all()

    def _reject(self, peer: str, reason: str, kind: str = "plan") -> None:
        with self._lock:
            self._n_rejected += 1
            self._rejection_counts[kind] += 1
            n, k = self._n_rejected, self._rejection_counts[kind]
            self._rejected.append(Rejected(peer, reason, kind))
        # Rate-limited per kind: a flood of one kind (say, connections from outside) hides no forgery.
        if k <= _LOG_FIRST or k % _LOG_EVERY == 0:
            log.warning("result channel: dropped from %s: %s (%d of kind %s, %d in all)", peer, reason, k, kind, n)

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

    def rejection_counts(self) -> dict[str, int]:
        """Refused messages and connections so far, by kind (``Rejected.kind``); every one counts, none is
        lost to the log's rate limit."""
        with self._lock:
            return dict(self._rejection_counts)

    def rank_key(self, rank: int) -> bytes:
        """Rank ``rank``'s key (keys.py): what its host's entrypoint hands its wrapper."""
        return self._rank_keys[rank]

    def host_seed(self, host: str) -> bytes:
        """``host``'s seed (keys.py): what its worker gets after its hello; the master's own host uses it too."""
        return self._seeds[host]

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
        """Send ``msg`` (signed with each rank's own key) on each rank's own connection; returns those reached."""
        with self._lock:
            peers = [(r, self._rank_peer.get(r)) for r in ranks]
        return [r for r, p in peers if p is not None and p.send_msg(msg, self._rank_keys[r])]

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
        payload = {"exit_code": int(result.exit_code), "result": result.to_dict()}   # exec/result.py's JSON
        with self._lock:
            self._result = payload
            peers = list(self._worker_peer.values())
        return sum(p.send_msg({"type": "result", **payload}, self.worker_key) for p in peers)

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


