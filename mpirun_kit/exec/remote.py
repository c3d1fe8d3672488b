"""Remote execution over ssh: one implementation (paramiko, host keys verified, keepalives, deadlines).

Place in the data flow: the ssh target (targets/ssh.py) and the doctor connect, ship files
and run commands on many hosts at once through these; every remote wait has a deadline and
every peer may vanish without a FIN (ssh keepalives plus TCP keepalive).  Host keys are
checked against known_hosts with paramiko's RejectPolicy: an unknown or changed key fails,
never prompts, never is added silently.  The cross-host work (``on_every_host``,
``connect_hosts``, ``write_files``, ``run_on_hosts``) returns each host's failure as data;
the caller words the error, naming the spec fields that fix it.

Every remote command is an argv (a list); ``command_line`` is the one place it becomes the string an
ssh exec takes (``shlex.join``), and ``run_argv``/``start_session`` the only calls of paramiko's
``exec_command``.  What used to be shell snippets (the pid file, the cancel loop, the atomic write,
reading a report back) runs on the host as ``python -m mpirun_kit.exec.remote_host VERB`` (remote_host.py).

A peer that stops waiting ends what it started (``end_remote``): without a pty, sshd never hangs up on a
command when its channel closes, so a deadline's expiry, a failed session or a kill first asks sshd to
SIGKILL the command's process group (the ssh "signal" request), then closes the channel.
"""
from __future__ import annotations

import shlex
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TypeVar

from ..core.backoff import Backoff
from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..errors import ClusterError
from . import remote_host

#: ssh keepalive interval; TCP keepalive probes a silent peer after the same idle time.
KEEPALIVE_S = 15
#: hosts worked on at once (threads that mostly wait on the network).
PARALLEL_HOSTS = 32

_T = TypeVar("_T")
_R = TypeVar("_R")


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
    try:
        client.connect(host, port=req["port"], username=req["user"],
                       key_filename=str(Path(req["identity_file"]).expanduser()) if req["identity_file"] else None,
                       timeout=t, banner_timeout=t, auth_timeout=t, allow_agent=True, look_for_keys=True)
        set_keepalive(client)
    except BaseException:
        # A refused host key or login fails after the transport started: its thread, its socket and the host's
        # half-open session would stay until the garbage collector ran (connect_hosts retries many times).
        client.close()
        raise
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


def end_remote(channel, signum: int = signal.SIGKILL) -> None:
    """End the command running on ``channel``: sshd sends ``signum`` to its process group, then the channel closes.

    Closing the channel alone ends nothing: without a pty sshd sends the command no SIGHUP, and one that does
    not write (a hung interpreter, a ``sleep``) runs on with no one waiting for it.  RFC 4254's "signal" request
    (section 6.9) makes sshd ``killpg`` the session's command (OpenSSH 7.9 and later; an older server ignores
    it, and a dead connection carries nothing).  paramiko has no call for it (paramiko/paramiko#1535 is open),
    so the message is built here as paramiko builds its own channel requests.
    """
    import paramiko
    from paramiko.common import cMSG_CHANNEL_REQUEST

    try:
        if not channel.closed:
            m = paramiko.Message()
            m.add_byte(cMSG_CHANNEL_REQUEST)
            m.add_int(channel.remote_chanid)
            m.add_string("signal")
            m.add_boolean(False)   # no reply: the exit status (or the channel's close) says it ended
            m.add_string(signal.Signals(signum).name[3:])
            channel.transport._send_user_message(m)
    except (OSError, EOFError, paramiko.SSHException):
        pass   # the session is gone: nothing can reach the command from here any more
    finally:
        channel.close()


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

    def __init__(self, client, command: str | Sequence[str], timeout_s: float, clock: Clock = SYSTEM_CLOCK):
        import threading

        self.command = command if isinstance(command, str) else command_line(command)
        self.client, self.clock = client, clock
        self.returncode: int | None = None
        self._killed = False
        self.channel = client.get_transport().open_session(timeout=timeout_s)
        self.channel.exec_command(self.command)
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
        """End the remote command and close its session (``end_remote``); ``communicate`` then returns what came."""
        self._killed = True
        self.returncode = None
        end_remote(self.channel)


