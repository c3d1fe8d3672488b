"""The host side of exec/remote.py: what the ssh target runs on each host, as argv lists, never shell.

Place in the data flow: targets/ssh.py builds the argv (``python -m mpirun_kit.exec.remote_host VERB ...``,
printed whole by ``--dry-run``); exec/remote.py sends it (``shlex.join`` there, the one place an argv
becomes the string an ssh exec takes); this module runs on the host and does the work a shell snippet
used to do, with the package's own atomic write and the supervisor's stop sequence:

``start --pid-file F --dir D --grace S -- ARGV...``  make D, enter it, start ARGV with its pid in F (atomically):
    the entrypoint's own, which a cancel signals by pid, never by name; then watch both: ARGV's end is ours
    (its exit code, or its signal), and the session's end (its channel closed: the submit that started it
    died, even by SIGKILL, or gave up) stops ARGV as a cancel does (SIGTERM, S s, SIGKILL): without a pty
    sshd would leave it running;
``cancel --pid-file F --grace S --wait W``  wait up to W s for F (a cancel may come before the start wrote
    it), SIGTERM that pid, up to S s for it to go, then SIGKILL; prints ``gone`` and exits 0 once it is
    gone, exits 3 when no pid file appeared (``NO_PID_FILE``);
``write PATH [--private DIR] [--mode OCTAL]``  stdin to PATH atomically (parents made), with that mode (default
    644): the launch files, the Slurm batch script (755) and job secret (600);
``--private DIR`` (``write`` and ``start``): DIR is the job's run directory, made 0700 and refused, before anything
    is written or started in it, when another user could swap its files (``unsafe_dir``; exit ``UNSAFE_DIR``);
``read PATH --limit N``  at most N bytes of PATH on stdout; nothing and exit 0 when there is no PATH;
``read-many --limit N PATH...``  one line per PATH, in order: ``-`` where it is missing, else ``+`` and its first N
    bytes in base64 (any byte, newlines too, fits one line): the Slurm target's result files in one command;
``scrubbed -- ARGV...``  exec ARGV with the SLURM_*, SBATCH_* and PMIX_* variables the calling shell inherited
    removed (SLURM_CONF kept): sbatch reads SBATCH_* as options and passes the rest into the job (submitit's
    clean_env); a parent allocation's SLURM_CPU_BIND has made jobs 3x slower.

Used by targets/ssh.py on every host, and by targets/slurm/runner.py where Slurm's clients run (a login node over
ssh, this machine, a sim cluster's algo-1).

Run by the host's Python with the package installed (the ssh target's preflight checks that first).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from ..core.clock import SYSTEM_CLOCK, Clock, Deadline

MODULE = "mpirun_kit.exec.remote_host"
#: ``cancel``'s exit code when no pid file appeared within its wait.
NO_PID_FILE = 3
#: how often ``cancel`` looks for the pid file and for the process's end.
POLL_S = 0.1
#: ``write``'s and ``start``'s exit code when their ``--private`` run directory is another user's to swap.
UNSAFE_DIR = 4


def argv(python: str, verb: str, *args: str) -> list[str]:
    """The argv that runs ``verb`` on a host with ``python``."""
    return [python, "-m", MODULE, verb, *args]


def unsafe_dir(run_dir: str, uid: int | None = None) -> str | None:
    """Why another user could swap the files of ``run_dir`` (a job's run directory), or None.

    The ssh target's default workdir is under /tmp, which every user of a host shares: whoever can rename
    an entry on the way could swap the launch spec or the hostfile the entrypoint reads.  So the run
    directory and the workdir above it must be ``uid``'s (default: ours) and writable by no one else, and
    every directory above them ``uid``'s or root's and not writable by group or others unless sticky; a
    symbolic link on the way must be ``uid``'s or root's (its owner may point it elsewhere), and the
    directories it leads to pass the same checks.  The same rule as the Slurm target's run directory.
    """
    from ..core.private import swappable

    return swappable(run_dir, uid, own=2)   # one home for the rule: core/private.py


def _private(run_dir: str) -> int:
    """Make ``run_dir`` (0700, parents too) and check it (``unsafe_dir``): 0, or UNSAFE_DIR with one line on stderr."""
    from ..core.private import make_private

    # Checked on the way down before each directory is made: never made through another user's link.
    why = make_private(run_dir, own=2, exist_ok=True)
    if why:
        print(f"mpirun_kit: {why}", file=sys.stderr, flush=True)
        return UNSAFE_DIR
    return 0


def start(pid_file: str, directory: str, command: list[str], private: str | None = None, grace_s: float = 10.0,
          clock: Clock = SYSTEM_CLOCK) -> int:
    """Make and enter ``directory``, start ``command`` with its pid in ``pid_file``, and wait for it: its exit
    code, or UNSAFE_DIR (``private``, the run directory, is another user's to swap: nothing started).

    While it runs, our stdout (the ssh channel) is watched: once nothing reads it any more (sshd closed the
    channel: the submit died or gave up on the session), ``command`` is stopped (SIGTERM, ``grace_s``, SIGKILL).
    A ``command`` ended by a signal ends us by the same signal, so sshd reports it as before.
    """
    from ..core.files import write_atomic

    if private and _private(private):
        return UNSAFE_DIR
    os.makedirs(directory, exist_ok=True)
    os.chdir(directory)
    pid = os.fork()
    if pid == 0:   # the child: the command itself, under the pid the file names
        try:
            write_atomic(pid_file, f"{os.getpid()}\n")
            os.execvp(command[0], command)
        except BaseException as exc:   # noqa: B036 - nothing of the parent may run on in the child
            print(f"mpirun_kit: could not start {command[0]}: {exc}", file=sys.stderr, flush=True)
        os._exit(127)
    status = _watch(pid, grace_s, clock)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:   # killed by a signal: so are we (sshd then says exit-signal, as when start exec'd it)
        if -code not in (signal.SIGKILL, signal.SIGSTOP):   # those two have no handler to reset
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code
    return code


def _watch(pid: int, grace_s: float, clock: Clock) -> int:
    """Wait for child ``pid``; stop it once stdout's reader is gone (POLLERR on a pipe, POLLHUP on a socket or
    tty); its wait status."""
    import select

    from .supervisor import stop_process

    out = select.poll()
    out.register(1, 0)   # no event asked: only the peer's end (POLLERR/POLLHUP) is reported
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if out.poll(POLL_S * 1000):
            # No one reads the command's output any more: nothing will stop it but us.
            stop_process(pid, grace_s, clock=clock)
            return os.waitpid(pid, 0)[1]


def cancel(pid_file: str, grace_s: float, wait_s: float, clock: Clock = SYSTEM_CLOCK,
           first: int = signal.SIGTERM) -> int:
    """Stop the process named by ``pid_file`` (``stop_process``: ``first``, SIGTERM unless a stop by another signal
    goes on as it came, ``grace_s``, SIGKILL); exit code."""
    from .supervisor import stop_process

    path = Path(pid_file)
    wait = Deadline(clock, wait_s)
    pid = _read_pid(path)
    while pid is None and not wait.expired():
        clock.sleep(min(POLL_S, wait.remaining()))
        pid = _read_pid(path)
    if pid is None:
        print("no-pid-file", flush=True)
        return NO_PID_FILE
    res = stop_process(pid, grace_s, clock=clock, first=first)
    print("gone" if res.gone else "still-running", flush=True)
    return 0 if res.gone else 1


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def write(path: str, private: str | None = None, mode: int = 0o644) -> int:
    """stdin (bytes, unchanged) to ``path``, atomically, parents made (core/files.write_atomic), with ``mode``; 0,
    or UNSAFE_DIR (nothing written) when ``private``, the run directory ``path`` is in, is another user's to swap."""
    from ..core.files import write_atomic

    if private and _private(private):
        return UNSAFE_DIR
    write_atomic(path, sys.stdin.buffer.read(), mode)
    return 0


def read_many(paths: list[str], limit: int) -> None:
    """One line per path on stdout: ``-`` (missing) or ``+`` and at most ``limit`` bytes of it in base64."""
    import base64

    lines = []
    for path in paths:
        try:
            with open(path, "rb") as f:
                lines.append("+" + base64.b64encode(f.read(limit)).decode())
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            lines.append("-")
    sys.stdout.write("".join(line + "\n" for line in lines))
    sys.stdout.flush()


#: what ``scrubbed`` removes: a Slurm client's inherited context (SLURM_CONF, where the cluster is, stays).
SCRUBBED_PREFIXES = ("SLURM_", "SBATCH_", "PMIX_")


def scrubbed_env(environ: dict[str, str]) -> dict[str, str]:
    """``environ`` without the SLURM_*/SBATCH_*/PMIX_* a shell or a parent allocation left (SLURM_CONF kept)."""
    return {k: v for k, v in environ.items() if k == "SLURM_CONF" or not k.startswith(SCRUBBED_PREFIXES)}


def scrubbed(command: list[str]) -> int:
    """exec ``command`` with ``scrubbed_env`` (this process's environment: it runs on the host, as a shell would)."""
    try:
        os.execvpe(command[0], command, scrubbed_env(dict(os.environ)))
    except OSError as exc:
        print(f"mpirun_kit: could not start {command[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        return 127


def read(path: str, limit: int) -> None:
    """At most ``limit`` bytes of ``path`` to stdout; nothing when it does not exist."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit)
    except FileNotFoundError:
        return
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def main(args: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="verb", required=True)
    s = sub.add_parser("start")
    s.add_argument("--pid-file", required=True)
    s.add_argument("--dir", required=True)
    s.add_argument("--private", metavar="RUN_DIR")
    s.add_argument("--grace", type=float, default=10.0)
    s.add_argument("command", nargs=argparse.REMAINDER)
    c = sub.add_parser("cancel")
    c.add_argument("--pid-file", required=True)
    c.add_argument("--grace", type=float, required=True)
    c.add_argument("--wait", type=float, required=True)
    # a stop by SIGINT or SIGHUP goes on as it came, so the entrypoint's result says the same stop (issue #40)
    c.add_argument("--signal", choices=("SIGTERM", "SIGINT", "SIGHUP"), default="SIGTERM")
    w = sub.add_parser("write")
    w.add_argument("path")
    w.add_argument("--private", metavar="RUN_DIR")
    w.add_argument("--mode", type=lambda text: int(text, 8), default=0o644)
    r = sub.add_parser("read")
    r.add_argument("path")
    r.add_argument("--limit", type=int, required=True)
    m = sub.add_parser("read-many")
    m.add_argument("--limit", type=int, required=True)
    m.add_argument("paths", nargs="*")
    x = sub.add_parser("scrubbed")
    x.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args(args)
    if a.verb == "start":
        command = a.command[1:] if a.command[:1] == ["--"] else a.command
        if not command:
            p.error("start: no command given after --")
        return start(a.pid_file, a.dir, command, a.private, a.grace)
    if a.verb == "cancel":
        return cancel(a.pid_file, a.grace, a.wait, first=signal.Signals[a.signal])
    if a.verb == "write":
        return write(a.path, a.private, a.mode)
    if a.verb == "read-many":
        read_many(a.paths, a.limit)
    elif a.verb == "scrubbed":
        command = a.command[1:] if a.command[:1] == ["--"] else a.command
        if not command:
            p.error("scrubbed: no command given after --")
        return scrubbed(command)
    elif a.verb == "read":
        read(a.path, a.limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
