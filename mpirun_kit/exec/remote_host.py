"""The host side of exec/remote.py: what the ssh target runs on each host, as argv lists, never shell.

Place in the data flow: targets/ssh.py builds the argv (``python -m mpirun_kit.exec.remote_host VERB ...``,
printed whole by ``--dry-run``); exec/remote.py sends it (``shlex.join`` there, the one place an argv
becomes the string an ssh exec takes); this module runs on the host and does the work a shell snippet
used to do, with the package's own atomic write and the supervisor's stop sequence:

``start --pid-file F --dir D -- ARGV...``  make D, enter it, write our pid to F (atomically), exec ARGV:
    the pid in F is then ARGV's own (the entrypoint's), which a cancel signals by pid, never by name;
``cancel --pid-file F --grace S --wait W``  wait up to W s for F (a cancel may come before the start wrote
    it), SIGTERM that pid, up to S s for it to go, then SIGKILL; prints ``gone`` and exits 0 once it is
    gone, exits 3 when no pid file appeared (``NO_PID_FILE``);
``write PATH``  stdin to PATH atomically (parents made): the launch files;
``read PATH --limit N``  at most N bytes of PATH on stdout; nothing and exit 0 when there is no PATH.

Run by the host's Python with the package installed (the ssh target's preflight checks that first).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..core.clock import SYSTEM_CLOCK, Clock, Deadline

MODULE = "mpirun_kit.exec.remote_host"
#: ``cancel``'s exit code when no pid file appeared within its wait.
NO_PID_FILE = 3
#: how often ``cancel`` looks for the pid file and for the process's end.
POLL_S = 0.1


def argv(python: str, verb: str, *args: str) -> list[str]:
    """The argv that runs ``verb`` on a host with ``python``."""
    return [python, "-m", MODULE, verb, *args]


def start(pid_file: str, directory: str, command: list[str]) -> None:
    """Make and enter ``directory``, record our pid in ``pid_file``, become ``command`` (never returns)."""
    from ..core.files import write_atomic

    os.makedirs(directory, exist_ok=True)
    os.chdir(directory)
    write_atomic(pid_file, f"{os.getpid()}\n")
    os.execvp(command[0], command)


def cancel(pid_file: str, grace_s: float, wait_s: float, clock: Clock = SYSTEM_CLOCK) -> int:
    """Stop the process named by ``pid_file`` (``stop_process``: SIGTERM, ``grace_s``, SIGKILL); exit code."""
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
    res = stop_process(pid, grace_s, clock=clock)
    print("gone" if res.gone else "still-running", flush=True)
    return 0 if res.gone else 1


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def write(path: str) -> None:
    """stdin (bytes, unchanged) to ``path``, atomically, parents made (core/files.write_atomic)."""
    from ..core.files import write_atomic

    write_atomic(path, sys.stdin.buffer.read())


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
    s.add_argument("command", nargs=argparse.REMAINDER)
    c = sub.add_parser("cancel")
    c.add_argument("--pid-file", required=True)
    c.add_argument("--grace", type=float, required=True)
    c.add_argument("--wait", type=float, required=True)
    w = sub.add_parser("write")
    w.add_argument("path")
    r = sub.add_parser("read")
    r.add_argument("path")
    r.add_argument("--limit", type=int, required=True)
    a = p.parse_args(args)
    if a.verb == "start":
        command = a.command[1:] if a.command[:1] == ["--"] else a.command
        if not command:
            p.error("start: no command given after --")
        start(a.pid_file, a.dir, command)
    if a.verb == "cancel":
        return cancel(a.pid_file, a.grace, a.wait)
    if a.verb == "write":
        write(a.path)
    elif a.verb == "read":
        read(a.path, a.limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
