"""spec/compile.py: a validated JobSpec -> CompiledJob, pure: stack outputs through a resolver (a dict here).

Whole specs compiled and planned are tested in tests/plan/test_jobplan.py; the string attacks a stack output
could carry in tests/spec/test_string_attacks.py.  Here: each step of the compile, on small specs.
"""
from __future__ import annotations

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.spec.compile import (compile_job, expand_macros, program_argv, resolve_relative_paths,
                                     resolve_stack_refs, with_job_name)
from mpirun_kit.spec.load import load_job_text

HEAD = "apiVersion: mpirun_kit/v1\nkind: Job\nname: t\n"


def spec(body: str, **kw):
    return load_job_text(HEAD + body, "t.yaml", **kw)


SAGEMAKER = """\
target:
  type: sagemaker
  sagemaker:
    role: ${stack:mrk-role.RoleArn}
    output_s3: s3://bkt/jobs/${job_name}/output
resources: {instance_type: ml.p4d.24xlarge, hosts: 2}
image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/t:1
program: {module: train, args: [--data, '${data:coco}', --out, '${checkpoint}']}
hyperparameters: {lr: '0.1'}
checkpoint: {s3: 's3://bkt/jobs/${job_name}/ckpt'}
data:
  coco: {s3: 's3://bkt/coco'}
"""


def test_stack_references_resolve_through_the_resolver_once_per_stack():
    asked = []

    def resolver(stack):
        asked.append(stack)
        return {"RoleArn": "arn:aws:iam::123456789012:role/r"}

    job = resolve_stack_refs(spec(SAGEMAKER), resolver)
    assert job.target.sagemaker.role == "arn:aws:iam::123456789012:role/r"
    assert asked == ["mrk-role"]


def test_a_missing_output_names_the_stack_and_its_outputs():
    with pytest.raises(SpecError, match=r"t.yaml: stack 'mrk-role' has no output 'RoleArn'; its outputs are A, B"):
        resolve_stack_refs(spec(SAGEMAKER), lambda s: {"B": "1", "A": "2"})


def test_a_reference_without_a_resolver_says_how_to_give_one():
    with pytest.raises(SpecError, match=r"\$\{stack:mrk-role.RoleArn\} needs the stack's outputs; run with AWS"):
        resolve_stack_refs(spec(SAGEMAKER), None)


def test_the_program_argv_puts_module_args_and_hyperparameters_in_order_with_sagemaker_paths():
    job = spec(SAGEMAKER)
    assert program_argv(job, "python3.11") == (
        "python3.11", "-m", "train", "--data", "/opt/ml/input/data/coco", "--out", "/opt/ml/checkpoints",
        "--lr", "0.1")


def test_an_escaped_macro_stays_literal_and_an_unknown_one_stays_as_written():
    job = spec("program: {command: ['true']}\n")
    assert expand_macros("$${HOME}/x", job) == "${HOME}/x"
    assert expand_macros("${output}/x", job) == "./runs/t/x"


def test_job_name_goes_into_every_s3_path_and_nowhere_else():
    job = with_job_name(spec(SAGEMAKER), "t-20260101")
    assert job.target.sagemaker.output_s3 == "s3://bkt/jobs/t-20260101/output"
    assert job.checkpoint.s3 == "s3://bkt/jobs/t-20260101/ckpt"
    assert job.data[0].s3 == "s3://bkt/coco"


def test_local_relative_paths_are_the_spec_files_directory():
    job = resolve_relative_paths(spec("program: {command: ['true']}\ncheckpoint: {local_path: ck}\n"), "/srv/jobs")
    assert (job.program.working_dir, job.checkpoint.local_path) == ("/srv/jobs", "/srv/jobs/ck")


def test_sagemaker_compiles_to_algo_hosts_with_the_instance_tables_gpus():
    compiled = compile_job(spec(SAGEMAKER), resolver=lambda s: {"RoleArn": "arn:aws:iam::123456789012:role/r"})
    assert [(h.name, h.slots) for h in compiled.hosts] == [("algo-1", 8), ("algo-2", 8)]
    assert compiled.gpus_per_host == 8
    assert compiled.channels == (("coco", "/opt/ml/input/data/coco"),)
    assert compiled.launch.env_inherit is False


def test_more_ranks_than_gpus_is_refused_with_the_remedy():
    with pytest.raises(SpecError, match=r"processes_per_host is 4 but the hosts have 2 GPU\(s\); expected at most "
                                        r"one rank per GPU, or set pinning: none"):
        compile_job(spec("program: {command: ['true']}\nresources: {processes_per_host: 4}\n"), local_gpus=2)


def test_a_local_job_inherits_the_shell_environment_and_runs_on_localhost():
    compiled = compile_job(spec("program: {command: ['true']}\nresources: {processes_per_host: 2}\n"))
    assert [(h.name, h.slots) for h in compiled.hosts] == [("localhost", 2)]
    assert compiled.launch.env_inherit is True
