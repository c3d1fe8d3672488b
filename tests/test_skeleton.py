"""The shared contracts: LaunchSpec round-trips as JSON and rejects bad input with clear text."""
import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.model import LaunchSpec, Timeouts


def test_launch_spec_json_round_trip():
    spec = LaunchSpec(program=("python", "-m", "x"), processes_per_host=2, env=(("A", "1"),),
                      mca=(("btl", "self,tcp"),), timeouts=Timeouts(job_s=60.0))
    assert LaunchSpec.from_json(spec.to_json()) == spec


def test_launch_spec_unknown_key_named():
    with pytest.raises(SpecError, match=r"hyperparameters.json: unknown key\(s\) \['programme'\]"):
        LaunchSpec.from_dict({"programme": ["x"]}, "hyperparameters.json")


def test_launch_spec_program_required():
    with pytest.raises(SpecError, match="'program' is required"):
        LaunchSpec.from_dict({}, "spec")


def test_launch_spec_bad_json():
    with pytest.raises(SpecError, match=r"^spec: not valid JSON \(.*\); expected a serialized LaunchSpec$"):
        LaunchSpec.from_json("{", "spec")
    with pytest.raises(SpecError, match=r"^spec: expected a JSON object, got list$"):
        LaunchSpec.from_json('["python", "train.py"]', "spec")


def test_launch_spec_unknown_timeout_key():
    with pytest.raises(SpecError, match=r"unknown timeouts key\(s\) \['ssh_s'\]"):
        LaunchSpec.from_dict({"program": ["x"], "timeouts": {"ssh_s": 1}}, "spec")
