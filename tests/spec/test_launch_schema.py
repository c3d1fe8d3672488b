"""spec/launch_schema.surely_valid: the entrypoint's fast check of a LaunchSpec never accepts what jsonschema,
the authority, rejects, and it does accept the specs ``LaunchSpec.to_json`` writes (or it saves nothing)."""
from __future__ import annotations

import json
import math

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpirun_kit.errors import SpecError
from mpirun_kit.spec.launch_spec import LaunchSpec, Timeouts
from mpirun_kit.spec.launch_schema import LAUNCH_SCHEMA, surely_valid

VALIDATOR = jsonschema.Draft202012Validator(LAUNCH_SCHEMA)


def valid_specs():
    yield LaunchSpec(program=("python", "train.py"))
    yield LaunchSpec(program=("python", "-m", "x"), processes_per_host=8, env=(("A", "1"), ("B_2", "")),
                     env_forward=("NCCL_DEBUG",), mpi_flavour="openmpi4", mpi_options=("--bind-to", "none"),
                     mca=(("btl", "^openib"),), pinning="none", working_dir="/w",
                     timeouts=Timeouts(job_s=3600, grace_s=0, hang_abort_s=60))


@pytest.mark.parametrize("spec", list(valid_specs()))
def test_what_to_json_writes_takes_the_fast_path(spec):
    raw = json.loads(spec.to_json())
    assert VALIDATOR.is_valid(raw)
    assert surely_valid(raw, LAUNCH_SCHEMA)
    assert LaunchSpec.from_dict(raw) == spec


# Values that break a spec in the ways a hostile or careless hyperparameters.json would.
ODD = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True, allow_infinity=True),
                st.text(max_size=5), st.just("-x"), st.just("A=B"), st.lists(st.text(max_size=3), max_size=3),
                st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2), st.just([["A", "b", "c"]]),
                st.just([[1, "b"]]), st.just({"1A": "x"}), st.just(2.0), st.just(0), st.just(0.0))


@st.composite
def mutated(draw):
    raw = json.loads(draw(st.sampled_from(list(valid_specs()))).to_json())
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["top", "timeouts", "drop", "extra"]))
        if where == "top":
            raw[draw(st.sampled_from(sorted(raw)))] = draw(ODD)
        elif where == "timeouts" and isinstance(raw.get("timeouts"), dict) and raw["timeouts"]:
            raw["timeouts"][draw(st.sampled_from(sorted(raw["timeouts"])))] = draw(ODD)
        elif where == "drop" and raw:
            raw.pop(draw(st.sampled_from(sorted(raw))))
        else:
            raw[draw(st.text(max_size=4))] = draw(ODD)
    return raw


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_fast_path_never_accepts_what_jsonschema_rejects(raw):
    if surely_valid(raw, LAUNCH_SCHEMA):
        assert VALIDATOR.is_valid(raw) and finite(raw), raw


def finite(value) -> bool:
    """No NaN/Infinity anywhere (from_dict refuses them beside the schema)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(finite(v) for v in value.values())
    if isinstance(value, list):
        return all(finite(v) for v in value)
    return True


def test_unknown_keyword_is_never_surely_valid():
    assert not surely_valid("x", {"type": "string", "format": "hostname"})
    assert not surely_valid({}, {"type": "object", "if": {}})


def test_a_bad_spec_still_gets_jsonschemas_message():
    raw = json.loads(LaunchSpec(program=("p",)).to_json())
    raw["timeouts"]["grace_s"] = "x"
    with pytest.raises(SpecError, match=r"grace_s"):
        LaunchSpec.from_dict(raw, "hyperparameters.json")


# Bad values for every declared key of a LaunchSpec (its fields and its timeouts'), generated from the declaration:
# the fast check and jsonschema give the same answer on each, and from_dict names the key it refuses.
BAD = [None, True, -1, 0, 0.5, 70000, "", "x y", "-", "1A", [], [["1A", "x"]], [[1, "x"]], {}, {"1A": "x"},
       float("nan"), float("inf")]


def declared_keys():
    from dataclasses import fields

    for f in fields(LaunchSpec):
        yield (f.name,)
    for f in fields(Timeouts):
        yield ("timeouts", f.name)


@pytest.mark.parametrize("path", list(declared_keys()), ids=".".join)
def test_the_fast_check_and_jsonschema_agree_on_bad_values_of_every_declared_key(path):
    refused = 0
    for bad in BAD:
        raw = json.loads(LaunchSpec(program=("python", "train.py")).to_json())
        node = raw
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = bad
        valid = VALIDATOR.is_valid(raw) and finite(raw)
        assert surely_valid(raw, LAUNCH_SCHEMA) == valid, (path, bad)
        if not valid:
            refused += 1
            with pytest.raises(SpecError, match=path[-1]):
                LaunchSpec.from_dict(raw, "hyperparameters.json")
    assert refused, f"{'.'.join(path)}: no bad value refused"
