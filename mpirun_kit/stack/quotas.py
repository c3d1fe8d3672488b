"""Quota preflight: what the account may run, read before anything is created.

Place in the data flow: after a job spec is compiled (cli/plan.py, cli/submit.py) and before
``stack deploy`` creates the VPC or FSx stack (cli/stack.py ``_preflight`` -> ``stack_preflight``).
The clients (Service Quotas, and EC2 / FSx for what the account already uses) are injected;
what a stack needs is computed from its parameters alone.  A shortfall is one line: the quota's name
and current value, what is needed, and the exact ``aws service-quotas
request-service-quota-increase`` command.  A quota that cannot be read (no permission, an
endpoint without Service Quotas) is a note, never a guess.

SageMaker's training quotas are per instance type and named "<type> for training job usage"
("... for spot training job usage" for managed spot); most new accounts have 0 for p4d/p5, so
``submit`` would fail with ResourceLimitExceeded after the request was built.  The codes are read
from the API by name, not kept here: they differ by quota and AWS adds types.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

# What cfn/vpc.yaml consumes, as (service code, quota code, name).  The codes are AWS's own and
# stable: the vpc ones are those moto serves from AWS's list, the Elastic IP one is the code public
# Service Quotas listings give it (a wrong one would be a note, not a refusal).  FSx quotas are
# looked up by name instead (fsx_preflight).
VPCS_PER_REGION = ("vpc", "L-F678F1CE", "VPCs per Region")
INTERNET_GATEWAYS_PER_REGION = ("vpc", "L-A4707A72", "Internet gateways per Region")
NAT_GATEWAYS_PER_ZONE = ("vpc", "L-FE5A380F", "NAT gateways per Availability Zone")
GATEWAY_ENDPOINTS_PER_REGION = ("vpc", "L-1B52E74A", "Gateway VPC endpoints per Region")
ELASTIC_IPS = ("ec2", "L-0263D0A3", "EC2-VPC Elastic IPs")

#: CloudFormation tags what it creates with this; on an update the stack's own resources are
#: already there and are not counted again.
STACK_TAG = "aws:cloudformation:stack-name"


@dataclass(frozen=True)
class Quota:
    service_code: str
    quota_code: str
    name: str
    value: float


class QuotaUnreadable(Exception):
    """Service Quotas did not answer (kept inside this module: callers get a note)."""


def training_quota_name(instance_type: str, spot: bool) -> str:
    return f"{instance_type} for {'spot ' if spot else ''}training job usage"


def _read(fn, what: str, **kwargs: Any) -> dict:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return fn(**kwargs)
    except ClientError as exc:
        err = exc.response.get("Error", {})
        raise QuotaUnreadable(f"{what}: {err.get('Code', '?')}: {err.get('Message', '')}".rstrip(": ")) from exc
    except BotoCoreError as exc:
        raise QuotaUnreadable(f"{what}: {str(exc)[:200]}") from exc


def find_quota(sq: Any, service_code: str, name: str) -> Quota | None:
    """The applied quota called ``name`` (ListServiceQuotas, paged); None when the service has no such quota."""
    return _find_all(sq, service_code, (name,)).get(name)


def shortfall(quota: Quota, need: int, region: str | None, what: str) -> str | None:
    """One line when ``need`` is over the quota, else None."""
    if need <= quota.value:
        return None
    where = f" --region {region}" if region else ""
    return (f"quota: {quota.name!r} is {quota.value:g} in {region or 'this region'}, {what} needs {need}; request "
            f"it with `aws service-quotas request-service-quota-increase --service-code {quota.service_code} "
            f"--quota-code {quota.quota_code} --desired-value {need}{where}` (approval can take days)")


def training_preflight(sq: Any, instance_type: str, hosts: int, *, spot: bool,
                       region: str | None, sm: Any = None) -> tuple[str | None, str | None]:
    """(shortfall line, note) for a SageMaker training job of ``hosts`` x ``instance_type``.

    The quota is the applied value (ListServiceQuotas), else AWS's default (ListAWSDefaultServiceQuotas:
    ListServiceQuotas leaves out a quota whose applied value was never set, so "not listed" is no
    reason to go ahead).  A job uses one unit per host, and the quota is the account's: with ``sm``
    (a SageMaker client), the instances of the account's in-progress training jobs of the same type
    (on-demand or spot, as this job) are counted too.
    """
    name = training_quota_name(instance_type, spot)
    try:
        quota = find_quota(sq, "sagemaker", name)
        source = ""
        if quota is None:
            quota = _find_all(sq, "sagemaker", (name,), default=True).get(name)
            source = " (AWS's default: no applied value is set)"
    except QuotaUnreadable as exc:
        return None, f"quota {name!r} not checked ({exc})"
    if quota is None:
        return None, f"quota {name!r} not found among SageMaker's quotas in {region}; check the Service Quotas console"
    used, jobs, note = 0, [], None
    if sm is not None:
        try:
            used, jobs = training_instances_in_use(sm, instance_type, spot)
        except QuotaUnreadable as exc:
            note = f"in-progress training jobs not counted against {name!r} ({exc})"
    what = f"this job ({hosts} x {instance_type})"
    if used:
        shown = ", ".join(jobs[:5]) + (f" and {len(jobs) - 5} more" if len(jobs) > 5 else "")
        what += f" plus the account's in-progress jobs ({used} x {instance_type}: {shown})"
    line = shortfall(quota, hosts + used, region, what)
    if line and source:
        line = line.replace(f" is {quota.value:g} in ", f" is {quota.value:g}{source} in ", 1)
    return line, note


def training_instances_in_use(sm: Any, instance_type: str, spot: bool) -> tuple[int, list[str]]:
    """(instances, job names) of the account's InProgress training jobs of ``instance_type`` (spot or not)."""
    used, names = 0, []
    token = None
    while True:
        page = _read(sm.list_training_jobs, "SageMaker ListTrainingJobs", StatusEquals="InProgress", MaxResults=100,
                     **({"NextToken": token} if token else {}))
        for summary in page.get("TrainingJobSummaries") or ():
            desc = _read(sm.describe_training_job, "SageMaker DescribeTrainingJob",
                         TrainingJobName=summary["TrainingJobName"])
            if bool(desc.get("EnableManagedSpotTraining")) != spot:
                continue
            rc = desc.get("ResourceConfig") or {}
            n = rc.get("InstanceCount", 0) if rc.get("InstanceType") == instance_type else 0
            n += sum(g.get("InstanceCount", 0) for g in rc.get("InstanceGroups") or ()
                     if g.get("InstanceType") == instance_type)
            if n:
                used += n
                names.append(f"{summary['TrainingJobName']} ({n})")
        token = page.get("NextToken")
        if not token:
            return used, names


