"""Hostfile and --hosts parsing."""
import pytest

from mpirun_kit.cluster import Cluster, Host
from mpirun_kit.cluster.hostfile import hostfile_cluster, parse_hostfile, parse_hosts_arg
from mpirun_kit.errors import SpecError


def test_hostfile_with_comments_and_optional_slots():
    text = "# cluster\nnode-a slots=8\n\nnode-b   slots = 4  # big one\nnode-c\n"
    assert parse_hostfile(text, "hf") == (Host("node-a", 8), Host("node-b", 4), Host("node-c", None))


@pytest.mark.parametrize("text, message", [
    ("a slots=0\n", "hf:1: slots='0' for host 'a'; expected a positive integer"),
    ("a slots=x\n", "hf:1: slots='x' for host 'a'; expected a positive integer"),
    ("a slots=2\na slots=2\n", "hf:2: host 'a' already listed on line 1; list each host once"),
    ("a b c\n", "hf:1: cannot parse 'a b c'; expected 'HOST' or 'HOST slots=N'"),
    ("# nothing\n", "hf: no hosts listed; expected lines like 'algo-1 slots=8'"),
])
def test_hostfile_errors(text, message):
    with pytest.raises(SpecError) as e:
        parse_hostfile(text, "hf")
    assert str(e.value) == message


def test_hosts_arg():
    assert parse_hosts_arg("h1:2,h2") == (Host("h1", 2), Host("h2", None))
    with pytest.raises(SpecError) as e:
        parse_hosts_arg("h1:2,:3")
    assert str(e.value) == "--hosts: entry ':3' in 'h1:2,:3' has no host name; expected 'HOST[:SLOTS],...'"


def test_hostfile_cluster_current_host():
    hosts = (Host("a", 1), Host("b", 1))
    assert hostfile_cluster(hosts, "b", "hf") == Cluster(hosts=hosts, current_host="b", source="hf")
    with pytest.raises(SpecError) as e:
        hostfile_cluster(hosts, "z", "hf")
    assert str(e.value) == "hf: this host 'z' is not among the hosts ['a', 'b']; pass --current-host NAME or list this host"
