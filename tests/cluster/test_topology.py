"""cluster/topology.py: a host's hardware as values: the kernel's cpulist format both ways, the JSON round trip.

The probe that fills these values from NVML and sysfs is tested in test_probe.py, pinning from them in
tests/plan/test_gpu.py and tests/rank/test_pinning.py.
"""
from __future__ import annotations

import json

import pytest

from mpirun_kit.cluster.topology import Gpu, NumaNode, Topology, format_cpu_list, parse_cpu_list
from mpirun_kit.errors import SpecError


@pytest.mark.parametrize("text, cpus", [
    ("0-2,5", (0, 1, 2, 5)), ("", ()), ("3", (3,)), ("0-23,48-71\n", tuple(range(24)) + tuple(range(48, 72))),
])
def test_cpu_lists_both_ways(text, cpus):
    assert parse_cpu_list(text) == cpus
    assert format_cpu_list(cpus) == text.strip()


def test_a_cpu_list_is_sorted_without_repeats_and_a_bad_one_is_refused():
    assert parse_cpu_list("5,0-1,1") == (0, 1, 5)
    with pytest.raises(SpecError, match=r"^cpu list '0-x' is malformed; expected the kernel's format like '0-23,48-71'$"):
        parse_cpu_list("0-x")


def test_a_topology_survives_its_json_and_a_malformed_one_names_the_source():
    topo = Topology((Gpu(0, "H100", "0000:10:1c.0", 0), Gpu(1, "H100", "0000:20:1c.0", None)),
                    (NumaNode(0, (0, 1)), NumaNode(1, (2, 3))), ((0, 2), (1, 3)), "recorded on p5")
    assert Topology.from_dict(json.loads(topo.to_json())) == topo
    assert topo.cpus == (0, 1, 2, 3)
    with pytest.raises(SpecError, match=r"^facts/p5.json: malformed topology \(KeyError\('pci_bus_id'\)\); expected "
                                        r"the shape Topology.to_json writes$"):
        Topology.from_dict({"gpus": [{"index": 0, "name": "H100"}]}, "facts/p5.json")
