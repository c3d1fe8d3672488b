"""Helpers for the tests of job records and the lifecycle verbs (issue #28), shared by tests/cli/test_jobs.py
and tests/targets/test_sim_jobs.py: `mpirun_kit` as a user runs it, the processes a job left, a bounded wait."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

#: a rank that prints a line a second for up to 5 minutes, and says when SIGTERM reached it
LONG = ("import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('rank got SIGTERM', flush=True), sys.exit(143)))\n"
        "for i in range(300):\n"
        "    print('tick', i, flush=True)\n"
        "    time.sleep(1)\n")


def mrk(*argv: str, cwd: Path | None = None, timeout: float = 300, check: int | None = None) -> subprocess.CompletedProcess:
    """`mpirun_kit ARGV` in a fresh interpreter (the records' store comes from the environment)."""
    p = subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main", *argv], capture_output=True, text=True,
                       cwd=cwd, timeout=timeout)
    if check is not None:
        assert p.returncode == check, (argv, p.returncode, p.stdout, p.stderr)
    return p


def processes_with(marker: str) -> list[str]:
    """Command lines of processes on this machine that carry ``marker`` (the job's own argument)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd and int(pid) != os.getpid():
            found.append(f"{pid}: {cmd[:200]}")
    return found


def wait_for(predicate, what: str, limit_s: float = 120.0):
    """``predicate()``'s first true value, polled until ``limit_s`` pass (then the test fails naming ``what``)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def local_spec(tmp_path: Path, name: str, command: str) -> str:
    """A local job spec file named ``name``: 2 ranks of ``command`` (YAML flow list), a 3 s grace period."""
    p = tmp_path / f"{name}.yaml"
    p.write_text(f"apiVersion: mpirun_kit/v1\nkind: Job\nname: {name}\nresources: {{processes_per_host: 2}}\n"
                 f"program: {{command: {command}}}\ntimeouts: {{grace_s: 3}}\n")
    return str(p)
