"""Failures as data: rank reports in, the job's result (exit code, cause, root cause) out, as JSON first.

The per-rank wrapper reports each rank's exit (code or signal name, host, rank,
wall-clock time) to the master; ``job_result`` picks the root cause as the first
failure by time (torch elastic's "first observed failure"), because mpirun kills
every other rank after it and those later deaths are consequences.

A ``JobResult`` is the value; ``to_dict`` is its JSON (the one shape every reader takes:
``<opt_ml>/output/result.json``, the result the master sends each worker, the targets' Outcome;
docs/architecture.md, "The job's result") and ``text`` is generated from it for people.  The
failure file (``failure_file_text``), which SageMaker shows as the 1024-character FailureReason,
opens with one machine-readable line, ``mpirun_kit result {JSON}`` (``head``: exit code, source,
cause, root cause, rejections), then the text; ``result_from_failure`` reads that first line
only, because everything after it may quote the program's own output.
"""
from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import ExitCode

#: the result's JSON beside the failure file, in ``<opt_ml>/output/`` on every host (entrypoint/common.py).
RESULT_FILE = "result.json"
#: the version of the result's JSON (``to_dict``); a reader refuses another.
RESULT_VERSION = 1
FAILURE_REASON_LIMIT = 1024
#: the failure file's first line: this, then ``head()`` as compact JSON.
FAILURE_HEADER = "mpirun_kit result "
#: where the text quotes mpirun's last lines (people only: never parsed).
TAIL_MARK = "mpirun output (last lines):"
#: what decided the exit code, one word each (the JSON's ``cause``); ``source`` follows from it.
CAUSES: dict[str, str] = {
    "succeeded": "job",         # every rank exited 0
    "rank_failed": "job",       # a rank exited non-zero or was killed: the root cause names it
    "mpirun_failed": "launcher",  # mpirun exited non-zero or was killed and no rank reported a failure
    "interrupted": "user",      # the entrypoint received a signal (Ctrl-C, SIGHUP, a cancel, the platform's stop)
    "timeout": "launcher",      # past timeouts.job_s
    "hung": "launcher",         # a stall outlasted timeouts.hang_abort_s
    "host_lost": "launcher",    # a worker went silent on the result channel
    "master_lost": "launcher",  # a worker lost its master
    "unreachable": "launcher",  # a worker's sshd never answered
    "launch_failed": "launcher",  # the entrypoint failed before or while starting the job
    "report_missing": "channel",  # mpirun exited 0 but a rank that got its key never reported its exit (issue 27)
}
#: causes that are a stop of the whole job: the ranks' deaths after it are its consequences, never a root cause.
STOPS = ("interrupted", "timeout", "hung", "host_lost")
#: at most this many failures, tail lines and characters travel in the JSON (the channel's line limit).
MAX_FAILURES, MAX_TAIL, MAX_LINE, MAX_REASON = 64, 12, 300, 3000
#: the failure file's head keeps the launcher's reason to this many characters (FailureReason is 1024).
HEAD_REASON = 200


def exit_code_for_signal(signum: int) -> int:
    return ExitCode.for_signal(signum)


