"""YAML job spec -> validated ``JobSpec``, with errors a user can act on.

Place in the data flow: first step of ``plan``/``submit``/``validate``.  Text is
parsed with PyYAML's safe loader, keeping each key's line (``yaml.compose``
node marks); the value is checked against ``schema.JOB_SCHEMA`` (jsonschema),
then built into frozen dataclasses, then checked for contradictions that a
schema cannot express (8 processes per host on a 4-GPU instance, an FSx channel
without subnets, ...).

Every problem becomes a ``SpecError`` (subclass ``JobSpecError``) whose message
lists every finding as ``FILE:LINE: key.path: expected X, got Y`` with a
"did you mean" for misspelt keys.  Nothing else escapes: the loader is fuzzed.
"""
from __future__ import annotations

import datetime
import difflib
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import yaml

from ..errors import SpecError
from . import presets
from ..redact import is_secret
from . import schema as S

#: macros that program args/env may use besides ${stack:...}; resolved per target in compile.py.
MACRO_RE = re.compile(r"\$\{([^}]*)\}")
STACK_RE = re.compile(r"^stack:([A-Za-z][A-Za-z0-9-]*)\.([A-Za-z0-9]+)$")


@dataclass(frozen=True)
class Finding:
    """One problem in a spec, located."""

    line: int | None
    path: str
    message: str

    def render(self, source: str) -> str:
        where = f"{source}:{self.line}" if self.line else source
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class JobSpecError(SpecError):
    """A job spec failed to parse or validate; ``findings`` holds each problem."""

    def __init__(self, source: str, findings: Iterable[Finding]):
        self.source = source
        self.findings = tuple(sorted(findings, key=lambda f: (f.line or 0, f.path)))
        lines = [f.render(source) for f in self.findings[:20]]
        if len(self.findings) > 20:
            lines.append(f"... and {len(self.findings) - 20} more")
        head = f"{source}: invalid job spec ({len(self.findings)} problem(s)):\n  " if len(lines) > 1 else ""
        super().__init__(head + "\n  ".join(lines))


# --- parsing with positions --------------------------------------------------------------

Path_ = tuple  # a key path: tuple of str keys and int indexes


#: deeper than any spec needs; bounds recursion on hostile input.
MAX_DEPTH = 32
#: a spec is a few KiB; anything past this is refused before it is parsed.
MAX_SPEC_BYTES = 1 << 20


class _Unwalkable(Exception):
    """A node graph that is not a tree of reasonable depth (recursive alias, absurd nesting)."""

    def __init__(self, finding: Finding):
        super().__init__(finding.message)
        self.finding = finding


def _positions(node: yaml.Node, path: Path_, out: dict, findings: list, active: frozenset = frozenset(),
               visited: set | None = None) -> None:
    """Record the 1-based line of every key/item; flag duplicate keys (YAML keeps the last silently).

    Raises:
        _Unwalkable: an alias (``*name``: a node reached twice; nested aliases multiply a 300-byte
            file into billions of values, so none are accepted), an anchor used inside itself (the
            value would be infinite) or nesting past MAX_DEPTH.
    """
    line = node.start_mark.line + 1
    if id(node) in active:
        raise _Unwalkable(Finding(line, render_path(path), "an anchor is used inside itself (a recursive alias); "
                                                           "a spec must be a plain tree"))
    visited = set() if visited is None else visited
    if id(node) in visited:
        raise _Unwalkable(Finding(out.get(path, line), render_path(path), "YAML aliases (*name) are not accepted in a spec "
                                                           "(each can multiply the file's size); write the value out"))
    visited.add(id(node))
    if len(path) > MAX_DEPTH:
        raise _Unwalkable(Finding(line, render_path(path[:3]) + "...",
                                  f"nested more than {MAX_DEPTH} levels deep; no spec key goes that deep"))
    active = active | {id(node)}
    out.setdefault(path, line)
    if isinstance(node, yaml.MappingNode):
        seen: dict = {}
        for knode, vnode in node.value:
            key = knode.value if isinstance(knode, yaml.ScalarNode) else None
            if key is not None and key in seen and knode.tag.endswith(":str"):
                findings.append(Finding(knode.start_mark.line + 1, render_path(path + (key,)),
                                        f"duplicate key (first at line {seen[key]}); keep one"))
            if key is not None:
                seen.setdefault(key, knode.start_mark.line + 1)
                out[path + (key,)] = knode.start_mark.line + 1
                _positions(vnode, path + (key,), out, findings, active, visited)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _positions(item, path + (i,), out, findings, active, visited)


