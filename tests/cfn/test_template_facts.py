"""What issue 15 found in the templates, each as a fact about the template that failed before the fix."""
from __future__ import annotations

from pathlib import Path

from mpirun_kit.stack import load_template
from mpirun_kit.stack.rules import _Scenario
from mpirun_kit.stack.template import parameter_values

REPO = Path(__file__).resolve().parents[2]


def _t(name):
    return load_template(str(REPO / "cfn" / name))


def _statements(template, values):
    """Every IAM statement of the role, inline and separate policies, for these parameter values."""
    s = _Scenario(template, parameter_values(template, values))
    out = []
    for _, res in s.of_type("AWS::IAM::Role"):
        for policy in s.props(res).get("Policies", []):
            out += policy["PolicyDocument"]["Statement"]
    for _, res in s.of_type("AWS::IAM::Policy"):
        out += s.props(res)["PolicyDocument"]["Statement"]
    return out


ROLE = {"BucketName": "mrk-artifacts", "VpcId": "vpc-0123"}
KEY = "arn:aws:kms:us-west-2:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def test_every_mutating_ec2_statement_is_limited_to_the_vpc():
    mutating = [st for st in _statements(_t("sagemaker-role.yaml"), ROLE)
                if any(a.startswith("ec2:") and not a.startswith("ec2:Describe")
                       for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]]))]
    assert len(mutating) == 2
    for st in mutating:
        assert "ec2:Vpc" in st["Condition"]["ArnEquals"], st["Sid"]


def test_kms_decrypt_only_with_a_key_and_only_for_that_key():
    role = _t("sagemaker-role.yaml")
    assert not any("kms:Decrypt" in st["Action"] for st in _statements(role, ROLE))
    sts = [st for st in _statements(role, {**ROLE, "KmsKeyArn": KEY}) if "kms:" in str(st["Action"])]
    assert len(sts) == 3  # execution role: decrypt, encrypt own job; submit role: its job's keys
    for st in sts:
        assert st["Resource"] == KEY and st["Effect"] == "Allow"
        assert "kms:ViaService" in st["Condition"]["StringEquals"]
        # issue 26: the object ARN S3 sends as encryption context keeps each job to its own prefixes
        assert "kms:EncryptionContext:aws:s3:arn" in st["Condition"]["StringLike"]


def test_role_defaults_are_the_repository_and_prefix_the_project_uses():
    role = _t("sagemaker-role.yaml")
    assert (role.parameter("ImageRepositoryName").default, role.parameter("Prefix").default) == \
        ("mpirun-kit", "mpirun-kit")


def test_scratch_file_system_has_no_export_path():
    """ExportPath = ImportPath would overwrite the inputs on export; SCRATCH_2 exports nothing automatically."""
    fsx = _t("fsx.yaml")
    s = _Scenario(fsx, parameter_values(fsx, {"SubnetId": "subnet-1", "SecurityGroupId": "sg-1",
                                              "S3DataPath": "s3://mrk-data/datasets"}))
    (lustre,) = [s.props(r)["LustreConfiguration"] for _, r in s.of_type("AWS::FSx::FileSystem")]
    assert lustre["DeploymentType"] == "SCRATCH_2" and lustre["ImportPath"] == "s3://mrk-data/datasets"
    assert "ExportPath" not in lustre
    assert "exported automatically" not in fsx.body


def test_efs_tells_a_job_its_directory_path():
    """SageMaker mounts the EFS root (no access points): the job needs the access point's directory."""
    outputs = _t("efs.yaml").parsed["Outputs"]
    assert outputs["DirectoryPath"]["Value"] == {"Ref": "RootDirectory"}


def test_fsx_outputs_the_subnet_and_deployment_type_plan_checks():
    outputs = _t("fsx.yaml").parsed["Outputs"]
    assert outputs["SubnetId"]["Value"] == {"Ref": "SubnetId"}
    assert outputs["DeploymentType"]["Value"] == {"Ref": "DeploymentType"}


