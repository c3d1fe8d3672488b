"""`mpirun_kit validate PATH...`: check job specs (files or directories of *.yaml) without running them.

Argument parsing and file discovery only; checking is spec/load.py (the schema: findings.py;
contradictions: checks.py) and spec/compile.py (with ``${stack:...}`` references replaced
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
    """Files named, plus *.yaml/*.yml under named directories, sorted.  A path that is neither is kept
    as a file: reading it fails with the same words as `submit` (spec/load.unreadable_spec).

    Raises:
        SpecError: an empty path, or a directory with no specs.
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
        else:
            out.append(p)
    return out


def validate_file(path: Path, target: str | None = None) -> dict:
    """One spec checked: {file, ok, job, target, hosts, problems: [{line, key, message}], warnings}.

    ``job``, ``target`` and ``hosts`` are null when the spec did not load; every problem is listed.
    """
    from ..spec.compile import compile_job
    from ..spec.findings import JobSpecError
    from .resolve import load_spec

    result: dict = {"file": str(path), "ok": False, "job": None, "target": None, "hosts": None,
                    "problems": [], "warnings": []}
    try:
        job = load_spec(path, target)
        result.update(job=job.name, target=job.target.type)
        compiled = compile_job(job, resolver=_PlaceholderOutputs)
    except JobSpecError as exc:
        result["problems"] = [{"line": f.line, "key": f.path or None, "message": f.message} for f in exc.findings]
        result["text"] = str(exc)
        return result
    except SpecError as exc:
        result["problems"] = [{"line": None, "key": None, "message": str(exc)}]
        result["text"] = f"{path}: {exc}"
        return result
    from ..stack.infra import key_channel_warnings

    result.update(ok=True, hosts=len(compiled.hosts), warnings=list(compiled.warnings + key_channel_warnings(job)))
    result["text"] = f"{path}: ok ({job.name}, target {job.target.type}, {len(compiled.hosts)} host(s))" + "".join(
        f"\n  warning: {w}" for w in result["warnings"])
    return result


def _validate(args) -> int:
    results = [validate_file(f, args.target) for f in spec_files(args.paths)]
    if args.json:
        print(json.dumps([{k: v for k, v in r.items() if k != "text"} for r in results], indent=2))
    else:
        for r in results:
            print(r["text"])
    bad = sum(1 for r in results if not r["ok"])
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
    p.add_argument("--target", choices=("local", "sim", "ssh", "sagemaker", "slurm"),
                   help="validate as if submitted with --target")
    p.add_argument("--json", action="store_true", help="one JSON list of {file, ok, job, target, hosts, problems: [{line, key, message}], warnings}")
    p.set_defaults(func=_validate)
