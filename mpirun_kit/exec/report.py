"""The signed line format of the result channel, and the rank's end of it (best effort).

Every message on the channel, in either direction, is one line::

    <hex HMAC-SHA256 of the JSON text> <JSON text>\\n

The key is per job and never appears in argv: ranks get theirs from the master
through mpirun's environment (``MPIRUN_KIT_CHANNEL_KEY``, forwarded with
``-x NAME``), workers derive theirs from the job secret (channel.py).  The MAC
is checked before the JSON is parsed, so nobody without the key gets anything
past the first 64 characters of a line.

Kept free of the rest of the package (stdlib only, nothing heavy) because every
rank imports it at start, and that start is on the launch's critical path.
"""
from __future__ import annotations

import hmac
import json
import socket

#: hex characters of a MAC, and the longest line either side accepts.
MAC_HEX = 64
MAX_LINE = 64 * 1024


def sign(key: bytes, body: bytes) -> bytes:
    # hmac.digest: OpenSSL's one-shot HMAC, no HMAC object per line (the master checks ~2,300 lines a second
    # at 256 hosts x 8); the same bytes as hmac.new(key, body, sha256).hexdigest().
    return hmac.digest(key, body, "sha256").hex().encode()


def encode(msg: dict, key: bytes) -> bytes:
    """One signed line for ``msg``."""
    body = json.dumps(msg, separators=(",", ":")).encode()
    return sign(key, body) + b" " + body + b"\n"


def verify(line: bytes, key: bytes) -> bytes | None:
    """The JSON text of ``line`` when its MAC is ``key``'s, else None (nothing is parsed)."""
    if len(line) < MAC_HEX + 2 or line[MAC_HEX:MAC_HEX + 1] != b" ":
        return None
    body = line[MAC_HEX + 1:]
    return body if hmac.compare_digest(line[:MAC_HEX], sign(key, body)) else None


def send_rank_event(addr: str, msg: dict, key: bytes, timeout: float = 2.0,
                    sock: socket.socket | None = None) -> socket.socket | None:
    """Send one rank report to ``host:port``; returns the (reusable) socket, None when unreachable.

    Reports are best effort: a rank must run even where the channel is down
    (mpirun's own status still reaches the master).
    """
    data = encode({"type": "rank", **msg}, key)
    if sock is not None:
        try:
            sock.sendall(data)
            return sock
        except OSError:
            sock.close()
    host, _, port = addr.rpartition(":")
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout)
        sock.sendall(data)
        return sock
    except (OSError, ValueError):
        return None
