"""resourceconfig.json and SM_* parsing (the LaunchSpec in hyperparameters.json: tests/spec/test_launch_spec.py): whole values in, whole values (or exact errors) out."""

import pytest

from mpirun_kit.cluster import Cluster, Host
from mpirun_kit.cluster.sagemaker import parse_resource_config, parse_sm_env, read_json
from mpirun_kit.errors import SpecError

RC = {
    "current_host": "algo-2",
    "current_instance_type": "ml.p4d.24xlarge",
    "current_group_name": "homogeneousCluster",
    "hosts": ["algo-1", "algo-2", "algo-3"],
    "instance_groups": [{"instance_group_name": "homogeneousCluster", "instance_type": "ml.p4d.24xlarge",
                         "hosts": ["algo-3", "algo-1", "algo-2"]}],
    "network_interface_name": "eth0",
}


def test_resource_config_whole_value():
    assert parse_resource_config(RC, "rc.json", interfaces={"lo", "eth0"}) == Cluster(
        hosts=(Host("algo-1"), Host("algo-2"), Host("algo-3")),
        current_host="algo-2", source="rc.json", network_interface="eth0",
        instance_type="ml.p4d.24xlarge", current_group="homogeneousCluster",
        instance_groups=(("homogeneousCluster", ("algo-3", "algo-1", "algo-2")),))


def test_interface_check_skipped_without_interfaces():
    assert parse_resource_config(RC, "rc.json").network_interface == "eth0"


@pytest.mark.parametrize("patch, message", [
    ({"current_host": "algo-9"},
     "rc.json: field 'current_host' is 'algo-9', which is not in field 'hosts' ['algo-1', 'algo-2', 'algo-3']; "
     "the file must list this host among the hosts"),
    ({"current_host": None}, "rc.json: field 'current_host' must be this host's name (e.g. \"algo-1\"), got None"),
    ({"hosts": ["algo-1", "algo-2", "algo-1"]},
     "rc.json: field 'hosts' lists host(s) ['algo-1'] more than once; each host must appear once"),
    ({"hosts": []}, "rc.json: field 'hosts' must be a non-empty list of host names, got []"),
    ({"hosts": "algo-1"}, "rc.json: field 'hosts' must be a non-empty list of host names, got 'algo-1'"),
    ({"network_interface_name": "ens9"},
     "rc.json: field 'network_interface_name' names network interface 'ens9', which this host does not have "
     "(it has ['eth0', 'lo']); fix the file or pass the right interface"),
    ({"network_interface_name": 7},
     "rc.json: field 'network_interface_name' must be an interface name like \"eth0\", got 7"),
    ({"instance_groups": [{"instance_group_name": "g", "hosts": ["algo-7"]}]},
     "rc.json: field 'instance_groups[0].hosts' names ['algo-7'], which are not in field 'hosts' "
     "['algo-1', 'algo-2', 'algo-3']"),
    ({"instance_groups": ["x"]},
     "rc.json: field 'instance_groups[0]' must be an object with 'instance_group_name' and 'hosts', got 'x'"),
])
def test_resource_config_errors(patch, message):
    with pytest.raises(SpecError) as e:
        parse_resource_config({**RC, **patch}, "rc.json", interfaces={"lo", "eth0"})
    assert str(e.value) == message


def test_read_json_malformed(tmp_path):
    p = tmp_path / "resourceconfig.json"
    p.write_text('{"current_host": "algo-1",\n "hosts": [}')
    with pytest.raises(SpecError) as e:
        read_json(p)
    assert str(e.value).startswith(f"{p}: malformed JSON at line 2 column")
    assert str(e.value).endswith("fix or regenerate the file")


def test_read_json_not_object_and_missing(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("[1]")
    with pytest.raises(SpecError, match=r"x.json: expected a JSON object at top level, got list"):
        read_json(p)
    with pytest.raises(SpecError, match=r"nope.json: cannot read \(No such file or directory\)"):
        read_json(tmp_path / "nope.json")


def test_sm_env_fallback():
    env = {"SM_HOSTS": '["algo-1","algo-2"]', "SM_CURRENT_HOST": "algo-1", "SM_NETWORK_INTERFACE_NAME": "eth0"}
    assert parse_sm_env(env) == Cluster(hosts=(Host("algo-1"), Host("algo-2")), current_host="algo-1",
                                        source="environment SM_HOSTS/SM_CURRENT_HOST", network_interface="eth0")
    assert parse_sm_env({}) is None


def test_sm_env_errors():
    with pytest.raises(SpecError, match=r"environment variable SM_HOSTS: not JSON .*expected e.g."):
        parse_sm_env({"SM_HOSTS": "algo-1,algo-2"})
    with pytest.raises(SpecError, match=r"field 'current_host' is 'algo-5', which is not in field 'hosts'"):
        parse_sm_env({"SM_HOSTS": '["algo-1"]', "SM_CURRENT_HOST": "algo-5"})
