"""`mpirun_kit launch`'s key hand-off to the other hosts, over the ssh mpirun already uses.

Place in the data flow: under `launch` no entrypoint runs on the other hosts, so none can say hello and take
its host's seed (keys.py).  The master (entrypoint/master.py) starts, beside its sshd wait and before mpirun,
one ``ssh HOST python -m mpirun_kit.exec.channel.keyhost ...`` per other host (``deliver``); each writes its
host's seed on that ssh's stdin.  The remote end (``main``) makes the host's key directory (keys.py
``write_key_dir``), says ``ready``, and holds it until its stdin closes (the master closes it when the job
ends, or dies) or ``hold_s`` passes, then removes it.  So the seed crosses the network only inside ssh, the
workers' key of a `launch` is random per run (no hello is ever expected), and every host's ranks report.

A host whose hand-off fails (ssh refused, no mpirun_kit there) is named in a warning and left out of the hosts
whose ranks wait for a key (plan/contract.py ``RUN_NONCE_VAR``): its ranks run without reports, and are not
expected to report.
"""
from __future__ import annotations

import logging
import os
import select
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ...core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..command import spawn

log = logging.getLogger(__name__)

READY = "mpirun_kit keys ready"
MODULE = "mpirun_kit.exec.channel.keyhost"


def remote_argv(python: str, run_nonce_hex: str, host: str, job: str, ranks: Sequence[int], hold_s: float) -> list[str]:
    """The remote command, as an argv (ssh joins it into one shell line: ``ssh_argv`` quotes it)."""
    return [python, "-m", MODULE, run_nonce_hex, host, job or "-", ",".join(map(str, ranks)) or "-", f"{hold_s:g}"]


def ssh_argv(host: str, port: int, remote: Sequence[str]) -> list[str]:
    """``ssh`` to ``host`` as mpirun reaches it (same ssh, same port), never prompting."""
    return ["ssh", "-o", "BatchMode=yes", "-p", str(port), host, shlex.join(remote)]


@dataclass
class Handoff:
    """The ssh processes holding each host's key directory, and the hosts whose ranks got their keys."""

    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    ready: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)

    def close(self, timeout: float = 5.0, clock: Clock = SYSTEM_CLOCK) -> None:
        """End the hand-off: every remote end removes its key directory (stdin closed), then exits."""
        for p in self.procs.values():
            try:
                p.stdin.close()
            except OSError:
                pass
        deadline = Deadline(clock, timeout)
        for h, p in self.procs.items():
            try:
                p.wait(max(0.01, deadline.remaining()))
            except subprocess.TimeoutExpired:
                log.warning("key hand-off to %s did not end within %g s; killing its ssh", h, timeout)
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()


def start(hosts_ranks: Mapping[str, Sequence[int]], seeds: Mapping[str, bytes], *, run_nonce_hex: str, job: str,
          python: str, ssh_port: int, hold_s: float) -> Handoff:
    """Start one ssh per host and hand it its seed; returns at once (``wait_ready`` waits)."""
    h = Handoff()
    for host, ranks in hosts_ranks.items():
        argv = ssh_argv(host, ssh_port, remote_argv(python, run_nonce_hex, host, job, ranks, hold_s))
        try:
            p = spawn(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            h.failed[host] = f"cannot run ssh ({exc.strerror})"
            continue
        try:
            p.stdin.write((seeds[host].hex() + "\n").encode())
            p.stdin.flush()
        except OSError:
            pass        # it died: wait_ready says why
        h.procs[host] = p
    return h


def wait_ready(h: Handoff, deadline: Deadline, clock: Clock = SYSTEM_CLOCK) -> Handoff:
    """Wait until every host said ready, failed, or ``deadline`` passed (those are failed)."""
    bufs = {host: b"" for host in h.procs}
    pending = {p.stdout.fileno(): host for host, p in h.procs.items() if host not in h.failed}
    while pending:
        left = deadline.remaining()
        if left <= 0:
            for host in pending.values():
                h.failed[host] = f"no answer within {deadline.seconds:g} s"
            break
        readable, _, _ = select.select(list(pending), [], [], min(left, 0.5))
        for fd in readable:
            host = pending[fd]
            chunk = os.read(fd, 4096)
            bufs[host] += chunk
            if READY.encode() in bufs[host]:
                h.ready.add(host)
                del pending[fd]
            elif not chunk or len(bufs[host]) > 65536:
                text = bufs[host].decode(errors="replace").strip().splitlines()
                h.failed[host] = (text[-1][:300] if text else f"ssh exited {h.procs[host].wait()}")
                del pending[fd]
    for host, why in sorted(h.failed.items()):
        log.warning("key hand-off to %s failed (%s): its ranks run without reports to the result channel", host, why)
    return h


def main(argv: list[str] | None = None, clock: Clock = SYSTEM_CLOCK) -> int:
    """The remote end: ``NONCE HOST JOB RANKS HOLD_S``, the seed's hex on stdin's first line; the hold's
    deadline is on ``clock``."""
    from .keys import remove_key_dir, write_key_dir

    nonce, host, job, ranks, hold = (argv if argv is not None else sys.argv[1:])[:5]
    line = sys.stdin.buffer.readline().strip()
    try:
        seed = bytes.fromhex(line.decode())
        if len(seed) != 32:
            raise ValueError
    except ValueError:
        print("mpirun_kit keyhost: no seed on stdin", flush=True)
        return 2
    directory = write_key_dir(nonce, host, seed, "" if job == "-" else job,
                              [] if ranks == "-" else [int(r) for r in ranks.split(",")])
    try:
        print(READY, flush=True)
        # Held until the master closes our stdin (the job ended, or the master died), or hold_s passed.
        deadline = Deadline(clock, float(hold))
        while deadline.remaining() > 0:
            r, _, _ = select.select([sys.stdin.buffer], [], [], min(deadline.remaining(), 60.0))
            if r and not os.read(sys.stdin.fileno(), 4096):
                break
    finally:
        remove_key_dir(directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
