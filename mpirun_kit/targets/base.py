"""What every target shares: the ``Target`` interface, the DryRun value, the retry policy, the status line.

Place in the data flow: a ``Target`` (one per module, registered in
targets/__init__.py) turns a ``CompiledJob`` into a ``DryRun`` (``prepare``:
the caller-side choices such as a free port or a job name, then the module's
pure ``dryrun``; ``submit --dry-run`` prints it) and runs it (``run``), the only
side effect, which ends in an ``Outcome`` (outcome.py: the exit code the CLI
passes through as its own, who decided it and why).  Processes,
signals and output go through exec/ (process supervision, SignalLatch, the
line pumps in exec/output.py).
"""
from __future__ import annotations

import json
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, TextIO

from ..core import verbosity
from ..core.clock import SYSTEM_CLOCK, Clock
from ..errors import ExitCode
from ..redact import redact_value
from .outcome import Outcome, error_outcome


@dataclass(frozen=True)
class DryRun:
    """A target's request as a value: what ``run`` will do, nothing more.

    ``request`` is JSON-ready (dicts, lists, strings); ``files`` maps a path
    relative to the run directory to the text ``run`` writes there first.
    ``warnings`` are what the user must hear before it runs (the CLI prints them on
    stderr; ``to_json`` carries them): a target returns them, it never prints.
    ``redact`` is the one printer's redaction hook: what a printed value becomes
    (redact.py's ``redact_value`` unless a target's request has secrets of its own
    shape); ``run`` always sends ``request`` itself.
    """

    target: str
    job: str
    request: Any
    files: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    redact: Callable[[Any], Any] = field(default=redact_value, compare=False, repr=False)

    def shown(self) -> dict:
        """What the printers show: the request and files through ``redact``, then notes and warnings."""
        return {"target": self.target, "job": self.job, "request": self.redact(self.request),
                "files": {p: self.redact(t) for p, t in self.files}, "notes": list(self.notes),
                "warnings": list(self.warnings)}

    def render(self) -> str:
        """The request for people: exactly what runs, except secret-looking values shown as ``***``."""
        shown = self.shown()
        lines = [f"target {self.target}: job {self.job}",
                 json.dumps(shown["request"], indent=2, sort_keys=True, default=str)]
        for path, text in shown["files"].items():
            lines.append(f"--- file {path}")
            lines.append(text.rstrip("\n"))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines) + "\n"

    def to_json(self) -> str:
        return json.dumps(self.shown(), indent=2, sort_keys=True, default=str)


@dataclass
class StatusLine:
    """A one-line status on stderr, redrawn in place on a terminal (see core/verbosity.py); lines in the CLI's format.

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


def retrying(run_once: Callable[[int], int], retries: int, progress: StatusLine | None = None,
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
