"""Pinning on recorded topologies: whole RankPinning maps compared as values (no mocks)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.cluster.topology import Topology, format_cpu_list, parse_cpu_list
from mpirun_kit.plan.gpu import RankPinning, pin_local_ranks

TOPO = Path(__file__).parent / "topologies"


def load(name: str) -> Topology:
    return Topology.from_dict(json.loads((TOPO / f"{name}.json").read_text()), name)


def rows(pins):
    return [(p.local_rank, p.gpu, p.numa_node, p.cpu_list()) for p in pins]


def test_p4d_eight_ranks_get_disjoint_numa_local_core_blocks():
    assert rows(pin_local_ranks(load("p4d.24xlarge"), 8)) == [
        (0, 0, 0, "0-5,48-53"), (1, 1, 0, "6-11,54-59"), (2, 2, 0, "12-17,60-65"), (3, 3, 0, "18-23,66-71"),
        (4, 4, 1, "24-29,72-77"), (5, 5, 1, "30-35,78-83"), (6, 6, 1, "36-41,84-89"), (7, 7, 1, "42-47,90-95"),
    ]


def test_p5_eight_ranks():
    assert rows(pin_local_ranks(load("p5.48xlarge"), 8)) == [
        (0, 0, 0, "0-11,96-107"), (1, 1, 0, "12-23,108-119"), (2, 2, 0, "24-35,120-131"),
        (3, 3, 0, "36-47,132-143"), (4, 4, 1, "48-59,144-155"), (5, 5, 1, "60-71,156-167"),
        (6, 6, 1, "72-83,168-179"), (7, 7, 1, "84-95,180-191"),
    ]


def test_p4d_two_ranks_split_node0_between_them():
    assert rows(pin_local_ranks(load("p4d.24xlarge"), 2)) == [
        (0, 0, 0, "0-11,48-59"), (1, 1, 0, "12-23,60-71"),
    ]


def test_single_gpu_without_numa_gets_every_cpu():
    assert pin_local_ranks(load("single-gpu"), 1) == (RankPinning(0, 0, None, (0, 1, 2, 3)),)


def test_no_gpu_leaves_ranks_unpinned():
    assert pin_local_ranks(load("no-gpu"), 2) == (RankPinning(0, None, None, ()), RankPinning(1, None, None, ()))


def test_more_ranks_than_gpus_is_a_spec_error():
    with pytest.raises(SpecError, match=r"2 processes per host but this host has 1 GPU\(s\); set "
                                        r"resources.processes_per_host to at most 1"):
        pin_local_ranks(load("single-gpu"), 2)


def test_zero_ranks_rejected():
    with pytest.raises(SpecError, match="processes per host is 0; expected at least 1"):
        pin_local_ranks(load("no-gpu"), 0)


def test_cpu_list_round_trip():
    assert format_cpu_list((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"
    assert parse_cpu_list("0-2,5,7-8") == (0, 1, 2, 5, 7, 8)
    with pytest.raises(SpecError, match="cpu list 'a-b' is malformed"):
        parse_cpu_list("a-b")


def test_topology_json_round_trip_and_bad_shape():
    t = load("p4d.24xlarge")
    assert Topology.from_dict(json.loads(t.to_json())) == t
    with pytest.raises(SpecError, match="bad.json: malformed topology"):
        Topology.from_dict({"gpus": [{"index": 0}]}, "bad.json")
