"""The shared contracts: LaunchSpec round-trips as JSON and rejects bad input with clear text."""
import json

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.spec.launch_spec import LaunchSpec, Timeouts


def test_launch_spec_json_round_trip():
    spec = LaunchSpec(program=("python", "-m", "x"), processes_per_host=2, env=(("A", "1"),),
                      mca=(("btl", "self,tcp"),), timeouts=Timeouts(job_s=60.0))
    assert LaunchSpec.from_json(spec.to_json()) == spec


def test_launch_spec_unknown_key_named():
    with pytest.raises(SpecError, match=r"hyperparameters.json: programme: unknown key; did you mean 'program'\? "):
        LaunchSpec.from_dict({"programme": ["x"]}, "hyperparameters.json")


def test_launch_spec_program_required():
    with pytest.raises(SpecError, match=r"^spec: 'program' is required: the argv every rank runs, e.g. \[\"python\", \"train.py\"\]\n"):
        LaunchSpec.from_dict({}, "spec")


def test_launch_spec_bad_json():
    with pytest.raises(SpecError, match=r"^spec: not valid JSON \(.*\); expected a serialized LaunchSpec$"):
        LaunchSpec.from_json("{", "spec")
    with pytest.raises(SpecError, match=r"^spec: expected a JSON object, got list$"):
        LaunchSpec.from_json('["python", "train.py"]', "spec")


def test_launch_spec_unknown_timeout_key():
    with pytest.raises(SpecError, match=r"spec: timeouts.ssh_s: unknown key; did you mean 'ssh_ready_s'\? valid keys"):
        LaunchSpec.from_dict({"program": ["x"], "timeouts": {"ssh_s": 1}}, "spec")


@pytest.mark.parametrize("raw, message", [
    ({"program": ["x"], "timeouts": {"grace_s": "x"}}, "spec: timeouts.grace_s: expected a number >= 0; got string 'x'"),
    ({"program": ["x"], "timeouts": {"grace_s": -1}}, "spec: timeouts.grace_s: expected a number >= 0; got number -1"),
    ({"program": "python train.py"}, "spec: program: expected a list; got string 'python train.py'"),
    ({"program": ["x", 3]}, "spec: program[1]: expected a string; got number 3"),
    ({"program": ["x"], "processes_per_host": True}, "spec: processes_per_host: expected an integer >= 1 or null; "
                                                     "got boolean true"),
    ({"program": ["x"], "env": {"A B": "1"}}, "spec: env: expected a mapping of NAME: string, or a list of "
                                              "[NAME, string] pairs; got a mapping"),
    ({"program": ["x"], "mca": [["btl"]]}, "spec: mca: expected a mapping of name: string, or a list of "
                                           "[name, string] pairs; got a list"),
    ({"program": ["x"], "ssh_port": 70000}, "spec: ssh_port: expected an integer from 1 to 65535; got number 70000"),
    ({"program": ["x"], "timeouts": {"job_s": float("inf")}},
     "spec: timeouts.job_s: expected a finite number; got NaN or Infinity"),
    ({"program": ["x"], "timeouts": []}, "spec: timeouts: expected a mapping; got a list"),
])
def test_launch_spec_wrong_types_are_clear_errors(raw, message):
    """hyperparameters.json and --spec go through this one check: no raw TypeError/ValueError, no bad value kept."""
    with pytest.raises(SpecError) as e:
        LaunchSpec.from_dict(raw, "spec")
    assert message in str(e.value)


def test_launch_spec_accepts_what_to_json_writes_and_hand_written_mappings():
    spec = LaunchSpec.from_dict({"program": ["python", "t.py"], "env": {"A": "1"}, "mca": {"btl": "tcp"},
                                 "timeouts": {"job_s": None, "grace_s": 0}}, "spec")
    assert spec.env == (("A", "1"),) and spec.mca == (("btl", "tcp"),) and spec.timeouts.grace_s == 0
    assert LaunchSpec.from_json(spec.to_json()) == spec


# SageMaker carries the LaunchSpec in hyperparameters.json (cluster/discover.py reads the file).
def test_hyperparameters_spec_in_all_encodings():
    spec = LaunchSpec(program=("python", "train.py"), processes_per_host=2, env=(("A", "1"),),
                      timeouts=Timeouts(grace_s=3.0))
    once = spec.to_json()
    for value in (json.loads(once), once, json.dumps(once)):
        assert LaunchSpec.from_hyperparameters({"mpirun_kit_launch": value, "lr": "0.1"}, "hp.json") == spec
    assert LaunchSpec.from_hyperparameters({"lr": "0.1"}, "hp.json") is None


def test_hyperparameters_errors():
    with pytest.raises(SpecError) as e:
        LaunchSpec.from_hyperparameters({"mpirun_kit_launch": "{not json"}, "hp.json")
    assert str(e.value).startswith("hp.json: key 'mpirun_kit_launch': not valid JSON")
    with pytest.raises(SpecError) as e:
        LaunchSpec.from_hyperparameters({"mpirun_kit_launch": "[1, 2]"}, "hp.json")
    assert str(e.value) == ("hp.json: key 'mpirun_kit_launch': expected a JSON object (a serialized LaunchSpec), "
                            "got list")
    with pytest.raises(SpecError, match=r"hp.json: key 'mpirun_kit_launch': 'program' is required"):
        LaunchSpec.from_hyperparameters({"mpirun_kit_launch": "{}"}, "hp.json")
