"""stack/zones.py: availability zones given by id are mapped to this account's names; an unknown one is refused.

The EC2 client is a stand-in returning DescribeAvailabilityZones' shape: moto's zone ids are its own fixed
table, and the mapping is what is tested, not the call.
"""
from __future__ import annotations

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.stack.zones import map_zones, needs_mapping


class _Ec2:
    def __init__(self):
        self.calls = 0

    def describe_availability_zones(self, Filters):
        self.calls += 1
        assert Filters == [{"Name": "zone-type", "Values": ["availability-zone"]}]   # no Local/Wavelength zones
        return {"AvailabilityZones": [{"ZoneId": "usw2-az1", "ZoneName": "us-west-2b"},
                                      {"ZoneId": "usw2-az2", "ZoneName": "us-west-2a"}]}


def test_ids_become_this_accounts_names_and_names_stay():
    params = {"AvailabilityZone1": "usw2-az1", "AvailabilityZone2": "us-west-2a", "Other": "x"}
    out, lines = map_zones(params, _Ec2(), "us-west-2")
    assert out == {"AvailabilityZone1": "us-west-2b", "AvailabilityZone2": "us-west-2a", "Other": "x"}
    assert lines == ["zone AvailabilityZone1: us-west-2b = usw2-az1", "zone AvailabilityZone2: us-west-2a = usw2-az2"]


def test_no_zone_given_asks_aws_nothing():
    ec2 = _Ec2()
    assert map_zones({"Other": "x"}, ec2, None) == ({"Other": "x"}, [])
    assert ec2.calls == 0


def test_a_zone_the_region_lacks_is_refused_with_the_regions_zones():
    with pytest.raises(SpecError, match=r"^--param AvailabilityZone1=usw2-az9: region us-west-2 has no such zone; "
                                        r"its zones \(name \(id\)\) are: us-west-2a \(usw2-az2\), us-west-2b \(usw2-az1\)$"):
        map_zones({"AvailabilityZone1": "usw2-az9"}, _Ec2(), "us-west-2")


def test_a_dry_run_names_the_ids_it_cannot_map():
    assert needs_mapping({"AvailabilityZone1": "use1-az4", "AvailabilityZone2": "us-east-1a"}) == \
        ["AvailabilityZone1=use1-az4"]
