"""stack/quotas.py: the quota preflight of plan, submit and `stack deploy` (issue 21 item 3).

SageMaker's, EC2's and FSx's quotas are served here by botocore's Stubber: moto implements
Service Quotas only for the ``vpc`` service (and not ListServiceQuotas at all), and no AWS
account is reachable.  The Stubber validates every request and response against botocore's real
Service Quotas (and FSx) model, so a wrong parameter name or shape fails the test.  The vpc
quotas, and the EC2 resources every count is made of, come from a real moto server.
"""
from __future__ import annotations

from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from mpirun_kit.stack.quotas import (fsx_preflight, nat_zones, stack_preflight, training_preflight,
                                     training_quota_name, vpc_preflight)

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
    sq, stub = stubbed([quota("ml.m5.xlarge for training job usage", "L-3", 4.0)])
    stub.add_response("list_aws_default_service_quotas", {"Quotas": []}, {"ServiceCode": "sagemaker"})
    assert training_preflight(sq, "ml.p5.48xlarge", 1, spot=False, region="us-west-2") == (
        None, f"quota {P5!r} not found among SageMaker's quotas in us-west-2; check the Service Quotas console")


def test_a_quota_without_an_applied_value_is_read_as_its_default():
    """Issue 26: ListServiceQuotas leaves out a quota whose applied value was never set (botocore's docs), so
    submit went ahead with a note; the AWS default (ListAWSDefaultServiceQuotas) is the quota then.
    Stubber, validated by the service model: moto serves no per-instance SageMaker quotas."""
    sq, stub = stubbed([quota("ml.m5.xlarge for training job usage", "L-3", 4.0)])
    stub.add_response("list_aws_default_service_quotas", {"Quotas": [quota(P5, "L-2222", 0.0)]},
                      {"ServiceCode": "sagemaker"})
    short, note = training_preflight(sq, "ml.p5.48xlarge", 4, spot=False, region="us-west-2")
    stub.assert_no_pending_responses()
    assert note is None
    assert short == ("quota: 'ml.p5.48xlarge for training job usage' is 0 (AWS's default: no applied value is set) "
                     "in us-west-2, this job (4 x ml.p5.48xlarge) needs 4; request it with `aws service-quotas "
                     "request-service-quota-increase --service-code sagemaker --quota-code L-2222 --desired-value 4 "
                     "--region us-west-2` (approval can take days)")


def _training_job(name, itype, count, spot=False):
    return {"TrainingJobName": name, "TrainingJobArn": f"arn:aws:sagemaker:us-west-2:210987654321:training-job/{name}",
            "ModelArtifacts": {"S3ModelArtifacts": ""}, "TrainingJobStatus": "InProgress",
            "SecondaryStatus": "Training", "AlgorithmSpecification": {"TrainingInputMode": "File"},
            "ResourceConfig": {"InstanceType": itype, "InstanceCount": count, "VolumeSizeInGB": 100},
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600}, "CreationTime": 1_763_000_000,
            "EnableManagedSpotTraining": spot}


