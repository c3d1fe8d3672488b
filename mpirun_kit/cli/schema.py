"""`python -m mpirun_kit.cli.schema [PATH]`: publish the job spec's JSON Schema for editors.

Place in the data flow: spec/schema.py builds ``JOB_SCHEMA`` (a value); this maintainer command
writes it as ``mpirun_kit/spec/job.schema.json`` (or PATH), and tests/spec/test_load.py keeps
the published file identical to the value.  It lives in cli/ because writing a file is I/O
(core/files.py) and spec/ sits below exec/ in the layers (docs/architecture.md, Layering).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..core.files import write_atomic
from ..spec.schema import SCHEMA_PATH, schema_text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mpirun_kit.cli.schema",
                                     description="Write the job spec's JSON Schema (for editors) to PATH.")
    parser.add_argument("path", metavar="PATH", nargs="?", type=Path, default=SCHEMA_PATH,
                        help=f"where to write it (default: {SCHEMA_PATH})")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    # Published atomically: a half-written schema would break every editor that reads it.
    write_atomic(args.path, schema_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
