"""The one exception hierarchy of mpirun_kit, and the exit codes the CLI maps it to.

Every layer raises a subclass of ``MpirunKitError``; the CLI (cli/main.py) is the
only place that turns one into a message and an exit code.  A message says what
failed, carries the offending value (file, field, host) and says how to fix it.

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


class JobTimeoutError(MpirunKitError):
    """The job ran past its deadline and was stopped."""

    exit_code = ExitCode.TIMEOUT


class JobFailedError(MpirunKitError):
    """The job ran and failed; ``exit_code`` is the job's own code."""

    def __init__(self, message: str, exit_code: int, failures: tuple = ()):
        super().__init__(message)
        self.exit_code = exit_code
        self.failures = tuple(failures)
