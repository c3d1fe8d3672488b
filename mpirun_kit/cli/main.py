"""`mpirun_kit` console script: parses argv, dispatches to one command module.

Each command lives in its own module under cli/ exposing ``register(subparsers)``,
which adds a subparser and sets ``func(args) -> int``.  Command modules import
heavy dependencies (torch, boto3) inside ``func``, never at module level, so
``mpirun_kit --help`` stays fast.

This is the one place where an error becomes a message on stderr and an exit
code (errors.ExitCode): an ``MpirunKitError`` as it is, the few library errors a
bad environment produces (no AWS region or credentials, a file that cannot be
read or written) through ``errors.translate``, and anything else as one "internal
error" line -- never a traceback, unless -vv asks for it.

Usage errors are one line too, with a suggestion for a mistyped command, action, choice or flag
(``Parser.error``, ``_unknown_flags``: difflib's closest match), and -q with -v is refused wherever each
was given.  Shell completion is argcomplete's, answered here when its environment is set (completion.py).

Output policy (one format for the tool's own lines): ``mpirun_kit: error: ...``,
``mpirun_kit: warning: ...`` and, with -v, ``mpirun_kit: ...`` for progress; -vv
adds debug lines naming their module.  -q leaves only the result and errors.
A live status line on waits is drawn only when stderr is a terminal
(targets/base.py StatusLine).
"""
from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import os
import re
import sys
import textwrap

from .. import __version__
from ..errors import EXIT_CODE_RANGES, EXIT_CODE_TEXT, ExitCode, MpirunKitError, exit_code_rows, translate

#: command modules, in --help order: the user's commands first, then the internal ones (the simulated
#: cluster, and what runs on each host: `entrypoint`, `launch`).
COMMAND_MODULES: tuple[str, ...] = (
    "validate",
    "plan",
    "submit",
    "jobs",
    "timeline",
    "doctor",
    "keys",
    "stack",
    "completion",
    "sim",
    "entrypoint",
    "run_detached",
)

#: commands whose stderr is the job's own log (CloudWatch on SageMaker, entrypoint.log on the sim), read
#: after the fact rather than watched: their progress lines are on without -v.
PROGRESS_BY_DEFAULT = ("entrypoint",)

#: the job's own codes and signals, in every epilog of a command that runs a job (errors.EXIT_CODE_RANGES).
JOB_CODES = "; ".join(f"{c} {t}" for c, t in EXIT_CODE_RANGES)


def exit_codes(*codes: int, extra: str | None = None, job: bool = False, notes: dict[int, str] | None = None) -> str:
    """An epilog's exit-code block: the codes this command can end with, from ExitCode's table.

    ``notes`` replaces a code's generic wording with what it means for this command.
    """
    notes = notes or {}
    lines = ["exit codes:"]
    for code in sorted({int(ExitCode.OK), int(ExitCode.USAGE), *map(int, codes)}):
        lines.append(f"  {code:<5} {notes.get(code, EXIT_CODE_TEXT[code])}")
    if job:
        lines += [f"  {c:<5} {t}" for c, t in EXIT_CODE_RANGES]
    if extra:
        lines.append(f"  {extra}")
    return "\n".join(lines)


def all_exit_codes() -> str:
    """The top-level epilog's block: every code any command can return (errors.exit_code_rows, the one table)."""
    return "\n".join(["exit codes:"] + [f"  {c:<5} {t}" for c, t in exit_code_rows()])


def epilog(examples: list[str], codes: str) -> str:
    """Examples, then the exit codes: every subcommand's epilog has both."""
    return "examples:\n" + "\n".join(f"  {e}" for e in examples) + "\n\n" + codes