def start_remote(settings: dict, host: str, command: str | Sequence[str], *, connect=None,
                 clock: Clock = SYSTEM_CLOCK) -> RemoteProcess:
    """Connect to ``host`` (``paramiko_client(settings, host)``: host key verified) and start ``command`` (an
    argv; a string is taken as already joined).

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


def on_every_host(items: Iterable[tuple[str, _T]], fn: Callable[[str, _T], _R]) -> dict[str, _R]:
    """``fn(host, item)`` for every host at once (at most PARALLEL_HOSTS threads); host -> its result.

    ``fn`` catches its own host's failures and returns them as its result: one host's error must
    not stop the visit of the others.
    """
    items = list(items)
    if not items:
        return {}
    with ThreadPoolExecutor(max_workers=min(PARALLEL_HOSTS, len(items))) as pool:
        results = list(pool.map(lambda hi: fn(*hi), items))
    return {host: r for (host, _), r in zip(items, results)}


def connect_hosts(hosts: list[str], connect: Callable[[str], Any], timeout_s: float, *, clock: Clock = SYSTEM_CLOCK,
                  status: Callable[[str], None] | None = None, name: Callable[[str], str] = str,
                  ) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """Connect to every host at once, retrying each with jittered backoff until ``timeout_s`` pass.

    ``connect(host)`` returns a client (``paramiko_client``) or raises; ``status`` hears the live
    line (hosts ready, the one being waited for and why); ``name(host)`` is how it names a host.

    Returns:
        (host -> client, host -> why it never accepted a session, host -> its host-key error).
        A host-key error is not retried: it will not fix itself.  On any failure the caller closes
        the clients it got.
    """
    import paramiko

    deadline = Deadline(clock, timeout_s)
    clients: dict[str, Any] = {}
    unreachable: dict[str, str] = {}
    bad_keys: dict[str, str] = {}
    lock = threading.Lock()

    def one(host: str, _: object) -> None:
        backoff = Backoff(clock, deadline)
        attempt = 0
        while True:
            attempt += 1
            try:
                c = connect(host)
                with lock:
                    clients[host] = c
                    if status:
                        status(f"ssh: {len(clients)}/{len(hosts)} host(s) ready")
                return
            except (paramiko.BadHostKeyException, paramiko.SSHException) as exc:
                if isinstance(exc, paramiko.BadHostKeyException) or "not found in known_hosts" in str(exc):
                    with lock:
                        bad_keys[host] = str(exc)
                    return
                last = str(exc)
            except OSError as exc:
                last = str(exc) or type(exc).__name__
            if deadline.remaining() <= 0:
                with lock:
                    unreachable[host] = last
                return
            if status:
                # The live line names the host being waited for and why it is not ready yet.
                with lock:
                    status(f"ssh: {len(clients)}/{len(hosts)} host(s) ready; waiting for "
                           f"{name(host)} (attempt {attempt}): {last}")
            # Jittered backoff 0.1 -> 1 s: many hosts booting together must not retry in lockstep.
            backoff.wait()

    on_every_host(((h, None) for h in hosts), one)
    return clients, unreachable, bad_keys


#: how long after we stop waiting a ``bounded`` command ends itself on its host
HOST_TIMEOUT_MARGIN_S = 5.0


def bounded(argv: Sequence[str], timeout_s: float, margin_s: float = HOST_TIMEOUT_MARGIN_S) -> list[str]:
    """``argv`` under the host's own ``timeout`` (coreutils): SIGKILL ``margin_s`` after our ``timeout_s``.

    Our side gives up first (and names the host); this ends what it left there.  Nothing else would for a
    root login: sshd sends a command without a pty no SIGHUP when the session closes, and refuses the
    "signal" request ``end_remote`` sends to root sessions.
    """
    return ["timeout", "--signal=KILL", f"{timeout_s + margin_s:g}", *[str(a) for a in argv]]


def command_line(argv: Sequence[str]) -> str:
    """The string an ssh exec takes for ``argv``: each word quoted (``shlex.join``); the one place it is made."""
    return shlex.join([str(a) for a in argv])


def run_argv(client, argv: Sequence[str], timeout: float, *, stdin: bytes | None = None, limit: int | None = None,
             clock: Clock = SYSTEM_CLOCK) -> tuple[int, bytes, bytes]:
    """Run ``argv`` over ``client``'s transport; (exit code, stdout, stderr), reading at most ``limit`` bytes of
    stdout.  Every wait is bounded by ``timeout``.

    Raises:
        OSError, EOFError, paramiko.SSHException: the session failed; RemoteTimeout: no exit status in time.
    """
    stdin_f, stdout, stderr = client.exec_command(command_line(argv), timeout=timeout)
    try:
        if stdin is not None:
            stdin_f.write(stdin)
        stdin_f.channel.shutdown_write()
        out = stdout.read(limit) if limit is not None else b""
        code = wait_exit(stdout.channel, timeout, clock)
        if limit is None:
            out = stdout.read()
        return code, out, stderr.read()
    except BaseException:
        # Past the deadline (or the session failed, or we were interrupted): the command must not run on.
        end_remote(stdout.channel)
        raise


def start_session(client, argv: Sequence[str]):
    """Start the long-running ``argv`` on a new session of ``client``, stdout and stderr combined; its channel."""
    chan = client.get_transport().open_session()
    chan.set_combine_stderr(True)
    chan.exec_command(command_line(argv))
    return chan


def write_argv(python: str, path: str, private: str | None = None) -> list[str]:
    """The remote side of writing one file: its bytes arrive on stdin and are written atomically there;
    ``private``: the run directory ``path`` is in, made 0700 and refused when another user could swap it."""
    return remote_host.argv(python, "write", path, *(("--private", private) if private else ()))


@dataclass(frozen=True)
class WriteFailure:
    """One host's failed write (``write_files``): its exit code (-1: the session failed) and stderr's end."""

    host: str
    path: str
    code: int
    err: str

    @property
    def unsafe_dir(self) -> bool:
        """The run directory was refused: another user could swap it (remote_host.UNSAFE_DIR; ``err`` says why)."""
        return self.code == remote_host.UNSAFE_DIR

    def __str__(self) -> str:
        return f"{self.host}: {self.path}: exit {self.code} {self.err}"


def write_files(clients: dict[str, Any], files: tuple[tuple[str, str], ...], timeout: float,
                commands: dict[str, dict[str, Sequence[str]]] | None = None,
                python: str = "python3") -> list[WriteFailure]:
    """Write ``files`` (path, text) on every host, each atomically; the failures, one per host.

    Through an exec channel (stdin) rather than SFTP: hardened sshd configs often have no sftp subsystem.
    ``commands`` (host -> path -> argv) are the commands sent, as a dry run printed them; ``write_argv``
    with ``python`` builds them when not given.
    """
    import paramiko

    def one(host: str, client) -> WriteFailure | None:
        for path, text in files:
            argv = commands[host][path] if commands else write_argv(python, path)
            try:
                code, _, err_b = run_argv(client, argv, timeout, stdin=text.encode())
                err = err_b.decode(errors="replace").strip()
            except (OSError, EOFError, paramiko.SSHException, ClusterError) as exc:
                code, err = -1, str(exc) or type(exc).__name__
            if code != 0:
                return WriteFailure(host, path, code, err[-200:])
        return None

    return [bad for bad in on_every_host(clients.items(), one).values() if bad]


def run_on_hosts(clients: dict[str, Any], argv: Sequence[str], timeout: float) -> dict[str, tuple[int, str]]:
    """Run ``argv`` on every host at once; host -> (exit code, stdout and stderr), -1 when the session failed."""
    import paramiko

    def one(host: str, client) -> tuple[int, str]:
        try:
            code, out, err = run_argv(client, argv, timeout)
            return code, (out + err).decode(errors="replace").strip()
        except (OSError, EOFError, paramiko.SSHException, ClusterError) as exc:
            return -1, str(exc) or type(exc).__name__

    return on_every_host(clients.items(), one)