def _get(sq: Any, quota: tuple[str, str, str]) -> Quota:
    service, code, name = quota
    q = _read(sq.get_service_quota, "Service Quotas GetServiceQuota", ServiceCode=service, QuotaCode=code)["Quota"]
    return Quota(service, code, str(q.get("QuotaName") or name), float(q.get("Value", 0.0)))


def _theirs(resources: Any, stack: str | None) -> list[dict]:
    """The resources not created by ``stack`` (an update must not count its own stack twice)."""
    return [r for r in resources or () if not any(t.get("Key") == STACK_TAG and t.get("Value") == stack
                                                  for t in r.get("Tags") or ())]


def nat_zones(params: Mapping[str, str]) -> list[str]:
    """The zones cfn/vpc.yaml puts a NAT gateway (and its Elastic IP) in, from the deploy's parameters."""
    if params.get("CreateNatGateway", "true") != "true":
        return []
    zones = [z for z in (params.get("AvailabilityZone1", ""), params.get("AvailabilityZone2", ""),
                         params.get("AvailabilityZone3", "")) if z]
    return zones if params.get("NatGatewayPerZone", "false") == "true" else zones[:1]


def vpc_preflight(sq: Any, ec2: Any, params: Mapping[str, str], region: str | None,
                  stack: str | None = None) -> tuple[list[str], list[str]]:
    """(shortfall lines, notes) before cfn/vpc.yaml with ``params`` (defaults filled in) is deployed.

    One VPC and one S3 gateway endpoint always; with CreateNatGateway an internet gateway and a
    NAT gateway with its Elastic IP in zone 1, or in every zone with NatGatewayPerZone.
    """
    zones = nat_zones(params)
    shorts: list[str] = []
    notes: list[str] = []

    def check(quota: tuple[str, str, str], count: Callable[[], tuple[int, str]], add: int) -> None:
        try:
            q = _get(sq, quota)
            used, where = count()
        except QuotaUnreadable as exc:
            notes.append(f"quota {quota[2]!r} not checked ({exc})")
            return
        line = shortfall(q, used + add, region, f"the stack ({where}, +{add})")
        if line:
            shorts.append(line)

    check(VPCS_PER_REGION, lambda: _count(_theirs(_read(ec2.describe_vpcs, "EC2 DescribeVpcs").get("Vpcs"),
                                                  stack), "the region has {} VPC(s)"), 1)
    check(GATEWAY_ENDPOINTS_PER_REGION, lambda: _count(_theirs(_read(
        ec2.describe_vpc_endpoints, "EC2 DescribeVpcEndpoints",
        Filters=[{"Name": "vpc-endpoint-type", "Values": ["Gateway"]}]).get("VpcEndpoints"), stack),
        "the region has {} gateway endpoint(s)"), 1)
    if zones:
        check(INTERNET_GATEWAYS_PER_REGION, lambda: _count(_theirs(_read(
            ec2.describe_internet_gateways, "EC2 DescribeInternetGateways").get("InternetGateways"), stack),
            "the region has {} internet gateway(s)"), 1)
        check(ELASTIC_IPS, lambda: _count(_theirs(_read(
            ec2.describe_addresses, "EC2 DescribeAddresses",
            Filters=[{"Name": "domain", "Values": ["vpc"]}]).get("Addresses"), stack),
            "the region has {} Elastic IP(s)"), len(zones))
        check(NAT_GATEWAYS_PER_ZONE, lambda: _busiest_zone(ec2, zones, stack), 1)
    return shorts, notes


