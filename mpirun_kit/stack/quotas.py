"""Quota preflight: what the account may run, read before anything is created.

Place in the data flow: after a job spec is compiled (cli/plan.py, cli/submit.py) and before
``stack deploy`` creates a VPC (cli/stack.py).  The Service Quotas client (and an EC2 client for
the VPC count) is injected; everything else is pure.  A shortfall is one line: the quota's name
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
from typing import Any

#: the VPC quota the vpc stack counts against (Service Quotas code; stable, documented by AWS).
VPCS_PER_REGION = ("vpc", "L-F678F1CE")


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
    token = None
    while True:
        kwargs: dict[str, Any] = {"ServiceCode": service_code, **({"NextToken": token} if token else {})}
        page = _read(sq.list_service_quotas, "Service Quotas ListServiceQuotas", **kwargs)
        for q in page.get("Quotas") or ():
            if q.get("QuotaName") == name:
                return Quota(service_code, str(q["QuotaCode"]), name, float(q.get("Value", 0.0)))
        token = page.get("NextToken")
        if not token:
            return None


def shortfall(quota: Quota, need: int, region: str | None, what: str) -> str | None:
    """One line when ``need`` is over the quota, else None."""
    if need <= quota.value:
        return None
    where = f" --region {region}" if region else ""
    return (f"quota: {quota.name!r} is {quota.value:g} in {region or 'this region'}, {what} needs {need}; request "
            f"it with `aws service-quotas request-service-quota-increase --service-code {quota.service_code} "
            f"--quota-code {quota.quota_code} --desired-value {need}{where}` (approval can take days)")


def training_preflight(sq: Any, instance_type: str, hosts: int, *, spot: bool,
                       region: str | None) -> tuple[str | None, str | None]:
    """(shortfall line, note) for a SageMaker training job of ``hosts`` x ``instance_type``.

    A job uses one unit of its instance type's quota per host, so it needs ``hosts`` (other
    running jobs of that type count too: the quota is for the account, not the job).
    """
    name = training_quota_name(instance_type, spot)
    try:
        quota = find_quota(sq, "sagemaker", name)
    except QuotaUnreadable as exc:
        return None, f"quota {name!r} not checked ({exc})"
    if quota is None:
        return None, f"quota {name!r} not found among SageMaker's quotas in {region}; check the Service Quotas console"
    return shortfall(quota, hosts, region, f"this job ({hosts} x {instance_type})"), None


def vpc_preflight(sq: Any, ec2: Any, region: str | None) -> tuple[str | None, str | None]:
    """(shortfall line, note) before the vpc stack creates one more VPC in the region."""
    service, code = VPCS_PER_REGION
    try:
        q = _read(sq.get_service_quota, "Service Quotas GetServiceQuota", ServiceCode=service,
                  QuotaCode=code)["Quota"]
        vpcs = len(_read(ec2.describe_vpcs, "EC2 DescribeVpcs").get("Vpcs") or ())
    except QuotaUnreadable as exc:
        return None, f"quota 'VPCs per Region' not checked ({exc})"
    quota = Quota(service, code, str(q.get("QuotaName", "VPCs per Region")), float(q.get("Value", 0.0)))
    return shortfall(quota, vpcs + 1, region, f"the stack (the region has {vpcs} VPC(s), +1)"), None
