"""Pure layout of a simulated cluster, compared as whole values (no system calls)."""
import json
from pathlib import Path

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.sim.layout import (SimHost, SimLayout, plan_layout, render_hosts_file, render_known_hosts,
                                   render_resource_config, render_sshd_config)


def test_plan_layout_whole_value():
    got = plan_layout("t1", 2, "/x/sim")
    assert got == SimLayout(
        name="t1", root=Path("/x/sim"), switch_netns="mrk-t1-sw", subnet="10.233.0", instance_type="ml.c5.xlarge",
        hosts=(
            SimHost("algo-1", 1, "10.233.0.1", "mrk-t1-1", "h1", Path("/x/sim/algo-1")),
            SimHost("algo-2", 2, "10.233.0.2", "mrk-t1-2", "h2", Path("/x/sim/algo-2")),
        ),
    )


@pytest.mark.parametrize("name", ["", "Has-Caps", "waytoolongname1", "a b"])
def test_plan_layout_rejects_bad_name(name):
    with pytest.raises(SpecError, match=r"sim cluster name .* is invalid: use 1-12 lowercase letters or digits"):
        plan_layout(name, 2, "/x")


@pytest.mark.parametrize("n", [0, -1, 201])
def test_plan_layout_rejects_bad_count(n):
    with pytest.raises(SpecError, match=rf"sim cluster host count {n} is invalid: expected 1..200"):
        plan_layout("ok", n, "/x")


def test_unknown_host_named():
    with pytest.raises(SpecError, match=r"sim cluster 'c' has no host 'algo-9'; hosts are \['algo-1'\]"):
        plan_layout("c", 1, "/x").host("algo-9")


def test_hosts_file():
    """Also the IPv4-mapped addresses (issue #28: c10d's reverse lookup of ::ffff:A.B.C.D went to DNS)."""
    assert render_hosts_file(plan_layout("c", 2, "/x")) == (
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
        "10.233.0.1\talgo-1\n10.233.0.2\talgo-2\n"
        "::ffff:127.0.0.1\tlocalhost\n::ffff:10.233.0.1\talgo-1\n::ffff:10.233.0.2\talgo-2\n")


def test_sshd_config_is_key_only_and_bound_to_cluster_address():
    text = render_sshd_config(plan_layout("c", 2, "/x").hosts[1])
    lines = set(text.splitlines())
    assert {"ListenAddress 10.233.0.2", "PasswordAuthentication no", "PermitRootLogin prohibit-password",
            "KbdInteractiveAuthentication no", "HostKey /x/algo-2/ssh_host_ed25519_key", "StrictModes yes"} <= lines


def test_known_hosts_names_every_host_by_name_and_address():
    L = plan_layout("c", 2, "/x")
    assert render_known_hosts(L, {"algo-1": "ssh-ed25519 AAA1 algo-1\n", "algo-2": "ssh-ed25519 AAA2 algo-2"}) == (
        "algo-1,10.233.0.1 ssh-ed25519 AAA1 algo-1\nalgo-2,10.233.0.2 ssh-ed25519 AAA2 algo-2\n")


def test_resource_config_is_sagemaker_format():
    L = plan_layout("c", 3, "/x", instance_type="ml.p4d.24xlarge")
    assert json.loads(render_resource_config(L, L.hosts[2])) == {
        "current_host": "algo-3",
        "current_instance_type": "ml.p4d.24xlarge",
        "current_group_name": "homogeneousCluster",
        "hosts": ["algo-1", "algo-2", "algo-3"],
        "instance_groups": [{"instance_group_name": "homogeneousCluster", "instance_type": "ml.p4d.24xlarge",
                             "hosts": ["algo-1", "algo-2", "algo-3"]}],
        "network_interface_name": "eth0",
    }
