"""spec/schema.py: the job spec's dataclasses and JOB_SCHEMA describe one shape.  For every section the schema's
keys are the dataclass's fields (load.py builds most sections field by field from them), so a field added to one
and not the other fails here; the few places where the YAML and the value differ are listed, each with its
reason (issue 31 item 4)."""
from __future__ import annotations

from dataclasses import fields

import pytest

from mpirun_kit.spec import schema as S
from mpirun_kit.spec.launch_schema import LAUNCH_SCHEMA
from mpirun_kit.spec.launch_spec import LaunchSpec


def props(*path: str) -> set[str]:
    node = S.JOB_SCHEMA
    for key in path:
        node = node["properties"][key] if key != "*" else node["additionalProperties"]
    return set(node["properties"])


def names(cls) -> set[str]:
    return {f.name for f in fields(cls)}


SECTIONS = [(("target", kind), cls) for kind, cls in S.TARGET_SETTINGS.items()] + [
    (("resources",), S.Resources), (("program",), S.Program), (("mpi",), S.Mpi), (("tuning",), S.Tuning),
    (("checkpoint",), S.Location), (("output",), S.Location), (("vpc",), S.Vpc), (("timeouts",), S.JobTimeouts),
    (("spot",), S.Spot),
]


@pytest.mark.parametrize("path,cls", SECTIONS, ids=[".".join(p) for p, _ in SECTIONS])
def test_each_section_has_exactly_its_dataclass_fields(path, cls):
    assert props(*path) == names(cls), f"{'.'.join(path)}: schema and {cls.__name__} differ"


def test_the_places_where_the_yaml_and_the_value_differ_are_these():
    # apiVersion/kind: the file's header (kind is fixed); source: where the spec came from, not a key.
    assert props() - names(S.JobSpec) == {"apiVersion", "kind"}
    assert names(S.JobSpec) - props() == {"api_version", "source"}
    # target.local has no settings; the other kinds are TARGET_SETTINGS.
    assert props("target") - names(S.Target) == {"local"} and props("target", "local") == set()
    assert names(S.Target) - {"type"} == set(S.TARGET_SETTINGS) and set(S.TARGETS) == set(S.TARGET_SETTINGS) | {"local"}
    # a data channel is keyed by its name, with its storage nested (efs:/fsx:); the value is flat.
    assert props("data", "*") == {"s3", "efs", "fsx", "local", "mode", "mount"}
    assert names(S.Channel) == {"name", "s3", "efs_id", "fsx_id", "fsx_mount_name", "path", "local", "mode", "mount"}


def test_the_launch_spec_schema_has_the_launch_specs_fields():
    assert set(LAUNCH_SCHEMA["properties"]) == names(LaunchSpec)


def test_a_section_is_built_field_by_field_in_each_fields_kind():
    from mpirun_kit.spec.load import _section

    slurm = _section(S.SlurmTarget, {"time": 30, "exclusive": True, "sbatch_options": ["--constraint=a100"]})
    assert (slurm.time, slurm.exclusive, slurm.sbatch_options) == ("30", True, ("--constraint=a100",))
    assert _section(S.Tuning, {"efa": True}).efa == "true"
    assert _section(S.SageMakerTarget, {"tags": {"team": "vision", "n": 3}}).tags == (("team", "vision"), ("n", "3"))
    assert _section(S.Spot, None) == S.Spot()
