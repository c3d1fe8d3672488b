"""The one exception hierarchy of mpirun_kit, and the exit codes the CLI maps it to.

Every layer raises a subclass of ``MpirunKitError``; the CLI (cli/main.py) is the
only place that turns one into a message and an exit code.  A message says what
failed, carries the offending value (file, field, host) and says how to fix it.

Exit codes (documented in the README; keep the two in step):

====  =====================================================================
0     success
1-63  the job's own exit code, passed through unchanged from the failing rank
2     command-line usage error (argparse)
64    bad input: a job spec, resourceconfig.json, hostfile or flag (SpecError)
69    a host or service is unreachable: sshd never answered, AWS refused (ClusterError)
70    the launcher itself failed: mpirun missing, MPI daemon never appeared (LaunchError)
75    a worker lost its master: it died, never launched or never reported (MasterLostError)
124   the job ran past its deadline
128+N the job (or the entrypoint) ended by signal N (143 = SIGTERM, 137 = SIGKILL)
====  =====================================================================
"""
from __future__ import annotations


class MpirunKitError(Exception):
    """Base of every error mpirun_kit raises on purpose."""

    exit_code = 1


class SpecError(MpirunKitError):
    """Bad user input: a spec, config file, flag or environment value."""

    exit_code = 64


class ClusterError(MpirunKitError):
    """A host, daemon or cloud service could not be reached or used."""

    exit_code = 69


class SSHUnreachableError(ClusterError):
    """One or more hosts never answered on ssh within the deadline."""

    def __init__(self, message: str, hosts: tuple[str, ...] = ()):
        super().__init__(message)
        self.hosts = tuple(hosts)


class LaunchError(MpirunKitError):
    """The launcher could not start or supervise the job."""

    exit_code = 70


class MasterLostError(MpirunKitError):
    """A worker lost contact with its master before learning the job's result."""

    exit_code = 75


class JobTimeoutError(MpirunKitError):
    """The job ran past its deadline and was stopped."""

    exit_code = 124


class JobFailedError(MpirunKitError):
    """The job ran and failed; ``exit_code`` is the job's own code."""

    def __init__(self, message: str, exit_code: int, failures: tuple = ()):
        super().__init__(message)
        self.exit_code = exit_code
        self.failures = tuple(failures)
