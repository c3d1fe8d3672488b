"""Where Slurm's clients run, and how the run directory's files are written and read there.

Place in the data flow: target.py hands every Slurm command (sbatch, squeue, sacct, scancel, scontrol) to a
``Runner``: ``LocalRunner`` (this machine is a login node: exec/command.py ``run``), ``SshRunner`` (a login node
over ssh: exec/remote.py, one connection, a session per command) or ``SimRunner`` (algo-1 of a simulated
cluster).  ``run(argv) -> (code, stdout, stderr)``; ``write``/``read``/``read_many``/``scrubbed`` are the
exec/remote_host.py verbs (``write --private --mode``, ``read-many``, ``scrubbed``) run by ``python`` there:
the ssh target's own argvs, with the run directory checked by the same rule (core/private.py), no shell.
"""
from __future__ import annotations

import base64
import os
import shlex
import subprocess
import sys

from ...errors import ClusterError
from ...exec import remote_host

# --- where the clients run -----------------------------------------------------------------------------

class Runner:
    """Runs Slurm's clients (and file writes) where they reach the cluster; ``run`` -> (code, stdout, stderr).

    ``python``: the interpreter with mpirun_kit where the clients run (exec/remote_host.py's verbs run there)."""

    python: str = sys.executable

    def _host(self, verb: str, *args: str) -> list[str]:
        return remote_host.argv(self.python, verb, *args)

    def run(self, argv: list[str], *, input: str | None = None, timeout: float = 60.0) -> tuple[int, str, str]:
        raise NotImplementedError

    def scrubbed(self, argv: list[str], **kw) -> tuple[int, str, str]:
        """``argv`` with the inherited SLURM_*/SBATCH_*/PMIX_* removed from its environment first."""
        return self.run(self._host("scrubbed", "--", *argv), **kw)

    def write(self, path: str, text: str, mode: int = 0o644) -> None:
        """Write ``path`` atomically where the cluster sees it (remote_host ``write``: a temporary name, then rename).

        The run directory (``path``'s) is made 0700, and it and the workdir above it must be ours and writable by
        no one else, every directory above them ours or root's and not writable by others unless sticky
        (remote_host ``--private``, core/private.py): the default workdir is under /tmp, shared by every user of
        a login node, and whoever can rename an entry there could swap the batch script or read the secret
        before sbatch runs.

        Raises:
            ClusterError: a directory another user controls (remote_host.UNSAFE_DIR), or the write failed.
        """
        argv = self._host("write", path, "--private", os.path.dirname(path), "--mode", f"{mode:o}")
        code, _, err = self.run(argv, input=text)
        if code == remote_host.UNSAFE_DIR:
            raise ClusterError(f"{err.strip().removeprefix('mpirun_kit: ')}: another user could replace the job's "
                               "files there; set target.slurm.workdir to a directory only you can write (on a "
                               "file system every node sees)")
        if "No module named" in err:
            raise ClusterError(f"could not write {path} on the Slurm side: {self.python} has no mpirun_kit "
                               f"({err.strip()[-200:]}); install mpirun_kit for the Python target.slurm.python "
                               "names there (pip install mpirun_kit)")
        if code != 0:
            raise ClusterError(f"could not write {path} on the Slurm side ({err.strip()[-300:]}); check that "
                               "target.slurm.workdir is writable there")

    def read(self, path: str, limit: int = 1 << 20) -> str | None:
        """At most ``limit`` bytes of ``path`` (None: missing)."""
        return self.read_many([path], limit)[0]

    def close(self) -> None:
        """Let go of what reaches the cluster (an ssh connection); nothing to do for the others."""

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def read_many(self, paths: list[str], limit: int = 1 << 20) -> list[str | None]:
        """At most ``limit`` bytes of each path, in one command (over ssh: one session instead of one each); None
        where a file is missing.

        Raises:
            ClusterError: the command failed or gave an answer that is not remote_host ``read-many``'s.
        """
        code, out, err = self.run(self._host("read-many", "--limit", str(limit), *paths))
        lines = out.splitlines()
        try:
            if code != 0 or len(lines) != len(paths) or any(line[:1] not in ("+", "-") for line in lines):
                raise ValueError(err.strip()[-300:] or out.strip()[-300:])
            return [base64.b64decode(line[1:], validate=True).decode(errors="replace") if line[0] == "+" else None
                    for line in lines]
        except ValueError as exc:
            raise ClusterError(f"could not read the run directory's files on the Slurm side with {self.python} "
                               f"-m {remote_host.MODULE} (exit {code}: {exc}); install mpirun_kit for the Python "
                               "target.slurm.python names there") from None


