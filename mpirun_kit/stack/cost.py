"""Cost estimates from the price table (prices.json, data with its date and source).

Place in the data flow: ``plan`` prints a job's instance-hours and on-demand estimate after the
plan (cli/plan.py); ``stack deploy`` prints what a stack keeps costing each month while it
exists (cli/stack.py) -- the NAT gateway(s) of cfn/vpc.yaml and the FSx file system of
cfn/fsx.yaml.  Pure: the table is read from the package, the inputs are values.  A price the
table does not have is said, never guessed; every line names the table's date.
"""
from __future__ import annotations

import functools
import json
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
    off = "" if region in p["regions"] else f"; the table holds {', '.join(p['regions'])} prices, not {region}'s"
    return f"price table of {p['as_of']} (mpirun_kit/stack/prices.json){off}"


def training_estimate(instance_type: str, hosts: int, max_run_s: int, region: str | None, *,
                      spot: bool = False) -> str:
    """``cost`` line of a plan: instance-hours at most, and what they cost on demand."""
    hours = hosts * max_run_s / 3600.0
    head = f"{hosts} x {instance_type} for up to {max_run_s / 3600.0:g} h = {hours:g} instance-hours"
    price = prices()["sagemaker_training_usd_per_hour"].get(instance_type)
    if price is None:
        return f"{head}; no price for {instance_type} in the {_where(region)}"
    spot_note = " (managed spot is billed less; this is the on-demand ceiling)" if spot else ""
    return (f"{head}, up to {_money(hours * price)} on demand at ${price:g}/h{spot_note} "
            f"({_where(region)})")


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
