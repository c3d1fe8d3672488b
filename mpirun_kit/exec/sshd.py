"""Worker side: start sshd for mpirun to log in with keys only.

``sshd_argv`` is pure: the options that make sshd key-only whatever the image's
sshd_config says (password and keyboard-interactive off; root by key only),
or the caller's own config file (``--sshd-config``; the simulated cluster passes
one).  Tuning the config file already sets (``MaxStartups``: docker/sshd_config
sizes it for the job) is kept, not overridden: ``start_sshd`` reads the file and
logs which value wins.  ``start_sshd`` runs it in the foreground as our child and waits, with a
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

from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..errors import ClusterError, LaunchError, SpecError
from .ssh import banner_probe
from .supervisor import start_process

log = logging.getLogger(__name__)

#: security options forced on the command line whatever the config file says.
KEY_ONLY_OPTIONS: tuple[tuple[str, str], ...] = (
    ("PasswordAuthentication", "no"),
    ("KbdInteractiveAuthentication", "no"),
    ("PubkeyAuthentication", "yes"),
    ("PermitRootLogin", "prohibit-password"),
)
#: tuning used only where the config file does not set it (a config's own value wins).
# mpirun opens sessions to many hosts at once; sshd's default 10:30:100 drops some.
DEFAULT_TUNING: tuple[tuple[str, str], ...] = (("MaxStartups", "200"),)
DEFAULT_CONFIG = "/etc/ssh/sshd_config"


def config_value(config_text: str, key: str) -> str | None:
    """The value sshd takes for ``key`` from a config file's text (first one outside Match), or None."""
    for line in config_text.splitlines():
        words = line.split(None, 1)
        if not words or words[0].startswith("#"):
            continue
        if words[0].lower() == "match":
            return None  # options below a Match apply conditionally; sshd's global value is unset
        if words[0].lower() == key.lower() and len(words) == 2:
            return words[1].split("#", 1)[0].strip()
    return None


def sshd_argv(sshd: str = "/usr/sbin/sshd", port: int = 22, config: str | None = None,
              config_text: str | None = None, listen_address: str | None = None) -> list[str]:
    """The sshd command line: foreground (-D), log to stderr (-e), key-only.

    ``config_text`` is the text of the config sshd will read: a ``DEFAULT_TUNING`` option
    it sets is left to it (a ``-o`` would silently override the operator's choice).
    ``listen_address`` adds the cluster interface's address to the config's own
    (docker/sshd_config listens on 127.0.0.1 unless told otherwise).  The port goes in
    as ``-p``: a command-line -p replaces the config's Port, ``-o Port=`` would add to it.

    Raises:
        SpecError: a port outside 1-65535, or an empty or wildcard listen address (that
            would listen on every interface).
    """
    if not 0 < int(port) < 65536:
        raise SpecError(f"sshd port {port}: expected 1-65535")
    argv = [sshd, "-D", "-e", "-p", str(int(port))]
    if config:
        argv += ["-f", config]
    for key, value in KEY_ONLY_OPTIONS:
        argv += ["-o", f"{key}={value}"]
    for key, value in DEFAULT_TUNING:
        if config_text is None or config_value(config_text, key) is None:
            argv += ["-o", f"{key}={value}"]
    if listen_address is not None:
        check_listen_address(listen_address)
        argv += ["-o", f"ListenAddress={listen_address_text(listen_address)}"]
    return argv


def check_listen_address(address: str) -> None:
    """Raises SpecError for an empty or wildcard address (sshd would listen on every interface)."""
    if address in ("", "0.0.0.0", "::", "*"):
        raise SpecError(f"sshd listen address {address!r}: expected the cluster interface's address "
                        "(e.g. 10.0.1.23), not a wildcard; sshd must not listen on every interface")


def listen_address_text(address: str) -> str:
    """The address as sshd's ListenAddress takes it (IPv6 in brackets)."""
    return f"[{address}]" if ":" in address else address


def _read_config(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError as exc:
        log.info("cannot read sshd config %s (%s); using mpirun_kit's defaults for %s", path, exc.strerror,
                 ", ".join(k for k, _ in DEFAULT_TUNING))
        return None


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
    config_text = _read_config(config or DEFAULT_CONFIG)
    for key, value in DEFAULT_TUNING:
        ours = config_value(config_text or "", key)
        if ours is not None and ours != value:
            log.info("sshd: %s %s from %s kept (mpirun_kit's default would be %s)", key, ours,
                     config or DEFAULT_CONFIG, value)
    argv = sshd_argv(exe, port, config, config_text)
    proc = start_process(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
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
