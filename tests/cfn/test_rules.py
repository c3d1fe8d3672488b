"""Our template rules (mpirun_kit.stack.rules): every cfn/ template passes, each seeded bad template fails.

The bad templates under tests/cfn/bad/ are the proof that each rule fails when it should;
findings are compared whole.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from mpirun_kit.stack import Finding, check_parameters, check_template, load_template
from mpirun_kit.stack.rules import parameter_choices, scenarios

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = sorted(str(p.relative_to(REPO)) for p in (REPO / "cfn").glob("*.yaml"))
BAD = "tests/cfn/bad/"


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch):
    monkeypatch.chdir(REPO)


def test_every_template_is_there():
    assert TEMPLATES == ["cfn/efs.yaml", "cfn/fsx.yaml", "cfn/sagemaker-role.yaml", "cfn/vpc.yaml"]


@pytest.mark.parametrize("path", TEMPLATES)
def test_templates_pass_our_rules(path):
    assert check_template(load_template(path)) == ()


def test_fsx_rules_try_both_deployment_types_and_both_link_styles():
    t = load_template("cfn/fsx.yaml")
    choices = parameter_choices(t)
    assert choices["DeploymentType"] == ("SCRATCH_2", "PERSISTENT_2")
    assert choices["S3DataPath"] == ("", "<S3DataPath>")
    # StorageCapacity has no AllowedValues (any multiple of 2400 is valid): its default is tried here, and
    # the concrete value at deploy (test_fsx_takes_every_valid_capacity / ..._refuses_an_invalid_capacity_...)
    assert "StorageCapacity" not in choices and len(list(scenarios(t))) == 160  # x2: ExportToS3 (issue 26)


def test_persistent2_with_import_path():
    assert check_template(load_template(BAD + "fsx-persistent2-importpath.yaml")) == (
        Finding("FSX_S3_LINK", "Lustre", "PERSISTENT_2 does not support ImportPath, ExportPath; link S3 with an "
                "AWS::FSx::DataRepositoryAssociation instead (or use SCRATCH_2)"),
    )


def test_deployment_type_from_ref_is_checked_per_allowed_value():
    assert check_template(load_template(BAD + "fsx-param-driven.yaml")) == (
        Finding("FSX_S3_LINK", "Lustre", "PERSISTENT_2 does not support ImportPath; link S3 with an "
                "AWS::FSx::DataRepositoryAssociation instead (or use SCRATCH_2)",
                when=(("DeploymentType", "PERSISTENT_2"),)),
    )


def test_double_link_and_association_on_scratch1():
    assert check_template(load_template(BAD + "fsx-double-link.yaml")) == (
        Finding("FSX_S3_LINK", "Scratch2", "linked to S3 both by ImportPath and by Scratch2Link; use one: "
                "ImportPath on SCRATCH_2, a DataRepositoryAssociation on PERSISTENT_2"),
        Finding("FSX_S3_LINK", "Scratch1", "AutoImportPolicy set without ImportPath; set ImportPath to the "
                "linked S3 location"),
        Finding("FSX_S3_LINK", "Scratch1", "SCRATCH_1 does not support data repository associations "
                "(Scratch1Link); use PERSISTENT_2"),
    )


def test_throughput_vs_deployment_type():
    assert check_template(load_template(BAD + "fsx-throughput.yaml")) == (
        Finding("FSX_THROUGHPUT", "Persistent", "PerUnitStorageThroughput=300 is not valid for PERSISTENT_2 SSD; "
                "expected one of 125, 250, 500, 1000 MB/s/TiB"),
        Finding("FSX_THROUGHPUT", "Scratch", "PerUnitStorageThroughput=125 on SCRATCH_2; scratch file systems "
                "have a fixed throughput: remove it (or use PERSISTENT_2)"),
        Finding("FSX_THROUGHPUT", "Scratch", "StorageCapacity=2000 GiB is not valid for SCRATCH_2 SSD; "
                "expected 1200 or a multiple of 2400"),
    )


def test_efa_group_without_self_egress():
    assert check_template(load_template(BAD + "vpc-no-self-egress.yaml")) == (
        Finding("EFA_SELF_RULES", "Efa", "EFA needs all traffic within the group; missing: an "
                "AWS::EC2::SecurityGroupEgress with IpProtocol -1 to itself (DestinationSecurityGroupId); "
                "egress with IpProtocol -1 to 0.0.0.0/0"),
    )


def test_vpc_without_efa_group():
    assert check_template(load_template(BAD + "vpc-no-efa-group.yaml")) == (
        Finding("EFA_SELF_RULES", "(template)", "creates a VPC but no security group is marked for EFA; add "
                "Metadata {mpirun_kit: {efa: true}} to the training-host group and give it the self rules"),
    )


def test_vpc_template_self_rules_are_what_the_rule_needs():
    """Removing the self egress from cfn/vpc.yaml makes the rule fire (the real template, not a copy)."""
    t = load_template("cfn/vpc.yaml")
    resources = {k: v for k, v in t.resources.items() if k != "TrainingSelfEgress"}
    trimmed = type(t)(t.path, t.body, {**t.parsed, "Resources": resources}, t.parameters)
    assert [f.rule for f in check_template(trimmed)] == ["EFA_SELF_RULES"]


def test_efs_unencrypted_without_backup():
    assert check_template(load_template(BAD + "efs-unencrypted.yaml")) == (
        Finding("EFS_ENCRYPTED", "Shared", "Encrypted=(not set); set Encrypted: true (encryption at rest can "
                "only be chosen at creation)"),
        Finding("EFS_BACKUP", "Shared", "BackupPolicy.Status=(not set); set BackupPolicy: {Status: ENABLED}"),
    )


def test_finding_text():
    f = Finding("FSX_S3_LINK", "Lustre", "bad", when=(("DeploymentType", "PERSISTENT_2"),))
    assert str(f) == "FSX_S3_LINK Lustre: bad [with DeploymentType=PERSISTENT_2]"


def test_empty_or_conditional_export():
    assert check_template(load_template(BAD + "vpc-empty-export.yaml")) == (
        Finding("EXPORT_NOT_EMPTY", "Outputs.Third", "exported value is ''; CloudFormation refuses empty exports "
                "and rolls the stack back: give the output a Condition instead of an empty branch",
                when=(("Zone3", ""),)),
        Finding("EXPORT_NOT_EMPTY", "Outputs.NoteExport", "exported value is ''; CloudFormation refuses empty "
                "exports and rolls the stack back: give the output a Condition instead of an empty branch",
                when=(("Zone3", ""),)),
    )


def test_vpc_two_zones_exports_nothing_empty():
    """cfn/vpc.yaml with the README's two zones: every export has a value (AWS refuses empty ones)."""
    t = load_template("cfn/vpc.yaml")
    assert check_template(t, {"AvailabilityZone1": "us-west-2a", "AvailabilityZone2": "us-west-2b"}) == ()