def test_nat_gateway_per_zone():
    vpc = _t("vpc.yaml")
    zones = {"AvailabilityZone1": "us-west-2a", "AvailabilityZone2": "us-west-2b", "AvailabilityZone3": "us-west-2c"}
    shared = _Scenario(vpc, parameter_values(vpc, zones))
    per_zone = _Scenario(vpc, parameter_values(vpc, {**zones, "NatGatewayPerZone": "true"}))
    assert len(list(shared.of_type("AWS::EC2::NatGateway"))) == 1
    assert sorted(lid for lid, _ in per_zone.of_type("AWS::EC2::NatGateway")) == ["NatGateway", "NatGateway2",
                                                                                   "NatGateway3"]


def test_fsx_links_a_data_prefix_and_imports_only_by_default():
    """Issue 26: the walk-through linked the bucket's root, and PERSISTENT_2 exported NEW/CHANGED/DELETED to it."""
    import re

    fsx = _t("fsx.yaml")
    pattern = re.compile(fsx.parameter("S3DataPath").allowed_pattern)
    for bare in ("s3://mrk-data", "s3://mrk-data/", "s3://mrk-data//"):
        assert not pattern.fullmatch(bare), bare
    for ok in ("", "s3://mrk-data/datasets", "s3://mrk-data/datasets/coco/"):
        assert pattern.fullmatch(ok), ok
    base = {"SubnetId": "subnet-1", "SecurityGroupId": "sg-1", "S3DataPath": "s3://mrk-data/datasets",
            "DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": "250"}
    for export, events in (("false", None), ("true", ["NEW", "CHANGED"])):
        s = _Scenario(fsx, parameter_values(fsx, {**base, "ExportToS3": export}))
        (dra,) = [s.props(r)["S3"] for _, r in s.of_type("AWS::FSx::DataRepositoryAssociation")]
        assert (dra.get("AutoExportPolicy") or {}).get("Events") == events
    assert fsx.parameter("ExportToS3").default == "false"
    assert fsx.parsed["Outputs"]["S3DataPath"]["Value"] == {"Ref": "S3DataPath"}


def test_the_role_scopes_each_job_to_its_own_prefix_by_session_tag():
    """Issue 26 (was issue 21's 'the shared role reads every job's key'): per-job statements by principal tag;
    the policy evaluation itself is in tests/stack/test_role_policy.py."""
    policies = _t("sagemaker-role.yaml").resources["ExecutionRole"]["Properties"]["Policies"]
    sts = {st["Sid"]: st for p in policies for st in p["PolicyDocument"]["Statement"]}
    tag = "${!aws:PrincipalTag/mpirun-kit-job}"  # ${!...}: Fn::Sub leaves ${...} for IAM
    assert sts["ReadOwnKeys"]["Action"] == "s3:GetObject"
    assert sts["ReadOwnKeys"]["Resource"]["Fn::Sub"].endswith(f"/${{Prefix}}/keys/{tag}/*")
    assert sts["ReadWriteOwnJob"]["Resource"]["Fn::Sub"].endswith(f"/${{Prefix}}/jobs/{tag}/*")
    assert not any(str(st.get("Resource", "")).endswith("/${Prefix}/*'}") for st in sts.values())
    trust = _t("sagemaker-role.yaml").resources["ExecutionRole"]["Properties"]["AssumeRolePolicyDocument"]
    t, alphabet = trust["Statement"]   # the Allow, and the Deny of tags outside the job-name alphabet (issue 37)
    assert (alphabet["Sid"], alphabet["Effect"]) == ("JobNameAlphabet", "Deny")
    assert t["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    assert t["Condition"]["ArnLike"]["aws:SourceArn"] == {
        "Fn::Sub": "arn:${AWS::Partition}:sagemaker:${AWS::Region}:${AWS::AccountId}:training-job/*"}


