"""The rank's end of the result channel: one JSON line per report, best effort.

Kept free of the rest of the package (stdlib only, nothing heavy) because every
rank imports it at start, and that start is on the launch's critical path.
"""
from __future__ import annotations

import json
import socket


def encode(msg: dict) -> bytes:
    return (json.dumps(msg, separators=(",", ":")) + "\n").encode()


def send_rank_event(addr: str, msg: dict, timeout: float = 2.0, sock: socket.socket | None = None) -> socket.socket | None:
    """Send one rank report to ``host:port``; returns the (reusable) socket, None when unreachable.

    Reports are best effort: a rank must run even where the channel is down
    (mpirun's own status still reaches the master).
    """
    data = encode({"type": "rank", **msg})
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