def test_repository_defaults_agree():
    from mpirun_kit.stack.rules import check_repository
    assert check_repository(str(REPO)) == ()


def test_repository_rules_catch_what_issue_15_found(tmp_path):
    """The role's old defaults (mpirun_kit), a job writing outside the prefix, a description naming a missing output."""
    import shutil

    from mpirun_kit.stack.rules import check_repository
    for d in ("cfn", "docker", "jobs"):
        (tmp_path / d).mkdir()
    for f in ("vpc", "fsx", "efs", "sagemaker-role"):
        shutil.copy(REPO / "cfn" / f"{f}.yaml", tmp_path / "cfn")
    shutil.copy(REPO / "docker" / "build.sh", tmp_path / "docker")
    role = tmp_path / "cfn" / "sagemaker-role.yaml"
    role.write_text(role.read_text().replace("Default: mpirun-kit", "Default: mpirun_kit"))
    efs = tmp_path / "cfn" / "efs.yaml"
    efs.write_text(efs.read_text().replace("(vpc stack output PrivateSubnet2Id)", "(vpc stack output Subnet2)"))
    job = (REPO / "jobs" / "maskrcnn.yaml").read_text().replace("${stack:mrk-role.RoleS3Uri}/jobs/",
                                                                "s3://mrk-artifacts/jobs/")
    (tmp_path / "jobs" / "maskrcnn.yaml").write_text(job)
    found = [(f.rule, f.resource.replace(str(tmp_path), "<tmp>"), f.message.split(";")[0].split(" is ")[0])
             for f in check_repository(str(tmp_path))]
    assert found == [
        ("OUTPUT_REFS", "<tmp>/cfn/efs.yaml SubnetId2", "names vpc stack output Subnet2, which cfn/vpc.yaml does not have"),
        ("DEFAULTS_AGREE", "<tmp>/cfn/sagemaker-role.yaml ImageRepositoryName",
         "default 'mpirun_kit', but docker/build.sh pushes to 'mpirun-kit'"),
        # the image and the key channel come from the role stack (RoleImageRepository, RoleS3Uri): they follow it
        ("DEFAULTS_AGREE", "jobs/maskrcnn.yaml",
         "target.sagemaker.output_s3: s3://mrk-artifacts/jobs/${job_name}/output"),
        ("DEFAULTS_AGREE", "jobs/maskrcnn.yaml", "checkpoint.s3: s3://mrk-artifacts/jobs/${job_name}/checkpoints"),
        # and outside the per-job home the role scopes each job to (issue 26)
        ("DEFAULTS_AGREE", "jobs/maskrcnn.yaml",
         "target.sagemaker.output_s3: s3://mrk-artifacts/jobs/${job_name}/output"),
        ("DEFAULTS_AGREE", "jobs/maskrcnn.yaml", "checkpoint.s3: s3://mrk-artifacts/jobs/${job_name}/checkpoints"),
    ]


