"""The SageMaker request against AWS's real limits, the dry-run's redaction, and ``${job_name}``.

Every request ``build_request`` returns has passed mpirun_kit.stack.limits (the checks
botocore's ParamValidator skips); what AWS would refuse is a SpecError before anything is sent.
"""
from __future__ import annotations

import json

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.spec.compile import compile_job
from mpirun_kit.spec.load import load_job_text
from mpirun_kit.targets import sagemaker as T

from .sagemaker_specs import OUTPUTS, SECRET_SPEC, SPEC


def compiled(text: str = SPEC):
    return compile_job(load_job_text(text, "mrcnn.yaml"), python="python", resolver=OUTPUTS.__getitem__)


@pytest.mark.parametrize("old, new, expected", [
    ("tags: {team: vision}", "tags: {team: 'vision, detection'}",
     "Tags[0].Value: 'vision, detection' does not match AWS's pattern"),
    ("tags: {team: vision}", "tags: {'aws:team': vision}", "Tags[0].Key: 'aws:team' starts with 'aws:'"),
    ("tags: {team: vision}", "tags: {team: " + "v" * 257 + "}", "is 257 characters; AWS allows at most 256"),
    ("max_run_s: 3600", "max_run_s: 2500000", "StoppingCondition.MaxRuntimeInSeconds: 2500000 s is over SageMaker's "
     "limit of 28 days (2419200 s)"),
    ("  extra:\n", "  " + "x" * 65 + ":\n", "is 65 characters; AWS allows at most 64"),
    ("env: {NCCL_DEBUG: INFO}", "env: {NCCL_DEBUG: INFO, BIG: " + "y" * 513 + "}", "Environment['BIG']: 'yyyy"),
])
def test_request_outside_aws_limits_is_refused_before_sending(old, new, expected):
    assert old in SPEC
    with pytest.raises(SpecError) as e:
        T.build_request(compiled(SPEC.replace(old, new)), "mrcnn-1")
    assert str(e.value).startswith("mrcnn.yaml: the CreateTrainingJob request breaks AWS's limits")
    assert expected in str(e.value)


def test_too_many_environment_variables():
    env = ", ".join(f"V{i}: x" for i in range(100))
    with pytest.raises(SpecError, match=r"Environment: 10\d entries; AWS allows at most 100"):
        T.build_request(compiled(SPEC.replace("env: {NCCL_DEBUG: INFO}", "env: {" + env + "}")), "mrcnn-1")


def test_dry_run_redacts_only_environment_and_hyperparameter_values():
    """Tags keep their "Key" (the printed request is what is sent); secret env values do not show."""
    c = compiled(SECRET_SPEC)
    dry = T.dryrun(c, job_name="n")
    shown = json.loads(dry.to_json())["request"]["CreateTrainingJob"]
    assert shown["Tags"] == [{"Key": "team", "Value": "vision"}]
    assert shown["Environment"]["WANDB_API_KEY"] == "***"
    assert "hunter2" not in json.dumps(shown)
    sent = dry.request.CreateTrainingJob
    assert {k: v for k, v in shown.items() if k not in ("Environment", "HyperParameters")} == \
        {k: v for k, v in sent.items() if k not in ("Environment", "HyperParameters")}
    assert '"Key": "team"' in dry.render()


def test_job_name_in_a_channel_uri_is_the_submitted_name():
    """Keys are derived for the exact job name: the key channel names it through ${job_name}."""
    text = SPEC.replace("  extra:\n    s3: s3://bucket/extra", "  mpirun-keys:\n    s3: s3://bucket/keys/${job_name}/")
    req = T.build_request(compiled(text), "mrcnn-20261123-020000")
    (keys,) = [ch for ch in req["InputDataConfig"] if ch["ChannelName"] == "mpirun-keys"]
    assert keys["DataSource"]["S3DataSource"]["S3Uri"] == "s3://bucket/keys/mrcnn-20261123-020000/"


def test_unknown_reference_in_any_s3_path_is_refused_with_its_line():
    """Before issue 26 an unknown ${...} in checkpoint.s3 or output_s3 was sent to AWS as written."""
    from mpirun_kit.spec.findings import JobSpecError

    for old, new, line, field in (("s3://bucket/extra", "s3://bucket/keys/${jobname}/", 24, "data.extra.s3"),
                                  ("s3://bucket/ckpt", '"s3://bucket/ckpt/${job}"', 25, "checkpoint.s3"),
                                  ("s3://bucket/out", "s3://bucket/${user}/out", 9, "target.sagemaker.output_s3")):
        with pytest.raises(JobSpecError) as e:
            compiled(SPEC.replace(old, new))
        assert (f"mrcnn.yaml:{line}: {field}: unknown reference ${{{new.split('${')[1].split('}')[0]}}} in an S3 "
                "path; expected ${job_name} (the training job's name, set at submit) or "
                "${stack:STACK.OutputKey}") in str(e.value)


def test_job_name_resolves_in_every_s3_path_so_two_jobs_have_two_homes():
    """Before issue 26 only channel URIs took ${job_name}: CheckpointConfig got it literally, so every job
    from one spec shared (and SageMaker downloaded at start) one checkpoint prefix."""
    text = (SPEC.replace("s3://bucket/ckpt", '"s3://bucket/jobs/${job_name}/checkpoints"')
            .replace("output_s3: s3://bucket/out", "output_s3: s3://bucket/jobs/${job_name}/output\n"
                     "    tensorboard_s3: s3://bucket/jobs/${job_name}/tensorboard")
            .replace("s3://bucket/extra", "s3://bucket/keys/${job_name}/"))
    a, b = (T.build_request(compiled(text), name) for name in ("mrcnn-a", "mrcnn-b"))
    for req, name in ((a, "mrcnn-a"), (b, "mrcnn-b")):
        assert req["CheckpointConfig"]["S3Uri"] == f"s3://bucket/jobs/{name}/checkpoints"
        assert req["OutputDataConfig"]["S3OutputPath"] == f"s3://bucket/jobs/{name}/output"
        assert req["TensorBoardOutputConfig"]["S3OutputPath"] == f"s3://bucket/jobs/{name}/tensorboard"
        (extra,) = [c for c in req["InputDataConfig"] if c["ChannelName"] == "extra"]
        assert extra["DataSource"]["S3DataSource"]["S3Uri"] == f"s3://bucket/keys/{name}/"
    assert "${job_name}" not in json.dumps(a)


def test_unknown_reference_in_an_aws_value_is_refused_with_its_line():
    """Issue 26: image, roles, subnets and file system ids take ${stack:...} only; anything else was sent as written."""
    from mpirun_kit.spec.findings import JobSpecError

    for old, new, line, field in (("role: ${stack:mrk-role.RoleArn}", "role: ${stack:mrk-role.RoleArn}${job_name}", 7,
                                   "target.sagemaker.role"),
                                  ("subnets: [subnet-1]", "subnets: ['${subnet}']", 26, "vpc.subnets[0]")):
        assert old in SPEC
        with pytest.raises(JobSpecError) as e:
            compiled(SPEC.replace(old, new))
        assert f"mrcnn.yaml:{line}: {field}: unknown reference " in str(e.value)
        assert "here; expected a value or ${stack:STACK.OutputKey}" in str(e.value)