def _count(items: list, what: str) -> tuple[int, str]:
    return len(items), what.format(len(items))


def _busiest_zone(ec2: Any, zones: list[str], stack: str | None) -> tuple[int, str]:
    """NAT gateways per zone: the quota is per zone, so the zone of ``zones`` that already has the most."""
    nats = _theirs(_read(ec2.describe_nat_gateways, "EC2 DescribeNatGateways",
                         Filters=[{"Name": "state", "Values": ["pending", "available"]}]).get("NatGateways"), stack)
    subnet_ids = sorted({n["SubnetId"] for n in nats if n.get("SubnetId")})
    zone_of = {}
    if subnet_ids:
        subnets = _read(ec2.describe_subnets, "EC2 DescribeSubnets", SubnetIds=subnet_ids).get("Subnets") or ()
        zone_of = {s["SubnetId"]: s.get("AvailabilityZone") for s in subnets}
    used = {z: sum(1 for n in nats if zone_of.get(n.get("SubnetId")) == z) for z in zones}
    zone = max(zones, key=lambda z: (used[z], -zones.index(z)))
    return used[zone], f"{zone} has {used[zone]} NAT gateway(s)"


#: FSx for Lustre quotas by deployment type: (storage capacity in GiB, file systems).  Names, not
#: codes: Service Quotas lists them as these names; SCRATCH_1 and SCRATCH_2 share the Scratch ones.
FSX_QUOTA_NAMES = {
    "SCRATCH_2": ("Lustre Scratch storage capacity", "Lustre Scratch file systems"),
    "PERSISTENT_2": ("Lustre Persistent_2 storage capacity", "Lustre Persistent_2 file systems"),
}
_FSX_SAME_QUOTA = {"SCRATCH_2": {"SCRATCH_1", "SCRATCH_2"}, "PERSISTENT_2": {"PERSISTENT_2"}}


