"""YAML job spec -> validated ``JobSpec``, with errors a user can act on.

Place in the data flow: first step of ``plan``/``submit``/``validate``.  Text is
parsed with PyYAML's safe loader, keeping each key's line (findings.py), the value
is checked against ``schema.JOB_SCHEMA`` (jsonschema, findings.py), then built
into the frozen dataclasses that schema was made from (shape.decode: no line here per
section or field), then checked for contradictions that a schema cannot express (checks.py).

Every problem becomes a ``SpecError`` (subclass ``JobSpecError``) whose message
lists every finding as ``FILE:LINE: key.path: expected X, got Y`` with a
"did you mean" for misspelt keys.  Nothing else escapes: the loader is fuzzed.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from . import schema as S
from .checks import check_spec, local_channel_findings
from .findings import (MAX_SPEC_BYTES, Finding, JobSpecError, check_keys, kind_of, line_of, parse_yaml,
                       schema_findings)
from .shape import decode


def _build(raw: dict, source: str, target_override: str | None) -> S.JobSpec:
    """The JobSpec from a mapping JOB_SCHEMA accepted: every section from its declaration (shape.decode)."""
    job = decode(S.JobSpec, raw, source=source)
    if target_override:
        job = replace(job, target=replace(job.target, type=target_override))
    return job


def load_job_text(text: str, source: str = "<spec>", *, target: str | None = None,
                  base_dir: Path | None = None) -> S.JobSpec:
    """Parse and validate spec text.

    Args:
        text: the YAML.
        source: file name for messages.
        target: overrides ``target.type`` (``submit --target``); contradictions are
            checked against the overriding target.
        base_dir: the spec's directory, given when the spec is a file on this machine: local data
            channels of jobs that run here are then checked to exist (local_channel_findings).

    Raises:
        JobSpecError: every problem found, each with line and key path.
    """
    value, pos = parse_yaml(text, source)
    if not isinstance(value, dict):
        raise JobSpecError(source, [Finding(1 if value is not None else None, "",
                                            f"expected a mapping with apiVersion, kind, name, program; "
                                            f"got {kind_of(value)}")])
    findings: list[Finding] = []
    if not check_keys(value, (), pos, findings):
        raise JobSpecError(source, findings)
    if value.get("apiVersion") not in (None, S.API_VERSION):
        raise JobSpecError(source, [Finding(line_of(pos, ("apiVersion",)), "apiVersion",
                                            f"this mpirun_kit reads {S.API_VERSION!r}; got {kind_of(value['apiVersion'])}")])
    findings = schema_findings(value, pos)
    if target is not None and target not in S.TARGETS:
        findings.append(Finding(None, "--target", f"expected one of {', '.join(S.TARGETS)}; got {target!r}"))
    if findings:
        raise JobSpecError(source, findings)
    job = _build(value, source, target)
    findings = check_spec(job, pos)
    if base_dir is not None:
        findings += local_channel_findings(job, base_dir, pos)
    if findings:
        raise JobSpecError(source, findings)
    return job


def load_job(path: str | Path, *, target: str | None = None) -> S.JobSpec:
    """Read and validate a job spec file (see ``load_job_text``)."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_SPEC_BYTES:  # before reading: a huge file is never loaded into memory
            raise JobSpecError(str(p), [Finding(None, "", f"{p.stat().st_size} bytes; a spec is at most "
                                                          f"{MAX_SPEC_BYTES} bytes: is this the right file?")])
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise JobSpecError(str(p), [Finding(None, "", unreadable_spec(p, exc))]) from exc
    return load_job_text(text, str(p), target=target, base_dir=p.parent)


def unreadable_spec(path: Path, exc: BaseException) -> str:
    """The one wording for a spec file that cannot be read (validate and submit alike), without errno."""
    if isinstance(exc, UnicodeDecodeError):
        why = f"not UTF-8 text (byte {exc.start})"
    elif isinstance(exc, FileNotFoundError) or (isinstance(exc, OSError) and not path.exists()):
        why = "no such file or directory"
        if not path.is_absolute():
            why += f" (relative to the current directory {Path.cwd()})"
    elif isinstance(exc, IsADirectoryError) or path.is_dir():
        why = "a directory (`validate` takes directories; `plan` and `submit` take one spec file)"
    elif isinstance(exc, PermissionError):
        why = "permission denied"
    else:
        why = (exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__).lower()
    return f"cannot read the job spec: {why}; expected a UTF-8 YAML job spec file"
