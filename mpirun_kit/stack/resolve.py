"""A loaded job spec resolved against AWS: its ``${stack:...}`` outputs, its region, its infrastructure.

Place in the data flow: below the CLI (cli/resolve.py parses the flags, reads the environment and
hands in the clients), above spec/ and cluster/: JobSpec -> stack outputs (``--stack-output`` values
first, then CloudFormation, probing other regions for a stack that is elsewhere) -> ``compile_job``
with the host's facts -> the job against the stacks it names (stack/infra.py: warnings, and the
refusals of an FSx link that would leak) -> a ``CompiledJob`` that plan/jobplan.py prints and
targets/ run.  Every AWS client comes from the injected ``aws(service, region)``; nothing here reads
the environment.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from ..errors import SpecError

#: makes a boto3 client for (service, region); the CLI's honours AWS_ENDPOINT_URL.
ClientFactory = Callable[[str, "str | None"], Any]


def stack_refs(job) -> tuple[tuple[str, str], ...]:
    """Every ``${stack:STACK.OutputKey}`` a job spec uses, in order of first use."""
    from ..spec.compile import map_strings
    from ..spec.schema import MACRO_RE, STACK_RE

    refs: dict[tuple[str, str], None] = {}

    def collect(text: str) -> str:
        for m in MACRO_RE.finditer(text):
            ref = STACK_RE.match(m.group(1))
            if ref:
                refs[(ref.group(1), ref.group(2))] = None
        return text
    map_strings(job, collect)
    return tuple(refs)


#: what an output stands for while it is unresolved (a dry run shows the reference as written).
def unresolved_value(stack: str, key: str) -> str:
    return f"${{stack:{stack}.{key}}}"


class Unresolved(dict):
    """The outputs of a stack that could not be read in a dry run: known ones (``--stack-output``) plus
    every other key as its own ``${stack:STACK.Key}`` text, so the plan shows the reference as written."""

    def __init__(self, stack: str, known: Mapping[str, str], reason: str) -> None:
        super().__init__(known)
        self.stack = stack
        self.reason = reason

    def __contains__(self, key: object) -> bool:
        return True

    def __missing__(self, key: str) -> str:
        return unresolved_value(self.stack, key)


class StackInOtherRegionError(SpecError):
    """The stack a spec names exists, but in another region than the one the job resolves in."""


def resolve_region(flag: str | None, spec_region: str | None, default: str | None) -> tuple[str | None, str]:
    """(region, where it came from): ``--region``, then the spec's target.sagemaker.region, then the AWS default.

    Every ``stack``, ``plan`` and ``submit`` call takes its region through here, so one spec and one
    shell resolve the same region everywhere.  Pure: ``default`` is the AWS configuration's region.
    """
    for value, source in ((flag, "--region"), (spec_region, "target.sagemaker.region"),
                          (default, "the AWS configuration")):
        if value:
            return value, source
    return None, "nowhere"


def aws_default_region() -> str | None:
    """The region boto3 would use without one (AWS_REGION, AWS_DEFAULT_REGION, ~/.aws/config); the CLI calls it."""
    import boto3

    return boto3.session.Session().region_name or None


def regions_to_probe(region: str | None, default: str | None) -> list[str]:
    """Where to look for a stack missing from ``region``: the AWS default first, then every region of
    ``region``'s partition that has CloudFormation (botocore's endpoint data; no AWS call)."""
    import boto3

    session = boto3.session.Session()
    try:
        partition = session.get_partition_for_region(region) if region else "aws"
        others = session.get_available_regions("cloudformation", partition_name=partition)
    except Exception:  # noqa: BLE001 - an unknown region: probe the default only
        others = []
    return [r for r in dict.fromkeys([default, *others]) if r and r != region]


def cloudformation_outputs(region: str | None, other_region: str | None = None, *, aws: ClientFactory,
                           probe=regions_to_probe, names=None):
    """Stack name -> outputs from CloudFormation (boto3 clients created on first use).

    ``names`` (stack/prefix.py ``StackNames``, the user's stack prefix) maps a name as written to the
    stack's own: ``mrk-vpc`` is read as ``PREFIX-vpc``; without it names are read as written.  A mapped
    stack that does not exist is said with the mapping and the way back to the names as written.

    A stack missing from ``region`` but present in another region (the AWS default first, then the
    other regions of the partition; with or without a default) is refused with one line naming both:
    the usual cause is a stack deployed with another default region than the spec's or --region.
    """
    clients: dict = {}

    def client(name: str | None):
        if name not in clients:
            clients[name] = aws("cloudformation", name)
        return clients[name]

    def fetch(written: str) -> Mapping[str, str]:
        from .aws import StackNotFoundError
        from .outputs import get_outputs
        from .prefix import MARK

        stack = names.of(written) if names is not None else written
        try:
            return get_outputs(stack, client(region))
        except StackNotFoundError as exc:
            for other in probe(region, other_region) if region else ():
                try:
                    get_outputs(stack, client(other))
                except Exception:  # noqa: BLE001 - the probe is best effort; the first error is the answer
                    continue
                raise StackInOtherRegionError(
                    f"stack {stack!r} is in region {other}, not in {region}, where this job resolves its "
                    f"stacks; pass --region {other} (or set target.sagemaker.region: {other}), or "
                    f"deploy the stack in {region}") from None
            if stack == written:
                raise
            where = f" in region {region}" if region else ""
            raise StackNotFoundError(stack, region, text=
                f"stack {names.says(written)} does not exist{where}; create it with `mpirun_kit stack deploy "
                f"{written} --template cfn/...` (it deploys {stack}), or, for stacks deployed under the names as "
                f"written, run `mpirun_kit stack prefix {MARK.rstrip('-')}`") from exc
    return fetch


def _is_offline(exc: BaseException) -> bool:
    """A failure that says nothing about the stack itself: no credentials, no region, AWS unreachable."""
    from ..errors import ClusterError

    return isinstance(exc, ClusterError) or "no AWS region configured" in str(exc)


def resolve_stacks(refs: tuple[tuple[str, str], ...], overrides: Mapping[str, Mapping[str, str]],
                   region: str | None, fetch=None, *, offline: bool = False) -> dict[str, Mapping[str, str]]:
    """The outputs of every stack ``refs`` name: ``--stack-output`` values first, then CloudFormation.

    A stack whose every referenced output is given by ``--stack-output`` is not read at all.
    Every stack is tried before failing, so one run reports all that could not be read.  With
    ``offline`` (plan, ``submit --dry-run``), a stack that cannot be read for want of AWS
    (credentials, region, network) becomes an ``Unresolved`` mapping instead of an error; a stack
    AWS says does not exist is still an error.

    Raises:
        ClusterError (69: no credentials, AWS unreachable) or SpecError (64: no region, unknown
        stacks): naming every stack that failed and the ``--stack-output`` flags that replace them.
    """
    from ..errors import ClusterError, MpirunKitError, translate

    if fetch is None:
        raise TypeError("resolve_stacks needs fetch (cloudformation_outputs(region, aws=...))")
    out: dict[str, Mapping[str, str]] = {}
    failed: dict[str, MpirunKitError] = {}
    for stack in dict.fromkeys(s for s, _ in refs):
        given = dict(overrides.get(stack, {}))
        if all(k in given for s, k in refs if s == stack):
            out[stack] = given
            continue
        try:
            out[stack] = {**fetch(stack), **given}
        except MpirunKitError as exc:
            failed[stack] = exc
        except Exception as exc:  # noqa: BLE001 - botocore's no-region/credentials errors, named below
            known = translate(exc)
            if known is None:
                raise
            failed[stack] = known
        if offline and stack in failed and _is_offline(failed[stack]):
            out[stack] = Unresolved(stack, given, str(failed.pop(stack)).replace(f" for stack {stack!r}", ""))
    if not failed:
        return out
    # The same cause for every stack (no credentials, no region) is said once.
    reasons = list(dict.fromkeys(str(e).replace(f" for stack {s!r}", "") for s, e in failed.items()))
    flags = " ".join(f"--stack-output {s}.{k}=VALUE" for s, k in refs if s in failed)
    elsewhere = [e for e in failed.values() if isinstance(e, StackInOtherRegionError)]
    if elsewhere:  # the stacks were deployed in another region: that one line is the whole story
        raise elsewhere[0]
    cls = ClusterError if any(isinstance(e, ClusterError) for e in failed.values()) else SpecError
    raise cls(f"could not read the outputs of stack(s) {', '.join(failed)}: {'; '.join(reasons)}; or give the "
              f"values on the command line: {flags}")


def _template_for(keys: list[str]) -> str:
    """The cfn/ template whose outputs include every key (for the deploy command a dry run suggests)."""
    from pathlib import Path

    from .template import load_template

    cfn = Path(__file__).resolve().parents[2] / "cfn"
    for path in sorted(cfn.glob("*.yaml")) if cfn.is_dir() else ():
        try:
            outputs = load_template(str(path)).parsed.get("Outputs") or {}
        except SpecError:
            continue
        if all(k in outputs for k in keys):
            return f"cfn/{path.name}"
    return "cfn/TEMPLATE.yaml"


def unresolved_warnings(refs: tuple[tuple[str, str], ...], outputs: Mapping[str, Mapping[str, str]],
                        region: str | None) -> tuple[str, ...]:
    """One line per stack a dry run could not read: its references, why, and the two ways to resolve them."""
    out = []
    for stack, found in outputs.items():
        if not isinstance(found, Unresolved):
            continue
        keys = [k for s, k in refs if s == stack and k not in dict.keys(found)]
        if not keys:
            continue
        where = f" --region {region}" if region else ""
        out.append(f"{', '.join(unresolved_value(stack, k) for k in keys)}: unresolved ({found.reason}), shown as "
                   f"written; they resolve once AWS is reachable and the stack exists (`mpirun_kit stack deploy "
                   f"{stack} --template {_template_for(keys)}{where}`), or pass "
                   + " ".join(f"--stack-output {stack}.{k}=VALUE" for k in keys))
    return tuple(out)




def resolve_job(job, facts, *, region_flag: str | None, overrides: Mapping[str, Mapping[str, str]],
                aws: ClientFactory, python: str, offline: bool = False,
                report: Callable[[str], None] | None = None, default_region: Callable[[], str | None] | None = None,
                names=None):
    """A loaded job resolved and compiled -> (compiled, facts, the ``("STACK.Key", value)`` pairs used).

    ``region_flag`` (``--region``) wins over the spec's region and ``default_region()`` (the AWS
    configuration's); ``overrides`` are ``--stack-output`` values; ``offline`` (plan, ``submit
    --dry-run``): stacks that cannot be read for want of AWS stay ``${stack:...}`` with a warning.
    ``report`` receives the region line.  ``names``: the user's stack prefix (stack/prefix.py), which
    ``${stack:mrk-...}`` names stand for, or a callable giving it, called only when the spec names a stack
    (the CLI's reads, and the first time writes, the user's configuration file).  ``python`` is the ranks' interpreter (the target's: targets/base.py
    ``Target.python``, which the CLI asks).

    Raises:
        SpecError: unknown stacks, a stack in another region, an FSx link that covers secrets or
            checkpoints (stack/infra.py ``fsx_link_refusals``), an invalid spec after resolution.
        ClusterError: AWS unreachable or no credentials (not ``offline``).
    """
    from ..spec.compile import compile_job
    refs = stack_refs(job)
    uses_aws = bool(refs) or job.target.type == "sagemaker"
    default = (default_region or aws_default_region)() if uses_aws else None
    region, source = resolve_region(region_flag, job.target.sagemaker.region, default)
    if uses_aws and report is not None:
        report(f"region {region} (from {source})" if region else "no AWS region (pass --region, set "
               "target.sagemaker.region, or AWS_DEFAULT_REGION)")
    if job.target.type == "sagemaker" and region != job.target.sagemaker.region:
        # The job runs where its stacks were read: one region for both.
        job = dataclasses.replace(job, target=dataclasses.replace(
            job.target, sagemaker=dataclasses.replace(job.target.sagemaker, region=region)))
    if callable(names):
        names = names() if refs else None
    fetch = cloudformation_outputs(region, default, aws=aws, names=names) if refs else None
    outputs = resolve_stacks(refs, overrides, region, fetch,
                             offline=offline) if refs else {}
    local = job.target.type in ("local", "sim")
    compiled = compile_job(job, python=python, resolver=outputs.__getitem__, efa=facts.efa if local else None,
                           local_gpus=facts.gpus)
    values = tuple((f"{s}.{k}", str(outputs[s][k])) for s, k in refs if k in outputs.get(s, {}))
    unresolved = unresolved_warnings(refs, outputs, region)
    known = {s: o for s, o in outputs.items() if not isinstance(o, Unresolved)}
    # The job against the stacks it names (role reach, key channel, FSx subnet): before anything is sent.
    from .infra import bucket_kms_keys, check_job_infrastructure, fsx_link_refusals, job_buckets

    refusals = fsx_link_refusals(job, compiled.job, known)
    if refusals:  # a leak, not a misfit: nothing is planned or sent
        raise SpecError(f"{job.source}: " + "; ".join(refusals))

    kms_keys: tuple[str, ...] = ()
    if compiled.job.target.type == "sagemaker" and any("RoleBucket" in o for o in known.values()):
        # the buckets' default KMS keys: one GetBucketEncryption each, best effort
        kms_keys = bucket_kms_keys(aws("s3", region), job_buckets(compiled.job))
    infra = check_job_infrastructure(job, compiled.job, known, kms_keys=kms_keys)
    if infra or unresolved:
        compiled = dataclasses.replace(compiled, warnings=compiled.warnings + unresolved + infra)
    return compiled, facts, values
