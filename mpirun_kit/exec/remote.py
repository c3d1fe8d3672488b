"""Remote execution over ssh: one implementation (paramiko, host keys verified, keepalives, deadlines).

Place in the data flow: the ssh target (targets/ssh.py) connects, ships files and
runs the per-host entrypoint through these; every remote wait has a deadline and
every peer may vanish without a FIN (ssh keepalives plus TCP keepalive).  Host
keys are checked against known_hosts with paramiko's RejectPolicy: an unknown or
changed key fails, never prompts, never is added silently.
"""
from __future__ import annotations

from pathlib import Path

from .clock import SYSTEM_CLOCK, Clock, Deadline
from ..errors import ClusterError

#: ssh keepalive interval; TCP keepalive probes a silent peer after the same idle time.
KEEPALIVE_S = 15


class HostKeyError(ClusterError):
    """A host's key is unknown or differs from known_hosts."""


def paramiko_client(req: dict, host: str):
    """A connected SSHClient with host keys verified; raises paramiko/socket errors."""
    import paramiko

    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.load_system_host_keys()
    known = Path(req["known_hosts"]).expanduser()
    if known.exists():
        client.load_host_keys(str(known))
    t = req["connect_timeout_s"]
    client.connect(host, port=req["port"], username=req["user"],
                   key_filename=str(Path(req["identity_file"]).expanduser()) if req["identity_file"] else None,
                   timeout=t, banner_timeout=t, auth_timeout=t, allow_agent=True, look_for_keys=True)
    set_keepalive(client)
    return client


def set_keepalive(client) -> None:
    """ssh keepalives (traffic on an idle session) and TCP keepalive (the kernel drops a peer that
    stopped answering: a host gone without a FIN ends its session instead of hanging it)."""
    import socket

    transport = client.get_transport()
    transport.set_keepalive(KEEPALIVE_S)
    sock = transport.sock
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", KEEPALIVE_S), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 6)):
        if hasattr(socket, name):  # Linux names; other systems keep their defaults
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


class RemoteTimeout(ClusterError):
    """A remote command did not finish within its deadline."""


def wait_exit(channel, timeout_s: float, clock: Clock = SYSTEM_CLOCK) -> int:
    """The exit status of ``channel``'s command, waiting at most ``timeout_s``.

    Raises:
        RemoteTimeout: no exit status within ``timeout_s`` (paramiko's recv_exit_status waits forever).
    """
    deadline = Deadline(clock, timeout_s)
    # A channel that closes without a status is "ready" too, with status -1.
    while not channel.exit_status_ready():
        if deadline.expired():
            raise RemoteTimeout(f"no exit status within {timeout_s:g}s")
        clock.sleep(0.05)
    return channel.recv_exit_status()