def render_path(path: Path_) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def parse_yaml(text: str, source: str) -> tuple[Any, dict]:
    """Parse one YAML document; return (value, {key path: line}).

    Raises:
        JobSpecError: not YAML, several documents, or duplicate keys.
    """
    findings: list[Finding] = []
    if len(text) > MAX_SPEC_BYTES:
        raise JobSpecError(source, [Finding(None, "", f"{len(text)} characters; a spec is at most {MAX_SPEC_BYTES} "
                                                      "(a few KiB is usual): is this the right file?")])
    try:
        # The reader checks for unprintable characters already in the constructor.
        loader = yaml.SafeLoader(text)
    except yaml.YAMLError as exc:
        raise JobSpecError(source, [Finding(None, "", f"not valid YAML: {exc}; remove control characters")]) from exc
    pos: dict = {}
    try:
        node = loader.get_single_node()
        # Aliases are refused on the node graph (linear) before anything walks the value, whose
        # expansion is what makes an alias bomb slow.
        if node is not None:
            _positions(node, (), pos, findings)
        value = loader.construct_document(node) if node is not None else None
    except _Unwalkable as exc:
        raise JobSpecError(source, [exc.finding]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        raise JobSpecError(source, [Finding(line, "", f"not valid YAML: {problem}; fix the syntax there")]) from exc
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        # e.g. a timestamp like 2024-13-45 (ValueError) or a mapping used as a key (TypeError).
        raise JobSpecError(source, [Finding(None, "", f"not valid YAML: {exc}")]) from exc
    finally:
        loader.dispose()
    if findings:
        raise JobSpecError(source, findings)
    return value, pos


def _line(pos: dict, path: Path_) -> int | None:
    path = tuple(path)
    while path not in pos and path:
        path = path[:-1]
    return pos.get(path)


# --- schema validation -------------------------------------------------------------------

def _kind(value: Any) -> str:
    if value is None:
        return "null (empty value)"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, (datetime.date, datetime.datetime)):
        return f"a date {value} (quote it to make it a string)"
    return f"a {type(value).__name__}"


_TYPE_WORDS = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
               "object": "a mapping", "array": "a list", "null": "null"}


