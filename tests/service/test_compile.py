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


def test_the_environment_is_an_argument_from_the_api_to_the_launch_spec(tmp_path):
    """Issue #40 item 4: the submitting shell's environment comes down as an argument (api.service's ``environ``,
    JobService, compile_spec), never read below the front doors; a multi-host job's launch spec carries its
    allow-listed variables under the spec's own env, and a local job's is left as it was (its ranks inherit)."""
    from mpirun_kit import api
    from mpirun_kit.service.requests import SubmitRequest

    spec = tmp_path / "s.yaml"
    spec.write_text("apiVersion: mpirun_kit/v1\nkind: Job\nname: s\nprogram: {command: ['true']}\n"
                    "env: {WANDB_ENTITY: spec}\ntarget: {type: ssh, ssh: {hosts: [a, b]}}\n")
    environ = {"WANDB_PROJECT": "p", "WANDB_ENTITY": "shell", "MYVAR": "m"}
    svc = api.service(tmp_path / "state", environ=environ)
    compiled = svc.compile(SubmitRequest(str(spec)), dry_run=True)
    assert {"WANDB_PROJECT": "p", "WANDB_ENTITY": "spec"}.items() <= dict(compiled.launch.env).items()
    assert "MYVAR" not in dict(compiled.launch.env)
    assert compiled.env_notes == ("env: not forwarded from this shell (1): MYVAR; name it in env_forward (or set it "
                                  "in env) to send one",)
    local = svc.compile(SubmitRequest(str(spec), target="local"), dry_run=True)
    assert "WANDB_PROJECT" not in dict(local.launch.env) and local.env_notes == ()
    bare, _, _ = compile_spec(str(spec), default_region=lambda: None)      # no environment given: none taken
    assert "WANDB_PROJECT" not in dict(bare.launch.env) and bare.env_notes == ()
