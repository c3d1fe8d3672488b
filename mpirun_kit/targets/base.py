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


@dataclass
class Progress:
    """A one-line status on stderr that rewrites itself on a TTY and logs changes otherwise."""

    stream: TextIO = field(default_factory=lambda: sys.stderr)
    clock: Clock = SYSTEM_CLOCK
    start: float = field(default=0.0)
    last: str = ""

    def __post_init__(self) -> None:
        self.start = self.clock.monotonic()

    def update(self, text: str) -> None:
        line = f"[{self.clock.monotonic() - self.start:6.1f}s] {text}"
        if self.stream.isatty():
            self.stream.write("\r\033[K" + line)
            self.stream.flush()
        elif text != self.last:
            self.stream.write(line + "\n")
            self.stream.flush()
        self.last = text

    def done(self, text: str) -> None:
        if self.stream.isatty():
            self.stream.write("\r\033[K")
        self.last = ""
        self.stream.write(f"[{self.clock.monotonic() - self.start:6.1f}s] {text}\n")
        self.stream.flush()


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