def _lit(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else repr(value)


def _expected(schema: dict) -> str:
    """Words for what a subschema accepts."""
    if "description" in schema and (schema.get("pattern") or "anyOf" in schema):
        return schema["description"]
    if "const" in schema:
        return _lit(schema["const"])
    if "enum" in schema:
        return "one of " + ", ".join(_lit(e) for e in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_expected(s) for s in schema["anyOf"])
    t = schema.get("type")
    words = " or ".join(_TYPE_WORDS[x] for x in t) if isinstance(t, list) else _TYPE_WORDS.get(t, "a value")
    if "minimum" in schema and "maximum" in schema:
        words += f" from {schema['minimum']} to {schema['maximum']}"
    elif "minimum" in schema:
        words += f" >= {schema['minimum']}"
    elif "maximum" in schema:
        words += f" <= {schema['maximum']}"
    if "exclusiveMinimum" in schema:
        words += f" > {schema['exclusiveMinimum']}"
    if "pattern" in schema:
        words += f" matching {schema['pattern']}"
    return words


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""


def _check_keys(value: Any, path: Path_, pos: dict, findings: list) -> bool:
    """YAML allows non-string keys (1:, true:, [a]:); specs do not.  Returns False if any."""
    ok = True
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                findings.append(Finding(_line(pos, path), render_path(path),
                                        f"key {k!r} is {_kind(k)}; keys must be strings (quote it)"))
                ok = False
            else:
                ok = _check_keys(v, path + (k,), pos, findings) and ok
    elif isinstance(value, list):
        for i, v in enumerate(value):
            ok = _check_keys(v, path + (i,), pos, findings) and ok
    return ok


def _schema_findings(value: dict, pos: dict, schema: dict = S.JOB_SCHEMA) -> list[Finding]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    findings = []
    for err in validator.iter_errors(value):
        path = tuple(err.absolute_path)
        where = render_path(path)
        kw = err.validator
        if kw == "additionalProperties" and isinstance(err.instance, dict):
            props = err.schema.get("properties", {})
            for key in sorted(set(err.instance) - set(props)):
                valid = ", ".join(sorted(props)) or "none"
                findings.append(Finding(_line(pos, path + (key,)), render_path(path + (key,)),
                                        f"unknown key; {did_you_mean(key, props)}valid keys here: {valid}"))
            continue
        if kw == "required":
            missing = [k for k in err.validator_value if k not in err.instance]
            for key in missing:
                findings.append(Finding(_line(pos, path), where,
                                        f"missing required key {key!r}"))
            continue
        if "propertyNames" in err.schema_path:
            key = err.instance
            findings.append(Finding(_line(pos, path + (key,)), render_path(path + (key,)),
                                    f"{key!r} is not a valid name here; expected {_expected(err.schema)}"))
            continue
        if kw in ("enum", "const"):
            choices = err.validator_value if kw == "enum" else [err.validator_value]
            hint = did_you_mean(err.instance, [c for c in choices if isinstance(c, str)]) \
                if isinstance(err.instance, str) else ""
            findings.append(Finding(_line(pos, path), where,
                                    f"expected {_expected(err.schema)}; got {_kind(err.instance)}"
                                    + (f"; {hint.strip()}" if hint else "")))
            continue
        if kw == "minItems":
            findings.append(Finding(_line(pos, path), where,
                                    f"expected at least {err.validator_value} item(s); got an empty list"))
            continue
        findings.append(Finding(_line(pos, path), where, f"expected {_expected(err.schema)}; got {_kind(err.instance)}"))
    # One "required" error per missing key, each carrying the whole list: keep each finding once.
    return list(dict.fromkeys(findings))


def _non_finite(value: Any, path: Path_ = ()) -> Iterable[Path_]:
    """Paths of NaN/Infinity numbers (JSON parsers accept them; a schema's bounds do not catch them)."""
    if isinstance(value, float) and not math.isfinite(value):
        yield path
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _non_finite(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _non_finite(v, path + (i,))


def launch_spec_findings(raw: dict, source: str) -> list[str]:
    """Every way ``raw`` differs from ``schema.LAUNCH_SCHEMA`` (the one LaunchSpec schema), as messages."""
    findings = [Finding(None, "", "'program' is required: the argv every rank runs, e.g. [\"python\", \"train.py\"]")
                if f.message == "missing required key 'program'" and not f.path else f
                for f in _schema_findings(raw, {}, S.LAUNCH_SCHEMA)]
    findings += [Finding(None, render_path(p), "expected a finite number; got NaN or Infinity")
                 for p in _non_finite(raw)]
    return [f.render(source) for f in findings]


# --- building the JobSpec ----------------------------------------------------------------

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


def check_spec(job: S.JobSpec, pos: dict | None = None) -> list[Finding]:
    """Contradictions a schema cannot express; empty when the spec is consistent."""
    pos = pos or {}
    out: list[Finding] = []

    def add(path: Path_, message: str) -> None:
        out.append(Finding(_line(pos, path), render_path(path), message))

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


def _check_macros(job: S.JobSpec, pos: dict) -> list[Finding]:
    names = {c.name for c in job.data}
    out = []
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
                       "or ${stack:STACK.OutputKey}")
            out.append(Finding(_line(pos, path), render_path(path), msg))
    return out


def local_channel_findings(job: S.JobSpec, base_dir: Path, pos: dict | None = None) -> list[Finding]:
    """Local data channels of a job that runs on this machine (targets local and sim) must be directories
    here: a missing one would otherwise surface only as the program's own "file not found", mid-job.
    Relative paths are the spec's own directory's, as spec/resolve.py resolves them.  A ``mode: rw``
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
            out.append(Finding(_line(pos or {}, ("data", ch.name, "local")), render_path(("data", ch.name, "local")),
                               f"{ch.local!r} {what} (resolved against the spec's directory: {where}); create it "
                               "or point the channel at the data's directory"))
    return out


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
                                            f"got {_kind(value)}")])
    findings: list[Finding] = []
    if not _check_keys(value, (), pos, findings):
        raise JobSpecError(source, findings)
    if value.get("apiVersion") not in (None, S.API_VERSION):
        raise JobSpecError(source, [Finding(_line(pos, ("apiVersion",)), "apiVersion",
                                            f"this mpirun_kit reads {S.API_VERSION!r}; got {_kind(value['apiVersion'])}")])
    findings = _schema_findings(value, pos)
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
