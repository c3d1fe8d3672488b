"""Target ``ssh``: real hosts that already run sshd, reached with paramiko.

Place in the data flow: CompiledJob + a run id (chosen by the caller) ->
``dryrun`` (hosts, the files to ship, the per-host entrypoint argv: a value) ->
``run``:

  1. connects to every host in parallel, host keys verified against
     known_hosts (``RejectPolicy``: an unknown or changed key fails, never
     prompts), key or agent auth, each attempt bounded, retried with jittered
     backoff until a deadline that scales with the host count;
  2. ships the LaunchSpec, a hostfile and a job secret made for this run (0600: it keys the workers on the
     result channel, and the result port is derived from it, so two runs of one spec on the same hosts each
     get their own) to ``workdir/<run id>`` (written atomically);
  3. starts ``mpirun_kit entrypoint --no-sshd --hostfile ...`` on every host at
     once; the elected master runs mpirun over ssh to the others (so the hosts
     must reach each other with keys, as for any mpirun), the others follow;
  4. streams every host's output (worker lines prefixed with the host);
  5. on Ctrl-C, SIGTERM or SIGHUP sends that signal (a deadline: SIGTERM) to each remote entrypoint by its
     pid (recorded in a pid file), which stops mpirun and the ranks with a grace period, so the job's result
     says the stop submit got (a SIGHUP is 129, source user, everywhere); the exit code is the master's.  Should ``submit`` die without a
     cancel (SIGKILL), each host's ``remote_host start`` sees its session's
     channel close and stops its entrypoint the same way.

Every host can vanish without a FIN and every ssh call can hang, so: each
session has ssh keepalives and TCP keepalive (a dead peer is noticed within
about a minute), every remote wait (an exit status, a file write, the
preflight) has a deadline, and ``cancel`` visits every host in parallel, each
failure caught and reported per host (paramiko raises SSHException as well as
OSError), reconnecting where a session died, until the remote entrypoint is
gone: a cancel that arrives before the pid file exists waits for it, and an
entrypoint that outlives the grace period is killed.

Every command sent is an argv (printed whole by ``--dry-run``); exec/remote.py
joins it into the string ssh exec takes and runs it, and the work a shell snippet
would do on a host (the pid file, the cancel, the atomic write, reading the
failure report back) is ``python -m mpirun_kit.exec.remote_host VERB`` there.
The work on every host at once (connecting, writing files, running a command) is
exec/remote.py's; the supervision (the job's deadline, a stop, the drain of every
host's output) is the one supervisor's (exec/supervisor.py, ``SshSessions``);
this module says what to send and words the errors.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..core.programs import cli_argv
from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..exec.output import copy_prefixed
from ..exec.result import RESULT_FILE, result_from_json
# ssh sessions and the work on every host at once: exec/remote.py (paramiko, host keys verified).
from ..exec import remote_host
from ..exec.remote import (HostKeyError, bounded, connect_hosts, end_remote, on_every_host, paramiko_client, run_argv,
                           run_on_hosts, start_session, wait_exit, write_argv, write_files)
from ..exec.signals import SignalLatch
from ..exec.supervisor import Stop, Supervisor, join_all
from ..cluster import elect_master
from ..errors import ClusterError, ExitCode, SSHUnreachableError
from ..spec.compile import CompiledJob
from ..core import verbosity
from .base import DryRun, Started, StatusLine, SubmitOptions, Target
from .outcome import Outcome, outcome_of

#: seconds allowed after the job's own limit for readiness, start-up and shutdown.
OVERHEAD_S = 120.0
DEFAULT_JOB_S = 7 * 24 * 3600.0
#: after a session's output ends, how long its exit status may take to arrive.
EXIT_STATUS_S = 30.0
#: how remote_host begins the line that says why a run directory is refused (the host's own words follow).
UNSAFE_PREFIX = "mpirun_kit: "
#: a cancel gives up on a host this long after the grace period (then it reports the host).
CANCEL_MARGIN_S = 15.0
#: how long a cancel waits for the entrypoint's pid file (the cancel may come before it is written).
PID_WAIT_S = 30.0
#: how long past grace_s a cancelled entrypoint may take before the cancel SIGKILLs it: its own stop ends
#: after grace_s (mpirun's process group SIGKILLed, the result sent to every worker, whose wait for it ends
#: at grace_s + 3 s), and a SIGKILL then would lose the job's result on every host.
ENTRYPOINT_STOP_S = 5.0


@dataclass(frozen=True)
class SshRequest:
    """What ``run`` does for an ssh job (the target's typed request, base.Target's ``R``): every command it sends,
    in the order it sends them, so --dry-run shows all that is sent."""

    hosts: list[dict]                       # [{"name", "slots"}], in the job's order
    user: str | None
    port: int
    identity_file: str | None
    known_hosts: str
    connect_timeout_s: float
    python: str                             # the hosts' interpreter (target.ssh.python)
    ready_timeout_s: float                  # connecting to every host, retries included
    deadline_s: float
    grace_s: float
    workdir: str                            # target.ssh.workdir/<run id>
    commands: dict[str, list[str]]          # host -> the entrypoint's start (remote_host start ... -- entrypoint)
    preflight: list[str]                    # sent first, to every host
    ship: dict[str, dict[str, list[str]]]   # host -> file -> its atomic write (the file's text goes to stdin)
    cancel: dict[str, list[str]]            # host -> its cancel, on a stop or the deadline
    failure_file: str                       # the master's failure report, read back after a failure ...
    fetch_failure: dict[str, list[str]]     # ... over the master's session, with this command
    #: the master's whole result (exec/result.py, its result.json), read back over its session once the job ended
    #: (empty: a request saved before it was read)
    fetch_result: dict[str, list[str]] = field(default_factory=dict)
    #: where each host's entrypoint reads the job secret ``run`` makes for the run and ships (never in the dry run;
    #: empty: a request saved before runs had one)
    secret_file: str = ""

    def connection(self) -> dict:
        """How a host is reached, as exec/remote.paramiko_client takes it (``connect(settings, host)``)."""
        return {"user": self.user, "port": self.port, "identity_file": self.identity_file,
                "known_hosts": self.known_hosts, "connect_timeout_s": self.connect_timeout_s}


def dryrun(compiled: CompiledJob, *, run_id: str, verbose: bool = True, quiet: bool = False) -> DryRun[SshRequest]:
    """The ssh run as a value.

    Args:
        compiled: the job (target ssh).
        run_id: names the remote working directory (chosen by the caller, unique per run).
        verbose: the hosts' entrypoints print their progress lines (`submit -v`); else only warnings, errors.
        quiet: the hosts' entrypoints print only errors and the result (`submit -q`).
    """
    job = compiled.job
    s = job.target.ssh
    t = compiled.launch.timeouts
    workdir = f"{s.workdir.rstrip('/')}/{run_id}"
    hostfile = "".join(f"{h.name} slots={h.slots}\n" for h in compiled.hosts)
    commands = {}
    secret_file = f"{workdir}/{SECRET_NAME}"
    for h in compiled.hosts:
        argv = [*cli_argv(s.python), "entrypoint", "--no-sshd", "--hostfile",
                f"{workdir}/hostfile", "--current-host", h.name, "--spec", f"{workdir}/launch-spec.json",
                "--secret-file", secret_file, "--opt-ml", f"{workdir}/{h.name}",
                *verbosity.entrypoint_flags(verbose, quiet)]
        # remote_host start records the entrypoint's pid (it execs it) so a cancel signals exactly that process,
        # never one matched by name.  Per-host names: the workdir may be on a file system the hosts share.
        # It stops the entrypoint as a cancel would should its session end (a submit killed by SIGKILL).
        commands[h.name] = remote_host.argv(s.python, "start", "--pid-file", f"{workdir}/{h.name}.pid",
                                            "--dir", f"{workdir}/{h.name}", "--private", workdir,
                                            "--grace", f"{t.grace_s + ENTRYPOINT_STOP_S:g}", "--", *argv)
    files = ((f"{workdir}/launch-spec.json", compiled.launch.to_json() + "\n"), (f"{workdir}/hostfile", hostfile))
    # After a failure, the master's failure report is read back over its open session, so --json's source and
    # root cause come from the report, not guessed from the exit code (the same parser as local and sim).
    master = elect_master([h.name for h in compiled.hosts])
    failure_file = f"{workdir}/{master}/output/failure"
    # Every command run remotely, in the order ``run`` sends them, so --dry-run shows all that is sent:
    # preflight, then ship (each file's text goes to the command's stdin), start (``commands``), and on a
    # stop or deadline the cancel.
    request = SshRequest(
        hosts=[{"name": h.name, "slots": h.slots} for h in compiled.hosts],
        user=s.user, port=s.port, identity_file=s.identity_file, known_hosts=s.known_hosts,
        connect_timeout_s=s.connect_timeout_s, python=s.python,
        ready_timeout_s=t.ssh_ready_s + t.ssh_ready_per_host_s * len(compiled.hosts),
        deadline_s=(t.job_s or DEFAULT_JOB_S) + OVERHEAD_S, grace_s=t.grace_s,
        workdir=workdir, commands=commands,
        preflight=preflight_command(s.python, preflight_timeout_s(s.connect_timeout_s)),
        # --private: the run directory is made 0700 and refused where another user could swap it (under /tmp).
        # The job secret is written 0600; its text is made by ``run`` for each run, never part of this value.
        ship={h.name: {**{name: write_argv(s.python, name, workdir) for name, _ in files},
                       secret_file: [*write_argv(s.python, secret_file, workdir), "--mode", "600"]}
              for h in compiled.hosts},
        cancel={h.name: cancel_argv(s.python, f"{workdir}/{h.name}.pid", t.grace_s, PID_WAIT_S)
                for h in compiled.hosts},
        failure_file=failure_file, fetch_failure={master: fetch_argv(s.python, failure_file)},
        fetch_result={master: fetch_argv(s.python, f"{workdir}/{master}/output/{RESULT_FILE}")},
        secret_file=secret_file)
    return DryRun("ssh", job.name, request, files=files)


#: the job secret's name in the run directory (as the Slurm target's).
SECRET_NAME = "job-secret"


def run_files(dry: DryRun) -> tuple[tuple[str, str], ...]:
    """What ``start_hosts`` ships: the dry run's files and, when the request has a place for it, a job secret made
    now (exec/sshkeys.py), new for every run as on sim and Slurm: the workers' channel key comes from it, and so
    does the multi-host result port (entrypoint/common.py ``job_result_port``), so two runs of one spec on the
    same hosts never derive the same port (issue #40)."""
    from ..exec.sshkeys import SECRET_BYTES, format_secret

    req: SshRequest = dry.request
    if not req.secret_file:
        return tuple(dry.files)
    return (*dry.files, (req.secret_file, format_secret(os.urandom(SECRET_BYTES))))


#: the most of a failure report read back (the launcher writes a few KiB; a hostile host could send more).
FAILURE_READ_LIMIT = 64 * 1024


def fetch_argv(python: str, path: str) -> list[str]:
    """Prints the remote failure report (at most FAILURE_READ_LIMIT bytes); exit 0 with nothing when there is none."""
    return remote_host.argv(python, "read", path, "--limit", str(FAILURE_READ_LIMIT))


def fetch_failure(client, argv: list[str], timeout: float) -> str | None:
    """A file of the master's read over ``client`` with ``argv`` (``fetch_argv``: the failure report, the result);
    None when there is none or it cannot be read (the Outcome then says it was judged from the exit code alone)."""
    import paramiko

    try:
        code, data, _ = run_argv(client, argv, timeout, limit=FAILURE_READ_LIMIT)
    except (OSError, EOFError, paramiko.SSHException, ClusterError):
        return None
    return data.decode(errors="replace") if code == 0 and data.strip() else None


#: the preflight's own deadline on a host, past ours: we stop waiting first (and name the host), and what we left
#: there ends itself this long after.
PREFLIGHT_MARGIN_S = 5.0


def preflight_timeout_s(connect_timeout_s: float) -> float:
    """How long the preflight (and each launch file's write) may take on a host."""
    return connect_timeout_s + 20


def preflight_command(python: str, timeout_s: float) -> list[str]:
    """Checks that ``python`` imports mpirun_kit on a host (prints its version), killed there ``PREFLIGHT_MARGIN_S``
    after we stop waiting (``timeout_s``).

    The host's own ``timeout`` (coreutils) bounds it because nothing else would: this interpreter may lack the
    package, so no remote_host verb can watch it, and sshd never hangs up on a command without a pty (the ssh
    "signal" request that exec/remote.end_remote sends is refused for root logins).  On 14f00b4 a hung
    interpreter ran on after the preflight gave up.
    """
    return bounded([python, "-c", "import mpirun_kit, sys; sys.stdout.write(mpirun_kit.__version__)"], timeout_s,
                   PREFLIGHT_MARGIN_S)


def connect_all(req: SshRequest, *, connect: Callable[[dict, str], Any] = paramiko_client, clock: Clock = SYSTEM_CLOCK,
                progress: StatusLine | None = None) -> dict[str, Any]:
    """Connect to every host at once (exec/remote.connect_hosts), retrying each until the readiness deadline.

    Raises:
        HostKeyError: a host key is unknown or changed (not retried: it will not fix itself).
        SSHUnreachableError: hosts that never accepted a session, all named.
    """
    hosts = [h["name"] for h in req.hosts]
    clients, errors, bad_keys = connect_hosts(
        hosts, lambda host: connect(req.connection(), host), req.ready_timeout_s, clock=clock,
        status=progress.update if progress else None, name=lambda host: f"{req.user}@{host}:{req.port}")
    if bad_keys or errors:
        for c in clients.values():
            c.close()
    if bad_keys:
        hosts_txt = ", ".join(sorted(bad_keys))
        raise HostKeyError(f"host key check failed for {hosts_txt} ({'; '.join(bad_keys.values())}); verify the key "
                           f"out of band, then add it to {req.known_hosts} (e.g. `ssh-keyscan -p {req.port} "
                           f"HOST >> {req.known_hosts}` after checking its fingerprint)")
    if errors:
        detail = "; ".join(f"{h}: {e}" for h, e in sorted(errors.items()))
        raise SSHUnreachableError(
            f"{len(errors)} of {len(hosts)} host(s) never accepted an ssh session within "
            f"{req.ready_timeout_s:g}s ({detail}); check that sshd runs there, the user {req.user!r} and "
            "the key are accepted, and raise timeouts.ssh_ready_s for slow boots", tuple(sorted(errors)))
    return clients


def ship(clients: dict[str, Any], files: tuple[tuple[str, str], ...], timeout: float,
         commands: dict[str, dict[str, str]] | None = None) -> None:
    """Write the launch files on every host, each atomically (exec/remote.write_files).

    Raises:
        ClusterError: names the host and file that could not be written, or the host and directory another
            user could swap (the run directory and every directory above it are checked there first).
    """
    bad = write_files(clients, files, timeout, commands)
    unsafe = [f for f in bad if f.unsafe_dir]
    if unsafe:
        # The run directory, the workdir or a directory above them is another user's to swap (remote_host.unsafe_dir).
        raise ClusterError(f"{'; '.join(f'{f.host}: {f.err.removeprefix(UNSAFE_PREFIX)}' for f in unsafe)}: another "
                           "user could replace the job's files there; set target.ssh.workdir to a directory only you "
                           "can write, on every host")
    if bad:
        raise ClusterError(f"could not write the launch files ({'; '.join(map(str, bad))}); check that "
                           "target.ssh.workdir is writable by the ssh user on every host")


@dataclass
class _Session:
    host: str
    channel: Any
    code: int | None = None


def _pump(session: _Session, prefix: str, out, lock: threading.Lock) -> None:
    """Copy one host's combined output line by line, bytes unchanged behind ``prefix``, until the channel closes."""
    try:
        copy_prefixed(session.channel.makefile("rb"), out, prefix, lock)
        session.code = wait_exit(session.channel, EXIT_STATUS_S)
    except (OSError, EOFError, ClusterError) as exc:  # a dead session: no code (counted as LAUNCH_FAILED by _master_code)
        end_remote(session.channel)   # its output ended but it did not: we stop waiting, so it must not run on
        with lock:
            out.write(f"{prefix}ssh session to {session.host} ended without an exit status ({exc})\n".encode())
            out.flush()


def cancel_argv(python: str, pid_file: str, grace_s: float, wait_s: float) -> list[str]:
    """The remote side of a cancel (exec/remote_host.py ``cancel``): waits up to ``wait_s`` for the pid file
    (the cancel may arrive before the entrypoint wrote it), SIGTERM once, waits ``grace_s + ENTRYPOINT_STOP_S``
    for the process to go, then SIGKILL.  Prints ``gone`` and exits 0 once it is gone; exits 3
    (remote_host.NO_PID_FILE) if no pid file appeared."""
    return remote_host.argv(python, "cancel", "--pid-file", pid_file, "--grace", f"{grace_s + ENTRYPOINT_STOP_S:g}",
                            "--wait", f"{wait_s:g}")


def cancel(clients: dict[str, Any], workdir: str, *, grace_s: float = 10.0, req: dict | None = None,
           commands: dict[str, list[str]] | None = None, connect: Callable[[dict, str], Any] | None = None, clock: Clock = SYSTEM_CLOCK,
           pid_wait_s: float = PID_WAIT_S, python: str = sys.executable) -> dict[str, str]:
    """Stop every host's entrypoint (SIGTERM by its recorded pid; it stops mpirun and the ranks with grace).

    Every host is visited, in parallel; a host whose session fails (OSError, paramiko's
    SSHException, EOF) is retried over a new connection (``connect``, when given) until the
    remote entrypoint is confirmed gone or ``pid_wait_s + grace_s + CANCEL_MARGIN_S`` pass
    (``connect(req, host)``: ``req`` is the connection settings, SshRequest.connection).
    The command sent is ``commands[host]`` (the dry run's ``cancel``) when given.  A connection it opens it
    closes before it returns; those in ``clients`` are the caller's.

    Returns:
        host -> why it could not be confirmed stopped (empty when every entrypoint is gone).
    """
    import paramiko

    limit = pid_wait_s + grace_s + CANCEL_MARGIN_S

    def one(host: str, client) -> str | None:
        deadline = Deadline(clock, limit)
        argv = (commands or {}).get(host) or cancel_argv(python, f"{workdir}/{host}.pid", grace_s,
                                                                     pid_wait_s)
        why = "not tried"
        ours = None   # a connection this cancel opened: closed by it (the caller closes the ones it gave)
        try:
            while True:
                try:
                    if client is None:
                        client = ours = connect(req, host)
                    code, out, err = run_argv(client, argv, max(1.0, deadline.remaining()), clock=clock)
                    text = (out + err).decode(errors="replace").strip()
                    if code == 0 and text.endswith("gone"):
                        return None
                    why = (f"no entrypoint pid file {workdir}/{host}.pid" if code == remote_host.NO_PID_FILE
                           else f"exit {code} {text[-200:]}")
                    if code == remote_host.NO_PID_FILE:
                        break
                except (OSError, EOFError, paramiko.SSHException, ClusterError) as exc:
                    why = f"{type(exc).__name__}: {exc}"
                    if ours is not None:
                        ours.close()
                    client = ours = None  # the session is broken: reconnect for the next try
                    if connect is None:
                        break
                if deadline.remaining() <= 0:
                    break
                clock.sleep(min(1.0, max(0.0, deadline.remaining())))
            return why
        finally:
            if ours is not None:
                ours.close()

    return {host: why for host, why in on_every_host(clients.items(), one).items() if why is not None}


def preflight(clients: dict[str, Any], python: str, timeout: float) -> None:
    """Check, on every host in parallel, that ``python`` can import mpirun_kit.

    Raises:
        ClusterError: names each host where it cannot, with what it printed.
    """
    results = run_on_hosts(clients, preflight_command(python, timeout), timeout)
    bad = [(h, c, text) for h, (c, text) in results.items() if c != 0]
    if bad:
        detail = "; ".join(f"{h}: exit {c}: {text[-200:]}" for h, c, text in sorted(bad))
        raise ClusterError(f"mpirun_kit is not importable with {python!r} on {len(bad)} host(s) ({detail}); install "
                           "it there (pip install mpirun_kit) or set target.ssh.python")


class StoppedBeforeStart(Exception):
    """A stop came while connecting or shipping: nothing was started on any host (``stop``: who asked, why)."""

    def __init__(self, stop: Stop):
        super().__init__(stop.why)
        self.stop = stop


def start_hosts(dry: DryRun, *, connect: Callable[[dict, str], Any] = paramiko_client, clock: Clock = SYSTEM_CLOCK,
                out=None, latch: SignalLatch | None = None, progress: StatusLine | None = None) -> Started:
    """Connect to every host, check it, ship the files and start every host's entrypoint; return at once with the
    run's working directory (``SshRequest.workdir``: the target's own id for the job) and the sessions, the child
    the one supervisor follows.  The connections stay open for the reads after the end: the caller closes them
    (``SshSessions.close``).  ``out`` takes the ranks' lines (bytes).

    Raises:
        StoppedBeforeStart: ``latch`` received a signal before anything started.
        HostKeyError, SSHUnreachableError, ClusterError: connect_all's, preflight's, ship's.
    """
    out = out or sys.stdout.buffer
    req: SshRequest = dry.request
    progress = progress or StatusLine(clock=clock)
    clients = connect_all(req, connect=connect, clock=clock, progress=progress)
    try:
        preflight(clients, req.python, preflight_timeout_s(req.connect_timeout_s))
        progress.note(f"ssh: all {len(clients)} host(s) ready; shipping the launch spec to {req.workdir}")
        ship(clients, run_files(dry), preflight_timeout_s(req.connect_timeout_s), req.ship)
        lock = threading.Lock()
        sessions: list[_Session] = []
        threads = []
        # The elected master's lines already carry "[rank host]" (mpirun's ranks); others get their host.
        first = elect_master([h["name"] for h in req.hosts])
        if latch is not None and latch.received:   # stopped while connecting or shipping: nothing started yet
            raise StoppedBeforeStart(latch.stop())
        for h in req.hosts:
            s = _Session(h["name"], start_session(clients[h["name"]], req.commands[h["name"]]))
            sessions.append(s)
            th = threading.Thread(target=_pump, args=(s, "" if h["name"] == first else f"[{h['name']} entrypoint] ",
                                                      out, lock), daemon=True)
            th.start()
            threads.append(th)
        return Started(req.workdir, SshSessions(sessions, threads, clients, req, connect, clock, progress))
    except BaseException:
        for c in clients.values():
            c.close()
        raise


def run(dry: DryRun, *, connect: Callable[[dict, str], Any] = paramiko_client, clock: Clock = SYSTEM_CLOCK,
        out=None, report: dict | None = None, latch: SignalLatch | None = None, level: int = verbosity.VERBOSE) -> int:
    """Run on the ssh hosts (``start_hosts``, then the one supervisor); return the job's exit code (the master's).

    ``report`` (when given) receives ``hosts`` (each host's code) and, after a failure, ``failure_text`` and
    ``failure_file``: the master's failure report, read over its session before it is closed, and ``result``, its
    whole result; after a stop, ``stop`` (exec/supervisor.Stop: who asked, why).  ``latch``: the signals that stop
    the job (a SIGINT, SIGTERM or SIGHUP to us: every host's entrypoint is cancelled, exit 128+N).  ``level``: the
    status line's output level (core/verbosity.py; ``SubmitOptions.verbosity``).
    """
    req: SshRequest = dry.request
    progress = StatusLine(clock=clock, level=level)
    try:
        child = start_hosts(dry, connect=connect, clock=clock, out=out, latch=latch, progress=progress).child
    except StoppedBeforeStart as stopped:
        progress.done(f"ssh: {stopped.stop.why} before the job started; nothing to stop")
        if report is not None:
            report["stop"] = stopped.stop
        return stopped.stop.exit_code
    try:
        ended = Supervisor(child, deadline_s=req.deadline_s, grace_s=child.cancel_bound_s(),
                           requested=latch.stop if latch is not None else None, clock=clock, tick_s=0.2,
                           drain_s=req.grace_s + 10, deadline_what="the ssh job").run()
        if ended.stop is not None:
            if report is not None:
                report["stop"] = ended.stop
            return ended.stop.exit_code
        codes = {s.host: s.code for s in child.sessions}
        master_code = _master_code(codes)
        progress.note("ssh: every host finished (" + ", ".join(f"{h}={c}" for h, c in codes.items()) + ")")
        if report is not None:
            report["hosts"] = {h: c if c is not None and c >= 0 else ExitCode.LAUNCH_FAILED for h, c in codes.items()}
            for host, command in req.fetch_result.items():   # the whole result, not the failure file's head
                report["result"] = result_from_json(fetch_failure(child.clients[host], command,
                                                                  req.connect_timeout_s + 20))
            if master_code != 0:
                (host, command), = req.fetch_failure.items()
                text = fetch_failure(child.clients[host], command, req.connect_timeout_s + 20)
                if text is not None:
                    report["failure_text"], report["failure_file"] = text, f"{host}:{req.failure_file}"
        return master_code
    finally:
        child.close()


class SshSessions:
    """Every host's entrypoint session as the supervisor's child (exec/supervisor.Child): done when every
    session's output ended; a stop is the remote cancel on every host at once (in a thread: it waits for each
    entrypoint's own stop); the kill ends each session's command (exec/remote.end_remote: sshd hangs up on nothing
    by itself without a pty) and closes the sessions."""

    def __init__(self, sessions: list[_Session], threads: list[threading.Thread], clients: dict[str, Any],
                 req: SshRequest, connect, clock: Clock, progress: StatusLine):
        self.sessions, self.threads, self.clients, self.req = sessions, threads, clients, req
        self.connect, self.clock, self.progress = connect, clock, progress
        self.canceller: threading.Thread | None = None

    def cancel_bound_s(self) -> float:
        """How long a cancel may take on a host (``cancel``'s own limit) before the sessions are closed."""
        return PID_WAIT_S + self.req.grace_s + CANCEL_MARGIN_S

    def poll(self) -> int | None:
        if any(th.is_alive() for th in self.threads):
            return None
        return _master_code({s.host: s.code for s in self.sessions})

    def terminate(self, stop: Stop) -> float | None:
        # the signal submit got (a closed terminal's SIGHUP too), so the job's result says the same stop (#40)
        sig = stop.signal if stop.signal in STOP_SIGNALS else "SIGTERM"
        self.progress.done(f"ssh: {stop.why}; sending {sig} to every host's entrypoint")
        self.canceller = threading.Thread(target=_stop, args=(self.clients, self.req, self.connect, self.clock,
                                                              self.progress, sig), name="ssh-cancel", daemon=True)
        self.canceller.start()
        return None

    def stopping(self) -> float | None:
        return None

    def kill(self) -> None:
        self.progress.done("ssh: the cancel did not end every host's session; closing them")
        for s in self.sessions:
            end_remote(s.channel)

    def drain(self, deadline: Deadline) -> None:
        join_all(self.threads + ([self.canceller] if self.canceller else []), deadline, self.clock)

    def wait(self, seconds: float) -> None:
        self.clock.sleep(seconds)

    def close(self) -> None:
        """Close every host's connection (after the reads that follow the end)."""
        for c in self.clients.values():
            c.close()


#: the stops that go on to every host's entrypoint as they came (others, a deadline's, are sent as SIGTERM).
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


def _stop(clients: dict[str, Any], req: SshRequest, connect, clock: Clock, progress: StatusLine,
          sig: str = "SIGTERM") -> None:
    # The dry run's cancel sends SIGTERM; a stop by another signal adds it (remote_host cancel --signal).
    commands = {h: [*argv, "--signal", sig] if sig != "SIGTERM" else argv for h, argv in req.cancel.items()}
    failures = cancel(clients, req.workdir, grace_s=req.grace_s, req=req.connection(), commands=commands,
                      connect=connect, clock=clock)
    for host, why in sorted(failures.items()):
        progress.done(f"ssh: could not confirm that {host}'s entrypoint stopped ({why}); check that host")


def _master_code(codes: dict[str, int | None]) -> int:
    """Every host exits with the job's code; if they disagree, the first non-zero one is the root cause's."""
    vals = [c if c is not None and c >= 0 else ExitCode.LAUNCH_FAILED for c in codes.values()]
    non_zero = [c for c in vals if c != 0]
    return non_zero[0] if non_zero else 0


class SshTarget(Target[SshRequest]):
    name = "ssh"
    request_type = SshRequest

    def python(self, job) -> str:
        return job.target.ssh.python   # the remote hosts' own (target.ssh.python)

    def choices(self, compiled, opts: SubmitOptions) -> dict:
        return {"run_id": f"{compiled.job.name}-{os.getpid():x}", "verbose": opts.verbosity >= verbosity.VERBOSE,
                "quiet": opts.verbosity <= verbosity.QUIET}

    def dryrun(self, compiled, **choices) -> DryRun[SshRequest]:
        return dryrun(compiled, **choices)

    def start(self, dry: DryRun[SshRequest], opts: SubmitOptions = SubmitOptions()) -> Started:
        """Every host's entrypoint started for ``dry``, at once: the run's working directory and the sessions."""
        return start_hosts(dry, progress=StatusLine(level=opts.verbosity))

    def run(self, dry: DryRun[SshRequest], opts: SubmitOptions = SubmitOptions(), *, started: float | None = None) -> Outcome:
        started = time.time() if started is None else started
        report: dict = {}
        with SignalLatch() as latch:
            code = run(dry, report=report, latch=latch, level=opts.verbosity)
        stop = report.get("stop")
        return outcome_of("ssh", dry.job, code, interrupted=stop.signal if stop is not None else None,
                          failure_text=report.get("failure_text"), failure_file=report.get("failure_file"),
                          started=started, ended=time.time(), hosts=report.get("hosts"), result=report.get("result"))


TARGET = SshTarget()
