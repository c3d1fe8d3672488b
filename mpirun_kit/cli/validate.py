"""`mpirun_kit validate PATH...`: check job specs (files or directories of *.yaml) without running them.

Argument parsing and file discovery only; checking is spec/load.py (schema,
contradictions) and spec/compile.py (with ``${stack:...}`` references replaced
by placeholders, so no AWS access is needed).  CI runs ``validate jobs/``.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import SpecError


class _PlaceholderOutputs(dict):
    """Any output of any stack: validation checks structure, not live values."""

    def __init__(self, stack: str):
        super().__init__()
        self.stack = stack

    def __contains__(self, key) -> bool:
        return True

    def __missing__(self, key: str) -> str:
        return f"<{self.stack}.{key}>"


def spec_files(paths: list[str]) -> list[Path]:
    """Files named, plus *.yaml/*.yml under named directories, sorted.

    Raises:
        SpecError: a path that does not exist, or a directory with no specs.
    """
    out: list[Path] = []
    for raw in paths:
        if not raw.strip():
            raise SpecError("validate: an empty PATH; name a job spec file or a directory of them, e.g. jobs/")
        p = Path(raw)
        if p.is_dir():
            found = sorted(q for q in p.rglob("*") if q.suffix in (".yaml", ".yml") and q.is_file())
            if not found:
                raise SpecError(f"{p}: no *.yaml or *.yml job specs in this directory")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise SpecError(f"{p}: no such file or directory; expected a job spec or a directory of them")
    return out


def validate_file(path: Path, target: str | None = None) -> tuple[bool, str]:
    """(ok, message) for one spec; the message lists every problem."""
    from ..spec.compile import compile_job
    from ..spec.resolve import load_spec

    try:
        job = load_spec(path, target)
        compiled = compile_job(job, resolver=_PlaceholderOutputs)
    except SpecError as exc:
        return False, str(exc)
    summary = f"{path}: ok ({job.name}, target {job.target.type}, {len(compiled.hosts)} host(s))"
    from ..stack.infra import key_channel_warnings

    warnings = compiled.warnings + key_channel_warnings(job)
    if warnings:
        summary += "".join(f"\n  warning: {w}" for w in warnings)
    return True, summary


def _validate(args) -> int:
    results = [(str(f), *validate_file(f, args.target)) for f in spec_files(args.paths)]
    if args.json:
        print(json.dumps([{"file": f, "ok": ok, "message": m} for f, ok, m in results], indent=2))
    else:
        for _, _, message in results:
            print(message)
    bad = sum(1 for _, ok, _ in results if not ok)
    if bad and not args.json:
        print(f"{bad} of {len(results)} spec(s) invalid")
    return SpecError.exit_code if bad else 0


def register(subparsers) -> None:
    from ..errors import ExitCode
    from .main import add_command, exit_codes

    p = add_command(
        subparsers, "validate",
        help="check job specs (files or directories) against the schema and for contradictions",
        description="Validate job specs: schema (unknown keys with suggestions, types, required keys), then "
                    "contradictions (processes per host vs GPUs, FSx/EFS without subnets, ...). ${stack:...} "
                    "references are not resolved, so no AWS access is needed. Every problem is reported as "
                    "FILE:LINE: key.path: message.",
        examples=["mpirun_kit validate jobs/", "mpirun_kit validate jobs/maskrcnn.yaml --target sagemaker",
                  "mpirun_kit validate jobs/ --json"],
        codes=exit_codes(ExitCode.BAD_INPUT, notes={0: "every spec is valid",
                                                    64: "at least one invalid spec, or a missing path"}))
    p.add_argument("paths", nargs="+", metavar="PATH", help="job spec files or directories (searched for *.yaml)")
    p.add_argument("--target", choices=("local", "sim", "ssh", "sagemaker"),
                   help="validate as if submitted with --target")
    p.add_argument("--json", action="store_true", help="one JSON list of {file, ok, message}")
    p.set_defaults(func=_validate)
