"""What every target shares: the ``Target`` interface, the DryRun and Outcome values, exit codes, progress.

Place in the data flow: a ``Target`` (one per module, registered in
targets/__init__.py) turns a ``CompiledJob`` into a ``DryRun`` (``prepare``:
the caller-side choices such as a free port or a job name, then the module's
pure ``dryrun``; ``submit --dry-run`` prints it) and runs it (``run``), the only
side effect, which ends in an ``Outcome``: the exit code the CLI passes through
as its own (errors.ExitCode), who decided it (the job, the launcher or the
platform) and why; ``submit --json`` prints it as its last line.  Processes,
signals and output go through exec/ (process supervision, SignalLatch, the
line pumps in exec/output.py).
"""
from __future__ import annotations

import json
import re
import sys
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, TextIO

from ..exec import verbosity
from ..exec.clock import SYSTEM_CLOCK, Clock
from ..errors import ExitCode


@dataclass(frozen=True)
class DryRun:
    """A target's request as a value: what ``run`` will do, nothing more.

    ``request`` is JSON-ready (dicts, lists, strings); ``files`` maps a path
    relative to the run directory to the text ``run`` writes there first.
    """

    target: str
    job: str
    request: Any
    files: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()

    def render(self) -> str:
        """The request for people: exactly what runs, except secret-looking values shown as ``***``."""
        lines = [f"target {self.target}: job {self.job}",
                 json.dumps(redact_value(self.request), indent=2, sort_keys=True, default=str)]
        for path, text in self.files:
            lines.append(f"--- file {path}")
            lines.append(redact_value(text).rstrip("\n"))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines) + "\n"

    def to_json(self) -> str:
        return json.dumps({"target": self.target, "job": self.job, "request": redact_value(self.request),
                           "files": {p: redact_value(t) for p, t in self.files}, "notes": list(self.notes)},
                          indent=2, sort_keys=True, default=str)


def redact_value(value: Any) -> Any:
    """A copy of a request with secret values replaced by ``***`` (mpirun_kit/redact.py decides what and how)."""
    from ..redact import redact_value as redact

    return redact(value)


#: codes mpirun_kit itself exits with when the job did not decide; a job may exit with the same numbers,
#: which is why an Outcome says who decided (``source``) instead of leaving scripts to guess from the code.
LAUNCHER_CODES = {ExitCode.BAD_INPUT: "bad input (spec, flag, resourceconfig.json)",
                  ExitCode.UNREACHABLE: "a host or AWS was unreachable", ExitCode.LAUNCH_FAILED: "the launcher failed",
                  ExitCode.HOST_LOST: "a worker host was lost mid-job", ExitCode.MASTER_LOST: "a worker lost its master",
                  ExitCode.HUNG: "the ranks hung", ExitCode.TIMEOUT: "the job ran past its deadline"}
SOURCES = ("job", "launcher", "platform")
# The failure report's root-cause line, written by exec/result.py (RankFailure.describe); it comes before
# any of the program's own output, which is only quoted after "mpirun output (last lines):".
_ROOT_CAUSE_RE = re.compile(r"root cause: rank (?P<rank>\d+) on (?P<host>\S+) "
                            r"(?:exited with code (?P<code>\d+)|was killed by (?P<signal>\S+))")
_TAIL_MARK = "mpirun output (last lines):"


@dataclass(frozen=True)
class Outcome:
    """How a submitted job ended, for scripts: ``submit --json`` prints ``to_json()`` as its last stdout line.

    ``source``: ``job`` (the program's own code: it succeeded, a rank exited non-zero or was killed),
    ``launcher`` (mpirun_kit or mpirun chose the code: bad input, unreachable host, launcher failure,
    lost host/master, deadline, stopped by a signal) or ``platform`` (SageMaker/AWS decided).
    """

    target: str | None                  # None: the spec never compiled
    job: str | None
    exit_code: int
    source: str
    reason: str
    root_cause: dict | None = None      # first failing rank: rank, host, exit_code, signal
    failure_file: str | None = None     # the full failure report, on this machine
    attempts: int = 1
    timeline: dict | None = None        # started_at, ended_at (UTC), duration_s, per-host exit codes

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def launch_timeline(output_dir: Path) -> dict | None:
    """The master's ``timeline.json`` in ``output_dir`` as seconds per phase (launch, run, shutdown, total)
    and the file's path; None when it wrote none (it failed before, or an older launcher)."""
    from ..errors import SpecError
    from ..observe import timeline

    path = Path(output_dir) / "timeline.json"
    if not path.is_file():
        return None
    try:
        s = timeline.summary(timeline.load(path))
    except SpecError:
        return None
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in s.items() if k != "startup_cpu_s"} | {
        "file": str(path)}


