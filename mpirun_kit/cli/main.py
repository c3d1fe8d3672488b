"""`mpirun_kit` console script: parses argv, dispatches to one command module.

Each command lives in its own module under cli/ exposing ``register(subparsers)``,
which adds a subparser and sets ``func(args) -> int``.  Command modules import
heavy dependencies (torch, boto3) inside ``func``, never at module level, so
``mpirun_kit --help`` stays fast.

This is the one place where an ``MpirunKitError`` becomes a message on stderr and
an exit code (see errors.py for the table).
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from .. import __version__
from ..errors import MpirunKitError

#: command modules, in --help order.  Each adds its own subcommand(s).
COMMAND_MODULES: tuple[str, ...] = (
    "sim",
    "entrypoint",
    "stack",
    "validate",
    "plan",
    "submit",
    "jobs",
    "doctor",
    "keys",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mpirun_kit",
        description="MPI cluster orchestration for multi-node GPU training.",
        epilog="Exit codes: 0 ok; 1-63 the job's own code; 2 usage; 64 bad input; "
        "69 unreachable host/service; 70 launcher failure; 75 worker lost its master; "
        "124 job deadline; 128+N ended by signal N.",
    )
    parser.add_argument("--version", action="version", version=f"mpirun_kit {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"{__package__}.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose >= 2 else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except MpirunKitError as exc:
        print(f"mpirun_kit: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("mpirun_kit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `mpirun_kit ... | head`: the reader left; not an error of ours.  Point
        # stdout at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
