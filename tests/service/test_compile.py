"""service/compile.py: a spec file compiled for a submission, its errors naming what to change."""
from __future__ import annotations

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.service.compile import compile_spec, parse_stack_overrides


def test_stack_outputs_parse_and_a_bad_one_names_the_shape():
    assert parse_stack_overrides(["a.K=v", "a.L=w=x", "b.K="]) == {"a": {"K": "v", "L": "w=x"}, "b": {"K": ""}}
    with pytest.raises(SpecError, match=r"--stack-output 'aK=v': expected STACK.OutputKey=VALUE, e.g. "):
        parse_stack_overrides(["aK=v"])


def test_an_empty_spec_name_is_refused_with_an_example():
    with pytest.raises(SpecError, match="JOB.yaml is an empty string; name a job spec file, e.g. jobs/"):
        compile_spec("  ")


def test_a_local_spec_compiles_without_aws(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("apiVersion: mpirun_kit/v1\nkind: Job\nname: s\nprogram: {command: ['true']}\n")

    def no_aws(service, region):   # a local job with no stacks never asks AWS
        raise AssertionError(f"asked AWS for {service}")

    compiled, facts, stack_values = compile_spec(str(spec), aws=no_aws, default_region=lambda: None)
    assert (compiled.job.name, compiled.job.target.type, stack_values) == ("s", "local", ())
