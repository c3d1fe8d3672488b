"""YAML job spec -> validated ``JobSpec``, with errors a user can act on.

Place in the data flow: first step of ``plan``/``submit``/``validate``.  Text is
parsed with PyYAML's safe loader, keeping each key's line (findings.py), the value
is checked against ``schema.JOB_SCHEMA`` (jsonschema, findings.py), then built
into frozen dataclasses here, then checked for contradictions that a schema
cannot express (checks.py).

Every problem becomes a ``SpecError`` (subclass ``JobSpecError``) whose message
lists every finding as ``FILE:LINE: key.path: expected X, got Y`` with a
"did you mean" for misspelt keys.  Nothing else escapes: the loader is fuzzed.
"""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from . import schema as S
from .checks import check_spec, local_channel_findings
from .findings import (MAX_SPEC_BYTES, Finding, JobSpecError, check_keys, kind_of, line_of, parse_yaml,
                       schema_findings)


def _pairs(mapping: dict | None) -> tuple[tuple[str, str], ...]:
    return tuple((str(k), _scalar(v)) for k, v in (mapping or {}).items())


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _section(cls: type, raw: dict | None):
    """A section's dataclass from its mapping, field by field.

    The schema checked the mapping first, and each of its keys is the field of the same name (a test holds
    the schema's keys and the dataclass's fields equal: tests/spec/test_schema.py), so a new field needs no
    line here.  The value is made the field's kind: a list a tuple, a mapping of scalars ``Pairs``, a number
    or boolean where the field holds text (``time: 30``, ``efa: true``) that text."""
    kinds = {f.name: str(f.type) for f in fields(cls)}
    out: dict[str, Any] = {}
    for key, value in (raw or {}).items():
        kind = kinds[key]
        if kind == "Pairs":
            value = _pairs(value)
        elif isinstance(value, list):
            value = tuple(value)
        elif kind.startswith("str") and isinstance(value, (bool, int, float)):
            value = _scalar(value)
        out[key] = value
    return cls(**out)


def _build(raw: dict, source: str, target_override: str | None) -> S.JobSpec:
    t = raw.get("target") or {}
    res = raw.get("resources") or {}
    prog = raw["program"]
    ppn = res.get("processes_per_host")
    channels = []
    for name, ch in (raw.get("data") or {}).items():
        efs, fsx = ch.get("efs") or {}, ch.get("fsx") or {}
        channels.append(S.Channel(
            name=name, s3=ch.get("s3"), efs_id=efs.get("file_system_id"), fsx_id=fsx.get("file_system_id"),
            fsx_mount_name=fsx.get("mount_name"), path=str(efs.get("path") or fsx.get("path") or "/"),
            local=ch.get("local"), mode=ch.get("mode", "ro"), mount=ch.get("mount")))
    return S.JobSpec(
        name=raw["name"],
        api_version=raw["apiVersion"],
        description=raw.get("description", ""),
        target=S.Target(
            type=target_override or t.get("type", "local"),
            **{kind: _section(cls, t.get(kind)) for kind, cls in S.TARGET_SETTINGS.items()},
        ),
        resources=S.Resources(instance_type=res.get("instance_type"), hosts=res.get("hosts"),
                              processes_per_host=None if ppn in (None, "auto") else ppn),
        image=raw.get("image"),
        program=S.Program(module=prog.get("module"), command=tuple(prog.get("command") or ()),
                          args=tuple(_scalar(a) for a in prog.get("args") or ()),
                          working_dir=prog.get("working_dir")),
        hyperparameters=_pairs(raw.get("hyperparameters")),
        env=_pairs(raw.get("env")),
        env_forward=tuple(raw.get("env_forward") or ()),
        mpi=_section(S.Mpi, raw.get("mpi")),
        tuning=_section(S.Tuning, raw.get("tuning")),
        pinning=raw.get("pinning", "auto"),
        data=tuple(channels),
        checkpoint=_section(S.Location, raw.get("checkpoint")),
        output=_section(S.Location, raw.get("output")),
        vpc=_section(S.Vpc, raw.get("vpc")),
        timeouts=_section(S.JobTimeouts, raw.get("timeouts")),
        retries=raw.get("retries", 0),
        spot=_section(S.Spot, raw.get("spot")),
        source=source,
    )


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