def fsx_preflight(sq: Any, fsx: Any, params: Mapping[str, str], region: str | None,
                  stack: str | None = None) -> tuple[list[str], list[str]]:
    """(shortfall lines, notes) before cfn/fsx.yaml creates one Lustre file system of StorageCapacity GiB.

    Both quotas are for the account's Lustre file systems of that deployment type, so the need is
    what those already hold (DescribeFileSystems, this stack's own excluded) plus the new one.
    """
    kind = params.get("DeploymentType", "SCRATCH_2")
    names = FSX_QUOTA_NAMES.get(kind)
    if names is None:
        return [], [f"no FSx quota known for DeploymentType {kind}; check the Service Quotas console"]
    gib = int(params.get("StorageCapacity", "1200") or 0)
    try:
        quotas = _find_all(sq, "fsx", names)
        same: list[dict] = []  # the account's other Lustre file systems counted by the same quotas
        token = None
        while True:
            page = _read(fsx.describe_file_systems, "FSx DescribeFileSystems",
                         **({"NextToken": token} if token else {}))
            same += [f for f in _theirs(page.get("FileSystems"), stack)
                     if f.get("FileSystemType") == "LUSTRE" and f.get("Lifecycle") not in ("DELETING", "FAILED")
                     and (f.get("LustreConfiguration") or {}).get("DeploymentType") in _FSX_SAME_QUOTA[kind]]
            token = page.get("NextToken")
            if not token:
                break
    except QuotaUnreadable as exc:
        return [], [f"quotas {names[0]!r} and {names[1]!r} not checked ({exc})"]
    held = sum(int(f.get("StorageCapacity") or 0) for f in same)
    shorts, notes = [], []
    for name, need, what in (
            (names[0], held + gib, f"the stack (the account's {kind} Lustre file systems hold {held} GiB, +{gib})"),
            (names[1], len(same) + 1, f"the stack (the account has {len(same)} {kind} Lustre file system(s), +1)")):
        quota = quotas.get(name)
        if quota is None:
            notes.append(f"quota {name!r} not found among FSx's quotas in {region}; check the Service Quotas console")
            continue
        line = shortfall(quota, need, region, what)
        if line:
            shorts.append(line)
    return shorts, notes


def _find_all(sq: Any, service_code: str, names: tuple[str, ...], *, default: bool = False) -> dict[str, Quota]:
    """The applied quotas among ``names`` (one paged ListServiceQuotas walk); with ``default``, AWS's
    default values instead (ListAWSDefaultServiceQuotas)."""
    found: dict[str, Quota] = {}
    token = None
    call, what = ((sq.list_aws_default_service_quotas, "Service Quotas ListAWSDefaultServiceQuotas") if default
                  else (sq.list_service_quotas, "Service Quotas ListServiceQuotas"))
    while True:
        kwargs: dict[str, Any] = {"ServiceCode": service_code, **({"NextToken": token} if token else {})}
        page = _read(call, what, **kwargs)
        for q in page.get("Quotas") or ():
            if q.get("QuotaName") in names:
                found[q["QuotaName"]] = Quota(service_code, str(q["QuotaCode"]), q["QuotaName"],
                                              float(q.get("Value", 0.0)))
        token = page.get("NextToken")
        if not token or len(found) == len(names):
            return found


def stack_preflight(template_path: str, params: Mapping[str, str], defaults: Mapping[str, str],
                    client: Callable[[str], Any], region: str | None,
                    stack: str | None = None) -> tuple[list[str], list[str]]:
    """(shortfall lines, notes) for ``stack deploy`` of cfn/vpc.yaml or cfn/fsx.yaml; nothing for the others.

    ``client(name)`` makes a boto3 client (the CLI's endpoint and region); ``params`` are the deploy's
    (zone ids already mapped to names), ``defaults`` the template's.
    """
    values = {**defaults, **params}
    name = Path(template_path).name
    if name == "vpc.yaml":
        return vpc_preflight(client("service-quotas"), client("ec2"), values, region, stack)
    if name == "fsx.yaml":
        return fsx_preflight(client("service-quotas"), client("fsx"), values, region, stack)
    return [], []
