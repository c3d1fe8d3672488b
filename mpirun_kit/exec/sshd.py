"""Worker side: start sshd for mpirun to log in with keys only.

``sshd_argv`` is pure: the options that make sshd key-only whatever the image's
sshd_config says (password and keyboard-interactive off; root by key only),
or the caller's own config file (``--sshd-config``; the simulated cluster passes
one).  ``start_sshd`` runs it in the foreground as our child and waits, with a
deadline, until it answers with an SSH banner.  When something already answers
on the port (a platform or the simulator started sshd), nothing is started.
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
from pathlib import Path

from ..clock import SYSTEM_CLOCK, Clock, Deadline
from ..errors import ClusterError, LaunchError
from .ssh import banner_probe

log = logging.getLogger(__name__)

KEY_ONLY_OPTIONS: tuple[tuple[str, str], ...] = (
    ("PasswordAuthentication", "no"),
    ("KbdInteractiveAuthentication", "no"),
    ("PubkeyAuthentication", "yes"),
    ("PermitRootLogin", "prohibit-password"),
    # mpirun opens sessions to many hosts at once; the default 10:30:100 drops some.
    ("MaxStartups", "200"),
)


def sshd_argv(sshd: str = "/usr/sbin/sshd", port: int = 22, config: str | None = None) -> list[str]:
    """The sshd command line: foreground (-D), log to stderr (-e), key-only."""
    argv = [sshd, "-D", "-e", "-p", str(port)]
    if config:
        argv += ["-f", config]
    for key, value in KEY_ONLY_OPTIONS:
        argv += ["-o", f"{key}={value}"]
    return argv


def start_sshd(port: int = 22, config: str | None = None, timeout_s: float = 10.0, clock: Clock = SYSTEM_CLOCK,
               probe_host: str = "127.0.0.1") -> subprocess.Popen | None:
    """Start sshd unless one already answers on ``port``; return our child (None if not ours).

    Raises:
        LaunchError: sshd is not installed.
        ClusterError: sshd exited or did not answer within ``timeout_s``.
    """
    if banner_probe(probe_host, port, 0.5) is None:
        log.info("sshd already answers on %s:%d; not starting another", probe_host, port)
        return None
    exe = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else None)
    if exe is None:
        raise LaunchError("sshd not found (looked on PATH and /usr/sbin/sshd); install openssh-server, "
                          "or start sshd yourself and pass --no-sshd")
    # sshd refuses to start without its privilege-separation directory.
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    argv = sshd_argv(exe, port, config)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = Deadline(clock, timeout_s)
    while True:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
            raise ClusterError(f"sshd exited with code {proc.returncode} at start ({' '.join(argv)}): {err[:400]}; "
                               "fix the sshd config or host keys (ssh-keygen -A), or pass --no-sshd")
        if banner_probe(probe_host, port, 0.5) is None:
            # sshd -e logs every login to stderr; drain it so a full pipe never blocks sshd.
            threading.Thread(target=_drain, args=(proc,), daemon=True, name="sshd-log").start()
            return proc
        if deadline.expired():
            proc.kill()
            raise ClusterError(f"sshd started but did not answer on {probe_host}:{port} within {timeout_s:g} s; "
                               "check its ListenAddress/Port, or pass --no-sshd if the platform runs sshd")
        clock.sleep(0.05)


def _drain(proc: subprocess.Popen) -> None:
    for line in proc.stderr:
        log.debug("sshd: %s", line.decode(errors="replace").rstrip())
