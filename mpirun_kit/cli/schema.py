"""`python -m mpirun_kit.cli.schema [PATH]`: publish the job spec's JSON Schema for editors.

Place in the data flow: spec/schema.py builds ``JOB_SCHEMA`` (a value); this maintainer command
writes it as ``mpirun_kit/spec/job.schema.json`` (or PATH), and tests/spec/test_load.py keeps
the published file identical to the value.  It lives in cli/ because writing a file is I/O
(core/files.py) and spec/ sits below exec/ in the layers (docs/architecture.md, Layering).
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..core.files import write_atomic
from ..spec.schema import SCHEMA_PATH, schema_text


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # Published atomically: a half-written schema would break every editor that reads it.
    write_atomic(Path(args[0]) if args else SCHEMA_PATH, schema_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
