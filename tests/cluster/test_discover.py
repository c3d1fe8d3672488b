"""Discovery picks the right source; real files under a tmp --opt-ml, real psutil interfaces."""
import json
import os

import pytest

from mpirun_kit.cluster import Cluster, Host
from mpirun_kit.cluster.discover import discover_cluster, local_interfaces, read_hyperparameters
from mpirun_kit.cluster.local import Machine
from mpirun_kit.errors import SpecError
from mpirun_kit.spec.launch_spec import LaunchSpec


def write_rc(opt_ml, **raw):
    cfg = opt_ml / "input" / "config"
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "resourceconfig.json").write_text(json.dumps(raw))
    return cfg / "resourceconfig.json"


def test_resourceconfig_wins_over_env(tmp_path):
    path = write_rc(tmp_path, current_host="algo-1", hosts=["algo-1", "algo-2"], network_interface_name="lo")
    env = {"SM_HOSTS": '["x"]', "SM_CURRENT_HOST": "x"}
    assert discover_cluster(tmp_path, env, hostname="whatever") == Cluster(
        hosts=(Host("algo-1"), Host("algo-2")), current_host="algo-1", source=str(path), network_interface="lo")


def test_unknown_interface_checked_against_this_host(tmp_path):
    path = write_rc(tmp_path, current_host="algo-1", hosts=["algo-1"], network_interface_name="nosuch0")
    with pytest.raises(SpecError) as e:
        discover_cluster(tmp_path, {})
    assert str(e.value).startswith(f"{path}: field 'network_interface_name' names network interface 'nosuch0', "
                                   "which this host does not have (it has [")
    assert "lo" in local_interfaces()


def test_env_then_alone(tmp_path):
    env = {"SM_HOSTS": '["algo-1","algo-2"]', "SM_CURRENT_HOST": "algo-2"}
    assert discover_cluster(tmp_path, env, interfaces=()).current_host == "algo-2"
    assert discover_cluster(tmp_path, {}, hostname="box") == Cluster(hosts=(Host("box"),), current_host="box",
                                                                     source="this machine alone")


def test_hosts_and_hostfile(tmp_path):
    assert discover_cluster(tmp_path, {}, hosts="localhost:2", hostname="box") == Cluster(
        hosts=(Host("localhost", 2),), current_host="localhost", source="--hosts")
    hf = tmp_path / "hf"
    hf.write_text("box slots=1\nother slots=1\n")
    assert discover_cluster(tmp_path, {}, hostfile=hf, hostname="box").current_host == "box"
    with pytest.raises(SpecError, match=r"both --hosts and --hostfile given; pass only one of them"):
        discover_cluster(tmp_path, {}, hosts="a", hostfile=hf)
    with pytest.raises(SpecError, match=r"nope: cannot read hostfile \(No such file or directory\); pass an existing file"):
        discover_cluster(tmp_path, {}, hostfile=tmp_path / "nope")


def test_read_hyperparameters(tmp_path):
    # Discovery reads the file; spec/ parses the LaunchSpec in it (cluster/ never imports spec/).
    assert read_hyperparameters(tmp_path) is None
    cfg = tmp_path / "input" / "config"
    cfg.mkdir(parents=True)
    spec = LaunchSpec(program=("python", "x.py"))
    (cfg / "hyperparameters.json").write_text(json.dumps({"mpirun_kit_launch": spec.to_json()}))
    raw, source = read_hyperparameters(tmp_path)
    assert source == str(cfg / "hyperparameters.json")
    assert LaunchSpec.from_hyperparameters(raw, source) == spec
    (cfg / "hyperparameters.json").write_text("[1]")
    with pytest.raises(SpecError) as e:
        read_hyperparameters(tmp_path)
    assert str(e.value) == f"{cfg / 'hyperparameters.json'}: expected a JSON object at top level, got list"


def test_no_gpus_without_driver():
    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("this machine has an NVIDIA driver")
    # No driver: NVML fails to initialise, and discovery reports 0 instead of raising.
    assert Machine(lambda argv: "").gpu_count() == 0


def test_gpu_count_without_device_nodes(tmp_path):
    # An empty /dev: no driver, so NVML is never loaded.
    assert Machine(lambda argv: "", dev=tmp_path).gpu_count() == 0


def test_local_interfaces_are_every_interface_of_this_host():
    # The kernel's list, read without psutil (whose import cost every entrypoint ~15 ms): the same names.
    import psutil

    assert local_interfaces() == frozenset(psutil.net_if_addrs())
