"""Failures as data: rank reports in, the job's result (exit code + root cause) out.

The per-rank wrapper reports each rank's exit (code or signal name, host, rank,
wall-clock time) to the master; ``job_result`` picks the root cause as the first
failure by time (torch elastic's "first observed failure"), because mpirun kills
every other rank after it and those later deaths are consequences.  The failure
text is ordered by importance and fits SageMaker's 1024-character FailureReason.

The failure file (``failure_file_text``) opens with one fixed machine-readable line,
``mpirun_kit exit_code=N``; everything after it is for people and may quote the
program's own output, so ``exit_code_from_failure`` reads that first line only.
"""
from __future__ import annotations

import re
import signal
import time
from dataclasses import dataclass

from ..errors import ExitCode

FAILURE_REASON_LIMIT = 1024
FAILURE_HEADER = "mpirun_kit exit_code="
# SageMaker puts "AlgorithmError: " (or another "<Kind>Error: ") in front of the file's text.
_HEADER_RE = re.compile(r"(?:[A-Za-z]+Error: )?" + re.escape(FAILURE_HEADER) + r"(\d{1,3})")


def exit_code_for_signal(signum: int) -> int:
    return ExitCode.for_signal(signum)


@dataclass(frozen=True)
class RankFailure:
    """One rank that ended badly: where, how and when it was first seen."""

    rank: int
    host: str
    exit_code: int | None      # set when the rank exited
    signal: str | None         # set when it was killed, e.g. "SIGKILL"
    first_seen: float          # wall-clock seconds (time.time on the rank's host)

    @property
    def job_exit_code(self) -> int:
        if self.signal is not None:
            try:
                return exit_code_for_signal(signal.Signals[self.signal].value)
            except KeyError:
                return ExitCode.FAILED
        return self.exit_code if self.exit_code else ExitCode.FAILED

    def describe(self) -> str:
        how = f"was killed by {self.signal}" if self.signal else f"exited with code {self.exit_code}"
        when = time.strftime("%H:%M:%S", time.gmtime(self.first_seen)) + f".{int(self.first_seen % 1 * 1000):03d}Z"
        return f"rank {self.rank} on {self.host} {how} (first seen {when})"


@dataclass(frozen=True)
class JobResult:
    """What every host exits with, and why."""

    exit_code: int
    root_cause: RankFailure | None = None
    failures: tuple[RankFailure, ...] = ()
    summary: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def rank_failure_from_report(msg: dict) -> RankFailure | None:
    """A RankFailure from a wrapper's exit report, None when the rank exited 0."""
    code, sig = msg.get("exit_code"), msg.get("signal")
    if sig is None and code == 0:
        return None
    return RankFailure(rank=int(msg.get("rank", -1)), host=str(msg.get("host", "?")),
                       exit_code=None if code is None else int(code), signal=sig,
                       first_seen=float(msg.get("t", 0.0)))


def job_result(launcher_code: int | None, launcher_signal: str | None, failures: tuple[RankFailure, ...],
               launcher_tail: tuple[str, ...] = (), interrupted_by: str | None = None) -> JobResult:
    """Combine mpirun's own status with the ranks' reports into the job's result.

    Args:
        launcher_code: mpirun's exit code (None when it died by a signal).
        launcher_signal: the signal name that killed mpirun, if any.
        failures: rank failures as reported by the wrappers.
        launcher_tail: the last lines mpirun printed (kept for the failure text).
        interrupted_by: the signal name the entrypoint received (SIGTERM from the platform).
    """
    ordered = tuple(sorted(failures, key=lambda f: (f.first_seen, f.rank)))
    root = ordered[0] if ordered else None
    if interrupted_by is not None:
        try:
            code = exit_code_for_signal(signal.Signals[interrupted_by].value)
        except KeyError:
            code = ExitCode.SIGTERM
    elif root is not None:
        code = root.job_exit_code
    elif launcher_signal is not None:
        try:
            code = exit_code_for_signal(signal.Signals[launcher_signal].value)
        except KeyError:
            code = ExitCode.FAILED
    else:
        code = launcher_code or 0
    if code == 0:
        return JobResult(0, None, ordered, "")
    parts: list[str] = []
    if interrupted_by is not None:
        parts.append(f"the job was stopped by {interrupted_by} sent to the master entrypoint")
    if root is not None:
        parts.append("root cause: " + root.describe())
        others = [f for f in ordered[1:]]
        if others:
            parts.append(f"{len(others)} more rank(s) failed after it: " +
                         "; ".join(f"rank {f.rank}@{f.host} " + (f.signal or f"code {f.exit_code}") for f in others[:8]))
    elif launcher_signal is not None:
        parts.append(f"mpirun was killed by {launcher_signal}; no rank reported a failure")
    else:
        parts.append(f"mpirun exited with code {launcher_code}; no rank reported a failure "
                     "(a rank may have been killed before reporting, or the launch itself failed)")
    if launcher_tail:
        parts.append("mpirun output (last lines):\n" + "\n".join(launcher_tail))
    return JobResult(code, root, ordered, failure_text(parts))


def failure_text(parts: list[str], limit: int = FAILURE_REASON_LIMIT) -> str:
    """Join parts in priority order and cut to ``limit`` characters, the first part intact when it fits.

    Secrets in the parts (output lines quoting ``--password X`` or ``TOKEN=X``) are redacted first
    (mpirun_kit/redact.py): this text becomes the failure file and SageMaker's FailureReason.
    """
    from ..redact import redact_text

    text = "\n".join(redact_text(p) for p in parts)
    if len(text) <= limit:
        return text
    return text[: limit - 4] + "\n..."


def failure_file_text(exit_code: int, summary: str, limit: int = FAILURE_REASON_LIMIT) -> str:
    """The failure file: the machine-readable first line, then the summary, cut to ``limit``."""
    return failure_text([f"{FAILURE_HEADER}{int(exit_code)}", summary.rstrip("\n")], limit)


def exit_code_from_failure(text: str) -> int | None:
    """The exit code on the failure file's first line (optionally after SageMaker's ``AlgorithmError: ``);
    None when the first line is not ours.  Nothing after the first line is ever read."""
    m = _HEADER_RE.fullmatch(text.split("\n", 1)[0].strip())
    if m is None or int(m.group(1)) > 255:
        return None
    return int(m.group(1))