class HelpFormatter(argparse.HelpFormatter):
    """Descriptions and epilogs: paragraphs are wrapped, indented lines (examples, tables) kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out: list[str] = []
        para: list[str] = []

        def flush() -> None:
            if para:
                out.append(textwrap.fill(" ".join(para), width, initial_indent=indent, subsequent_indent=indent))
                para.clear()
        for line in textwrap.dedent(text).strip("\n").splitlines():
            if not line.strip():
                flush()
                out.append("")
            elif line.startswith((" ", "\t")) or line.rstrip().endswith(":") and not para:
                flush()
                out.append(indent + line.rstrip())
            else:
                para.append(line.strip())
        flush()
        return "\n".join(out)


def add_command(subparsers, name: str, *, help: str, description: str, examples: list[str], codes: str,
                **kwargs) -> argparse.ArgumentParser:
    """A subcommand parser with a description, examples and its own exit codes."""
    return subparsers.add_parser(name, help=help, description=description, epilog=epilog(examples, codes),
                                 formatter_class=HelpFormatter, **kwargs)


class Parser(argparse.ArgumentParser):
    """argparse with usage errors as one line in the tool's format, naming the command and its --help,
    and a suggestion for a mistyped command or choice (``sumbit`` -> ``submit``)."""

    def error(self, message: str):
        name = self.prog.partition(" ")[2]
        m = re.match(r"argument (\S+): invalid choice: '(.*)' \(choose from (.*)\)$", message)
        if m:
            what, given = m.group(1), m.group(2)
            choices = re.findall(r"'([^']*)'", m.group(3))
            if what in ("COMMAND", "ACTION"):
                message = f"unknown command '{given}'{did_you_mean(given, choices)}"
            else:
                message = f"{what}: unknown value '{given}'{did_you_mean(given, choices)}; expected one of " \
                          + ", ".join(choices)
        self.exit(ExitCode.USAGE, f"mpirun_kit: error: {name + ': ' if name else ''}{message}; see "
                                  f"`{self.prog} --help`\n")


def did_you_mean(given: str, choices) -> str:
    """`` (did you mean `submit`?)`` for the closest choice, or "" when none is close."""
    close = difflib.get_close_matches(given, list(choices), n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


def _unknown_flags(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """The usage error for arguments no parser took, naming the closest flag of the command they followed."""
    flags = [o for a in parser._actions for o in a.option_strings]
    parts = []
    for arg in extras:
        flag = arg.partition("=")[0]
        hint = did_you_mean(flag, flags) if flag.startswith("-") else ""
        parts.append(f"'{arg}'{hint}")
    noun = "argument" if len(extras) == 1 else "arguments"
    return f"unrecognized {noun}: " + ", ".join(parts)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; ``only``: with that one command module's commands alone (``main``'s fast path)."""
    parser = Parser(
        prog="mpirun_kit",
        description="MPI cluster orchestration for multi-node GPU training.",
        formatter_class=HelpFormatter,
        epilog=epilog(["mpirun_kit validate jobs/", "mpirun_kit plan jobs/maskrcnn-demo.yaml",
                       "mpirun_kit submit jobs/maskrcnn-demo.yaml", "mpirun_kit doctor",
                       "mpirun_kit COMMAND --help"],
                      all_exit_codes()),
    )
    parser.add_argument("--version", action="version", version=f"mpirun_kit {__version__}")
    _output_flags(parser, default_verbose=0, default_quiet=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES if only is None else (only,):
        importlib.import_module(f"{__package__}.{name}").register(sub)
    for p in subcommand_parsers(parser):
        # Also after the command (`submit JOB.yaml -q`); SUPPRESS keeps a flag given before it.
        _output_flags(p, default_verbose=argparse.SUPPRESS, default_quiet=argparse.SUPPRESS)
        # The deepest parser's default wins: "stack list", the name error lines start with.
        p.set_defaults(command_name=p.prog.partition(" ")[2])
    return parser


def _output_flags(parser: argparse.ArgumentParser, default_verbose, default_quiet) -> None:
    # Not an argparse exclusive group: -q before the command and -v after it land in two parsers, so
    # main() refuses the pair itself, with one message wherever they were given.
    loud = parser
    loud.add_argument("-v", "--verbose", action="count", default=default_verbose,
                      help="also print progress (-vv: debug lines too, and a traceback on internal errors)")
    loud.add_argument("-q", "--quiet", action="store_true", default=default_quiet,
                      help="print only the result and errors (no warnings, no status line)")


def _deepest_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the command ``args`` was parsed for (``stack deploy``), or the top-level one."""
    name = getattr(args, "command_name", "")
    for p in subcommand_parsers(parser):
        if name and p.prog == f"{parser.prog} {name}":
            return p
    return parser


def subcommand_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every parser below ``parser`` (``stack``, ``stack deploy``, ...), depth first."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for p in dict.fromkeys(action.choices.values()):
                out += [p, *subcommand_parsers(p)]
    return out


class _Format(logging.Formatter):
    """``mpirun_kit: warning: text``; debug lines also name their module."""

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if record.levelno >= logging.ERROR:
            return f"mpirun_kit: error: {msg}"
        if record.levelno >= logging.WARNING:
            return f"mpirun_kit: warning: {msg}"
        if record.levelno <= logging.DEBUG:
            return f"mpirun_kit: debug: {record.name}: {msg}"
        return f"mpirun_kit: {msg}"


def output_level(verbose: int, quiet: bool) -> int:
    """The tool's own output level (core/verbosity.py) for one command: a value the CLI passes down (issue #31)."""
    from ..core import verbosity

    return verbosity.QUIET if quiet else min(verbose + 1, verbosity.VERBOSE)


def configure_output(verbose: int, quiet: bool) -> logging.Handler:
    """Route the library's log records to stderr in the tool's one format; returns the handler (to remove)."""
    level = logging.ERROR if quiet else {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    from ..redact import RedactingFilter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Format())
    handler.addFilter(RedactingFilter())  # log lines quote argv and output: secrets are hidden (mpirun_kit/redact.py)
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
    # Third-party chatter ("Found credentials in environment variables") only at -vv.
    for noisy in ("botocore", "boto3", "urllib3", "paramiko", "s3transfer"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbose >= 2 else logging.WARNING)
    return handler


#: commands that run on every host of a job as it starts, on the launch's critical path (issue 41): given first,
#: only their own parser is built, not every command's, whose modules' imports were a third of a host's start-up CPU.
FAST_COMMANDS = ("entrypoint",)


def main(argv: list[str] | None = None) -> int:
    first = (sys.argv[1:] if argv is None else argv)[:1]
    parser = build_parser(only=first[0] if first and first[0] in FAST_COMMANDS and "_ARGCOMPLETE" not in os.environ
                          else None)
    if "_ARGCOMPLETE" in os.environ:
        # Shell completion (argcomplete's protocol: the shell sets _ARGCOMPLETE and COMP_LINE); it prints
        # the candidates and exits here.  Imported only then, so a plain command stays fast.
        import argcomplete

        argcomplete.autocomplete(parser)
    args, extras = parser.parse_known_args(argv)
    sub = _deepest_parser(parser, args)
    if extras:
        sub.error(_unknown_flags(sub, extras))
    if args.quiet and args.verbose:
        sub.error("-q (only errors and the result) and -v (also progress) contradict each other; give one")
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return ExitCode.USAGE
    saved_root = logging.getLogger().level
    by_default = args.command_name in PROGRESS_BY_DEFAULT and not getattr(args, "no_progress", False)
    verbose = args.verbose or (1 if by_default else 0)
    handler = configure_output(verbose, args.quiet)
    args.verbosity = output_level(verbose, args.quiet)   # passed down from here, never kept in a module (issue #31)
    try:
        return int(args.func(args) or 0)
    except MpirunKitError as exc:
        print(f"mpirun_kit: error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("mpirun_kit: interrupted", file=sys.stderr)
        return ExitCode.for_signal(2)
    except BrokenPipeError:
        # `mpirun_kit ... | head`: the reader left; not an error of ours.  Point
        # stdout at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # noqa: BLE001 - the last line of defence: a message, never a traceback
        known = translate(exc)
        if known is not None:
            print(f"mpirun_kit: error: {args.command_name}: {known}", file=sys.stderr)
            return int(known.exit_code)
        if verbose >= 2:
            raise
        print(f"mpirun_kit: error: internal error in `{args.command_name}`: {type(exc).__name__}: {exc}; rerun with "
              "-vv for the traceback and report it", file=sys.stderr)
        return ExitCode.LAUNCH_FAILED
    finally:
        logging.getLogger().removeHandler(handler)
        logging.getLogger().setLevel(saved_root)


if __name__ == "__main__":
    sys.exit(main())