def test_instances_of_in_progress_training_jobs_count_against_the_quota():
    """Issue 26: the quota is the account's; a job that fits alone does not fit beside running ones.
    Stubber, validated by the service model (moto's training jobs are Completed at once)."""
    sq, _ = stubbed([quota(P5, "L-2222", 6.0)])
    sm = boto3.client("sagemaker", region_name="us-west-2", aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    stub = Stubber(sm)
    jobs = [_training_job("team-a-1", "ml.p5.48xlarge", 2), _training_job("team-b-1", "ml.p5.48xlarge", 1, spot=True),
            _training_job("team-c-1", "ml.p4d.24xlarge", 4)]
    summary = [{"TrainingJobName": j["TrainingJobName"], "TrainingJobArn": j["TrainingJobArn"],
                "CreationTime": j["CreationTime"], "TrainingJobStatus": "InProgress"} for j in jobs]
    stub.add_response("list_training_jobs", {"TrainingJobSummaries": summary},
                      {"StatusEquals": "InProgress", "MaxResults": 100})
    for j in jobs:
        stub.add_response("describe_training_job", j, {"TrainingJobName": j["TrainingJobName"]})
    with stub:
        short, note = training_preflight(sq, "ml.p5.48xlarge", 5, spot=False, region="us-west-2", sm=sm)
    assert note is None
    # 5 + team-a-1's 2 on-demand p5 > 6; the spot job and the p4d job use other quotas
    assert short.startswith("quota: 'ml.p5.48xlarge for training job usage' is 6 in us-west-2, this job "
                            "(5 x ml.p5.48xlarge) plus the account's in-progress jobs (2 x ml.p5.48xlarge: "
                            "team-a-1 (2)) needs 7; request it with")
    sq, _ = stubbed([quota(P5, "L-2222", 6.0)])
    stub.add_response("list_training_jobs", {"TrainingJobSummaries": summary[:1]},
                      {"StatusEquals": "InProgress", "MaxResults": 100})
    stub.add_response("describe_training_job", jobs[0], {"TrainingJobName": "team-a-1"})
    with stub:
        assert training_preflight(sq, "ml.p5.48xlarge", 4, spot=False, region="us-west-2", sm=sm) == (None, None)


def test_submit_refuses_a_shortfall_before_creating_anything(monkeypatch, capsys):
    """The CLI path: all outputs given, the quota is 0, so submit stops with 69 and no SageMaker client is made."""
    from mpirun_kit.cli.main import main

    sq, _ = stubbed([quota(P5, "L-2222", 2.0)])
    made = []
    real = boto3.client

    sm = real("sagemaker", region_name="us-west-2", aws_access_key_id="testing", aws_secret_access_key="testing")
    sm_stub = Stubber(sm)  # in-progress jobs: none; any other call (a create) would fail the stub
    sm_stub.add_response("list_training_jobs", {"TrainingJobSummaries": []},
                         {"StatusEquals": "InProgress", "MaxResults": 100})
    sm_stub.activate()

    def client(name, *a, **kw):
        made.append(name)
        return {"service-quotas": sq, "sagemaker": sm}.get(name) or real(name, *a, **kw)
    monkeypatch.setattr(boto3, "client", client)
    outs = ["mrk-role.RoleArn=arn:aws:iam::210987654321:role/mrk", "mrk-role.RoleS3Uri=s3://b-1/mpirun-kit",
            "mrk-role.RoleImageRepository=210987654321.dkr.ecr.us-west-2.amazonaws.com/mpirun-kit",
            "mrk-role.SubmitRoleArn=arn:aws:iam::210987654321:role/mrk-submit",
            "mrk-fsx.FileSystemId=fs-0123456789abcdef0", "mrk-fsx.LustreMountName=abcdefgh",
            "mrk-vpc.PrivateSubnet1Id=subnet-1", "mrk-vpc.SecurityGroupId=sg-1"]
    rc = main(["submit", "jobs/maskrcnn.yaml", "--region", "us-west-2", "--job-name", "j-1", *[a for o in outs for a in ("--stack-output", o)]])
    err = capsys.readouterr().err
    assert rc == 69
    assert "mpirun_kit: error: quota: 'ml.p5.48xlarge for training job usage' is 2 in us-west-2, this job " \
           "(4 x ml.p5.48xlarge) needs 4; request it with `aws service-quotas" in err
    sm_stub.assert_no_pending_responses()  # read the running jobs, created nothing


VPC_PARAMS = {"AvailabilityZone1": "us-west-2a", "AvailabilityZone2": "us-west-2b", "AvailabilityZone3": "",
              "CreateNatGateway": "false", "NatGatewayPerZone": "false"}
NAT = {**VPC_PARAMS, "CreateNatGateway": "true"}


def _moto(moto, *services):
    return [boto3.client(s, region_name="us-west-2", endpoint_url=moto) for s in services]


def test_nat_zones_follow_the_vpc_parameters():
    assert nat_zones(VPC_PARAMS) == []
    assert nat_zones(NAT) == ["us-west-2a"]
    assert nat_zones({**NAT, "NatGatewayPerZone": "true"}) == ["us-west-2a", "us-west-2b"]
    assert nat_zones({**NAT, "NatGatewayPerZone": "true", "AvailabilityZone3": "us-west-2c"}) == [
        "us-west-2a", "us-west-2b", "us-west-2c"]


def test_vpc_quota_from_a_moto_server(moto):
    """moto serves the vpc quotas (VPCs per Region: 5) and counts the default VPC."""
    sq, ec2 = _moto(moto, "service-quotas", "ec2")
    assert vpc_preflight(sq, ec2, VPC_PARAMS, "us-west-2") == ([], [])
    for i in range(4):
        ec2.create_vpc(CidrBlock=f"10.{i}.0.0/16")
    assert vpc_preflight(sq, ec2, VPC_PARAMS, "us-west-2") == ([
        "quota: 'VPCs per Region' is 5 in us-west-2, the stack (the region has 5 VPC(s), +1) needs 6; "
        "request it with `aws service-quotas request-service-quota-increase --service-code vpc "
        "--quota-code L-F678F1CE --desired-value 6 --region us-west-2` (approval can take days)"], [])


def test_internet_gateways_and_nat_gateways_per_zone_count_only_with_a_nat(moto):
    """5 internet gateways and 5 NAT gateways in us-west-2b: a NAT in zone 1 only needs neither zone's room,
    but one per zone does; without a NAT gateway the stack makes no internet gateway."""
    sq, ec2 = _moto(moto, "service-quotas", "ec2")
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.0.0/24", AvailabilityZone="us-west-2b")["Subnet"]
    for _ in range(5):
        ec2.create_internet_gateway()
        ec2.create_nat_gateway(SubnetId=subnet["SubnetId"],
                               AllocationId=ec2.allocate_address(Domain="vpc")["AllocationId"])
    assert vpc_preflight(sq, ec2, VPC_PARAMS, "us-west-2") == ([], [])
    igw = ("quota: 'Internet gateways per Region' is 5 in us-west-2, the stack (the region has 5 internet "
           "gateway(s), +1) needs 6; request it with `aws service-quotas request-service-quota-increase "
           "--service-code vpc --quota-code L-A4707A72 --desired-value 6 --region us-west-2` (approval can take days)")
    # moto has no ec2 quotas: the Elastic IP quota is a note (a real account answers; see the stubbed test)
    eip_note = ("quota 'EC2-VPC Elastic IPs' not checked (Service Quotas GetServiceQuota: NoSuchResourceException: "
                "This service is not available in the current Region. Choose a different Region or a different "
                "service.)")
    assert vpc_preflight(sq, ec2, NAT, "us-west-2") == ([igw], [eip_note])
    assert vpc_preflight(sq, ec2, {**NAT, "NatGatewayPerZone": "true"}, "us-west-2") == ([igw, (
        "quota: 'NAT gateways per Availability Zone' is 5 in us-west-2, the stack (us-west-2b has 5 NAT gateway(s), "
        "+1) needs 6; request it with `aws service-quotas request-service-quota-increase --service-code vpc "
        "--quota-code L-FE5A380F --desired-value 6 --region us-west-2` (approval can take days)")], [eip_note])


def test_an_update_does_not_count_the_stacks_own_resources(moto):
    """AWS tags what a stack creates with aws:cloudformation:stack-name; moto's change sets do not, so the VPC
    is tagged here as AWS would.  With 5 VPCs, updating mrk-vpc needs no new one, while another stack does."""
    sq, ec2 = _moto(moto, "service-quotas", "ec2")
    ec2.create_vpc(CidrBlock="10.0.0.0/16", TagSpecifications=[{"ResourceType": "vpc", "Tags": [
        {"Key": "aws:cloudformation:stack-name", "Value": "mrk-vpc"}]}])
    for i in range(3):
        ec2.create_vpc(CidrBlock=f"10.{i + 1}.0.0/16")
    assert vpc_preflight(sq, ec2, VPC_PARAMS, "us-west-2", "mrk-vpc") == ([], [])
    assert vpc_preflight(sq, ec2, VPC_PARAMS, "us-west-2", "mrk-vpc-2")[0] == [
        "quota: 'VPCs per Region' is 5 in us-west-2, the stack (the region has 5 VPC(s), +1) needs 6; "
        "request it with `aws service-quotas request-service-quota-increase --service-code vpc "
        "--quota-code L-F678F1CE --desired-value 6 --region us-west-2` (approval can take days)"]


def _sq_quota(service, code, name, value):
    return {"Quota": {"ServiceCode": service, "QuotaCode": code, "QuotaName": name, "Value": value}}


def test_elastic_ips_one_per_nat_gateway(moto):
    """The ec2 quota is stubbed (moto has none); the addresses are real ones on moto: 4 held plus one per
    NAT gateway (one per zone, 3 zones) is 7, over the 5 allowed."""
    (ec2,) = _moto(moto, "ec2")
    for _ in range(4):
        ec2.allocate_address(Domain="vpc")
    sq = boto3.client("service-quotas", region_name="us-west-2", aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    stub = Stubber(sq)
    for service, code, name, value in (("vpc", "L-F678F1CE", "VPCs per Region", 5.0),
                                       ("vpc", "L-1B52E74A", "Gateway VPC endpoints per Region", 20.0),
                                       ("vpc", "L-A4707A72", "Internet gateways per Region", 5.0),
                                       ("ec2", "L-0263D0A3", "EC2-VPC Elastic IPs", 5.0),
                                       ("vpc", "L-FE5A380F", "NAT gateways per Availability Zone", 5.0)):
        stub.add_response("get_service_quota", _sq_quota(service, code, name, value),
                          {"ServiceCode": service, "QuotaCode": code})
    stub.activate()
    params = {**NAT, "NatGatewayPerZone": "true", "AvailabilityZone3": "us-west-2c"}
    assert vpc_preflight(sq, ec2, params, "us-west-2") == ([
        "quota: 'EC2-VPC Elastic IPs' is 5 in us-west-2, the stack (the region has 4 Elastic IP(s), +3) needs 7; "
        "request it with `aws service-quotas request-service-quota-increase --service-code ec2 --quota-code "
        "L-0263D0A3 --desired-value 7 --region us-west-2` (approval can take days)"], [])
    stub.assert_no_pending_responses()


SCRATCH = ("Lustre Scratch storage capacity", "Lustre Scratch file systems")


def _fsx_quota(name, code, value):
    return {"ServiceCode": "fsx", "ServiceName": "Amazon FSx", "QuotaCode": code, "QuotaName": name, "Value": value,
            "Unit": "None", "Adjustable": True, "GlobalQuota": False}


def _fs(fid, kind, gib, lifecycle="AVAILABLE", stack=None):
    return {"FileSystemId": f"fs-{fid:017x}", "FileSystemType": "LUSTRE", "Lifecycle": lifecycle,
            "StorageCapacity": gib, "LustreConfiguration": {"DeploymentType": kind},
            **({"Tags": [{"Key": "aws:cloudformation:stack-name", "Value": stack}]} if stack else {})}


def fsx_stubbed(quotas, *pages, error=None):
    """Service Quotas and FSx both stubbed: moto has no fsx quotas, and its FSx lacks Lifecycle and deployment
    types; the Stubber checks both against botocore's models."""
    sq = boto3.client("service-quotas", region_name="us-west-2", aws_access_key_id="t", aws_secret_access_key="t")
    fsx = boto3.client("fsx", region_name="us-west-2", aws_access_key_id="t", aws_secret_access_key="t")
    sq_stub, fsx_stub = Stubber(sq), Stubber(fsx)
    if error:
        sq_stub.add_client_error("list_service_quotas", service_error_code=error, service_message="denied",
                                 expected_params={"ServiceCode": "fsx"})
    else:
        sq_stub.add_response("list_service_quotas", {"Quotas": quotas}, {"ServiceCode": "fsx"})
        for i, page in enumerate(pages):
            more = {"NextToken": f"n{i}"} if i < len(pages) - 1 else {}
            fsx_stub.add_response("describe_file_systems", {"FileSystems": page, **more},
                                  {"NextToken": f"n{i - 1}"} if i else {})
    sq_stub.activate()
    fsx_stub.activate()
    return sq, fsx, (sq_stub, fsx_stub)


FSX_QUOTAS = [_fsx_quota("Lustre Persistent_2 storage capacity", "L-8F1B9C74", 100800.0),
              _fsx_quota(SCRATCH[0], "L-AD2FC696", 100800.0), _fsx_quota(SCRATCH[1], "L-C48231E5", 100.0)]


def test_fsx_storage_counts_the_scratch_file_systems_the_account_holds():
    """96000 GiB of SCRATCH_1/2 held (the persistent one, the deleting one and this stack's own do not count):
    7200 more needs 103200 of 100800."""
    sq, fsx, stubs = fsx_stubbed(FSX_QUOTAS, [_fs(1, "SCRATCH_2", 48000), _fs(2, "PERSISTENT_2", 9600)],
                                 [_fs(3, "SCRATCH_1", 48000), _fs(4, "SCRATCH_2", 2400, "DELETING"),
                                  _fs(5, "SCRATCH_2", 2400, stack="mrk-fsx")])
    short, notes = fsx_preflight(sq, fsx, {"DeploymentType": "SCRATCH_2", "StorageCapacity": "7200"}, "us-west-2",
                                 "mrk-fsx")
    for s in stubs:
        s.assert_no_pending_responses()
    assert (short, notes) == ([
        "quota: 'Lustre Scratch storage capacity' is 100800 in us-west-2, the stack (the account's SCRATCH_2 Lustre "
        "file systems hold 96000 GiB, +7200) needs 103200; request it with `aws service-quotas "
        "request-service-quota-increase --service-code fsx --quota-code L-AD2FC696 --desired-value 103200 "
        "--region us-west-2` (approval can take days)"], [])


def test_fsx_file_system_count_and_a_quota_not_listed():
    """PERSISTENT_2: its storage quota is listed, its file-system count is not (a note); SCRATCH_2: 1 allowed."""
    sq, fsx, _ = fsx_stubbed(FSX_QUOTAS, [_fs(1, "PERSISTENT_2", 2400)])
    assert fsx_preflight(sq, fsx, {"DeploymentType": "PERSISTENT_2", "StorageCapacity": "2400"}, "us-west-2") == (
        [], ["quota 'Lustre Persistent_2 file systems' not found among FSx's quotas in us-west-2; check the "
             "Service Quotas console"])
    one = [_fsx_quota(SCRATCH[0], "L-AD2FC696", 100800.0), _fsx_quota(SCRATCH[1], "L-C48231E5", 1.0)]
    sq, fsx, _ = fsx_stubbed(one, [_fs(1, "SCRATCH_2", 1200)])
    assert fsx_preflight(sq, fsx, {"DeploymentType": "SCRATCH_2", "StorageCapacity": "1200"}, "us-west-2") == ([
        "quota: 'Lustre Scratch file systems' is 1 in us-west-2, the stack (the account has 1 SCRATCH_2 Lustre file "
        "system(s), +1) needs 2; request it with `aws service-quotas request-service-quota-increase --service-code "
        "fsx --quota-code L-C48231E5 --desired-value 2 --region us-west-2` (approval can take days)"], [])


def test_an_unreadable_fsx_quota_is_a_note():
    sq, fsx, _ = fsx_stubbed([], error="AccessDeniedException")
    assert fsx_preflight(sq, fsx, {"DeploymentType": "SCRATCH_2", "StorageCapacity": "1200"}, "us-west-2") == (
        [], ["quotas 'Lustre Scratch storage capacity' and 'Lustre Scratch file systems' not checked (Service Quotas "
             "ListServiceQuotas: AccessDeniedException: denied)"])


def test_stack_preflight_picks_the_check_by_template_and_fills_in_defaults():
    """fsx.yaml with no StorageCapacity given deploys the template's default; other templates need no quota."""
    sq, fsx, _ = fsx_stubbed([_fsx_quota(SCRATCH[0], "L-AD2FC696", 1000.0), _fsx_quota(SCRATCH[1], "L-C48231E5", 9.0)],
                             [])
    clients = {"service-quotas": sq, "fsx": fsx}
    short, _ = stack_preflight("cfn/fsx.yaml", {}, {"DeploymentType": "SCRATCH_2", "StorageCapacity": "1200"},
                               clients.__getitem__, "us-west-2", "mrk-fsx")
    assert short == ["quota: 'Lustre Scratch storage capacity' is 1000 in us-west-2, the stack (the account's "
                     "SCRATCH_2 Lustre file systems hold 0 GiB, +1200) needs 1200; request it with `aws service-quotas "
                     "request-service-quota-increase --service-code fsx --quota-code L-AD2FC696 --desired-value 1200 "
                     "--region us-west-2` (approval can take days)"]
    assert stack_preflight("cfn/efs.yaml", {}, {}, clients.__getitem__, "us-west-2") == ([], [])


def test_stack_deploy_refuses_a_vpc_shortfall_and_notes_unread_quotas_at_v(moto, cli, monkeypatch):
    """The CLI path on moto: 5 internet gateways, so the default VPC stack (a NAT gateway) stops with 69 before
    any change set; with two gateways fewer it deploys, and the Elastic IP quota moto lacks is a note only at -v."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto)
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    sq, ec2, cf = _moto(moto, "service-quotas", "ec2", "cloudformation")
    for _ in range(5):
        ec2.create_internet_gateway()
    args = ("stack", "deploy", "mrk-vpc", "--template", "cfn/vpc.yaml", "--param", "AvailabilityZone1=us-west-2a",
            "--param", "AvailabilityZone2=us-west-2b", "--yes", "--poll", "0.1")
    r = cli(*args)
    assert r.rc == 69
    assert r.err.splitlines()[-1] == (
        "mpirun_kit: error: stack deploy mrk-vpc: quota: 'Internet gateways per Region' is 5 in us-west-2, the "
        "stack (the region has 5 internet gateway(s), +1) needs 6; request it with `aws service-quotas "
        "request-service-quota-increase --service-code vpc --quota-code L-A4707A72 --desired-value 6 --region "
        "us-west-2` (approval can take days)")
    assert cf.list_stacks()["StackSummaries"] == []
    for gw in ec2.describe_internet_gateways()["InternetGateways"][:2]:
        ec2.delete_internet_gateway(InternetGatewayId=gw["InternetGatewayId"])
    # two new stacks, not an update: moto does not tag a stack's resources with its name as AWS does
    quiet = cli(*args)
    assert quiet.rc == 0, quiet.err
    assert "not checked" not in quiet.err
    v = cli("-v", *args[:2], "mrk-vpc-2", *args[3:])
    assert v.rc == 0, v.err
    assert ("note: quota 'EC2-VPC Elastic IPs' not checked (Service Quotas GetServiceQuota: NoSuchResourceException: "
            "This service is not available in the current Region. Choose a different Region or a different service.)"
            ) in v.err
