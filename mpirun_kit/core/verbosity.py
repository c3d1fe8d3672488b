"""How much the tool prints of its own: the one output level, read by every printer of the tool's lines.

Place in the data flow: no module holds the level (issue #31: no global).  The CLI works it out for one
command (cli/main.py ``output_level``, kept as ``args.verbosity``) and passes it down as a value: into
``SubmitOptions.verbosity`` (the targets' status line, targets/base.py ``StatusLine(level=...)``, and the
hosts' ``verbose``/``quiet`` choice; saved with the job's request so ``run-detached`` prints the same),
and into ``EntrypointOptions.progress`` (entrypoint/common.py ``say``, exec/process.py ``run_launcher``'s
``quiet``).  Library callers get ``VERBOSE`` by default.  Standard library only: every entrypoint imports
it on the launch's critical path.

Levels: 0 (``-q``) nothing; 1 (default) the live status line (on a terminal only) and ``done``
lines; 2 (``-v``, ``entrypoint`` by default, and library callers) also each status change as a
line when stderr is not a terminal, and ``note`` and progress lines.
"""
from __future__ import annotations

QUIET, DEFAULT, VERBOSE = 0, 1, 2


def entrypoint_flags(verbose: bool, quiet: bool) -> list[str]:
    """The flags a target gives the hosts' entrypoints so they print what `submit` was asked for:
    progress lines with -v, only errors and the result with -q, else warnings and errors."""
    return [] if verbose else ["-q"] if quiet else ["--no-progress"]
