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


class RemoteProcess:
    """A command started on a host over its own ssh session, read like a subprocess: ``communicate``, ``kill``.

    Both output streams are drained by threads as they arrive (a full window would stall the
    remote command); ``communicate`` waits for the exit status under a deadline.
    """

    def __init__(self, client, command: str, timeout_s: float, clock: Clock = SYSTEM_CLOCK):
        import threading

        self.client, self.command, self.clock = client, command, clock
        self.returncode: int | None = None
        self._killed = False
        self.channel = client.get_transport().open_session(timeout=timeout_s)
        self.channel.exec_command(command)
        self._out: list[bytes] = []
        self._err: list[bytes] = []
        self._readers = [threading.Thread(target=self._drain, args=(f, buf), daemon=True)
                         for f, buf in ((self.channel.makefile("rb"), self._out),
                                        (self.channel.makefile_stderr("rb"), self._err))]
        for t in self._readers:
            t.start()

    @staticmethod
    def _drain(f, buf: list[bytes]) -> None:
        try:
            for chunk in iter(lambda: f.read(65536), b""):
                buf.append(chunk)
        except (OSError, EOFError):
            pass

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """(stdout, stderr) once the command exited.

        Raises:
            subprocess.TimeoutExpired: no exit status within ``timeout`` (the caller may ``kill``).
        """
        import subprocess

        if not self._killed:
            try:
                self.returncode = wait_exit(self.channel, timeout, self.clock)  # None: no deadline
            except RemoteTimeout:
                raise subprocess.TimeoutExpired(self.command, timeout) from None
        for t in self._readers:
            t.join(timeout=5.0)
        self.client.close()
        return b"".join(self._out).decode(errors="replace"), b"".join(self._err).decode(errors="replace")

    def kill(self) -> None:
        """Close the session (sshd hangs up on the remote command); ``communicate`` then returns what came."""
        self._killed = True
        self.returncode = None
        self.channel.close()


def start_remote(settings: dict, host: str, command: str, *, connect=None, clock: Clock = SYSTEM_CLOCK) -> RemoteProcess:
    """Connect to ``host`` (``paramiko_client(settings, host)``: host key verified) and start ``command``.

    Raises:
        ClusterError: the connection or the session failed (names the host, port and why).
    """
    import paramiko

    try:
        client = (connect or paramiko_client)(settings, host)
    except (OSError, EOFError, paramiko.SSHException) as exc:
        raise ClusterError(f"ssh to {host}:{settings['port']} failed: {exc or type(exc).__name__}") from None
    try:
        return RemoteProcess(client, command, settings["connect_timeout_s"], clock)
    except (OSError, EOFError, paramiko.SSHException) as exc:
        client.close()
        raise ClusterError(f"ssh to {host}:{settings['port']}: could not start a session: {exc}") from None
