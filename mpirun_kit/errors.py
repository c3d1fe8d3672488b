"""The one exception hierarchy of mpirun_kit, and the exit codes the CLI maps it to.

Every layer raises a subclass of ``MpirunKitError``; the CLI (cli/main.py) is the
only place that turns one into a message and an exit code.  A message says what
failed, carries the offending value (file, field, host) and says how to fix it.
A job that ran and failed, ran past its deadline or lost a host is not an error
of ours: it is a value (exec/result.JobResult on a host, targets/base.Outcome for
``submit``) carrying the exit code below, never an exception.
``translate`` turns the few library errors caused by the environment (botocore's
no region/credentials, unreadable files) into one of these.

Exit codes: one ``ExitCode`` enum below (the README's "Exit codes" table lists the same
values; keep the two in step).  Codes 1-63 are the job's own, passed through from the
failing rank; 128+N means "ended by signal N".
"""
from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Every exit code mpirun_kit itself chooses (the job's own 1-63 pass through unchanged)."""

    OK = 0
    FAILED = 1            # a failure with no more specific code (the job's own code was unknown)
    USAGE = 2             # command-line usage error (argparse)
    BAD_INPUT = 64        # a job spec, resourceconfig.json, hostfile or flag (SpecError)
    UNREACHABLE = 69      # sshd never answered, AWS refused (ClusterError)
    LAUNCH_FAILED = 70    # mpirun missing, MPI daemon never appeared, entrypoint crashed (LaunchError)
    HOST_LOST = 74        # a worker host went silent mid-job (network cut, host died): a JobResult, not raised
    MASTER_LOST = 75      # a worker lost its master: it died, never launched or went silent (MasterLostError)
    HUNG = 76             # a stall outlasted timeouts.hang_abort_s after its hang report (observe/hang.py)
    TIMEOUT = 124         # the job ran past timeouts.job_s
    INTERRUPTED = 130     # 128 + 2 (SIGINT): Ctrl-C, or `submit --wait` stopped following
    SIGKILL = 137         # 128 + 9
    SIGTERM = 143         # 128 + 15

    @staticmethod
    def for_signal(signum: int) -> int:
        """128 + N: the shell's convention for "ended by signal N"."""
        return 128 + int(signum)


class MpirunKitError(Exception):
    """Base of every error mpirun_kit raises on purpose."""

    exit_code = ExitCode.FAILED


class SpecError(MpirunKitError):
    """Bad user input: a spec, config file, flag or environment value."""

    exit_code = ExitCode.BAD_INPUT


class ClusterError(MpirunKitError):
    """A host, daemon or cloud service could not be reached or used."""

    exit_code = ExitCode.UNREACHABLE


class SSHUnreachableError(ClusterError):
    """One or more hosts never answered on ssh within the deadline."""

    def __init__(self, message: str, hosts: tuple[str, ...] = ()):
        super().__init__(message)
        self.hosts = tuple(hosts)


class LaunchError(MpirunKitError):
    """The launcher could not start or supervise the job."""

    exit_code = ExitCode.LAUNCH_FAILED


class MasterLostError(MpirunKitError):
    """A worker lost contact with its master before learning the job's result."""

    exit_code = ExitCode.MASTER_LOST


def translate(exc: BaseException) -> MpirunKitError | None:
    """A library error caused by the environment, as an MpirunKitError naming what to set or fix.

    None for anything else (a bug: reported as an internal error).
    """
    mod = type(exc).__module__ or ""
    name = type(exc).__name__
    if mod.startswith("botocore") or mod.startswith("boto3"):
        if name == "NoRegionError":
            return SpecError("no AWS region configured; pass --region REGION, or set AWS_DEFAULT_REGION "
                             "(or `region` in ~/.aws/config)")
        if name in ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"):
            return ClusterError(f"no usable AWS credentials ({exc}); set AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
                                "AWS_SECRET_ACCESS_KEY, or run `aws configure`")
        if name == "ProfileNotFound":
            return SpecError(f"{exc}; check AWS_PROFILE and ~/.aws/config")
        if name == "ClientError":
            err = getattr(exc, "response", {}).get("Error", {})
            return ClusterError(f"AWS refused the request: {err.get('Code', '?')}: {err.get('Message', exc)}")
        return ClusterError(f"AWS call failed: {exc}; check --region, the network and AWS_ENDPOINT_URL")
    if isinstance(exc, UnicodeDecodeError):
        return SpecError(f"a file is not UTF-8 text ({exc.reason} at byte {exc.start}); pass a text file")
    if isinstance(exc, OSError):
        where = exc.filename if exc.filename is not None else ""
        return SpecError(f"{where}: {exc.strerror or exc}; check the path and its permissions")
    return None
