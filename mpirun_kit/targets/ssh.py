"""Target ``ssh``: real hosts that already run sshd, reached with paramiko.

Place in the data flow: CompiledJob + a run id (chosen by the caller) ->
``dryrun`` (hosts, the files to ship, the per-host entrypoint argv: a value) ->
``run``:

  1. connects to every host in parallel, host keys verified against
     known_hosts (``RejectPolicy``: an unknown or changed key fails, never
     prompts), key or agent auth, each attempt bounded, retried with jittered
     backoff until a deadline that scales with the host count;
  2. ships the LaunchSpec and a hostfile to ``workdir/<run id>`` (SFTP, written
     atomically);
  3. starts ``mpirun_kit entrypoint --no-sshd --hostfile ...`` on every host at
     once; the elected master runs mpirun over ssh to the others (so the hosts
     must reach each other with keys, as for any mpirun), the others follow;
  4. streams every host's output (worker lines prefixed with the host);
  5. on Ctrl-C or SIGTERM sends SIGTERM to each remote entrypoint by its pid
     (recorded in a pid file), which stops mpirun and the ranks with a grace
     period; the exit code is the master's.

The remote command is the one place a shell string exists (ssh exec takes
one): built with ``shlex.join`` from an argv.
"""
from __future__ import annotations

import random
import shlex
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..clock import SYSTEM_CLOCK, Clock, Deadline
from ..cluster import elect_master
from ..errors import ClusterError, SSHUnreachableError
from ..spec.compile import CompiledJob
from .base import DryRun, Progress

#: seconds allowed after the job's own limit for readiness, start-up and shutdown.
OVERHEAD_S = 120.0
DEFAULT_JOB_S = 7 * 24 * 3600.0


class HostKeyError(ClusterError):
    """A host's key is unknown or differs from known_hosts."""


def dryrun(compiled: CompiledJob, *, run_id: str) -> DryRun:
    """The ssh run as a value.

    Args:
        compiled: the job (target ssh).
        run_id: names the remote working directory (chosen by the caller, unique per run).
    """
    job = compiled.job
    s = job.target.ssh
    t = compiled.launch.timeouts
    workdir = f"{s.workdir.rstrip('/')}/{run_id}"
    hostfile = "".join(f"{h.name} slots={h.slots}\n" for h in compiled.hosts)
    commands = {}
    for h in compiled.hosts:
        argv = [s.python, "-m", "mpirun_kit.cli.main", "entrypoint", "--no-sshd", "--hostfile",
                f"{workdir}/hostfile", "--current-host", h.name, "--spec", f"{workdir}/launch-spec.json",
                "--opt-ml", f"{workdir}/{h.name}"]
        # Record the entrypoint's pid so a cancel signals exactly that process, never one matched by name.  Per-host
        # names: the workdir may be on a file system the hosts share.
        commands[h.name] = (f"mkdir -p {shlex.quote(workdir + '/' + h.name)} && cd {shlex.quote(workdir)} && "
                            f"echo $$ > {shlex.quote(h.name + '.pid')} && exec {shlex.join(argv)}")
    request = {
        "hosts": [{"name": h.name, "slots": h.slots} for h in compiled.hosts],
        "user": s.user, "port": s.port, "identity_file": s.identity_file, "known_hosts": s.known_hosts,
        "connect_timeout_s": s.connect_timeout_s, "python": s.python,
        "ready_timeout_s": t.ssh_ready_s + t.ssh_ready_per_host_s * len(compiled.hosts),
        "deadline_s": (t.job_s or DEFAULT_JOB_S) + OVERHEAD_S, "grace_s": t.grace_s,
        "workdir": workdir, "commands": commands,
    }
    files = ((f"{workdir}/launch-spec.json", compiled.launch.to_json() + "\n"), (f"{workdir}/hostfile", hostfile))
    return DryRun("ssh", job.name, request, files=files)


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
    return client


