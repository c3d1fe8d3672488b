"""Shared by the stop tests of the local and sim targets: a job whose ranks wait, a real `submit` process,
the signal, and the search for anything of the job left running (processes, namespaces)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil

from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline

#: each rank says it is ready, then waits (the default SIGTERM action ends it).
WAITER = ("import os, sys, time\n"
          "os.write(1, ('rank %s ready\\n' % os.environ['OMPI_COMM_WORLD_RANK']).encode())\n"
          "time.sleep(300)\n")


def start_submit(spec: Path, log: Path, *flags: str) -> subprocess.Popen:
    """`mpirun_kit submit SPEC --json FLAGS` as a user runs it, in its own session (as a shell's job is),
    output in ``log``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPI_")}
    with open(log, "wb") as f:
        return subprocess.Popen([sys.executable, "-m", "mpirun_kit.cli.main", "submit", str(spec), "--json", *flags],
                                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=spec.parent,
                                env=env, start_new_session=True)


def wait_ready(proc: subprocess.Popen, log: Path, ranks: list[str], timeout: float = 120.0) -> list[psutil.Process]:
    """Wait until every rank printed its ready line; every process the submit started by then."""
    end = Deadline(SYSTEM_CLOCK, timeout)
    while not all(f"{r} ready" in log.read_text(errors="replace") for r in ranks):
        assert proc.poll() is None and not end.expired(), log.read_text(errors="replace")
        SYSTEM_CLOCK.sleep(0.1)
    return psutil.Process(proc.pid).children(recursive=True)


def left_running(procs: list[psutil.Process], marker: str, timeout: float = 20.0) -> list[str]:
    """What is still running ``timeout`` s from now: of ``procs``, and any process whose command line names
    ``marker`` (the test's directory: the ranks' program, the sim hosts' sshd configs)."""
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    alive = [p for p in alive if _running(p)]
    named = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.pid != os.getpid() and marker in " ".join(p.info["cmdline"] or ()) and _running(p):
                named.append(p)
        except psutil.NoSuchProcess:
            pass
    return sorted({f"{p.pid} {_cmd(p)}" for p in alive + named})


def _running(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _cmd(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())[:200]
    except psutil.NoSuchProcess:
        return "(gone)"


def netns_of(cluster: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"mrk-{cluster}-")]


def result_line(log: Path) -> dict:
    """The --json Outcome: the last line of the log that is one."""
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError("no result line:\n" + log.read_text(errors="replace"))
