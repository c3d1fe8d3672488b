"""mpirun_kit.stack.limits: AWS's full shape constraints, which botocore's ParamValidator skips.

Each case below is a request botocore's own validator accepts (asserted) and AWS refuses;
the validator must name the member and the limit.
"""
from __future__ import annotations

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.stack.limits import OPERATIONS, _service_model, check_request, java_pattern, validate_request

ROLE = "arn:aws:iam::123456789012:role/mrk-role-ExecutionRole-ABC"


def _job(**over):
    req = {
        "TrainingJobName": "maskrcnn-20261123-020000",
        "RoleArn": ROLE,
        "AlgorithmSpecification": {"TrainingImage": "123456789012.dkr.ecr.us-west-2.amazonaws.com/mpirun-kit:0.1.0",
                                   "TrainingInputMode": "File"},
        "OutputDataConfig": {"S3OutputPath": "s3://mrk-artifacts/maskrcnn/output"},
        "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 4, "VolumeSizeInGB": 200},
        "StoppingCondition": {"MaxRuntimeInSeconds": 172800},
        "Environment": {"NCCL_DEBUG": "WARN"},
        "Tags": [{"Key": "project", "Value": "mpirun_kit"}],
    }
    req.update(over)
    return req


def _botocore_accepts(service, operation, params):
    from botocore.validate import ParamValidator
    shape = _service_model(service).operation_model(operation).input_shape
    return not ParamValidator().validate(params, shape).has_errors()


def _messages(params, service="sagemaker", operation="CreateTrainingJob"):
    return [str(v) for v in check_request(service, operation, params)]


def test_a_good_request_passes():
    assert check_request("sagemaker", "CreateTrainingJob", _job()) == ()


@pytest.mark.parametrize("change, expected", [
    ({"Environment": {f"V{i}": "x" for i in range(101)}}, "Environment: 101 entries; AWS allows at most 100"),
    ({"Environment": {"BIG": "x" * 513}}, "Environment['BIG']: 'xxxxxxxx"),
    ({"Environment": {"1BAD": "x"}}, "Environment key '1BAD': '1BAD' does not match AWS's pattern"),
    ({"Tags": [{"Key": f"k{i}", "Value": "v"} for i in range(51)]}, "Tags: 51 entries; AWS allows at most 50"),
    ({"Tags": [{"Key": "k" * 129, "Value": "v"}]}, "is 129 characters; AWS allows at most 128"),
    ({"Tags": [{"Key": "k", "Value": "v" * 257}]}, "is 257 characters; AWS allows at most 256"),
    ({"Tags": [{"Key": "team", "Value": "vision, detection"}]},
     "Tags[0].Value: 'vision, detection' does not match AWS's pattern ([\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*)"),
    ({"Tags": [{"Key": "aws:createdBy", "Value": "me"}]}, "Tags[0].Key: 'aws:createdBy' starts with 'aws:'"),
    ({"InputDataConfig": [{"ChannelName": "c" * 65, "DataSource": {"S3DataSource": {
        "S3DataType": "S3Prefix", "S3Uri": "s3://b/p"}}}]}, "is 65 characters; AWS allows at most 64"),
    ({"StoppingCondition": {"MaxRuntimeInSeconds": 29 * 86400}},
     "StoppingCondition.MaxRuntimeInSeconds: 2505600 s is over SageMaker's limit of 28 days (2419200 s)"),
    ({"TrainingJobName": "maskrcnn_r50"}, "TrainingJobName: 'maskrcnn_r50' does not match AWS's pattern"),
    ({"RetryStrategy": {"MaximumRetryAttempts": 31}}, "RetryStrategy.MaximumRetryAttempts: 31 is above AWS's maximum 30"),
    ({"AlgorithmSpecification": {"TrainingImage": "x", "TrainingInputMode": "Files"}},
     "AlgorithmSpecification.TrainingInputMode: 'Files' is not one of: Pipe, File, FastFile"),
])
def test_refusals_botocore_lets_through(change, expected):
    req = _job(**change)
    assert _botocore_accepts("sagemaker", "CreateTrainingJob", req), "botocore already catches this one"
    found = _messages(req)
    assert any(expected in m for m in found), found


def test_unicode_letters_and_spaces_are_valid_tag_characters():
    # \p{L}, \p{Z}, \p{N}: the pattern is Unicode, not ASCII.
    assert _messages(_job(Tags=[{"Key": "équipe", "Value": "vision détection ٣\u3000"}])) == []


def test_every_pattern_of_every_operation_we_call_compiles():
    seen, patterns = set(), set()

    def walk(shape):
        if shape.name in seen:
            return
        seen.add(shape.name)
        if "pattern" in shape.metadata:
            patterns.add(shape.metadata["pattern"])
        for sub in (getattr(shape, "members", {}) or {}).values():
            walk(sub)
        for attr in ("member", "key", "value"):
            if hasattr(shape, attr):
                walk(getattr(shape, attr))

    for service, op in OPERATIONS:
        walk(_service_model(service).operation_model(op).input_shape)
    assert len(patterns) > 20
    for p in patterns:
        java_pattern(p)


def test_java_classes_translate():
    assert java_pattern(r"arn:[\p{Alnum}\-]+:x").fullmatch("arn:aws-cn:x")
    assert not java_pattern(r"[\p{Alnum}]+").fullmatch("é")
    assert java_pattern(r"\p{L}+").fullmatch("日本語")
    assert not java_pattern(r"\P{L}+").fullmatch("a")
    assert not java_pattern(r"\w+").fullmatch("é")  # Java's \w is ASCII
    with pytest.raises(SpecError, match=r"\\p\{InGreek\}"):
        java_pattern(r"\p{InGreek}")


def test_change_set_parameters_and_tags():
    req = {"StackName": "mrk-vpc", "ChangeSetName": "mrk-20261123", "TemplateBody": "x",
           "Parameters": [{"ParameterKey": "P", "ParameterValue": "v" * 4097}],
           "Tags": [{"Key": "aws:cloudformation:x", "Value": "x"}]}
    assert _botocore_accepts("cloudformation", "CreateChangeSet", req)
    assert _messages(req, "cloudformation", "CreateChangeSet") == [
        "Parameters[0].ParameterValue: 4097 bytes, over CloudFormation's 4096-byte parameter value limit",
        "Tags[0].Key: 'aws:cloudformation:x' starts with 'aws:', which AWS reserves; choose another key",
    ]


def test_validate_request_lists_every_problem_with_the_source():
    with pytest.raises(SpecError) as e:
        validate_request("sagemaker", "CreateTrainingJob", _job(TrainingJobName="a_b", Tags=[{"Key": "aws:x", "Value": "y"}]),
                         source="jobs/x.yaml")
    assert str(e.value).startswith("jobs/x.yaml: the CreateTrainingJob request breaks AWS's limits (2 problem(s)); "
                                   "AWS would refuse it:\n  TrainingJobName: 'a_b' does not match")