def connect_all(req: dict, *, connect: Callable[[dict, str], Any] = paramiko_client, clock: Clock = SYSTEM_CLOCK,
                progress: Progress | None = None) -> dict[str, Any]:
    """Connect to every host in parallel, retrying each until the readiness deadline.

    Raises:
        HostKeyError: a host key is unknown or changed (not retried: it will not fix itself).
        SSHUnreachableError: hosts that never accepted a session, all named.
    """
    import paramiko

    deadline = Deadline(clock, req["ready_timeout_s"])
    hosts = [h["name"] for h in req["hosts"]]
    clients: dict[str, Any] = {}
    errors: dict[str, str] = {}
    lock = threading.Lock()

    def one(host: str) -> None:
        delay = 0.1
        while True:
            try:
                c = connect(req, host)
                with lock:
                    clients[host] = c
                    if progress:
                        progress.update(f"ssh: {len(clients)}/{len(hosts)} host(s) ready")
                return
            except (paramiko.BadHostKeyException, paramiko.SSHException) as exc:
                if isinstance(exc, paramiko.BadHostKeyException) or "not found in known_hosts" in str(exc):
                    with lock:
                        errors[host] = f"hostkey: {exc}"
                    return
                last = str(exc)
            except OSError as exc:
                last = str(exc) or type(exc).__name__
            if deadline.remaining() <= 0:
                with lock:
                    errors[host] = last
                return
            # Jittered backoff 0.1 -> 1 s: many hosts booting together must not retry in lockstep.
            clock.sleep(min(delay * (0.5 + random.random()), deadline.remaining()))
            delay = min(delay * 2, 1.0)

    with ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
        list(pool.map(one, hosts))
    bad_keys = {h: e for h, e in errors.items() if e.startswith("hostkey: ")}
    if bad_keys or errors:
        for c in clients.values():
            c.close()
    if bad_keys:
        hosts_txt = ", ".join(sorted(bad_keys))
        raise HostKeyError(f"host key check failed for {hosts_txt} ({'; '.join(bad_keys.values())}); verify the key "
                           f"out of band, then add it to {req['known_hosts']} (e.g. `ssh-keyscan -p {req['port']} "
                           f"HOST >> {req['known_hosts']}` after checking its fingerprint)")
    if errors:
        detail = "; ".join(f"{h}: {e}" for h, e in sorted(errors.items()))
        raise SSHUnreachableError(
            f"{len(errors)} of {len(hosts)} host(s) never accepted an ssh session within "
            f"{req['ready_timeout_s']:g}s ({detail}); check that sshd runs there, the user {req['user']!r} and "
            "the key are accepted, and raise timeouts.ssh_ready_s for slow boots", tuple(sorted(errors)))
    return clients


def ship(clients: dict[str, Any], files: tuple[tuple[str, str], ...], timeout: float) -> None:
    """Write the files on every host, each atomically (temp name, then rename).

    Through ``cat`` over an exec channel rather than SFTP: hardened sshd configs
    often have no sftp subsystem.

    Raises:
        ClusterError: names the host and file that could not be written.
    """
    import paramiko

    def one(item) -> str | None:
        host, client = item
        for name, text in files:
            tmp = f"{name}.tmp.{host}"
            cmd = (f"mkdir -p {shlex.quote(str(Path(name).parent))} && cat > {shlex.quote(tmp)} && "
                   f"mv -f {shlex.quote(tmp)} {shlex.quote(name)}")
            try:
                stdin, stdout, stderr = client.exec_command(cmd, timeout=timeout)
                stdin.write(text)
                stdin.channel.shutdown_write()
                code = stdout.channel.recv_exit_status()
                err = stderr.read().decode(errors="replace").strip()
            except (OSError, paramiko.SSHException) as exc:
                code, err = -1, str(exc)
            if code != 0:
                return f"{host}: {name}: exit {code} {err[-200:]}"
        return None

    with ThreadPoolExecutor(max_workers=min(32, len(clients))) as pool:
        bad = [b for b in pool.map(one, clients.items()) if b]
    if bad:
        raise ClusterError(f"could not write the launch files ({'; '.join(bad)}); check that target.ssh.workdir "
                           "is writable by the ssh user on every host")


@dataclass
class _Session:
    host: str
    channel: Any
    code: int | None = None


def _pump(session: _Session, prefix: str, out, lock: threading.Lock) -> None:
    """Copy one host's combined output line by line, bytes unchanged behind ``prefix``, until the channel closes."""
    f = session.channel.makefile("rb")
    for raw in iter(f.readline, b""):
        with lock:
            out.write(prefix.encode() + (raw if raw.endswith(b"\n") else raw + b"\n"))
            out.flush()
    session.code = session.channel.recv_exit_status()