def test_jobs_name_no_account_and_no_global_bucket():
    """Issue 21: `grep -rE '[0-9]{12}|mrk-artifacts' jobs/` finds nothing (any account can run them)."""
    import re
    hits = [f"{p.name}:{i}" for p in sorted((REPO / "jobs").glob("*.yaml"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"[0-9]{12}|mrk-artifacts", line)]
    assert hits == []


@pytest.mark.parametrize("gib", [1200, 2400, 14400, 16800, 21600, 72000])
def test_fsx_takes_every_valid_capacity(gib):
    """Issue 21 item 6: AllowedValues left out valid sizes (14400, 16800, 21600, ...)."""
    t = load_template("cfn/fsx.yaml")
    values = {"SubnetId": "subnet-0123456789abcdef0", "SecurityGroupId": "sg-0123456789abcdef0",
              "StorageCapacity": str(gib)}
    check_parameters(t, values)
    assert check_template(t, values) == ()


@pytest.mark.parametrize("gib", [3000, 4000, 600])
def test_fsx_refuses_an_invalid_capacity_before_deploying(gib):
    from mpirun_kit.errors import SpecError

    t = load_template("cfn/fsx.yaml")
    values = {"SubnetId": "subnet-0123456789abcdef0", "SecurityGroupId": "sg-0123456789abcdef0",
              "StorageCapacity": str(gib)}
    try:
        check_parameters(t, values)
    except SpecError as exc:  # below MinValue: CloudFormation's own check
        assert "StorageCapacity" in str(exc) and gib < 1200
        return
    (f,) = check_template(t, values)
    assert (f.rule, f.message.split(";")[0]) == (
        "FSX_THROUGHPUT", f"StorageCapacity={gib} GiB is not valid for SCRATCH_2 SSD")


def test_jobs_name_no_region():
    """Issue 26: jobs/maskrcnn.yaml said region: us-west-2; the region comes from --region or the AWS configuration."""
    from mpirun_kit.spec.load import load_job

    for p in sorted((REPO / "jobs").glob("*.yaml")):
        assert load_job(p).target.sagemaker.region is None, p.name
