"""The result channel's wire: one signed line per message, each MAC bound to where and when it was sent.

Place in the data flow: every end of the channel frames and checks its lines here and only here: the
master's server (server.py), each worker's link (link.py) and each rank wrapper's link (rank_link.py).

A connection opens with the master's greeting, one unsigned line::

    mpirun_kit-channel/2 <run nonce: 32 hex> <connection nonce: 32 hex>\\n

Then every message, in either direction, is one line::

    <hex HMAC-SHA256, 64 chars> <sender> <JSON text>\\n

``sender`` is ``w`` (a worker), ``r<N>`` (rank N's wrapper) or ``m`` (the master).  The MAC covers
``context \\0 JSON text``, where the context names the protocol, the job, the run nonce (random per
master run), the connection nonce (random per connection), the direction, the sender and the line's
number on this connection in its direction (0, 1, 2, ...).  So a line is valid exactly once: a hello
replayed on a new connection (other connection nonce), a heartbeat replayed on its own connection
(other number), a line sent back the other way, or two lines swapped, all fail the MAC check.  Nothing
but the sender token (which picks the key) is read before the MAC is checked.

Stdlib only and nothing heavy: every rank wrapper imports it at start, on the launch's critical path.
"""
from __future__ import annotations

import hmac
import json

PROTOCOL = b"mpirun_kit-channel/2"
#: hex characters of a MAC, and the longest line either side accepts.
MAC_HEX = 64
MAX_LINE = 64 * 1024
#: bytes of a run or connection nonce.
NONCE_BYTES = 16
#: the longest sender token (``r`` and a rank number).
MAX_SENDER = 12
TO_MASTER, FROM_MASTER = b"to-master", b"from-master"
MASTER_SENDER, WORKER_SENDER = "m", "w"


def rank_sender(rank: int) -> str:
    return f"r{rank}"


def greeting(run_nonce: bytes, conn_nonce: bytes) -> bytes:
    """The master's first line on a new connection."""
    return PROTOCOL + b" " + run_nonce.hex().encode() + b" " + conn_nonce.hex().encode() + b"\n"


def parse_greeting(line: bytes) -> tuple[bytes, bytes] | None:
    """(run nonce, connection nonce) from a greeting line (without its newline), None if it is not one."""
    parts = line.split(b" ")
    if len(parts) != 3 or parts[0] != PROTOCOL:
        return None
    try:
        run, conn = bytes.fromhex(parts[1].decode("ascii")), bytes.fromhex(parts[2].decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None
    if len(run) != NONCE_BYTES or len(conn) != NONCE_BYTES:
        return None
    return run, conn


def sender_of(line: bytes) -> str | None:
    """The sender token of a signed line (nothing else is read before the MAC check); None if malformed."""
    if len(line) < MAC_HEX + 4 or line[MAC_HEX:MAC_HEX + 1] != b" ":
        return None
    end = line.find(b" ", MAC_HEX + 1, MAC_HEX + 2 + MAX_SENDER)
    if end < 0:
        return None
    token = line[MAC_HEX + 1:end]
    return token.decode("ascii") if token.isascii() and token.isalnum() else None


class Session:
    """One connection's MAC state at one end: the context and a line counter per direction.

    ``master_end``: True on the master (it receives ``to-master`` lines and sends ``from-master`` ones).
    Keys are passed per line: the master picks one by the sender token of each incoming line.
    """

    def __init__(self, job: str, run_nonce: bytes, conn_nonce: bytes, *, master_end: bool):
        base = PROTOCOL + b"\0" + job.encode() + b"\0" + run_nonce + b"\0" + conn_nonce + b"\0"
        self._out = base + (FROM_MASTER if master_end else TO_MASTER) + b"\0"
        self._in = base + (TO_MASTER if master_end else FROM_MASTER) + b"\0"
        self.sent = 0
        self.received = 0

    def seal(self, msg: dict, key: bytes, sender: str) -> bytes:
        """The next outgoing line for ``msg``: numbered, signed with ``key``."""
        body = json.dumps(msg, separators=(",", ":")).encode()
        tag = sender.encode()
        mac = hmac.digest(key, b"%s%s\0%d\0%s" % (self._out, tag, self.sent, body), "sha256").hex().encode()
        self.sent += 1
        return mac + b" " + tag + b" " + body + b"\n"

    def open(self, line: bytes, key: bytes, sender: str) -> bytes | None:
        """The JSON text of ``line`` when it is the next line from ``sender`` signed with ``key``, else None.

        Only a valid line moves the counter: a forged or replayed line costs the real sender nothing.
        """
        return self.open_tagged(line, key, sender.encode() + b" ")

    def open_tagged(self, line: bytes, key: bytes, tag_sp: bytes) -> bytes | None:
        """``open`` with the sender already encoded and followed by its space (the server's hot path)."""
        start = MAC_HEX + 1 + len(tag_sp)
        if line[MAC_HEX + 1:start] != tag_sp:
            return None
        body = line[start:]
        mac = hmac.digest(key, b"%s%s\0%d\0%s" % (self._in, tag_sp[:-1], self.received, body), "sha256")
        if not hmac.compare_digest(line[:MAC_HEX], mac.hex().encode()):
            return None
        self.received += 1
        return body


def decode_object(body: bytes) -> tuple[dict | None, str]:
    """(message, "") when ``body`` is a JSON object, else (None, why)."""
    try:
        msg = json.loads(body)
    except (ValueError, RecursionError):  # a MemoryError would be ours, not the peer's: let it raise
        return None, "malformed JSON"
    if not isinstance(msg, dict):
        return None, "not a JSON object"
    return msg, ""
