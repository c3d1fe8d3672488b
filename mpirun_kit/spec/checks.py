"""Contradictions a JSON Schema cannot express, found in a built ``JobSpec``.

Place in the data flow: load.py builds the JobSpec from a schema-valid value, then asks
``check_spec`` (8 processes per host on a 4-GPU instance, an FSx channel without subnets, a
secret-looking env name sent to SageMaker in plain text, an unknown ``${...}`` reference, ...)
and, for a spec file on this machine, ``local_channel_findings``.  Each problem is a
``Finding`` located by the key path's line (findings.py).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from ..errors import SpecError
from ..redact import is_secret
from . import presets
from . import schema as S
from .findings import Finding, Path_, did_you_mean, line_of, render_path
from .schema import MACRO_RE, STACK_RE


def check_spec(job: S.JobSpec, pos: dict | None = None) -> list[Finding]:
    """Contradictions a schema cannot express; empty when the spec is consistent."""
    pos = pos or {}
    out: list[Finding] = []

    def add(path: Path_, message: str) -> None:
        out.append(Finding(line_of(pos, path), render_path(path), message))

    target = job.target.type
    prog = job.program
    if (prog.module is None) == (not prog.command):
        add(("program",), "set exactly one of 'module' (runs python -m MODULE) or 'command' (an argv list); "
            f"got {'both' if prog.module else 'neither'}")
    itype = job.resources.instance_type
    gpus = None
    if itype is not None and "${" not in itype:
        try:
            presets.instance_family(itype)
            gpus = presets.gpus_for_instance(itype)
        except SpecError as exc:
            add(("resources", "instance_type"), str(exc))
    ppn = job.resources.processes_per_host
    if ppn is not None and gpus and job.pinning != "none" and ppn > gpus:
        add(("resources", "processes_per_host"),
            f"{ppn} processes per host but {itype} has {gpus} GPUs; expected at most {gpus} "
            "(one rank per GPU), or set pinning: none to share GPUs")
    try:
        presets.preset_for(job.tuning.profile, None if itype and "${" in itype else itype)
    except SpecError as exc:
        add(("tuning", "profile"), str(exc))
    if job.tuning.aws_ofi_nccl is not None:
        try:
            presets.parse_version(job.tuning.aws_ofi_nccl)
        except SpecError as exc:
            add(("tuning", "aws_ofi_nccl"), str(exc))
    for ch in job.data:
        set_kinds = [k for k, v in (("s3", ch.s3), ("efs", ch.efs_id), ("fsx", ch.fsx_id), ("local", ch.local))
                     if v is not None]
        if len(set_kinds) != 1:
            add(("data", ch.name), f"set exactly one of s3, efs, fsx, local; got {' and '.join(set_kinds) or 'none'}")
            continue
        if target == "sagemaker" and ch.kind == "local":
            add(("data", ch.name, "local"), "a local directory channel cannot reach SageMaker hosts; "
                "use s3, efs or fsx, or submit with --target local/sim/ssh")
        if target != "sagemaker" and ch.kind != "local":
            add(("data", ch.name, ch.kind), f"a {ch.kind} channel is provisioned only by target sagemaker "
                f"(this job targets {target}); add a 'local' directory for it or use --target sagemaker")
        if target == "sagemaker" and ch.kind in ("efs", "fsx"):
            if not job.vpc.subnets:
                add(("data", ch.name, ch.kind), f"an {ch.kind.upper() if ch.kind == 'efs' else 'FSx'} channel "
                    "needs the job inside the file system's VPC: set vpc.subnets (and vpc.security_groups)")
        if ch.kind == "s3" and ch.mode == "rw":
            add(("data", ch.name, "mode"), "S3 channels are read-only (File mode); use mode: ro or an EFS/FSx channel")
    if job.vpc.subnets and not job.vpc.security_groups:
        add(("vpc",), "vpc.subnets is set but vpc.security_groups is empty; SageMaker needs both "
            "(a group that allows all traffic to itself, for MPI and NCCL)")
    if target == "sagemaker":
        sm = job.target.sagemaker
        for key, val, hint in (("role", sm.role, "an IAM role ARN SageMaker can assume"),
                               ("output_s3", sm.output_s3, "an s3:// URI for output artifacts")):
            if not val:
                add(("target", "sagemaker", key), f"required for target sagemaker: {hint}")
        if not job.image:
            add(("image",), "required for target sagemaker: the training image URI (ECR)")
        if not itype:
            add(("resources", "instance_type"), "required for target sagemaker, e.g. ml.p4d.24xlarge")
        elif "${" not in itype and not itype.startswith("ml."):
            add(("resources", "instance_type"), f"SageMaker instance types start with 'ml.'; got {itype!r}, "
                f"did you mean 'ml.{itype}'?")
        allowed = set(sm.allow_plaintext_secrets)
        for section, pairs in (("env", job.env), ("hyperparameters", job.hyperparameters)):
            for name, _ in pairs:
                if is_secret(name) and name not in allowed:
                    add((section, name), "looks like a secret, and target sagemaker sends env and hyperparameters "
                        "in plain text (DescribeTrainingJob and the console show them to anyone allowed to read the "
                        "job); fetch it at run time instead (Secrets Manager through the job's role), or list "
                        f"{name!r} in target.sagemaker.allow_plaintext_secrets to send it anyway")
        for name in sorted(allowed - {n for n, _ in job.env + job.hyperparameters}):
            add(("target", "sagemaker", "allow_plaintext_secrets"),
                f"{name!r} is neither an env nor a hyperparameters name of this spec; remove it")
        if job.spot.enabled:
            if job.spot.max_wait_s is not None and job.spot.max_wait_s < sm.max_run_s:
                add(("spot", "max_wait_s"), f"{job.spot.max_wait_s} is less than target.sagemaker.max_run_s "
                    f"({sm.max_run_s}); SageMaker needs max_wait_s >= max_run_s")
    elif job.spot.enabled:
        add(("spot", "enabled"), f"spot capacity exists only on target sagemaker; this job targets {target}")
    if target == "ssh":
        if not job.target.ssh.hosts:
            add(("target", "ssh", "hosts"), "required for target ssh: a list of hosts ('name' or 'name:slots')")
        elif job.resources.hosts is not None and job.resources.hosts != len(job.target.ssh.hosts):
            add(("resources", "hosts"), f"{job.resources.hosts} but target.ssh.hosts lists "
                f"{len(job.target.ssh.hosts)}; drop resources.hosts or make them agree")
    if target == "local" and (job.resources.hosts or 1) > 1:
        add(("resources", "hosts"), f"target local runs on this machine only, got {job.resources.hosts} hosts; "
            "use target sim to simulate several hosts, or ssh/sagemaker for real ones")
    if job.retries and target == "ssh":
        add(("retries",), "retries are supported by targets local, sim and sagemaker; set 0 for ssh")
    out.extend(_check_macros(job, pos))
    out.extend(Finding(line_of(pos, path), render_path(path), msg) for path, msg in string_problems(job))
    return out


#: the kernel's limit on one argument or environment string, NUL included (MAX_ARG_STRLEN: 32 pages of 4 KiB).
MAX_ARG_STRLEN = 131072
#: fields whose strings may span lines (a ``python -c`` program, a description, a multi-line env value): a tab
#: and a newline belong there; every other string of a spec is one line without control characters.
_MULTILINE = {("description",), ("program", "command"), ("program", "args"), ("env",), ("hyperparameters",)}


def _spec_strings(value, path: Path_) -> Iterable[tuple[Path_, str, bool]]:
    """Every string of a spec dataclass as (key path, text, is a pair's name), data channels by their name."""
    import dataclasses

    if isinstance(value, str):
        yield path, value, False
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            if f.name != "source":
                yield from _spec_strings(getattr(value, f.name), path + (f.name,))
    elif isinstance(value, tuple):
        for i, v in enumerate(value):
            if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str):   # Pairs: (name, value)
                yield path + (v[0],), v[0], True
                yield from _spec_strings(v[1], path + (v[0],))
            else:
                yield from _spec_strings(v, path + (getattr(v, "name", i),))