def test_inter_container_encryption_is_off_and_explained():
    from mpirun_kit.spec.compile import compile_job
    from mpirun_kit.spec.load import load_job
    from mpirun_kit.targets.sagemaker import build_request

    outputs = {"mrk-role": {"RoleArn": "arn:aws:iam::210987654321:role/r", "RoleS3Uri": "s3://b-1/mpirun-kit",
                            "SubmitRoleArn": "arn:aws:iam::210987654321:role/s",
                            "RoleImageRepository": "210987654321.dkr.ecr.us-west-2.amazonaws.com/mpirun-kit"},
               "mrk-fsx": {"FileSystemId": "fs-0123456789abcdef0", "LustreMountName": "abcd"},
               "mrk-vpc": {"PrivateSubnet1Id": "subnet-1", "SecurityGroupId": "sg-1"}}
    compiled = compile_job(load_job(REPO / "jobs" / "maskrcnn.yaml"), resolver=outputs.__getitem__)
    assert build_request(compiled, "j-1")["EnableInterContainerTrafficEncryption"] is False
    threat = (REPO / "docs" / "threat-model.md").read_text()
    assert "**Inter-container traffic encryption is off**" in threat and "IPsec" in threat


def test_fsx_refuses_a_link_that_covers_the_secrets_and_checkpoints():
    """Issue 37, finding 3: the template accepted S3DataPath=s3://BUCKET/mpirun-kit, which covers every
    job's keys/ and jobs/; only `plan` refused it, so a stack deployed by hand linked every secret to every
    host that mounts the file system.  The refusal is in the template (AllowedPattern, which CloudFormation
    applies and `stack deploy` checks locally)."""
    import re

    pattern = re.compile(_t("fsx.yaml").parameter("S3DataPath").allowed_pattern)
    for covering in ("s3://mrk-data/mpirun-kit", "s3://mrk-data/mpirun-kit/", "s3://mrk-data/mpirun-kit/keys",
                     "s3://mrk-data/mpirun-kit/keys/alice--x/", "s3://mrk-data/mpirun-kit/jobs", "s3://mrk-data/mpirun-kit/jobs/a/checkpoints",
                     "s3://mrk-data/teams/vision/keys/", "s3://mrk-data/teams/vision/jobs", "s3://mrk-data/keys", "s3://mrk-data/jobs/x"):
        assert not pattern.fullmatch(covering), covering
    for ok in ("s3://mrk-data/datasets", "s3://mrk-data/mpirun-kit/data", "s3://mrk-data/mpirun-kit/data/coco/", "s3://mrk-data/mpirun-kitten",
               "s3://mrk-data/datasets/monkeys", "s3://mrk-data/datasets/jobs-2024"):
        assert pattern.fullmatch(ok), ok


def test_the_s3_gateway_endpoint_reaches_only_the_accounts_buckets_and_ecr_layers():
    """Issue 37, finding 8: the S3 gateway endpoint had no policy, so every bucket was reachable through it."""
    ep = _t("vpc.yaml").resources["S3GatewayEndpoint"]["Properties"]
    allow = {st["Sid"]: st for st in ep["PolicyDocument"]["Statement"]}
    assert set(allow) == {"OwnAccountBuckets", "EcrImageLayers"}
    assert allow["OwnAccountBuckets"]["Condition"] == {"StringEquals": {"aws:ResourceAccount": {"Ref": "AWS::AccountId"}}}
    assert allow["EcrImageLayers"]["Action"] == "s3:GetObject"
    assert allow["EcrImageLayers"]["Resource"]["Fn::Sub"].endswith(":s3:::prod-${AWS::Region}-starport-layer-bucket/*")


def test_the_training_group_admits_only_itself_and_the_storage_group():
    """Issue 37, finding 6: the documented choice (one training group per VPC stack, docs/threat-model.md
    "Jobs side by side") holds only while nothing but the group itself and the file systems reach it."""
    from pathlib import Path

    vpc = _t("vpc.yaml")
    into = [r["Properties"] for r in vpc.resources.values() if r["Type"] == "AWS::EC2::SecurityGroupIngress"
            and r["Properties"]["GroupId"] == {"Fn::GetAtt": ["TrainingSecurityGroup", "GroupId"]}]
    assert into and all("CidrIp" not in p and "CidrIpv6" not in p for p in into)
    assert {p["SourceSecurityGroupId"]["Fn::GetAtt"][0] for p in into} == {"TrainingSecurityGroup",
                                                                          "StorageSecurityGroup"}
    assert "SecurityGroupIngress" not in vpc.resources["TrainingSecurityGroup"]["Properties"]
    text = (Path(__file__).resolve().parents[2] / "docs" / "threat-model.md").read_text()
    assert "**Jobs side by side share the network and EFS: a choice, with its cost.**" in text
