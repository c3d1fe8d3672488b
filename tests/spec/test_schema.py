"""spec/schema.py: the job spec is declared once, in its dataclasses' fields.  JOB_SCHEMA is made from those
declarations (every field under its key, with the bounds, patterns and choices it declares, nothing else), the
value is built from them (shape.decode), and the few places where the YAML and the value differ are declared on
the fields themselves and listed here (issue 31 item 4)."""
from __future__ import annotations

import typing
from dataclasses import fields, is_dataclass

import pytest

from mpirun_kit.spec import schema as S
from mpirun_kit.spec.launch_schema import LAUNCH_SCHEMA
from mpirun_kit.spec.launch_spec import LaunchSpec, Timeouts
from mpirun_kit.spec.shape import _optional, decode, key_of

KEYWORD_NAMES = {"enum", "const", "minimum", "maximum", "exclusiveMinimum", "pattern", "minItems"}


def declared(cls, node, path=()):
    """(path, field, schema node) for every key of ``cls`` and of the dataclasses it holds."""
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        k = key_of(f)
        if k is None:
            continue
        yield path + (k,), f, node["properties"][k]
        inner, _ = _optional(hints[f.name])
        if is_dataclass(inner):
            sub = node["properties"][k]
            yield from declared(inner, sub["anyOf"][0] if "anyOf" in sub else sub, path + (k,))
        if "keyed_by" in f.metadata:
            item = typing.get_args(inner)[0]
            yield from declared(item, node["properties"][k]["additionalProperties"], path + (k, "*"))


JOB_FIELDS = list(declared(S.JobSpec, S.JOB_SCHEMA))
LAUNCH_FIELDS = list(declared(LaunchSpec, LAUNCH_SCHEMA))


@pytest.mark.parametrize("path,f,node", JOB_FIELDS + LAUNCH_FIELDS,
                         ids=[".".join(p) for p, _, _ in JOB_FIELDS] + ["launch." + ".".join(p) for p, _, _ in LAUNCH_FIELDS])
def test_every_declared_field_is_in_its_schema_with_what_it_declares(path, f, node):
    want = f.metadata.get("schema", {})
    got = node["anyOf"][0] if "anyOf" in node and "anyOf" not in f.metadata.get("accepts", {}) \
        and node["anyOf"][-1] == {"type": "null"} else node
    for keyword, value in want.items():
        assert got.get(keyword) == value, f"{'.'.join(path)}: {keyword}"
    if "doc" in f.metadata:
        assert node["description"] == f.metadata["doc"]
    if "items" in f.metadata:
        assert got["items"] == f.metadata["items"]
    if "names" in f.metadata:
        assert (got.get("propertyNames") or got["anyOf"][0]["propertyNames"]) == f.metadata["names"]


def objects(node):
    """Every object schema with properties inside ``node``."""
    if isinstance(node, dict):
        if "properties" in node:
            yield node
        for v in node.values():
            yield from objects(v)
    elif isinstance(node, list):
        for v in node:
            yield from objects(v)


def test_the_schemas_hold_no_key_that_no_field_declares():
    # Every object in the schemas is a declared dataclass with exactly its fields' keys, closed to others.
    n_job = sum(len(o["properties"]) for o in objects(S.JOB_SCHEMA))
    n_launch = sum(len(o["properties"]) for o in objects(LAUNCH_SCHEMA))
    assert (n_job, n_launch) == (len(JOB_FIELDS), len(LAUNCH_FIELDS))
    assert all(o["additionalProperties"] is False for o in objects(S.JOB_SCHEMA))


def test_the_places_where_the_yaml_and_the_value_differ_are_declared_on_the_fields():
    keys = {f.name: key_of(f) for f in fields(S.JobSpec)}
    # apiVersion is the file's header under its YAML name; kind is fixed; source is where the spec came from.
    assert {n: k for n, k in keys.items() if n != k} == {"api_version": "apiVersion", "source": None}
    assert S.JOB_SCHEMA["required"] == ["apiVersion", "kind", "name", "program"]
    # every target type has its section, target.local an empty one.
    assert [f.name for f in fields(S.Target)][1:] == list(S.TARGET_SETTINGS) and set(S.TARGETS) == set(S.TARGET_SETTINGS)
    assert S.JOB_SCHEMA["properties"]["target"]["properties"]["local"]["properties"] == {}
    # a data channel is written under its name: the name is the mapping's key, not a key inside.
    assert key_of(next(f for f in fields(S.Channel) if f.name == "name")) is None
    assert set(S.JOB_SCHEMA["properties"]["data"]["additionalProperties"]["properties"]) == \
        {"s3", "efs", "fsx", "local", "mode", "mount"}
    # timeouts are launch_spec.Timeouts' waits, each optional in a spec.
    assert [f.name for f in fields(S.JobTimeouts)] == [f.name for f in fields(Timeouts)]


def test_a_channel_is_built_under_its_name_with_its_storage_nested():
    job = decode(S.JobSpec, {"name": "t", "program": {"module": "m"},
                             "data": {"train": {"fsx": {"file_system_id": "fs-1", "mount_name": "abc", "path": "/d"}},
                                      "val": {"efs": {"file_system_id": "fs-2"}}, "raw": {"local": "/x"}}})
    train, val, raw = job.data
    assert (train.name, train.kind, train.fsx_id, train.fsx_mount_name, train.path) == ("train", "fsx", "fs-1", "abc", "/d")
    assert (val.name, val.kind, val.efs_id, val.path) == ("val", "efs", "fs-2", "/")
    assert (raw.kind, raw.local, raw.path, raw.efs_id) == ("local", "/x", "/", None)


def test_a_section_is_built_field_by_field_in_each_fields_kind():
    slurm = decode(S.SlurmTarget, {"time": 30, "exclusive": True, "sbatch_options": ["--constraint=a100"]})
    assert (slurm.time, slurm.exclusive, slurm.sbatch_options) == ("30", True, ("--constraint=a100",))
    assert decode(S.Tuning, {"efa": True}).efa == "true"
    assert decode(S.SageMakerTarget, {"tags": {"team": "vision", "n": 3}}).tags == (("team", "vision"), ("n", "3"))
    assert decode(S.Spot, None) == S.Spot()
    assert decode(S.Resources, {"processes_per_host": "auto"}).processes_per_host is None
    assert decode(S.Program, {"args": [1, 0.5, False]}).args == ("1", "0.5", "false")
