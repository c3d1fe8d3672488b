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


def _build(raw: dict, source: str, target_override: str | None) -> S.JobSpec:
    t = raw.get("target") or {}
    ssh = t.get("ssh") or {}
    sm = t.get("sagemaker") or {}
    res = raw.get("resources") or {}
    prog = raw["program"]
    mpi = raw.get("mpi") or {}
    tun = raw.get("tuning") or {}
    ppn = res.get("processes_per_host")
    channels = []
    for name, ch in (raw.get("data") or {}).items():
        efs, fsx = ch.get("efs") or {}, ch.get("fsx") or {}
        channels.append(S.Channel(
            name=name, s3=ch.get("s3"), efs_id=efs.get("file_system_id"), fsx_id=fsx.get("file_system_id"),
            fsx_mount_name=fsx.get("mount_name"), path=str(efs.get("path") or fsx.get("path") or "/"),
            local=ch.get("local"), mode=ch.get("mode", "ro"), mount=ch.get("mount")))
    spot = raw.get("spot") or {}
    vpc = raw.get("vpc") or {}
    efa = tun.get("efa", "auto")
    return S.JobSpec(
        name=raw["name"],
        api_version=raw["apiVersion"],
        description=raw.get("description", ""),
        target=S.Target(
            type=target_override or t.get("type", "local"),
            ssh=S.SshTarget(**{k: (tuple(v) if k == "hosts" else v) for k, v in ssh.items()}),
            sim=S.SimTarget(**(t.get("sim") or {})),
            slurm=S.SlurmTarget(**{k: (str(v) if k == "time" else tuple(v) if isinstance(v, list) else v)
                                   for k, v in (t.get("slurm") or {}).items()}),
            sagemaker=S.SageMakerTarget(**{k: (_pairs(v) if k == "tags" else tuple(v) if k == "allow_plaintext_secrets"
                                               else v) for k, v in sm.items()}),
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
        mpi=S.Mpi(flavour=mpi.get("flavour", "auto"), mca=_pairs(mpi.get("mca")),
                  options=tuple(mpi.get("options") or ())),
        tuning=S.Tuning(profile=tun.get("profile", "auto"), aws_ofi_nccl=tun.get("aws_ofi_nccl"),
                        efa=efa if isinstance(efa, str) else _scalar(efa)),
        pinning=raw.get("pinning", "auto"),
        data=tuple(channels),
        checkpoint=S.Location(**(raw.get("checkpoint") or {})),
        output=S.Location(**(raw.get("output") or {})),
        vpc=S.Vpc(subnets=tuple(vpc.get("subnets") or ()), security_groups=tuple(vpc.get("security_groups") or ())),
        timeouts=S.JobTimeouts(**(raw.get("timeouts") or {})),
        retries=raw.get("retries", 0),
        spot=S.Spot(enabled=spot.get("enabled", False), max_wait_s=spot.get("max_wait_s")),
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
