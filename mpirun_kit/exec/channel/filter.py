"""Refuse outsiders before their handshake: a classic BPF filter on the result channel's listening socket.

Place in the data flow: server.py attaches it once, at ``start()``, with the plan's host addresses.
Linux runs a socket's filter on every TCP segment for it, the SYN to a listener included, and a
connection accepted from the listener inherits the filter: so a SYN from an address that is none
of the job's hosts is dropped in the kernel (no handshake, no file descriptor, no ``accept()``
wake-up for the master's loop), and the outsider's connect times out.  ``accept()`` still checks
the address (server.py): where the filter cannot be attached, nothing else changes.
"""
from __future__ import annotations

import array
import socket
import struct
from typing import Collection

SO_ATTACH_FILTER = getattr(socket, "SO_ATTACH_FILTER", 26)
#: the network header in a BPF absolute load (linux/filter.h SKF_NET_OFF); the IPv4 source is 12 bytes in.
_SKF_NET_OFF = -0x100000
_LD_W_ABS, _JEQ_K, _RET_K = 0x20, 0x15, 0x06
#: a classic BPF program holds at most 4096 instructions: two per address, one load, one final return.
MAX_ADDRESSES = 2000


def program(addresses: Collection[str]) -> bytes:
    """The filter's instructions: load the IPv4 source; accept it when it is one of ``addresses``; else drop.

    Raises:
        ValueError: an address is not IPv4, or there are more than MAX_ADDRESSES.
    """
    try:
        # inet_aton, not ipaddress: this runs on the master's start-up path, and ipaddress costs an import.
        ips = sorted({struct.unpack("!I", socket.inet_aton(a))[0] for a in addresses if a.count(".") == 3})
    except OSError:
        ips = None
    if ips is None or len(ips) != len(set(addresses)):
        raise ValueError(f"not IPv4 addresses: {sorted(addresses)[:5]}")
    if len(ips) > MAX_ADDRESSES:
        raise ValueError(f"{len(ips)} addresses; a filter holds at most {MAX_ADDRESSES}")
    insns = [(_LD_W_ABS, 0, 0, (_SKF_NET_OFF + 12) & 0xFFFFFFFF)]
    for ip in ips:
        insns.append((_JEQ_K, 0, 1, ip))          # equal: the next instruction (accept); else skip it
        insns.append((_RET_K, 0, 0, 0xFFFFFFFF))
    insns.append((_RET_K, 0, 0, 0))
    return b"".join(struct.pack("HBBI", *i) for i in insns)


def attach(sock: socket.socket, addresses: Collection[str]) -> str:
    """Attach the filter to ``sock``; "" when it is in place, else why not (the caller logs it)."""
    try:
        code = program(addresses)
    except ValueError as exc:
        return f"no kernel filter: {exc}"
    buf = array.array("B", code)       # array, not ctypes: its buffer's address without ctypes' import cost
    fprog = struct.pack("HL", len(code) // 8, buf.buffer_info()[0])   # struct sock_fprog
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
    except OSError as exc:
        return f"no kernel filter: {exc.strerror or exc}"
    return ""