def _code_for_signal_name(name: str, default: int) -> int:
    try:
        return exit_code_for_signal(signal.Signals[name].value)
    except KeyError:
        return default


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
            return _code_for_signal_name(self.signal, ExitCode.FAILED)
        return self.exit_code if self.exit_code else ExitCode.FAILED

    def how(self) -> str:
        return f"was killed by {self.signal}" if self.signal else f"exited with code {self.exit_code}"

    def describe(self) -> str:
        when = time.strftime("%H:%M:%S", time.gmtime(self.first_seen)) + f".{int(self.first_seen % 1 * 1000):03d}Z"
        return f"rank {self.rank} on {self.host} {self.how()} (first seen {when})"

    def to_dict(self) -> dict:
        return {"rank": self.rank, "host": self.host, "exit_code": self.exit_code, "signal": self.signal,
                "first_seen": self.first_seen}

    @classmethod
    def from_dict(cls, d: Any) -> "RankFailure":
        """Raises ValueError when ``d`` is not a rank failure's JSON."""
        if not isinstance(d, dict):
            raise ValueError(f"a rank failure is an object, not {type(d).__name__}")
        rank, host, code, sig, t = (d.get(k) for k in ("rank", "host", "exit_code", "signal", "first_seen"))
        if not (_is_int(rank) and isinstance(host, str) and (code is None or _is_int(code))
                and (sig is None or isinstance(sig, str)) and (code is None) != (sig is None)
                and isinstance(t, (int, float)) and not isinstance(t, bool)):
            raise ValueError(f"not a rank failure: {json.dumps(d)[:200]}")
        return cls(rank, host[:MAX_LINE], code, None if sig is None else sig[:40], float(t))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class JobResult:
    """What every host exits with, and why: the data; ``text`` is the failure text generated from it.

    ``reason``: the launcher's own words when it decided the code (a lost host, a hang, the deadline), with
    the remedy; empty when the ranks' reports say it all.  ``cause`` is one of ``CAUSES`` (empty: derived
    from the rest, see ``kind``).
    """

    exit_code: int
    root_cause: RankFailure | None = None
    failures: tuple[RankFailure, ...] = ()
    reason: str = ""
    cause: str = ""
    interrupted_by: str | None = None     # the signal the master entrypoint received
    launcher_code: int | None = None      # mpirun's own exit code (None: it died by a signal or never ran)
    launcher_signal: str | None = None
    tail: tuple[str, ...] = ()            # mpirun's last lines (redacted)
    rejections: Mapping[str, int] = field(default_factory=dict)   # the result channel's refusals, by kind
    failures_total: int | None = None     # when ``failures`` was cut (the JSON keeps MAX_FAILURES)
    #: the stall the master's hang monitor reported, as data (observe/hang.py ``hang_json``: when, which ranks,
    #: why each suspect, their last frames); None when there was none.
    hang: Mapping[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def kind(self) -> str:
        """``cause``, or what the rest says when it was not set."""
        if self.cause:
            return self.cause
        if self.exit_code == 0:
            return "succeeded"
        if self.interrupted_by:
            return "interrupted"
        if self.root_cause is not None:
            return "rank_failed"
        if self.launcher_code is not None or self.launcher_signal is not None:
            return "mpirun_failed"
        return "launch_failed"

    @property
    def source(self) -> str:
        """Who decided the exit code: ``job`` or ``launcher``."""
        return CAUSES.get(self.kind, "launcher")

    # -- the JSON ----------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The result as JSON (docs/architecture.md, "The job's result"); bounded for the result channel."""
        return {
            "version": RESULT_VERSION, "exit_code": int(self.exit_code), "source": self.source, "cause": self.kind,
            "reason": self.reason[:MAX_REASON],
            "root_cause": None if self.root_cause is None else self.root_cause.to_dict(),
            "failures": [f.to_dict() for f in self.failures[:MAX_FAILURES]],
            "failures_total": self.failures_total if self.failures_total is not None else len(self.failures),
            "interrupted_by": self.interrupted_by,
            "launcher": {"exit_code": self.launcher_code, "signal": self.launcher_signal,
                         "tail": [line[:MAX_LINE] for line in self.tail[-MAX_TAIL:]]},
            "rejections": {str(k): int(n) for k, n in sorted(self.rejections.items())},
            "hang": None if self.hang is None else dict(self.hang),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: Any) -> "JobResult":
        """The value back from ``to_dict``'s JSON.

        Raises:
            ValueError: ``d`` is not a result of this version (the message says which field).
        """
        if not isinstance(d, dict) or d.get("version") != RESULT_VERSION:
            raise ValueError(f"not a version-{RESULT_VERSION} job result: "
                             f"version {d.get('version') if isinstance(d, dict) else type(d).__name__!r}")
        code = d.get("exit_code")
        if not (_is_int(code) and 0 <= code <= 255):
            raise ValueError(f"exit_code {str(code)[:40]!r} is not an integer 0-255")
        cause = d.get("cause", "")
        if cause not in CAUSES:
            raise ValueError(f"cause {str(cause)[:40]!r} is not one of {', '.join(CAUSES)}")
        launcher = d.get("launcher") or {}
        tail = launcher.get("tail") or []
        rejections = d.get("rejections") or {}
        if not (isinstance(launcher, dict) and isinstance(tail, list) and all(isinstance(t, str) for t in tail)
                and isinstance(rejections, dict) and all(_is_int(n) for n in rejections.values())
                and isinstance(d.get("reason", ""), str) and isinstance(d.get("failures", []), list)):
            raise ValueError("launcher, reason, failures or rejections has the wrong type")
        root = d.get("root_cause")
        failures = tuple(RankFailure.from_dict(f) for f in d.get("failures", [])[:MAX_FAILURES])
        total = d.get("failures_total")
        interrupted, lcode, lsig = d.get("interrupted_by"), launcher.get("exit_code"), launcher.get("signal")
        if not ((interrupted is None or isinstance(interrupted, str)) and (lcode is None or _is_int(lcode))
                and (lsig is None or isinstance(lsig, str)) and (total is None or _is_int(total))):
            raise ValueError("interrupted_by, launcher.exit_code, launcher.signal or failures_total has the wrong type")
        hang = d.get("hang")
        if hang is not None and not isinstance(hang, dict):
            raise ValueError(f"hang is {type(hang).__name__}, not an object")
        return cls(code, None if root is None else RankFailure.from_dict(root), failures,
                   d.get("reason", "")[:MAX_REASON], cause, interrupted, lcode, lsig,
                   tuple(t[:MAX_LINE] for t in tail[-MAX_TAIL:]), {str(k)[:40]: n for k, n in rejections.items()},
                   total if total is not None and total != len(failures) else None, hang)

    def head(self) -> dict:
        """The failure file's first line as data: what a reader of FailureReason alone gets (a few hundred
        characters: the code, who decided it, the root cause, the launcher's reason cut to HEAD_REASON)."""
        return {"version": RESULT_VERSION, "exit_code": int(self.exit_code), "source": self.source,
                "cause": self.kind, "reason": self.headline()[:HEAD_REASON],
                "root_cause": None if self.root_cause is None else self.root_cause.to_dict(),
                "rejections": {str(k): int(n) for k, n in sorted(self.rejections.items())}}

    # -- the text, generated ------------------------------------------------------------
    def parts(self, tail: bool = True) -> list[str]:
        """The failure text's parts in order of importance (``text`` joins them)."""
        if self.exit_code == 0 and not self.rejections:
            return []
        parts: list[str] = []
        if self.reason:
            parts.append(self.reason)
        elif self.interrupted_by is not None:
            parts.append(f"the job was stopped by {self.interrupted_by} sent to the master entrypoint")
        if self.root_cause is not None and self.kind not in STOPS:
            parts.append("root cause: " + self.root_cause.describe())
            others = [f for f in self.failures if f != self.root_cause]
            n = (self.failures_total or len(self.failures)) - 1
            if others:
                parts.append(f"{n} more rank(s) failed after it: " + "; ".join(
                    f"rank {f.rank}@{f.host} " + (f.signal or f"code {f.exit_code}") for f in others[:8]))
        elif self.failures and (self.kind in STOPS or self.reason):
            # A stop's rank deaths (the deadline, a hang abort, a signal) are its consequences: no rank is blamed,
            # the ranks it ended are listed.
            parts.append(f"{self.failures_total or len(self.failures)} rank(s) ended by the stop: " + "; ".join(
                f"rank {f.rank}@{f.host} " + (f.signal or f"code {f.exit_code}") for f in self.failures[:8]))
        elif self.reason or self.exit_code == 0:
            pass
        elif self.launcher_signal is not None:
            parts.append(f"mpirun was killed by {self.launcher_signal}; no rank reported a failure")
        elif self.launcher_code is not None:
            parts.append(f"mpirun exited with code {self.launcher_code}; no rank reported a failure "
                         "(a rank may have been killed before reporting, or the launch itself failed)")
        if self.rejections:
            parts.append(f"result channel refused {sum(self.rejections.values())} message(s)/connection(s) ("
                         + ", ".join(f"{k} {n}" for k, n in sorted(self.rejections.items()))
                         + "); see the master's log")
        if tail and self.tail:
            parts.append(TAIL_MARK + "\n" + "\n".join(self.tail))
        return parts

    def text(self, tail: bool = True, limit: int | None = FAILURE_REASON_LIMIT) -> str:
        """The failure text for people, generated from the data; ``tail=False`` leaves out mpirun's last lines
        (the terminal that just showed them)."""
        return failure_text(self.parts(tail), limit)

    @property
    def summary(self) -> str:
        """The failure text, whole (``text()``); empty for a success."""
        return self.text()

    def headline(self) -> str:
        """The text's first line: the launcher's reason, or the root cause."""
        return failure_text(self.parts(tail=False)[:1], None).split("\n", 1)[0]


#: the cause of a result made from an error's exit code alone (a worker's own failure): errors.py's codes.
_CAUSE_OF_CODE = {ExitCode.UNREACHABLE: "unreachable", ExitCode.HOST_LOST: "host_lost",
                  ExitCode.MASTER_LOST: "master_lost", ExitCode.HUNG: "hung", ExitCode.TIMEOUT: "timeout"}


def error_result(exit_code: int, reason: str) -> JobResult:
    """The result of an error of ours (``reason``: its message), its cause from its exit code."""
    return JobResult(int(exit_code), reason=reason, cause=_CAUSE_OF_CODE.get(exit_code, "launch_failed"))


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
        launcher_tail: the last lines mpirun printed (kept for the failure text, redacted here).
        interrupted_by: the signal name the entrypoint received (SIGTERM from the platform).
    """
    from ..redact import redact_text

    ordered = tuple(sorted(failures, key=lambda f: (f.first_seen, f.rank)))
    # A stop's rank deaths are its consequences, never a root cause.
    root = ordered[0] if ordered and interrupted_by is None else None
    if interrupted_by is not None:
        code, cause = _code_for_signal_name(interrupted_by, ExitCode.SIGTERM), "interrupted"
    elif root is not None:
        code, cause = root.job_exit_code, "rank_failed"
    elif launcher_signal is not None:
        code, cause = _code_for_signal_name(launcher_signal, ExitCode.FAILED), "mpirun_failed"
    else:
        code = launcher_code or 0
        cause = "mpirun_failed" if code else "succeeded"
    if code == 0:
        return JobResult(0, None, ordered, cause="succeeded", launcher_code=launcher_code)
    return JobResult(code, root, ordered, cause=cause, interrupted_by=interrupted_by, launcher_code=launcher_code,
                     launcher_signal=launcher_signal, tail=tuple(redact_text(line) for line in launcher_tail))


def failure_text(parts: list[str], limit: int | None = FAILURE_REASON_LIMIT) -> str:
    """Join parts in priority order and cut to ``limit`` characters, the first part intact when it fits.

    Secrets in the parts (output lines quoting ``--password X`` or ``TOKEN=X``) are redacted first
    (mpirun_kit/redact.py): this text becomes the failure file and SageMaker's FailureReason.
    """
    from ..redact import redact_text

    text = "\n".join(redact_text(p) for p in parts)
    if limit is None or len(text) <= limit:
        return text
    return text[: limit - 4] + "\n..."


def failure_file_text(result: JobResult, limit: int = FAILURE_REASON_LIMIT) -> str:
    """The failure file: the machine-readable first line (``head`` as JSON), then the text, cut to ``limit``."""
    head = FAILURE_HEADER + json.dumps(result.head(), sort_keys=True, separators=(",", ":"))
    return failure_text([head, result.text(limit=None)], limit)


def result_from_failure(text: str) -> dict | None:
    """The head (``JobResult.head``) on a failure file's first line, optionally after SageMaker's
    ``AlgorithmError: ``; None when the first line is not ours.  Nothing after the first line is ever read."""
    first = text.split("\n", 1)[0].strip()
    kind, sep, rest = first.partition(": ")
    if sep and kind.isalpha() and kind.endswith("Error") and rest.startswith(FAILURE_HEADER):
        first = rest
    if not first.startswith(FAILURE_HEADER):
        return None
    try:
        head = json.loads(first[len(FAILURE_HEADER):])
        code = head["exit_code"]
        root = head.get("root_cause")
        if root is not None:
            RankFailure.from_dict(root)
    except (ValueError, KeyError, TypeError):
        return None
    if not (isinstance(head, dict) and head.get("version") == RESULT_VERSION and _is_int(code) and 0 <= code <= 255
            and head.get("cause") in CAUSES and isinstance(head.get("reason", ""), str)):
        return None
    return head


def split_failure(text: str) -> tuple[dict | None, str]:
    """A failure file's (or FailureReason's) head as data (``result_from_failure``) and the text after it."""
    first, _, rest = text.partition("\n")
    head = result_from_failure(first)
    return head, (rest if head is not None else text)


def result_from_message(msg: dict) -> JobResult:
    """The result in the master's ``result`` message to a worker (exec/channel/server.py ``publish``); a message
    whose ``result`` cannot be read still gives its exit code, which the channel checked (0-255)."""
    code = int(msg["exit_code"])
    try:
        result = JobResult.from_dict(msg.get("result"))
    except ValueError as exc:
        return JobResult(code, reason=f"the master sent exit code {code} with a result that cannot be read ({exc})",
                         cause="succeeded" if code == 0 else "launch_failed")
    return result if result.exit_code == code else JobResult(code, reason=result.text(limit=None),
                                                             cause=result.kind)


def result_from_json(text: str | bytes | None) -> JobResult | None:
    """The whole ``JobResult`` in ``text``, a result file's content (RESULT_FILE, read on a host or over ssh);
    None when there is none or it is not a result of this version."""
    if not text:
        return None
    try:
        return JobResult.from_dict(json.loads(text))
    except (ValueError, TypeError, KeyError):
        return None


def read_result_file(path) -> JobResult | None:
    """The whole ``JobResult`` a master wrote to ``path`` (``<opt_ml>/output/result.json``, RESULT_FILE); None when
    there is none or it is not a result of this version.  Targets read this, not the failure file's cut-down
    head, wherever the file can be reached (failures, hang, tail and the uncut reason are only here)."""
    from pathlib import Path

    try:
        return result_from_json(Path(path).read_text())
    except OSError:
        return None


def exit_code_from_failure(text: str) -> int | None:
    """The exit code in the failure file's head (``result_from_failure``); None when the first line is not ours."""
    head = result_from_failure(text)
    return None if head is None else head["exit_code"]
