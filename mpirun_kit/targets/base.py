"""What every target shares: the ``Target`` interface, the DryRun value, the retry policy, the status line.

Place in the data flow: a ``Target`` (one per module, registered in
targets/__init__.py) turns a ``CompiledJob`` into a ``DryRun`` (``prepare``:
the caller-side choices such as a free port or a job name, then the module's
pure ``dryrun``; ``submit --dry-run`` prints it) and runs it (``run``), the only
side effect, which ends in an ``Outcome`` (outcome.py: the exit code the CLI
passes through as its own, who decided it and why).  Processes,
signals and output go through exec/ (process supervision, SignalLatch, the
line pumps in exec/output.py).

After ``run`` starts, a job is followed by its record (records/: a job id, a run directory,
a state) through the lifecycle half of the interface: ``describe`` (a ``JobStatus``), ``cancel``,
``logs`` and ``list``, as torchx's schedulers answer describe/cancel/log_iter/list.  The states
are records.JobState, one enum for every target.  Their defaults (targets/supervised.py) fit the
targets whose supervisor is a process on this machine (local, sim, ssh); a target that hands
the job to a platform (sagemaker, slurm) overrides them with the platform's own calls.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterable, Iterator, TextIO, TypeVar

from ..core import verbosity
from ..core.clock import SYSTEM_CLOCK, Clock
from ..errors import ExitCode
from ..records import JobRecord
from ..redact import redact_value
from .outcome import JobStatus, Outcome, error_outcome  # noqa: F401 - JobStatus: the lifecycle verbs' value

#: a target's request type: a frozen dataclass of JSON-ready fields, one per target (local's ``LocalRequest``,
#: sim's, ssh's, sagemaker's, slurm's ``SlurmRequest``), declared as the target's ``request_type``.
R = TypeVar("R")


def plain(request: Any) -> Any:
    """A request as JSON-ready data: a dataclass as its fields (``dataclasses.asdict``), else itself."""
    return dataclasses.asdict(request) if dataclasses.is_dataclass(request) else request


@dataclass(frozen=True)
class DryRun(Generic[R]):
    """A target's request as a value: what ``run`` will do, nothing more.

    ``request`` is the target's typed request (``R``: a dataclass of JSON-ready fields, or a dict
    of them; ``plain`` turns either into data for the printers); ``files`` maps a path
    relative to the run directory to the text ``run`` writes there first.
    ``warnings`` are what the user must hear before it runs (the CLI prints them on
    stderr; ``to_json`` carries them): a target returns them, it never prints.
    ``redact`` is the one printer's redaction hook: what a printed value becomes
    (redact.py's ``redact_value`` unless a target's request has secrets of its own
    shape); ``run`` always sends ``request`` itself.
    """

    target: str
    job: str
    request: R
    files: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    redact: Callable[[Any], Any] = field(default=redact_value, compare=False, repr=False)

    def shown(self) -> dict:
        """What the printers show: the request and files through ``redact``, then notes and warnings."""
        return {"target": self.target, "job": self.job, "request": self.redact(plain(self.request)),
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
    #: the output level (core/verbosity.py), passed down from the CLI (``SubmitOptions.verbosity``)
    level: int = verbosity.VERBOSE
    start: float = field(default=0.0)
    last: str = ""
    _live: Any = field(default=None, init=False, repr=False)   # the tqdm bar while a live line shows

    def __post_init__(self) -> None:
        self.start = self.clock.monotonic()

    def update(self, text: str) -> None:
        line = f"mpirun_kit: [{self.clock.monotonic() - self.start:.0f}s] {text}"
        if self.level == verbosity.QUIET:
            pass
        elif self.stream.isatty():
            if self._live is None:
                from tqdm import tqdm   # only here: a terminal is watching (~20 ms to import)

                # A terminal that reports no width (0 columns: a pty nobody sized, some CI consoles) would have
                # the line cut to nothing (issue #28: no status line during a sim job); 80 columns then.
                width = {"ncols": 80, "nrows": 24} if _columns(self.stream) == 0 else {"dynamic_ncols": True}
                self._live = tqdm(file=self.stream, bar_format="{desc}", leave=False, mininterval=0, **width)
            self._live.set_description_str(line, refresh=True)
        elif text != self.last and self.level >= verbosity.VERBOSE:
            self.stream.write(line + "\n")
            self.stream.flush()
        self.last = text

    def done(self, text: str, level: int = verbosity.DEFAULT) -> None:
        if self._live is not None:
            self._live.close()      # leave=False: the live line is erased, the next update draws a new one
            self._live = None
        self.last = ""
        if self.level >= level:
            self.stream.write(f"mpirun_kit: {text} (at {self.clock.monotonic() - self.start:.1f}s)\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        self.done(text, level=verbosity.VERBOSE)


def _columns(stream: TextIO) -> int | None:
    """The width the terminal behind ``stream`` reports (0: it reports none; None: no terminal to ask)."""
    import os

    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return None


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
    """What the caller says about a run beyond the spec (``submit``'s flags and its record)."""

    wait: bool = False                  # sagemaker: follow the job until it ends
    job_name: str | None = None         # sagemaker: the training job's name
    keep_keys: bool = False             # sagemaker: leave the job's key secret in S3 after the job
    resume_from: str | None = None      # sagemaker: seed this job's checkpoints from that job's
    job_id: str | None = None           # the record's job id (records.RecordStore.create); None: a dry run
    run_dir: str | None = None          # the record's run directory, never reused; None: a dry run
    #: the output level (core/verbosity.py): the status line's and the hosts' (-q/-v); saved with the request,
    #: so `run-detached` prints what `submit` was asked for.  Library callers: VERBOSE.
    verbosity: int = verbosity.VERBOSE


@dataclass(frozen=True)
class Started:
    """A job a target started, returned at once by ``Target.start``: ``native``, the target's own id for it (the
    local launcher's pid), and ``child``, what the one supervisor (exec/supervisor.py ``Supervisor``) follows,
    stops and drains (an exec/supervisor ``Child``)."""

    native: str
    child: Any


class Target(ABC, Generic[R]):
    """Where a compiled job runs, and how a job started there is followed afterwards.

    Submitting: ``prepare`` -> a printable ``DryRun[R]``; ``run`` -> an ``Outcome``.  Subclasses set
    ``name`` and implement ``choices`` (the impure decisions a pure builder must not make: a free
    port, a name with a timestamp; ``opts.job_id``/``opts.run_dir`` are the record's), ``dryrun``
    (pure) and ``run``.

    The lifecycle (every method takes the job's ``JobRecord``, never a bare id: the record says
    where the job's files are and what the target's own name for it is):

    * ``describe(record) -> JobStatus``: the state now (records.JobState) and, once it ended, its result;
    * ``cancel(record) -> JobStatus``: stop it on every host (SIGTERM, the spec's grace, SIGKILL) and
      return once nothing of it is left; cancelling an ended job changes nothing;
    * ``logs(record, rank=None, follow=False) -> Iterator[str]``: its output lines (one rank's with
      ``rank``), and with ``follow`` new lines until it ends;
    * ``list(records) -> list[JobStatus]``: ``describe`` of each of this target's records.

    The defaults (targets/supervised.py) are for jobs supervised by a process on this machine
    (``submit`` or its detached copy, whose pid the record holds).
    """

    name = ""
    #: the request's dataclass (``request_from`` rebuilds it from JSON); None: the request is a dict.
    request_type: type | None = None
    #: True for a target that hands the job to a platform (sagemaker, slurm): after ``run`` returns without
    #: waiting, the job runs on there and ``describe`` asks the platform, not the record.
    platform = False
    #: its dry runs' redaction hook (``DryRun.redact``), which a DryRun rebuilt from the run directory gets again
    #: (service/runs.load_request: the detached supervisor's); a target whose request has secrets of its own shape
    #: sets its own, and its ``dryrun`` passes the same.
    redact: Callable[[Any], Any] = staticmethod(redact_value)

    def choices(self, compiled, opts: SubmitOptions) -> dict:
        return {}

    def python(self, job) -> str:
        """The interpreter every rank's ``python -m`` runs with on this target's hosts (``job``: the loaded
        JobSpec; the compiler puts it in the program's argv).  Default: the training image's ``python``
        (docker/Dockerfile); a target whose hosts share this machine's interpreter, or whose settings name
        one, says so."""
        return "python"

    def request_from(self, data: Any) -> R:
        """The request back from ``plain(request)`` (the detached supervisor reads it from the run directory)."""
        return self.request_type(**data) if self.request_type is not None else data

    def handle(self, dry: DryRun[R]) -> tuple[str | None, dict]:
        """What the job's record keeps to find it again: the target's own name for it (None: the record's job
        id is the only one) and JSON-ready details (``grace_s``, ``deadline_s``, a region)."""
        req = plain(dry.request)
        keep = ("grace_s", "deadline_s")
        return None, {k: req[k] for k in keep if isinstance(req, dict) and req.get(k) is not None}

    def submitted_as(self, opts: SubmitOptions) -> str | None:
        """The target's own name for a job that only ``run`` learns (Slurm's job id, from sbatch), read from the
        run directory ``opts.run_dir`` after ``run``; None: ``handle`` named it already, or there is none."""
        return None

    @abstractmethod
    def dryrun(self, compiled, **choices) -> DryRun[R]:
        """The request this target would send or run, as a printable value (nothing is executed)."""

    def prepare(self, compiled, opts: SubmitOptions = SubmitOptions()) -> DryRun[R]:
        """The request as a value, with this run's choices made."""
        return self.dryrun(compiled, **self.choices(compiled, opts))

    @abstractmethod
    def run(self, dry: DryRun[R], opts: SubmitOptions = SubmitOptions(), *, started: float | None = None) -> Outcome:
        """Execute ``dry`` exactly as printed; how it ended."""

    def start(self, dry: DryRun[R], opts: SubmitOptions = SubmitOptions()) -> Started:
        """Start ``dry`` exactly as printed and return at once: the target's id for the job and the child the one
        supervisor follows (``run`` is start, then the supervisor, then the Outcome).  Done for ``local``,
        ``ssh`` and ``sim``; the platform targets still start and follow inside ``run``.

        Raises:
            NotImplementedError: this target does not separate starting from following yet.
        """
        raise NotImplementedError(f"target {self.name!r} starts its jobs only inside run()")

    def describe(self, record: JobRecord, *, clock: Clock = SYSTEM_CLOCK) -> JobStatus:
        """The job's state now and, once it ended, its result."""
        from .supervised import describe

        return describe(record)

    def cancel(self, record: JobRecord, *, clock: Clock = SYSTEM_CLOCK) -> JobStatus:
        """Stop the job everywhere; returns once nothing of it runs (raises ClusterError naming what is left)."""
        from .supervised import cancel

        return cancel(record, clock=clock)

    def logs(self, record: JobRecord, *, rank: int | None = None, follow: bool = False,
             clock: Clock = SYSTEM_CLOCK) -> Iterator[str]:
        """The job's output lines (``rank``: only that rank's), following new ones until it ends with ``follow``."""
        from .supervised import logs

        return logs(record, rank=rank, follow=follow, clock=clock)

    def list(self, records: Iterable[JobRecord], *, clock: Clock = SYSTEM_CLOCK) -> list[JobStatus]:
        """``describe`` of each of this target's ``records``."""
        return [self.describe(r, clock=clock) for r in records if r.target == self.name]

    def error_source(self, exc: BaseException) -> str:
        """Who decided the code of an error of ours raised while submitting (``launcher`` unless a platform did)."""
        return "launcher"

    def error_outcome(self, job: str | None, exc, started: float) -> Outcome:
        """The Outcome of a submit that ended in an error of ours (bad spec, unreachable host, AWS refusal)."""
        return error_outcome(self.name or None, job, exc, started, self.error_source(exc))