def string_problems(job: S.JobSpec) -> list[tuple[Path_, str]]:
    """(key path, why) for each string that could break out of the argv or script it reaches: a NUL anywhere
    (no argv or environment can hold one), a control character in a one-line value (a newline in an #SBATCH
    value starts a shell line of the batch script; a trailing one passes a pattern ending in ``$``), an
    environment string or argument longer than the kernel passes.  compile.py asks again once
    ``${stack:...}`` outputs are in."""
    out = []
    for path, text, is_name in _spec_strings(job, ()):
        multiline = not is_name and any(path[:len(m)] == m for m in _MULTILINE)
        bad = next((i for i, c in enumerate(text) if (ord(c) < 32 or ord(c) == 127)
                    and not (multiline and c in "\t\n")), None)
        if bad is not None:
            c = text[bad]
            name = {"\0": "a NUL character (\\0)", "\n": "a newline (\\n)", "\r": "a carriage return (\\r)",
                    "\t": "a tab (\\t)"}.get(c, f"a control character ({c!r})")
            where = "a name" if is_name else "this value"
            allowed = "" if c == "\0" or not multiline else " (a tab or newline may be; no other control character)"
            out.append((path, f"holds {name} at character {bad + 1}; {where} must be text without control "
                              f"characters{allowed}: a NUL cannot reach a program, and a line break or other control "
                              "character could start a new line of the script or command it goes into"))
            continue
        if path[:1] == ("env",) and not is_name:
            size = len(f"{path[1]}={text}".encode()) + 1
        elif path[:2] in (("program", "args"), ("program", "command")):
            size = len(text.encode()) + 1
        else:
            continue
        if size > MAX_ARG_STRLEN:
            out.append((path, f"is {size} bytes {'as NAME=VALUE ' if path[0] == 'env' else ''}(with its NUL); the "
                              f"kernel passes at most {MAX_ARG_STRLEN} bytes per argument or environment string "
                              "(MAX_ARG_STRLEN): put the value in a file and pass its path"))
    return out