def root_cause_of(failure_text: str) -> dict | None:
    """The first failing rank named by a failure report, None when it names none (launcher failures)."""
    head = failure_text.split(_TAIL_MARK, 1)[0]
    for line in head.splitlines()[1:]:
        m = _ROOT_CAUSE_RE.match(line)
        if m:
            return {"rank": int(m["rank"]), "host": m["host"],
                    "exit_code": int(m["code"]) if m["code"] else None, "signal": m["signal"]}
    return None


def outcome_of(target: str | None, job: str | None, exit_code: int, *, failure_text: str | None = None,
               failure_file: str | None = None, interrupted: str | None = None, platform_reason: str | None = None,
               attempts: int = 1, started: float | None = None, ended: float | None = None,
               hosts: dict[str, int] | None = None, error: tuple[str, str] | None = None,
               launch: dict | None = None) -> Outcome:
    """Who decided ``exit_code`` and why, from what the target saw (pure).

    Args:
        failure_text: the master's failure report (``mpirun_kit exit_code=N`` first line), when read.
        interrupted: the signal name submit itself received (Ctrl-C: SIGINT), if it stopped the job.
        platform_reason: set when the platform (SageMaker/AWS) ended the job without a report of ours.
        started, ended: wall-clock seconds; hosts: each host's exit code (multi-host targets).
        error: (source, message) when submit itself ended in an error (bad spec, unreachable host, AWS).
        launch: the launcher's own timeline summary (``launch_timeline``), when it wrote one.
    """
    # A stop's rank deaths are its consequences, not a cause.
    cause = root_cause_of(failure_text) if failure_text and not interrupted else None
    if error is not None:
        source, reason = error
    elif interrupted:
        source, reason = "launcher", f"stopped by {interrupted}: SIGTERM to every rank, SIGKILL after the grace period"
    elif exit_code == 0:
        source, reason = "job", "the job succeeded"
    elif cause is not None:
        how = f"was killed by {cause['signal']}" if cause["signal"] else f"exited with code {cause['exit_code']}"
        source, reason = "job", f"rank {cause['rank']} on {cause['host']} {how}"
    elif platform_reason:
        source, reason = "platform", platform_reason
    elif failure_text:
        lines = [ln for ln in failure_text.split(_TAIL_MARK, 1)[0].splitlines()[1:] if ln.strip()]
        source, reason = "launcher", (lines[0] if lines else LAUNCHER_CODES.get(exit_code, "the launcher failed"))
    elif exit_code in LAUNCHER_CODES:
        source, reason = "launcher", LAUNCHER_CODES[exit_code] + " (from the exit code; no failure report was read)"
    else:
        how = f"ended by signal {exit_code - 128}" if exit_code > 128 else f"exited with code {exit_code}"
        source, reason = "job", f"the job {how} (from the exit code; no failure report was read)"
    timeline = None
    if started is not None and ended is not None:
        stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))  # noqa: E731
        timeline = {"started_at": stamp(started), "ended_at": stamp(ended),
                    "duration_s": round(ended - started, 3), "hosts": dict(hosts or {})}
        if launch:
            timeline["launch"] = launch
    return Outcome(target, job, int(exit_code), source, reason, cause, failure_file, attempts, timeline)


