"""How much the tool prints of its own: the one output level, read by every printer of the tool's lines.

Place in the data flow: the CLI sets ``LEVEL`` for one command (cli/main.py ``configure_output``)
and restores it after; the targets' status line (targets/base.py ``StatusLine``), the entrypoint's
progress lines (entrypoint/common.py ``say``) and the hosts a target starts (their ``verbose``
choice) read it.  Library callers keep the default.  Standard library only: every entrypoint
imports it on the launch's critical path.

Levels: 0 (``-q``) nothing; 1 (default) the live status line (on a terminal only) and ``done``
lines; 2 (``-v``, ``entrypoint`` by default, and library callers) also each status change as a
line when stderr is not a terminal, and ``note`` and progress lines.
"""
from __future__ import annotations

QUIET, DEFAULT, VERBOSE = 0, 1, 2

#: the level in force; read it as ``verbosity.LEVEL`` at the time of printing (the CLI changes it).
LEVEL = VERBOSE


def entrypoint_flags(verbose: bool, quiet: bool) -> list[str]:
    """The flags a target gives the hosts' entrypoints so they print what `submit` was asked for:
    progress lines with -v, only errors and the result with -q, else warnings and errors."""
    return [] if verbose else ["-q"] if quiet else ["--no-progress"]