def _strings(job: S.JobSpec) -> Iterable[tuple[Path_, str]]:
    for i, a in enumerate(job.program.args):
        yield ("program", "args", i), a
    for i, a in enumerate(job.program.command):
        yield ("program", "command", i), a
    for k, v in job.env:
        yield ("env", k), v
    for k, v in job.hyperparameters:
        yield ("hyperparameters", k), v


def _s3_strings(job: S.JobSpec) -> Iterable[tuple[Path_, str]]:
    """The spec's S3 paths: the only place ``${job_name}`` (the training job's name) means something."""
    sm = job.target.sagemaker
    for key in ("output_s3", "tensorboard_s3"):
        if getattr(sm, key):
            yield ("target", "sagemaker", key), getattr(sm, key)
    if job.checkpoint.s3:
        yield ("checkpoint", "s3"), job.checkpoint.s3
    for ch in job.data:
        if ch.s3:
            yield ("data", ch.name, "s3"), ch.s3


def _stack_only_strings(job: S.JobSpec) -> Iterable[tuple[Path_, str]]:
    """Values a stack output may fill but nothing else: ``${job_name}`` or ``${data:...}`` there would be
    sent to AWS as written."""
    sm = job.target.sagemaker
    for path, value in ((("image",), job.image), (("target", "sagemaker", "role"), sm.role),
                        (("target", "sagemaker", "submit_role"), sm.submit_role)):
        if value:
            yield path, value
    for key in ("subnets", "security_groups"):
        for i, v in enumerate(getattr(job.vpc, key)):
            yield ("vpc", key, i), v
    for ch in job.data:
        for kind, key, value in (("fsx", "file_system_id", ch.fsx_id), ("fsx", "mount_name", ch.fsx_mount_name),
                                 ("efs", "file_system_id", ch.efs_id)):
            if value:
                yield ("data", ch.name, kind, key), value


def _check_macros(job: S.JobSpec, pos: dict) -> list[Finding]:
    names = {c.name for c in job.data}
    out = []
    for path, text in _stack_only_strings(job):
        for m in MACRO_RE.finditer(text):
            if not STACK_RE.match(m.group(1)):
                out.append(Finding(line_of(pos, path), render_path(path),
                                   f"unknown reference ${{{m.group(1)}}} here; expected a value or "
                                   "${stack:STACK.OutputKey}"))
    for path, text in _s3_strings(job):
        for m in MACRO_RE.finditer(text):
            if not (STACK_RE.match(m.group(1)) or m.group(1) == "job_name"):
                out.append(Finding(line_of(pos, path), render_path(path),
                                   f"unknown reference ${{{m.group(1)}}} in an S3 path; expected ${{job_name}} (the "
                                   "training job's name, set at submit) or ${stack:STACK.OutputKey}"))
    for path, text in _strings(job):
        for m in MACRO_RE.finditer(text):
            body = m.group(1)
            if STACK_RE.match(body) or body in ("checkpoint", "output") or \
                    (body.startswith("data:") and body[5:] in names):
                continue
            if body.startswith("data:"):
                msg = (f"${{{body}}} names no data channel; {did_you_mean(body[5:], names)}"
                       f"channels: {', '.join(sorted(names)) or 'none'}")
            else:
                msg = (f"unknown reference ${{{body}}}; expected ${{data:CHANNEL}}, ${{checkpoint}}, ${{output}} "
                       f"or ${{stack:STACK.OutputKey}}, or write $${{{body}}} for a literal ${{{body}}} (the shell's)")
            out.append(Finding(line_of(pos, path), render_path(path), msg))
    return out


def local_channel_findings(job: S.JobSpec, base_dir: Path, pos: dict | None = None) -> list[Finding]:
    """Local data channels of a job that runs on this machine (targets local and sim) must be directories
    here: a missing one would otherwise surface only as the program's own "file not found", mid-job.
    Relative paths are the spec's own directory's, as cli/resolve.py resolves them.  A ``mode: rw``
    channel may be missing (the program writes it, e.g. the demo's synthetic data), not be a file."""
    if job.target.type not in ("local", "sim"):
        return []
    out = []
    for ch in job.data:
        if ch.kind != "local" or not ch.local or "${" in ch.local:
            continue
        where = Path(os.path.abspath(base_dir / ch.local))
        if not where.is_dir() and (ch.mode != "rw" or where.exists()):
            what = "is not a directory" if where.exists() else "does not exist"
            out.append(Finding(line_of(pos or {}, ("data", ch.name, "local")), render_path(("data", ch.name, "local")),
                               f"{ch.local!r} {what} (resolved against the spec's directory: {where}); create it "
                               "or point the channel at the data's directory"))
    return out
