"""Our own template rules: what cfn-lint and checkov do not know about training clusters.

Run by the test suite over every template in cfn/ (for every combination of the
parameters' AllowedValues the template's own Rules permit) and by ``stack deploy`` for
the concrete parameter values, before any AWS call.  Rules:

FSX_S3_LINK     PERSISTENT_2 links S3 only through a DataRepositoryAssociation (it does
                not support ImportPath/ExportPath/AutoImportPolicy); ExportPath and
                AutoImportPolicy need ImportPath; a file system uses one link style; no
                association on SCRATCH_1.
FSX_THROUGHPUT  PerUnitStorageThroughput only on PERSISTENT_*, from the set valid for the
                deployment and storage type; SSD capacity 1200 GiB or a multiple of 2400.
EFA_SELF_RULES  a security group marked ``Metadata: {mpirun_kit: {efa: true}}`` has
                all-traffic ingress from itself, egress to itself and egress to anywhere
                (without the self egress EFA health checks fail); a template that creates
                a VPC marks one.
EFS_ENCRYPTED   every EFS file system is encrypted at rest.
EFS_BACKUP      every EFS file system has automatic backups enabled.
EXPORT_NOT_EMPTY an exported output never evaluates to an empty or blank string (also not
                in one branch of an ``Fn::If``): CloudFormation refuses it ("Exported values
                must not be empty or whitespace-only") only after creating every resource,
                then rolls the whole stack back.  Make the output conditional instead.

Across the repository (``check_repository``: templates, docker/build.sh and jobs/ together,
run by tests/cfn/test_rules.py):

DEFAULTS_AGREE  cfn/sagemaker-role.yaml's defaults reach what the project uses: its
                ImageRepositoryName is the repository docker/build.sh pushes to, and every
                SageMaker job in jobs/ whose role is ``${stack:NAME.RoleArn}`` pulls from that
                repository and keeps its S3 URIs under the default Prefix (infra.py's checks).
OUTPUT_REFS     a parameter described as "(<stack> stack output KEY)" names an output the
                template of that stack has (cfn/<stack>.yaml).
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from ..errors import SpecError
from .template import (NO_VALUE, UNKNOWN, Template, cfn_str, evaluate, evaluate_condition, parameter_values,
                       rule_violations)

#: MB/s/TiB valid per (deployment type, storage type) (FSx API: PerUnitStorageThroughput).
FSX_THROUGHPUT = {
    ("PERSISTENT_1", "SSD"): (50, 100, 200),
    ("PERSISTENT_1", "HDD"): (12, 40),
    ("PERSISTENT_2", "SSD"): (125, 250, 500, 1000),
}
_LEGACY_S3_KEYS = ("ImportPath", "ExportPath", "AutoImportPolicy", "ImportedFileChunkSize")
#: more combinations than this and the template should be split (or its parameters given).
MAX_SCENARIOS = 2048


@dataclass(frozen=True)
class Finding:
    """One rule violated by one resource, under one choice of parameter values."""

    rule: str
    resource: str
    message: str
    #: parameter values under which it happens (empty: always).
    when: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        when = f" [with {', '.join(f'{k}={v}' for k, v in self.when)}]" if self.when else ""
        return f"{self.rule} {self.resource}: {self.message}{when}"


def _refers_to(node: Any, logical_id: str) -> bool:
    """``!Ref X``, ``!GetAtt X.GroupId`` (or any attribute) names resource X."""
    if isinstance(node, Mapping) and len(node) == 1:
        (fn, arg), = node.items()
        if fn == "Ref":
            return arg == logical_id
        if fn == "Fn::GetAtt":
            target = arg[0] if isinstance(arg, list) else str(arg).split(".")[0]
            return target == logical_id
    return False


def _all_traffic(protocol: Any) -> bool:
    return cfn_str(protocol) in ("-1", "all")


class _Scenario:
    """The resources of a template as they come out for one set of parameter values."""

    def __init__(self, template: Template, values: Mapping[str, Any]) -> None:
        self.values = values
        self.conditions = template.parsed.get("Conditions") or {}
        self.raw: dict[str, Mapping[str, Any]] = {}
        for lid, res in template.resources.items():
            if not isinstance(res, Mapping):
                continue
            cond = res.get("Condition")
            if cond is not None and evaluate_condition(str(cond), values, self.conditions) is False:
                continue
            self.raw[str(lid)] = res

    def of_type(self, rtype: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        for lid, res in self.raw.items():
            if res.get("Type") == rtype:
                yield lid, res

    def props(self, res: Mapping[str, Any]) -> dict[str, Any]:
        p = evaluate(res.get("Properties") or {}, self.values, self.conditions)
        return p if isinstance(p, dict) else {}


def _check_fsx(s: _Scenario) -> Iterator[tuple[str, str, str]]:
    associations = [(lid, res) for lid, res in s.of_type("AWS::FSx::DataRepositoryAssociation")]
    for lid, res in s.of_type("AWS::FSx::FileSystem"):
        props = s.props(res)
        if props.get("FileSystemType") not in ("LUSTRE", UNKNOWN):
            continue
        lustre = props.get("LustreConfiguration")
        lustre = lustre if isinstance(lustre, dict) else {}
        dtype = lustre.get("DeploymentType", "SCRATCH_1")
        legacy = [k for k in _LEGACY_S3_KEYS if k in lustre]
        linked = [a for a, ares in associations if _refers_to((ares.get("Properties") or {}).get("FileSystemId"), lid)]
        if dtype == "PERSISTENT_2" and legacy:
            yield ("FSX_S3_LINK", lid,
                   f"PERSISTENT_2 does not support {', '.join(legacy)}; link S3 with an "
                   "AWS::FSx::DataRepositoryAssociation instead (or use SCRATCH_2)")
        orphans = [k for k in legacy if k != "ImportPath"]
        if orphans and "ImportPath" not in lustre:
            yield ("FSX_S3_LINK", lid, f"{', '.join(orphans)} set without ImportPath; "
                   "set ImportPath to the linked S3 location")
        if linked and "ImportPath" in lustre:
            yield ("FSX_S3_LINK", lid, f"linked to S3 both by ImportPath and by {', '.join(linked)}; "
                   "use one: ImportPath on SCRATCH_2, a DataRepositoryAssociation on PERSISTENT_2")
        if linked and dtype == "SCRATCH_1":
            yield ("FSX_S3_LINK", lid, f"SCRATCH_1 does not support data repository associations "
                   f"({', '.join(linked)}); use PERSISTENT_2")
        yield from _fsx_throughput(lid, props, lustre, dtype)


def _fsx_throughput(lid: str, props: Mapping[str, Any], lustre: Mapping[str, Any], dtype: Any) -> Iterator[tuple[str, str, str]]:
    if dtype is UNKNOWN:
        return
    storage = props.get("StorageType", "SSD")
    throughput = lustre.get("PerUnitStorageThroughput")
    if str(dtype).startswith("SCRATCH"):
        if throughput is not None:
            yield ("FSX_THROUGHPUT", lid, f"PerUnitStorageThroughput={cfn_str(throughput)} on {dtype}; "
                   "scratch file systems have a fixed throughput: remove it (or use PERSISTENT_2)")
    elif storage is not UNKNOWN and (dtype, storage) in FSX_THROUGHPUT:
        valid = FSX_THROUGHPUT[(dtype, storage)]
        if throughput is None:
            yield ("FSX_THROUGHPUT", lid, f"{dtype} {storage} needs PerUnitStorageThroughput, "
                   f"one of {', '.join(map(str, valid))} MB/s/TiB")
        elif throughput is not UNKNOWN and cfn_str(throughput) not in {str(v) for v in valid}:
            yield ("FSX_THROUGHPUT", lid, f"PerUnitStorageThroughput={cfn_str(throughput)} is not valid for "
                   f"{dtype} {storage}; expected one of {', '.join(map(str, valid))} MB/s/TiB")
    capacity = props.get("StorageCapacity")
    if storage == "SSD" and dtype in ("SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2") and capacity not in (None, UNKNOWN):
        try:
            gib = int(cfn_str(capacity))
        except ValueError:
            gib = -1
        if gib != 1200 and (gib <= 0 or gib % 2400):
            yield ("FSX_THROUGHPUT", lid, f"StorageCapacity={cfn_str(capacity)} GiB is not valid for {dtype} SSD; "
                   "expected 1200 or a multiple of 2400")


def _check_efa(s: _Scenario) -> Iterator[tuple[str, str, str]]:
    marked = []
    for lid, res in s.of_type("AWS::EC2::SecurityGroup"):
        meta = (res.get("Metadata") or {}).get("mpirun_kit") or {}
        if isinstance(meta, Mapping) and cfn_str(meta.get("efa", "false")).lower() == "true":
            marked.append((lid, res))
    if not marked and any(True for _ in s.of_type("AWS::EC2::VPC")):
        yield ("EFA_SELF_RULES", "(template)", "creates a VPC but no security group is marked for EFA; "
               "add Metadata {mpirun_kit: {efa: true}} to the training-host group and give it the self rules")
    for lid, res in marked:
        self_in = any(
            _refers_to((r.get("Properties") or {}).get("GroupId"), lid)
            and _refers_to((r.get("Properties") or {}).get("SourceSecurityGroupId"), lid)
            and _all_traffic((r.get("Properties") or {}).get("IpProtocol"))
            for _, r in s.of_type("AWS::EC2::SecurityGroupIngress"))
        self_out = any(
            _refers_to((r.get("Properties") or {}).get("GroupId"), lid)
            and _refers_to((r.get("Properties") or {}).get("DestinationSecurityGroupId"), lid)
            and _all_traffic((r.get("Properties") or {}).get("IpProtocol"))
            for _, r in s.of_type("AWS::EC2::SecurityGroupEgress"))
        inline_out = (res.get("Properties") or {}).get("SecurityGroupEgress") or []
        anywhere = any(isinstance(e, Mapping) and e.get("CidrIp") == "0.0.0.0/0" and _all_traffic(e.get("IpProtocol"))
                       for e in inline_out) or any(
            _refers_to((r.get("Properties") or {}).get("GroupId"), lid)
            and (r.get("Properties") or {}).get("CidrIp") == "0.0.0.0/0"
            and _all_traffic((r.get("Properties") or {}).get("IpProtocol"))
            for _, r in s.of_type("AWS::EC2::SecurityGroupEgress"))
        missing = [what for ok, what in (
            (self_in, "an AWS::EC2::SecurityGroupIngress with IpProtocol -1 from itself (SourceSecurityGroupId)"),
            (self_out, "an AWS::EC2::SecurityGroupEgress with IpProtocol -1 to itself (DestinationSecurityGroupId)"),
            (anywhere, "egress with IpProtocol -1 to 0.0.0.0/0"),
        ) if not ok]
        if missing:
            yield ("EFA_SELF_RULES", lid, "EFA needs all traffic within the group; missing: " + "; ".join(missing))


def _check_efs(s: _Scenario) -> Iterator[tuple[str, str, str]]:
    for lid, res in s.of_type("AWS::EFS::FileSystem"):
        props = s.props(res)
        encrypted = props.get("Encrypted")
        if encrypted is UNKNOWN or cfn_str(encrypted).lower() != "true":
            yield ("EFS_ENCRYPTED", lid, f"Encrypted={cfn_str(encrypted) if encrypted is not None else '(not set)'}; "
                   "set Encrypted: true (encryption at rest can only be chosen at creation)")
        backup = props.get("BackupPolicy")
        status = backup.get("Status") if isinstance(backup, dict) else None
        if status != "ENABLED":
            yield ("EFS_BACKUP", lid, f"BackupPolicy.Status={status if status not in (None, UNKNOWN) else '(not set)'}; "
                   "set BackupPolicy: {Status: ENABLED}")


def _check_exports(template: Template, s: _Scenario) -> Iterator[tuple[str, str, str]]:
    for key, out in (template.parsed.get("Outputs") or {}).items():
        if not isinstance(out, Mapping) or "Export" not in out:
            continue
        cond = out.get("Condition")
        if cond is not None and evaluate_condition(str(cond), s.values, s.conditions) is False:
            continue
        value = evaluate(out.get("Value"), s.values, s.conditions)
        if value is NO_VALUE or (isinstance(value, str) and not value.strip()):
            shown = "AWS::NoValue" if value is NO_VALUE else repr(value)
            yield ("EXPORT_NOT_EMPTY", f"Outputs.{key}", f"exported value is {shown}; CloudFormation refuses "
                   "empty exports and rolls the stack back: give the output a Condition instead of an empty branch")


def _walk(node: Any) -> Iterator[Mapping[str, Any]]:
    if isinstance(node, Mapping):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def parameter_choices(template: Template) -> dict[str, tuple[str, ...]]:
    """The values worth trying for each parameter the conditions and resources use.

    A parameter with AllowedValues tries each; one without tries its default, every
    literal a condition or rule compares it with, and one value equal to none of them
    (``<Name>``) -- enough to take every branch of every ``Fn::If``.
    """
    sections = [template.parsed.get("Conditions") or {}, template.parsed.get("Rules") or {}, template.resources,
                template.parsed.get("Outputs") or {}]
    used: set[str] = set()
    literals: dict[str, set[str]] = {}
    for node in _walk(sections):
        if len(node) == 1 and isinstance(node.get("Ref"), str):
            used.add(node["Ref"])
        args = node.get("Fn::Equals") if len(node) == 1 else None
        if isinstance(args, list) and len(args) == 2:
            for a, b in (args, args[::-1]):
                if isinstance(a, Mapping) and isinstance(a.get("Ref"), str) and not isinstance(b, (Mapping, list)):
                    literals.setdefault(a["Ref"], set()).add(cfn_str(b))
    choices = {}
    for name in sorted(used):
        p = template.parameter(name)
        if p is None:
            continue
        if p.allowed_values:
            choices[name] = p.allowed_values
        elif name in literals:
            tried = set(literals[name]) | ({p.default} if p.default is not None else set())
            choices[name] = (*sorted(tried), f"<{name}>")
    return choices


def scenarios(template: Template) -> Iterator[dict[str, str]]:
    """Every combination of the ``parameter_choices``; other parameters keep their defaults.

    Combinations the template's own Rules reject are skipped by ``check_template``
    (CloudFormation refuses them before creating anything).
    """
    choices = parameter_choices(template)
    total = 1
    for c in choices.values():
        total *= len(c)
    if total > MAX_SCENARIOS:
        raise SpecError(f"{template.path}: {total} combinations of {', '.join(choices)} to check, over {MAX_SCENARIOS}; "
                        "pass parameter values (check_template(template, values)) or split the template")
    for combo in itertools.product(*choices.values()):
        yield dict(zip(choices, combo))


def check_template(template: Template, given: Mapping[str, str] | None = None) -> tuple[Finding, ...]:
    """Run every rule; with ``given`` for those parameter values, else for every scenario.

    Returns:
        Findings, each once, with the first parameter choice that shows it.
    """
    runs = [dict(given)] if given is not None else list(scenarios(template))
    seen: dict[tuple[str, str, str], Finding] = {}
    for run in runs:
        values = parameter_values(template, run)
        if given is None and rule_violations(template, values):
            continue
        s = _Scenario(template, values)
        for rule, resource, message in (*_check_fsx(s), *_check_efa(s), *_check_efs(s), *_check_exports(template, s)):
            key = (rule, resource, message)
            if key not in seen:
                when = tuple(sorted(run.items())) if given is None else ()
                seen[key] = Finding(rule, resource, message, when)
    return tuple(seen.values())


_OUTPUT_REF = re.compile(r"\(([a-z-]+) stack output ([A-Za-z0-9]+)\)")


def check_repository(root: str) -> tuple[Finding, ...]:
    """The cross-file rules DEFAULTS_AGREE and OUTPUT_REFS over a checkout at ``root``."""
    from pathlib import Path

    from ..spec.compile import resolve_stack_refs
    from ..spec.load import load_job
    from .infra import check_job_infrastructure, key_channel_warnings, role_outputs_from_template
    from .template import load_template

    base = Path(root)
    templates = {p.stem: load_template(str(p)) for p in sorted((base / "cfn").glob("*.yaml"))}
    found: list[Finding] = []
    for name, t in templates.items():
        for p in t.parameters:
            for stack, key in _OUTPUT_REF.findall(p.description):
                other = templates.get(stack)
                if other is None or key not in (other.parsed.get("Outputs") or {}):
                    found.append(Finding("OUTPUT_REFS", f"{t.path} {p.name}", f"names {stack} stack output {key}, "
                                         f"which cfn/{stack}.yaml does not have"))
    role_t = templates.get("sagemaker-role")
    if role_t is None:
        return tuple(found)
    role = role_outputs_from_template(role_t, {"BucketName": "example-bucket"})
    build = base / "docker" / "build.sh"
    pushed = re.findall(r'^repository="([^"]+)"$', build.read_text(), re.M) if build.is_file() else []
    if pushed and pushed[0] != role.get("RoleImageRepository"):
        found.append(Finding("DEFAULTS_AGREE", f"{role_t.path} ImageRepositoryName",
                             f"default {role.get('RoleImageRepository')!r}, but docker/build.sh pushes to "
                             f"{pushed[0]!r}; the role could not pull the image"))
    for spec in sorted((base / "jobs").glob("*.yaml")):
        job = load_job(spec)
        m = re.match(r"^\$\{stack:([A-Za-z][A-Za-z0-9-]*)\.RoleArn\}$", job.target.sagemaker.role or "")
        if job.target.type != "sagemaker" or m is None:
            continue
        # A spec that names its bucket literally is checked with that bucket; one that takes it from the
        # role stack (${stack:ROLE.RoleS3Uri}, as jobs/maskrcnn.yaml does) with an example bucket.
        bucket = next((u.split("/")[2] for u in (job.target.sagemaker.output_s3 or "",) if u.startswith("s3://")), "")
        given = role_outputs_from_template(role_t, {"BucketName": bucket}) if bucket else role
        outputs = {m.group(1): {"RoleArn": "arn:aws:iam::123456789012:role/r", **given}}

        def placeholder(stack: str, known: dict = outputs) -> dict:
            return known.get(stack) or _AnyOutput(stack)

        resolved = resolve_stack_refs(job, placeholder)
        own = set(key_channel_warnings(resolved))  # the job's own matter: validate reports it
        found += [Finding("DEFAULTS_AGREE", str(spec.relative_to(base)), w)
                  for w in check_job_infrastructure(job, resolved, outputs) if w not in own]
    return tuple(found)


class _AnyOutput(dict):
    """Any output of a stack the rules do not model, as a placeholder value."""

    def __init__(self, stack: str) -> None:
        super().__init__()
        self.stack = stack

    def __contains__(self, key: object) -> bool:
        return True

    def __missing__(self, key: str) -> str:
        return f"<{self.stack}.{key}>"