def cancel(clients: dict[str, Any], workdir: str) -> None:
    """SIGTERM each remote entrypoint by its recorded pid (it stops mpirun and the ranks, with grace)."""
    for host, client in clients.items():
        cmd = f"kill -TERM $(cat {shlex.quote(f'{workdir}/{host}.pid')}) 2>/dev/null || true"
        try:
            client.exec_command(cmd, timeout=10)
        except OSError:
            pass


def preflight(clients: dict[str, Any], python: str, timeout: float) -> None:
    """Check, on every host in parallel, that ``python`` can import mpirun_kit.

    Raises:
        ClusterError: names each host where it cannot, with what it printed.
    """
    cmd = shlex.join([python, "-c", "import mpirun_kit, sys; sys.stdout.write(mpirun_kit.__version__)"])

    def one(item):
        host, client = item
        try:
            _, stdout, stderr = client.exec_command(cmd, timeout=timeout)
            code = stdout.channel.recv_exit_status()
            return host, code, (stdout.read() + stderr.read()).decode(errors="replace").strip()
        except OSError as exc:
            return host, -1, str(exc)

    with ThreadPoolExecutor(max_workers=min(32, len(clients))) as pool:
        bad = [(h, c, text) for h, c, text in pool.map(one, clients.items()) if c != 0]
    if bad:
        detail = "; ".join(f"{h}: exit {c}: {text[-200:]}" for h, c, text in sorted(bad))
        raise ClusterError(f"mpirun_kit is not importable with {python!r} on {len(bad)} host(s) ({detail}); install "
                           "it there (pip install mpirun_kit) or set target.ssh.python")


def run(dry: DryRun, *, connect: Callable[[dict, str], Any] = paramiko_client, clock: Clock = SYSTEM_CLOCK,
        out=None) -> int:
    """Run on the ssh hosts; return the job's exit code (the master's).  ``out`` takes bytes."""
    out = out or sys.stdout.buffer
    req = dry.request
    progress = Progress(clock=clock)
    clients = connect_all(req, connect=connect, clock=clock, progress=progress)
    try:
        preflight(clients, req["python"], req["connect_timeout_s"] + 20)
        progress.done(f"ssh: all {len(clients)} host(s) ready; shipping the launch spec to {req['workdir']}")
        ship(clients, dry.files, req["connect_timeout_s"] + 20)
        lock = threading.Lock()
        sessions: list[_Session] = []
        threads = []
        # The elected master's lines already carry "[rank host]" (mpirun's ranks); others get their host.
        first = elect_master([h["name"] for h in req["hosts"]])
        for h in req["hosts"]:
            chan = clients[h["name"]].get_transport().open_session()
            chan.set_combine_stderr(True)
            chan.exec_command(req["commands"][h["name"]])
            s = _Session(h["name"], chan)
            sessions.append(s)
            th = threading.Thread(target=_pump, args=(s, "" if h["name"] == first else f"[{h['name']} entrypoint] ",
                                                      out, lock), daemon=True)
            th.start()
            threads.append(th)
        deadline = Deadline(clock, req["deadline_s"])
        try:
            while any(th.is_alive() for th in threads):
                if deadline.expired():
                    progress.done(f"ssh: the job ran past {req['deadline_s']:g}s; stopping it")
                    cancel(clients, req["workdir"])
                    _drain(threads, clock, req["grace_s"] + 10)
                    return 124
                clock.sleep(0.2)
        except KeyboardInterrupt:
            progress.done("ssh: interrupted; sending SIGTERM to every host's entrypoint")
            cancel(clients, req["workdir"])
            _drain(threads, clock, req["grace_s"] + 10)
            return 130
        codes = {s.host: s.code for s in sessions}
        master_code = _master_code(codes)
        progress.done("ssh: every host finished (" + ", ".join(f"{h}={c}" for h, c in codes.items()) + ")")
        return master_code
    finally:
        for c in clients.values():
            c.close()


def _drain(threads, clock: Clock, seconds: float) -> None:
    end = Deadline(clock, seconds)
    while any(th.is_alive() for th in threads) and not end.expired():
        clock.sleep(0.2)


def _master_code(codes: dict[str, int | None]) -> int:
    """Every host exits with the job's code; if they disagree, the first non-zero one is the root cause's."""
    vals = [c if c is not None and c >= 0 else 70 for c in codes.values()]
    non_zero = [c for c in vals if c != 0]
    return non_zero[0] if non_zero else 0
