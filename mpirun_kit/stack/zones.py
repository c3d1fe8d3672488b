"""Availability zones by id or by name, for ``stack deploy`` of cfn/vpc.yaml.

Place in the data flow: the CLI's ``--param AvailabilityZoneN=...`` values, before the deploy
request is built (cli/stack.py).  Zone *names* (us-west-2a) are shuffled per account: the same
name is a different physical zone in another account, while zone *ids* (usw2-az1) are the same
everywhere.  Capacity for p4d/p5 and FSx differs by physical zone, so AWS capacity advice and
reservations name ids.  The template takes names (``AWS::EC2::Subnet`` AvailabilityZone); ids
are mapped here with one DescribeAvailabilityZones call (EC2 client injected).
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from ..errors import SpecError

#: a zone id: usw2-az1, use1-az4, apne1-az2 ...
ZONE_ID = re.compile(r"^[a-z]{2,}[0-9]+-az[0-9]+$")
ZONE_PARAMS = ("AvailabilityZone1", "AvailabilityZone2", "AvailabilityZone3")


def zone_params(params: Mapping[str, str]) -> dict[str, str]:
    """The zone parameters given, in order."""
    return {k: params[k] for k in ZONE_PARAMS if params.get(k)}


def map_zones(params: Mapping[str, str], ec2: Any, region: str | None) -> tuple[dict[str, str], list[str]]:
    """(params with every zone id replaced by its name, one ``zone NAME = ID`` line per zone).

    Raises:
        SpecError: an id or name the region does not have (the message lists the region's zones).
    """
    given = zone_params(params)
    if not given:
        return dict(params), []
    zones = ec2.describe_availability_zones(Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}])
    by_id = {z["ZoneId"]: z["ZoneName"] for z in zones.get("AvailabilityZones") or ()}
    by_name = {v: k for k, v in by_id.items()}
    out, lines = dict(params), []
    for key, value in given.items():
        name = by_id.get(value) if ZONE_ID.match(value) else (value if value in by_name else None)
        if name is None:
            have = ", ".join(f"{n} ({i})" for i, n in sorted(by_id.items(), key=lambda kv: kv[1]))
            raise SpecError(f"--param {key}={value}: region {region} has no such zone; its zones (name (id)) are: "
                            f"{have}")
        out[key] = name
        lines.append(f"zone {key}: {name} = {by_name[name]}")
    return out, lines


def needs_mapping(params: Mapping[str, str]) -> list[str]:
    """The zone parameters given as ids (a dry run cannot map them: no AWS call)."""
    return [f"{k}={v}" for k, v in zone_params(params).items() if ZONE_ID.match(v)]
