"""PID 1 of one simulated host: sets the host up, starts its sshd, then reaps.

Started by ``cluster.py`` as
``ip netns exec NS unshare --pid --fork --mount-proc --uts --mount -- python -m mpirun_kit.sim.hostinit CONFIG``,
so it runs inside the host's fresh network, PID, UTS and mount namespaces.  It
sets the hostname, bind-mounts the host's ``/etc/hosts``, ``/opt/ml`` and
``/root/.ssh``, gives the host private ``/run`` and ``/dev/shm``, starts sshd, and
writes a ready file.  Then it only reaps orphans: as PID 1 of the namespace it
inherits every orphaned process, and a zombie ``orted`` would look alive to a
worker polling for it.  When it dies the kernel kills everything in the host.

/tmp stays shared with the machine: the cluster's own files usually live under
/tmp (pytest), and a private /tmp would hide them from sshd.  Open MPI keys its
session directories by hostname, so hosts do not collide there.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..core.files import write_atomic
from ..exec.command import run, spawn


def _mount(*argv: str) -> None:
    run(["mount", *argv], check=True)   # CommandFailed (an OSError) names the mount and its stderr


def _wait_listening(address: str, port: int, timeout: float, clock: Clock = SYSTEM_CLOCK) -> bool:
    deadline = Deadline(clock, timeout)
    while not deadline.expired():
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return True
        except OSError:
            clock.sleep(0.02)
    return False


def setup(cfg: dict) -> int | None:
    """Prepare the host's namespaces; return sshd's pid (in this PID namespace) or None."""
    socket.sethostname(cfg["name"])
    _mount("--make-rprivate", "/")
    _mount("--bind", cfg["hosts_file"], "/etc/hosts")
    _mount("--bind", cfg["opt_ml"], "/opt/ml")
    _mount("--bind", cfg["ssh_dir"], "/root/.ssh")
    _mount("-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/run")
    _mount("-t", "tmpfs", "-o", "mode=1777", "tmpfs", "/dev/shm")
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    if not cfg.get("start_sshd", True):
        return None
    log = open(cfg["sshd_log"], "ab")
    proc = spawn([cfg["sshd"], "-D", "-e", "-f", cfg["sshd_config"]], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    return proc.pid


def reap_forever() -> None:
    """Reap every child and orphan until SIGTERM, then kill the whole host."""
    signals = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    while True:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        info = signal.sigtimedwait(signals, 1.0)
        if info is not None and info.si_signo in (signal.SIGTERM, signal.SIGINT):
            # kill(-1) from PID 1 reaches every other process of this PID namespace.
            os.kill(-1, signal.SIGKILL)
            sys.exit(0)


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        cfg = json.load(f)
    try:
        sshd_pid = setup(cfg)
        if sshd_pid is not None and not _wait_listening(cfg["address"], 22, cfg.get("sshd_timeout", 20.0)):
            raise RuntimeError(f"sshd did not listen on {cfg['address']}:22; see {cfg['sshd_log']}")
    except (OSError, subprocess.CalledProcessError, RuntimeError) as exc:
        write_atomic(cfg["ready_file"], json.dumps({"ok": False, "error": str(exc)}))
        return 1
    write_atomic(cfg["ready_file"], json.dumps({"ok": True, "sshd_pid": sshd_pid}))
    reap_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
