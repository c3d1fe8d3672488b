"""stack/quotas.py: the quota preflight of plan, submit and `stack deploy` (issue 21 item 3).

SageMaker's quotas are served here by botocore's Stubber: moto implements Service Quotas only
for the ``vpc`` service (and not ListServiceQuotas at all), and no AWS account is reachable.
The Stubber validates every request and response against botocore's real Service Quotas model,
so a wrong parameter name or shape fails the test.  The VPC quota is read from a real moto server.
"""
from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from mpirun_kit.stack.quotas import training_preflight, training_quota_name, vpc_preflight

P5 = "ml.p5.48xlarge for training job usage"


def quota(name, code, value):
    return {"ServiceCode": "sagemaker", "ServiceName": "Amazon SageMaker", "QuotaCode": code, "QuotaName": name,
            "Value": value, "Unit": "None", "Adjustable": True, "GlobalQuota": False,
            "QuotaArn": f"arn:aws:servicequotas:us-west-2:210987654321:sagemaker/{code}"}


def stubbed(*pages, error=None):
    sq = boto3.client("service-quotas", region_name="us-west-2", aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    stub = Stubber(sq)
    token = None
    for i, page in enumerate(pages):
        expected = {"ServiceCode": "sagemaker", **({"NextToken": token} if token else {})}
        token = f"t{i}" if i < len(pages) - 1 else None
        stub.add_response("list_service_quotas", {"Quotas": page, **({"NextToken": token} if token else {})},
                          expected)
    if error:
        stub.add_client_error("list_service_quotas", service_error_code=error, service_message="denied",
                              expected_params={"ServiceCode": "sagemaker"})
    stub.activate()
    return sq, stub


def test_quota_names():
    assert training_quota_name("ml.p5.48xlarge", False) == P5
    assert training_quota_name("ml.p4d.24xlarge", True) == "ml.p4d.24xlarge for spot training job usage"


def test_a_shortfall_is_one_line_with_the_value_the_need_and_the_command():
    sq, stub = stubbed([quota("ml.p4d.24xlarge for training job usage", "L-1111", 8.0)],
                       [quota(P5, "L-2222", 0.0)])
    short, note = training_preflight(sq, "ml.p5.48xlarge", 4, spot=False, region="us-west-2")
    stub.assert_no_pending_responses()
    assert note is None
    assert short == ("quota: 'ml.p5.48xlarge for training job usage' is 0 in us-west-2, this job (4 x ml.p5.48xlarge) "
                     "needs 4; request it with `aws service-quotas request-service-quota-increase --service-code "
                     "sagemaker --quota-code L-2222 --desired-value 4 --region us-west-2` (approval can take days)")


def test_enough_quota_says_nothing():
    sq, _ = stubbed([quota(P5, "L-2222", 4.0)])
    assert training_preflight(sq, "ml.p5.48xlarge", 4, spot=False, region="us-west-2") == (None, None)


def test_an_unreadable_quota_is_a_note_not_a_guess():
    sq, _ = stubbed(error="AccessDeniedException")
    short, note = training_preflight(sq, "ml.p5.48xlarge", 4, spot=False, region="us-west-2")
    assert short is None
    assert note == ("quota 'ml.p5.48xlarge for training job usage' not checked (Service Quotas ListServiceQuotas: "
                    "AccessDeniedException: denied)")


def test_a_quota_the_service_does_not_list():
    sq, _ = stubbed([quota("ml.m5.xlarge for training job usage", "L-3", 4.0)])
    assert training_preflight(sq, "ml.p5.48xlarge", 1, spot=False, region="us-west-2") == (
        None, f"quota {P5!r} not found among SageMaker's quotas in us-west-2; check the Service Quotas console")


def test_submit_refuses_a_shortfall_before_creating_anything(monkeypatch, capsys):
    """The CLI path: all outputs given, the quota is 0, so submit stops with 69 and no SageMaker client is made."""
    from mpirun_kit.cli.main import main

    sq, _ = stubbed([quota(P5, "L-2222", 2.0)])
    made = []
    real = boto3.client

    def client(name, *a, **kw):
        made.append(name)
        return sq if name == "service-quotas" else real(name, *a, **kw)
    monkeypatch.setattr(boto3, "client", client)
    outs = ["mrk-role.RoleArn=arn:aws:iam::210987654321:role/mrk", "mrk-role.RoleS3Uri=s3://b-1/mpirun-kit",
            "mrk-role.RoleImageRepository=210987654321.dkr.ecr.us-west-2.amazonaws.com/mpirun-kit",
            "mrk-fsx.FileSystemId=fs-0123456789abcdef0", "mrk-fsx.LustreMountName=abcdefgh",
            "mrk-vpc.PrivateSubnet1Id=subnet-1", "mrk-vpc.SecurityGroupId=sg-1"]
    rc = main(["submit", "jobs/maskrcnn.yaml", "--job-name", "j-1", *[a for o in outs for a in ("--stack-output", o)]])
    err = capsys.readouterr().err
    assert rc == 69
    assert "mpirun_kit: error: quota: 'ml.p5.48xlarge for training job usage' is 2 in us-west-2, this job " \
           "(4 x ml.p5.48xlarge) needs 4; request it with `aws service-quotas" in err
    assert "sagemaker" not in made


def test_vpc_quota_from_a_moto_server(moto):
    """moto serves the vpc quotas (VPCs per Region: 5) and counts the default VPC."""
    kw = {"region_name": "us-west-2", "endpoint_url": moto}
    sq, ec2 = boto3.client("service-quotas", **kw), boto3.client("ec2", **kw)
    assert vpc_preflight(sq, ec2, "us-west-2") == (None, None)
    for i in range(4):
        ec2.create_vpc(CidrBlock=f"10.{i}.0.0/16")
    short, note = vpc_preflight(sq, ec2, "us-west-2")
    assert note is None
    assert short == ("quota: 'VPCs per Region' is 5 in us-west-2, the stack (the region has 5 VPC(s), +1) needs 6; "
                     "request it with `aws service-quotas request-service-quota-increase --service-code vpc "
                     "--quota-code L-F678F1CE --desired-value 6 --region us-west-2` (approval can take days)")
