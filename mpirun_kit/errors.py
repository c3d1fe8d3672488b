"""The one exception hierarchy of mpirun_kit, and the exit codes the CLI maps it to.

Every layer raises a subclass of ``MpirunKitError``; the CLI (cli/main.py) is the
only place that turns one into a message and an exit code.  A message says what
failed, carries the offending value (file, field, host) and says how to fix it.
A job that ran and failed, ran past its deadline or lost a host is not an error
of ours: it is a value (exec/result.JobResult on a host, targets/outcome.Outcome for
``submit``) carrying the exit code below, never an exception.
``translate`` turns the few library errors caused by the environment (botocore's
no region/credentials, unreadable files) into one of these.

Exit codes: one ``ExitCode`` enum below and one table of their meanings (``EXIT_CODE_TEXT``,
``exit_code_rows``), from which the top-level ``--help``, every command's epilog and the
docs' table (docs/cli.md, ``exit_code_markdown``) are generated; a test checks they agree.
Codes 1-63 are the job's own, passed through from the failing rank; 128+N means "ended by
signal N".
"""
from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Every exit code mpirun_kit itself chooses (the job's own 1-63 pass through unchanged).  What each means
    is worded once, in ``EXIT_CODE_TEXT`` below; --help, docs/cli.md and targets/outcome.py are generated from it."""

    OK = 0
    FAILED = 1
    USAGE = 2
    BAD_INPUT = 64        # SpecError
    UNREACHABLE = 69      # ClusterError
    LAUNCH_FAILED = 70    # LaunchError
    HOST_LOST = 74        # a JobResult (exec/result.py), never raised
    MASTER_LOST = 75      # MasterLostError
    HUNG = 76             # a JobResult (observe/hang.py decides)
    TIMEOUT = 124         # a JobResult
    CANNOT_START = 127    # CannotStartError
    INTERRUPTED = 130     # 128 + 2 (SIGINT)
    SIGKILL = 137         # 128 + 9
    SIGTERM = 143         # 128 + 15

    @staticmethod
    def for_signal(signum: int) -> int:
        """128 + N: the shell's convention for "ended by signal N"."""
        return 128 + int(signum)


#: one line per code mpirun_kit chooses: the --help epilogs and docs/cli.md are generated from it.
EXIT_CODE_TEXT: dict[int, str] = {
    ExitCode.OK: "success",
    ExitCode.FAILED: "failure with no more specific code",
    ExitCode.USAGE: "command-line usage error (unknown command or flag, bad flag value)",
    ExitCode.BAD_INPUT: "bad input: spec, file, flag or environment (what to fix is named)",
    ExitCode.UNREACHABLE: "a host or AWS unreachable, or AWS refused (no credentials, access denied)",
    ExitCode.LAUNCH_FAILED: "launcher failure (mpirun missing, MPI daemon never started; also internal errors)",
    ExitCode.HOST_LOST: "a worker host went silent mid-job",
    ExitCode.MASTER_LOST: "a worker lost its master",
    ExitCode.HUNG: "the ranks stalled past timeouts.hang_abort_s (after a hang report)",
    ExitCode.TIMEOUT: "the job ran past timeouts.job_s",
    ExitCode.CANNOT_START: "the program could not start: command not found or not executable, or its script "
                           "missing (checked before the launch on local and sim)",
}
#: the ranges that are not one code: the job's own codes and "ended by signal N".
EXIT_CODE_RANGES: tuple[tuple[str, str], ...] = (
    ("1-63", "the job's own exit code (first failing rank); `submit --json` says whose code it is (source)"),
    ("128+N", "ended by signal N (130 Ctrl-C, 137 SIGKILL, 143 SIGTERM)"),
)


def exit_code_rows() -> list[tuple[str, str]]:
    """Every code any command can return, in order: (code or range, meaning).  The one table."""
    rows = [(str(int(c)), t) for c, t in sorted(EXIT_CODE_TEXT.items())]
    rows.insert(2, EXIT_CODE_RANGES[0])  # after 0 and 1: the job's own codes
    rows.append(EXIT_CODE_RANGES[1])
    return rows


def exit_code_markdown() -> str:
    """The table as Markdown (docs/cli.md holds this text between its exit-code markers)."""
    return "| code | meaning |\n|---|---|\n" + "".join(f"| {c} | {t} |\n" for c, t in exit_code_rows())


class MpirunKitError(Exception):
    """Base of every error mpirun_kit raises on purpose."""

    exit_code = ExitCode.FAILED


class SpecError(MpirunKitError):
    """Bad user input: a spec, config file, flag or environment value."""

    exit_code = ExitCode.BAD_INPUT


class NoSuchJobError(SpecError):
    """A job id the job records do not hold (records/store.py ``get``): ``ref`` is what was asked, ``db`` the
    records' file, so a command can say where it looked (a mistyped id is not a SageMaker name to ask for)."""

    def __init__(self, message: str, ref: str = "", db: str = ""):
        super().__init__(message)
        self.ref, self.db = ref, db


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


class CannotStartError(MpirunKitError):
    """The job's program cannot start: its command is not found or not executable, or its script is missing."""

    exit_code = ExitCode.CANNOT_START


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