@dataclass
class Progress:
    """A one-line status on stderr, redrawn in place on a terminal (see exec/verbosity.py); lines in the CLI's format.

    ``update``: what is being waited for, and the last error seen (the live line).  ``done``: an
    outcome the user must see (a deadline passed, a retry).  ``note``: a milestone (-v only).
    On a terminal the live line is a tqdm bar showing only that text: tqdm redraws it in place and
    cuts it to the terminal's width (a longer line would wrap, and a redraw would erase only its last
    row).  Elsewhere there is no live line: a status change prints as a line at -v, nothing by default.
    """

    stream: TextIO = field(default_factory=lambda: sys.stderr)
    clock: Clock = SYSTEM_CLOCK
    start: float = field(default=0.0)
    last: str = ""
    _live: Any = field(default=None, init=False, repr=False)   # the tqdm bar while a live line shows

    def __post_init__(self) -> None:
        self.start = self.clock.monotonic()

    def update(self, text: str) -> None:
        line = f"mpirun_kit: [{self.clock.monotonic() - self.start:.0f}s] {text}"
        if verbosity.LEVEL == verbosity.QUIET:
            pass
        elif self.stream.isatty():
            if self._live is None:
                from tqdm import tqdm   # only here: a terminal is watching (~20 ms to import)

                self._live = tqdm(file=self.stream, bar_format="{desc}", dynamic_ncols=True, leave=False,
                                  mininterval=0)
            self._live.set_description_str(line, refresh=True)
        elif text != self.last and verbosity.LEVEL >= verbosity.VERBOSE:
            self.stream.write(line + "\n")
            self.stream.flush()
        self.last = text

    def done(self, text: str, level: int = verbosity.DEFAULT) -> None:
        if self._live is not None:
            self._live.close()      # leave=False: the live line is erased, the next update draws a new one
            self._live = None
        self.last = ""
        if verbosity.LEVEL >= level:
            self.stream.write(f"mpirun_kit: {text} (at {self.clock.monotonic() - self.start:.1f}s)\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        self.done(text, level=verbosity.VERBOSE)


#: codes a retry cannot change: success, usage (2), bad input (64), Ctrl-C (130).
NEVER_RETRIED = frozenset({ExitCode.OK, ExitCode.USAGE, ExitCode.BAD_INPUT, ExitCode.INTERRUPTED})
#: ... and a stop (SIGTERM, 143) for the targets that supervise the job themselves (local, sim).
STOPPED = NEVER_RETRIED | {ExitCode.SIGTERM}


def retrying(run_once: Callable[[int], int], retries: int, progress: Progress | None = None,
             permanent: frozenset[int] = NEVER_RETRIED) -> int:
    """Run ``run_once(attempt)`` up to ``1 + retries`` times while it fails with a retryable code.

    Bad input (64), usage (2) and Ctrl-C (130) are never retried: running again cannot fix them.
    """
    code = 0
    for attempt in range(1 + retries):
        code = run_once(attempt)
        if code in permanent:
            return code
        if attempt < retries and progress is not None:
            progress.done(f"attempt {attempt + 1} failed with exit code {code}; retrying "
                          f"({retries - attempt} left)")
    return code


@dataclass(frozen=True)
class SubmitOptions:
    """What the caller says about a run beyond the spec (``submit``'s flags)."""

    wait: bool = False                  # sagemaker: follow the job until it ends
    job_name: str | None = None         # sagemaker: the training job's name


class Target(ABC):
    """Where a compiled job runs.  ``prepare`` -> a printable ``DryRun``; ``run`` -> an ``Outcome``.

    Subclasses set ``name`` and implement ``choices`` (the impure decisions a pure builder
    must not make: a free port, a run id, a name with a timestamp), ``dryrun`` (pure) and ``run``.
    """

    name = ""

    def choices(self, compiled, opts: SubmitOptions) -> dict:
        return {}

    @abstractmethod
    def dryrun(self, compiled, **choices) -> DryRun:
        """The request this target would send or run, as a printable value (nothing is executed)."""

    def prepare(self, compiled, opts: SubmitOptions = SubmitOptions()) -> DryRun:
        """The request as a value, with this run's choices made."""
        return self.dryrun(compiled, **self.choices(compiled, opts))

    @abstractmethod
    def run(self, dry: DryRun, opts: SubmitOptions = SubmitOptions(), *, started: float | None = None) -> Outcome:
        """Execute ``dry`` exactly as printed; how it ended."""

    def error_source(self, exc: BaseException) -> str:
        """Who decided the code of an error of ours raised while submitting (``launcher`` unless a platform did)."""
        return "launcher"

    def error_outcome(self, job: str | None, exc, started: float) -> Outcome:
        """The Outcome of a submit that ended in an error of ours (bad spec, unreachable host, AWS refusal)."""
        return error_outcome(self.name or None, job, exc, started, self.error_source(exc))


def error_outcome(target: str | None, job: str | None, exc, started: float, source: str = "launcher") -> Outcome:
    """The Outcome of a submit that ended in ``exc``, an error of ours; ``source`` decided its code."""
    return outcome_of(target, job, int(exc.exit_code), error=(source, str(exc).split("\n", 1)[0] or type(exc).__name__),
                      started=started, ended=time.time(), hosts={})
