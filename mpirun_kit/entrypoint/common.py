"""Small pieces both roles share: the result and failure files, and the channel keys."""
from __future__ import annotations

import logging
from pathlib import Path

from ..exec.channel.keys import worker_key_from_secret
from ..core.files import write_atomic
from ..exec.result import RESULT_FILE, JobResult, error_result, failure_file_text

log = logging.getLogger(__name__)


def say(out, text: str, *, shown: bool) -> None:
    """A progress line of the tool's own (``mpirun_kit: text``), printed only when ``shown``: the entrypoint's
    ``progress`` option (EntrypointOptions.verbosity at VERBOSE: -v, and `entrypoint` by default, its stderr
    being the job's log that the SageMaker metrics read; `launch` and the targets' hosts under a plain
    `submit` stay quiet).  Passed down, never read from a module (issue #31)."""
    if shown:
        print(f"mpirun_kit: {text}", file=out, flush=True)


def failure_path(opt_ml: Path) -> Path:
    return Path(opt_ml) / "output" / "failure"


def result_path(opt_ml: Path) -> Path:
    return Path(opt_ml) / "output" / RESULT_FILE


def write_result(opt_ml: Path, result: JobResult) -> Path | None:
    """Write the result as JSON to ``<opt_ml>/output/result.json`` and, when it failed, the failure file
    ``<opt_ml>/output/failure`` (SageMaker shows its first 1024 chars as FailureReason), both atomically.

    The failure file's first line is the result's JSON head (exec/result.py), the only part a program reads;
    the rest is text generated from the same data.  Returns the failure file's path (None: none written).
    """
    path = result_path(opt_ml)
    try:
        write_atomic(path, result.to_json() + "\n", 0o600)
    except OSError as exc:
        log.warning("could not write the result file %s: %s", path, exc)
    if result.exit_code == 0:
        return None
    path = failure_path(opt_ml)
    try:
        return write_atomic(path, failure_file_text(result) + "\n", 0o600)
    except OSError as exc:
        log.warning("could not write the failure file %s: %s", path, exc)
        return None


def write_failure(opt_ml: Path, exit_code: int, text: str) -> Path | None:
    """``write_result`` for an error of ours with message ``text`` (its cause from its exit code)."""
    return write_result(opt_ml, error_result(exit_code, text))


def default_secret_file(opt_ml: Path) -> Path:
    """Where a SageMaker host finds the job secret: the ``mpirun-keys`` input channel."""
    from ..exec.sshkeys import SECRET_FILE_NAME

    return Path(opt_ml) / "input" / "data" / "mpirun-keys" / SECRET_FILE_NAME


def channel_worker_key(secret_file: Path | None, opt_ml: Path, *, multi_host: bool, job: str = "") -> bytes | None:
    """The workers' result-channel key from the job secret and the job's name; None when the job has no secret.

    An explicit ``--secret-file`` must be readable and valid; the default one may be absent
    (a single-host job, or a cluster set up without `mpirun_kit keys`), in which case the
    workers' messages are only checked against the plan, and a warning says so.

    Raises:
        SpecError: ``secret_file`` cannot be read or is not a job secret.
    """
    from ..errors import SpecError
    from ..exec.sshkeys import parse_secret

    from ..cluster.trust import read_plan_input

    path = Path(secret_file) if secret_file is not None else default_secret_file(opt_ml)
    try:
        text = read_plan_input(path, "job secret")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: cannot read the job secret (not UTF-8 text); pass the file written by "
                        "`mpirun_kit keys new`") from exc
    except OSError as exc:
        if secret_file is not None:
            raise SpecError(f"--secret-file {path}: cannot read the job secret ({exc.strerror}); pass the file "
                            "written by `mpirun_kit keys new`") from exc
        if multi_host:
            log.warning("no job secret at %s: the result channel authenticates ranks (a key made per run) but "
                        "not workers; deliver the secret (input channel mpirun-keys) or pass --secret-file", path)
        return None
    return worker_key_from_secret(parse_secret(text, str(path)), job)


#: where a multi-host job's result port is derived: below Linux's ephemeral range (net.ipv4.ip_local_port_range
#: starts at 32768), so no outgoing connection of the host takes it, and clear of the well-known ports.
JOB_PORT_BASE, JOB_PORT_SPAN = 20000, 12000


def job_result_port(worker_key: bytes | None, hosts, job: str) -> int:
    """The result channel's port of a multi-host job whose spec leaves it open: the same on every host without a
    round trip (each derives it, as each derives the plan), and another for every job.  From the job secret's
    workers' key (every target that makes a secret makes one per run: two runs of one spec differ); without a
    secret, from the job's hosts and name (two such jobs of one spec on the same hosts collide, and the master
    says so, naming the holder).  A single-host job binds a free port instead (entrypoint/main.py)."""
    import hashlib

    seed = worker_key if worker_key is not None else (",".join(sorted(hosts)) + "\0" + job).encode()
    digest = hashlib.sha256(b"mpirun_kit result port\0" + seed).digest()
    return JOB_PORT_BASE + int.from_bytes(digest[:4], "big") % JOB_PORT_SPAN


def port_holder(port: int) -> str:
    """Who listens on TCP ``port`` on this host, for an error: ``pid 123 (python3 -m x ...)``, or why unknown."""
    try:
        import psutil

        for c in psutil.net_connections(kind="tcp"):
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
                try:
                    cmd = " ".join(psutil.Process(c.pid).cmdline())[:120]
                except psutil.Error:
                    cmd = "?"
                return f"pid {c.pid} ({cmd})"
        return "a process this user cannot see (run `ss -ltnp` as root)"
    except Exception as exc:  # noqa: BLE001 - only the wording of an error depends on it
        return f"unknown ({exc})"


def session_dir(run_nonce_hex: str) -> str:
    """The base of one run's MPI session directories (plan/mpi.py ``session_dir_env``), the same path on every
    host: /tmp (every host has it, and the launcher makes what is missing under it), named by the run nonce."""
    return f"/tmp/mpirun_kit-{run_nonce_hex[:16]}"


def remove_session_dir(path: str | None) -> None:
    """The run's session base, whole, once the launcher has ended on this host (mpirun, or this host's MPI
    daemon, is gone, and with it every rank here).  The base is named by this run's nonce, so nothing of another
    job is in it; what a killed or aborted launcher left there (its ``ompi.HOST.UID/pid.N`` tree) would otherwise
    stay in /tmp for good.  Only a real directory that this user owns: never through a link (rmtree does not
    follow links inside either), never another user's directory of the same name."""
    import os
    import shutil
    import stat

    if not path:
        return
    try:
        st = os.lstat(path)
    except OSError:
        return
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
        shutil.rmtree(path, ignore_errors=True)
