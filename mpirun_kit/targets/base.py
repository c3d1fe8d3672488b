"""What every target shares: the DryRun value, exit-code mapping, output prefixing, progress.

Place in the data flow: targets/*.dryrun builds a ``DryRun`` from a
``CompiledJob``; targets/*.run executes it and returns the job's exit code,
which the CLI passes through as its own (errors.py table).
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, TextIO

from ..clock import SYSTEM_CLOCK, Clock


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
    """A copy of a request with values of secret-looking names replaced by ``***``.

    Handles the shapes requests carry: ``{NAME: value}`` maps (SageMaker Environment),
    ``[NAME, value]`` pairs (LaunchSpec.env) and strings holding JSON (the serialized
    LaunchSpec in HyperParameters, the spec file).
    """
    from ..plan.env import REDACTED, is_secret

    if isinstance(value, dict):
        return {k: (REDACTED if isinstance(v, str) and is_secret(str(k)) else redact_value(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if len(value) == 2 and all(isinstance(x, str) for x in value) and is_secret(value[0]):
            return [value[0], REDACTED]
        return [redact_value(v) for v in value]
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        return json.dumps(redact_value(parsed), sort_keys=True) + ("\n" if value.endswith("\n") else "")
    return value


def exit_code_of(returncode: int) -> int:
    """Popen returncode -> shell-style exit code (-N for signal N -> 128+N)."""
    return 128 - returncode if returncode < 0 else returncode


#: how much Progress prints, set by the CLI for one command (cli/main.py): 0 (-q) nothing; 1 (default)
#: the live status line (on a terminal only) and ``done`` lines; 2 (-v, and library callers) also each
#: status change as a line when stderr is not a terminal, and ``note`` lines.
OUTPUT_LEVEL = 2


@dataclass
class Progress:
    """A one-line status on stderr that rewrites itself on a TTY (see OUTPUT_LEVEL); lines in the CLI's format.

    ``update``: what is being waited for, and the last error seen (the live line).  ``done``: an
    outcome the user must see (a deadline passed, a retry).  ``note``: a milestone (-v only).
    """

    stream: TextIO = field(default_factory=lambda: sys.stderr)
    clock: Clock = SYSTEM_CLOCK
    start: float = field(default=0.0)
    last: str = ""

    def __post_init__(self) -> None:
        self.start = self.clock.monotonic()

    def update(self, text: str) -> None:
        line = f"mpirun_kit: [{self.clock.monotonic() - self.start:.0f}s] {text}"
        if OUTPUT_LEVEL == 0:
            pass
        elif self.stream.isatty():
            self.stream.write("\r\033[K" + line)
            self.stream.flush()
        elif text != self.last and OUTPUT_LEVEL >= 2:
            self.stream.write(line + "\n")
            self.stream.flush()
        self.last = text

    def done(self, text: str, level: int = 1) -> None:
        if self.stream.isatty() and OUTPUT_LEVEL:
            self.stream.write("\r\033[K")
        self.last = ""
        if OUTPUT_LEVEL >= level:
            self.stream.write(f"mpirun_kit: {text} (at {self.clock.monotonic() - self.start:.1f}s)\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        self.done(text, level=2)


def retrying(run_once: Callable[[int], int], retries: int, progress: Progress | None = None,
             permanent: frozenset[int] = frozenset({0, 2, 64, 130})) -> int:
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