class LocalRunner(Runner):
    """sbatch on this machine's PATH (a login node)."""

    def run(self, argv, *, input=None, timeout=60.0):
        from ...exec.command import run

        try:
            res = run(argv, input=input, timeout_s=timeout)
        except FileNotFoundError as exc:
            raise ClusterError(f"{argv[0]} not found: run submit on a Slurm login node, or set target.slurm.login "
                               "(user@host) or target.slurm.sim") from exc
        except TimeoutError as exc:
            raise ClusterError(f"`{shlex.join(argv[:4])}` gave no answer within {timeout:g} s; is slurmctld up?") from exc
        return res.returncode, res.stdout, res.stderr


class SimRunner(Runner):
    """algo-1 of a simulated cluster brought up with ``sim up --slurm`` (its Slurm's client environment)."""

    def __init__(self, name: str, root: str):
        from ...sim import SimCluster
        from ...sim import slurm as sim_slurm

        self.sim = SimCluster.attach(name, root)
        st = sim_slurm.state(self.sim.layout)
        if st is None:
            raise ClusterError(f"sim cluster {name!r} under {root} runs no Slurm; bring it up with "
                               f"`mpirun_kit sim up --slurm --name {name}`")
        self.login, self.env = st["login"], st["env"]

    def run(self, argv, *, input=None, timeout=60.0):
        p = self.sim.popen(self.login, argv, self.env, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = p.popen.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            p.popen.kill()
            p.popen.communicate()
            raise ClusterError(f"`{shlex.join(argv[:4])}` on {self.login} gave no answer within {timeout:g} s") from exc
        return p.popen.returncode, out, err


class _KeptOpen:
    """The runner's ssh client as RemoteProcess uses it, but whose ``close`` keeps the connection for the next command."""

    def __init__(self, client):
        self.client = client

    def get_transport(self):
        return self.client.get_transport()

    def close(self) -> None:
        pass


class SshRunner(Runner):
    """A login node over ssh (exec/remote.py: host key verified); start_remote joins the argv.

    One connection serves every command of the runner, each in a session of its own: a connection's handshake
    cost ~0.4 s here, and a submit runs a dozen commands, ``--wait`` several more a second.
    """

    def __init__(self, where: dict):
        self.where = where
        self.python = where.get("python") or "python3"   # the login node's (target.slurm.python)
        self._client = None

    def _connect(self, settings: dict, host: str) -> _KeptOpen:
        from ...exec.remote import paramiko_client

        transport = self._client.get_transport() if self._client is not None else None
        if transport is None or not transport.is_active():
            self._client = paramiko_client(settings, host)
        return _KeptOpen(self._client)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()   # the sshd session on the login node ends with it
            self._client = None

    def run(self, argv, *, input=None, timeout=60.0):
        from ...exec.remote import bounded, start_remote

        # the login node ends the command itself past our deadline (a root login's session would not)
        proc = start_remote(self.where, self.where["host"], bounded(argv, timeout), connect=self._connect)
        if input is not None:
            proc.channel.sendall(input.encode())
            proc.channel.shutdown_write()
        try:
            out, err = proc.communicate(timeout)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            raise ClusterError(f"`{shlex.join(argv[:4])}` on {self.where['host']} gave no answer within "
                               f"{timeout:g} s") from exc
        return proc.returncode if proc.returncode is not None else 255, out, err


def runner_for(where: dict) -> Runner:
    if where["kind"] == "sim":
        return SimRunner(where["name"], where["root"])
    if where["kind"] == "ssh":
        return SshRunner(where)
    return LocalRunner()
