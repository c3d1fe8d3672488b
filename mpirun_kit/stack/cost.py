"""Cost estimates: current prices from the AWS Price List API where it answers, else the price table
(prices.json, data with its date and source).

Place in the data flow: ``plan`` prints a job's instance-hours and on-demand estimate after the
plan (cli/plan.py); ``stack deploy`` prints what a stack keeps costing each month while it
exists (cli/stack.py) -- the NAT gateway(s) of cfn/vpc.yaml and the FSx file system of
cfn/fsx.yaml.  The table is read from the package; the Price List client (``pricing``) is injected
and optional: ``api_training_price`` asks it for the region's on-demand SageMaker training price
and its publication date, and ``training_estimate`` falls back to the table when it cannot (no
credentials, no network), naming the table's date.  A price neither has is said, never guessed.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

TABLE = Path(__file__).with_name("prices.json")


@functools.lru_cache(maxsize=1)
def prices() -> dict[str, Any]:
    return json.loads(TABLE.read_text())


def _money(usd: float) -> str:
    return f"${usd:,.0f}" if usd >= 100 else f"${usd:,.2f}"


def _where(region: str | None) -> str:
    p = prices()
    held = ", ".join(p["regions"])
    off = ("" if region in p["regions"] else f"; the table holds {held} prices, not {region}'s" if region
           else f"; no region is set; the table holds {held} prices")
    return f"price table of {p['as_of']} (mpirun_kit/stack/prices.json){off}"


@dataclass(frozen=True)
class Price:
    usd_per_hour: float
    source: str  # where it came from, with its date, as the estimate prints it


#: region name prefixes of the partitions other than ``aws`` (botocore's endpoints data, as of 2024)
PARTITION_PREFIXES = (("us-gov-", "aws-us-gov"), ("cn-", "aws-cn"), ("us-isob-", "aws-iso-b"),
                      ("us-iso-", "aws-iso"), ("eu-isoe-", "aws-iso-e"), ("us-isof-", "aws-iso-f"))
#: where the Price List API answers: partition -> (region name prefix -> endpoint region), the first match wins
PRICE_LIST_ENDPOINTS = {"aws": (("eu-", "eu-central-1"), ("me-", "eu-central-1"), ("af-", "eu-central-1"),
                                ("il-", "eu-central-1"), ("ap-", "ap-south-1"), ("", "us-east-1")),
                        "aws-cn": (("", "cn-northwest-1"),)}


def partition_of(region: str) -> str:
    """The AWS partition of a region name: ``aws-us-gov`` for ``us-gov-west-1``, ``aws`` for the rest."""
    return next((part for prefix, part in PARTITION_PREFIXES if region.startswith(prefix)), "aws")


def price_list_endpoint(region: str | None) -> tuple[str | None, str | None]:
    """(the region to ask the Price List API in for ``region``'s prices, or None; why not, when None).

    The API answers only in the ``aws`` partition (us-east-1, eu-central-1, ap-south-1: the nearest is
    taken) and in ``aws-cn`` (cn-northwest-1), each with that partition's credentials; GovCloud and
    the isolated partitions have no endpoint, so their estimate is the table's, and says so.  Pure.
    """
    if not region:
        return None, None
    partition = partition_of(region)
    endpoints = PRICE_LIST_ENDPOINTS.get(partition)
    if endpoints is None:
        return None, (f"the Price List API has no endpoint in the {partition} partition (it answers in the "
                      f"{' and '.join(PRICE_LIST_ENDPOINTS)} partitions, with their credentials), so the price is "
                      "the table's")
    return next(where for prefix, where in endpoints if region.startswith(prefix)), None


def api_training_price(pricing: Any, instance_type: str, region: str) -> Price | None:
    """The on-demand SageMaker training price of ``instance_type`` in ``region`` (AWS Price List API,
    GetProducts), or None when the API does not answer or lists no such product."""
    from botocore.exceptions import BotoCoreError, ClientError

    filters = [{"Type": "TERM_MATCH", "Field": "instanceName", "Value": instance_type},
               {"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
               {"Type": "TERM_MATCH", "Field": "component", "Value": "Training"}]
    try:
        page = pricing.get_products(ServiceCode="AmazonSageMaker", Filters=filters, MaxResults=10)
    except (BotoCoreError, ClientError):
        return None
    for item in page.get("PriceList") or ():
        product = json.loads(item) if isinstance(item, str) else item
        for term in (product.get("terms") or {}).get("OnDemand", {}).values():
            for dim in (term.get("priceDimensions") or {}).values():
                usd = float((dim.get("pricePerUnit") or {}).get("USD", 0) or 0)
                if usd > 0 and dim.get("unit", "Hrs").lower().startswith("hr"):
                    date = str(product.get("publicationDate") or term.get("effectiveDate") or "")[:10]
                    return Price(usd, f"AWS Price List API, {region}, published {date or 'undated'}")
    return None


def training_estimate(instance_type: str, hosts: int, max_run_s: int, region: str | None, *,
                      spot: bool = False, pricing: Any = None, expected_s: float | None = None,
                      no_api: str | None = None) -> str:
    """``cost`` line of a plan: instance-hours at most (max_run), what they cost on demand, and, when the
    workload says how long it expects to run (``expected_s``), what that costs.

    The price is the Price List API's (``pricing``, a boto3 client) when it answers, else the table's;
    ``no_api`` says why there is no client (``price_list_endpoint``'s reason: GovCloud), after the table."""
    hours = hosts * max_run_s / 3600.0
    head = f"{hosts} x {instance_type} for up to {max_run_s / 3600.0:g} h = {hours:g} instance-hours"
    found = api_training_price(pricing, instance_type, region) if pricing is not None and region else None
    if found is None:
        table = prices()["sagemaker_training_usd_per_hour"].get(instance_type)
        if table is None:
            return f"{head}; no price for {instance_type} in the {_where(region)}" + (f"; {no_api}" if no_api else "")
        why = "; the Price List API did not answer" if pricing is not None else f"; {no_api}" if no_api else ""
        found = Price(table, _where(region) + why)
    price = found.usd_per_hour
    spot_note = " (managed spot is billed less; this is the on-demand ceiling)" if spot else ""
    expected = ""
    if expected_s:
        exp_h = hosts * expected_s / 3600.0
        expected = f"; the schedule's expected {expected_s / 3600.0:.3g} h = {exp_h:.3g} instance-hours, about {_money(exp_h * price)}"
    return (f"{head}, up to {_money(hours * price)} on demand at ${price:g}/h{spot_note}{expected} "
            f"({found.source})")


def stack_monthly(template_path: str, params: Mapping[str, str], defaults: Mapping[str, str],
                  region: str | None) -> str | None:
    """What a deployed stack costs per month while it exists, for the templates that cost by the hour."""
    p = prices()
    value = {**defaults, **params}.get
    name = Path(template_path).name
    if name == "vpc.yaml":
        if value("CreateNatGateway", "true") != "true":
            return None
        zones = 2 + (1 if value("AvailabilityZone3", "") else 0)
        n = zones if value("NatGatewayPerZone", "false") == "true" else 1
        monthly = n * p["nat_gateway_usd_per_hour"] * p["hours_per_month"]
        return (f"cost: {n} NAT gateway(s) cost {_money(monthly)}/month while the stack exists, plus "
                f"${p['nat_gateway_usd_per_gb_processed']:g}/GB through them ({_where(region)}); "
                "--param CreateNatGateway=false leaves them out (the S3 gateway endpoint stays)")
    if name == "fsx.yaml":
        kind = value("DeploymentType", "SCRATCH_2")
        key = kind if kind == "SCRATCH_2" else f"{kind}/{value('PerUnitStorageThroughput', '')}"
        gib = int(value("StorageCapacity", "1200") or 0)
        per = p["fsx_lustre_usd_per_gib_month"].get(key)
        if per is None:
            return f"cost: {gib} GiB of FSx for Lustre {key}: no price in the {_where(region)}"
        return (f"cost: {gib} GiB of FSx for Lustre {key} costs {_money(gib * per)}/month while the stack exists "
                f"({_where(region)}); delete it between runs (`mpirun_kit stack down`)")
    return None
