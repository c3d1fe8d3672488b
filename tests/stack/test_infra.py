"""mpirun_kit.stack.infra: a job against the stacks it names, each check with its message."""
from __future__ import annotations

import textwrap
from pathlib import Path


from mpirun_kit.spec.compile import resolve_stack_refs
from mpirun_kit.spec.load import load_job_text
from mpirun_kit.stack import load_template
from mpirun_kit.stack.infra import check_job_infrastructure, key_channel_warnings, role_outputs_from_template

REPO = Path(__file__).resolve().parents[2]
SPEC = textwrap.dedent("""\
    apiVersion: mpirun_kit/v1
    kind: Job
    name: j
    target:
      type: sagemaker
      sagemaker:
        role: ${stack:mrk-role.RoleArn}
        output_s3: s3://mrk-artifacts/mpirun-kit/j/output
    image: 123456789012.dkr.ecr.us-west-2.amazonaws.com/mpirun-kit:0.1.0
    resources: {instance_type: ml.p4d.24xlarge, hosts: 2}
    program: {module: m}
    data:
      coco:
        fsx: {file_system_id: "${stack:mrk-fsx.FileSystemId}", mount_name: abcd, path: /coco}
      mpirun-keys:
        s3: s3://mrk-artifacts/mpirun-kit/keys/${job_name}/
    checkpoint: {s3: s3://mrk-artifacts/mpirun-kit/j/checkpoints}
    vpc: {subnets: ["${stack:mrk-vpc.PrivateSubnet1Id}"], security_groups: [sg-1]}
    """)
OUTPUTS = {
    "mrk-role": {"RoleArn": "arn:aws:iam::123456789012:role/r", "RoleBucket": "mrk-artifacts", "RolePrefix": "mpirun-kit",
                 "RoleImageRepository": "123456789012.dkr.ecr.us-west-2.amazonaws.com/mpirun-kit"},
    "mrk-fsx": {"FileSystemId": "fs-0123456789abcdef0", "SubnetId": "subnet-a", "DeploymentType": "SCRATCH_2"},
    "mrk-vpc": {"PrivateSubnet1Id": "subnet-a", "PrivateSubnet2Id": "subnet-b"},
}


def check(text=SPEC, outputs=OUTPUTS, **kw):
    written = load_job_text(text, "j.yaml")
    return check_job_infrastructure(written, resolve_stack_refs(written, outputs.__getitem__), outputs, **kw)


def test_a_fitting_job_has_no_warning():
    assert check() == ()


def test_image_in_another_repository():
    (w,) = check(SPEC.replace("/mpirun-kit:0.1.0", "/mpirun_kit:0.1.0"))
    assert w == ("image: 123456789012.dkr.ecr.us-west-2.amazonaws.com/mpirun_kit:0.1.0 is not in the ECR repository "
                 "role stack mrk-role may pull from (123456789012.dkr.ecr.us-west-2.amazonaws.com/mpirun-kit); set "
                 "image: ${stack:mrk-role.RoleImageRepository}:0.1.0 in the spec (the repository of this account and "
                 "region, which docker/build.sh pushes to), or deploy the role with --param ImageRepositoryName=<its "
                 "repository>")


def test_s3_outside_the_role_prefix():
    warnings = check(SPEC.replace("s3://mrk-artifacts/mpirun-kit/j/output", "s3://mrk-artifacts/maskrcnn/output")
                     .replace("s3://mrk-artifacts/mpirun-kit/j/checkpoints", "s3://other/mpirun-kit/c"))
    assert warnings == (
        "target.sagemaker.output_s3: s3://mrk-artifacts/maskrcnn/output is outside what role stack mrk-role may read "
        "and write (s3://mrk-artifacts/mpirun-kit/...); set it to ${stack:mrk-role.RoleS3Uri}/maskrcnn/output in "
        "the spec, or deploy the role with --param BucketName=/Prefix= to match",
        "checkpoint.s3: s3://other/mpirun-kit/c is outside what role stack mrk-role may read and write "
        "(s3://mrk-artifacts/mpirun-kit/...); set it to ${stack:mrk-role.RoleS3Uri}/c in the spec, or deploy the "
        "role with --param BucketName=/Prefix= to match")


def test_prefix_is_a_path_segment_not_a_string_prefix():
    (w,) = check(SPEC.replace("s3://mrk-artifacts/mpirun-kit/j/output", "s3://mrk-artifacts/mpirun-kit-old/out"))
    assert w.startswith("target.sagemaker.output_s3: s3://mrk-artifacts/mpirun-kit-old/out is outside")


def test_multi_host_without_key_channel():
    text = SPEC.replace("  mpirun-keys:\n    s3: s3://mrk-artifacts/mpirun-kit/keys/${job_name}/\n", "")
    (w,) = check(text)
    assert w.startswith("data: 2-host SageMaker job without the 'mpirun-keys' channel: `keys install --sagemaker` "
                        "fails on every host. Add data: {mpirun-keys: {s3: s3://BUCKET/PREFIX/keys/${job_name}/}}")
    assert w.endswith("submit makes the job's secret there and removes it after the job")  # issue 26
    one_host = text.replace("hosts: 2", "hosts: 1")
    assert check(one_host) == ()


def test_key_channel_not_per_job():
    (w,) = key_channel_warnings(load_job_text(SPEC.replace("keys/${job_name}/", "keys/"), "j.yaml"))
    assert w == ("data.mpirun-keys.s3: s3://mrk-artifacts/mpirun-kit/keys/ does not name ${job_name}; the keys are "
                 "derived for the exact training-job name, so every job needs its own secret under its own name")


def test_kms_key_the_role_cannot_decrypt():
    key = "arn:aws:kms:us-west-2:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    (w,) = check(kms_keys=[key])
    assert w == (f"kms: the job's objects are encrypted with {key}, but role stack mrk-role may decrypt with no "
                 f"customer-managed key; deploy the role with --param KmsKeyArn={key}")
    allowed = {**OUTPUTS, "mrk-role": {**OUTPUTS["mrk-role"], "RoleKmsKeyArn": key}}
    assert check(outputs=allowed, kms_keys=[key]) == ()


def test_fsx_channel_in_another_subnet():
    (w,) = check(SPEC.replace("PrivateSubnet1Id", "PrivateSubnet2Id"))
    assert w == ("data.coco.fsx: file system fs-0123456789abcdef0 is in subnet subnet-a, but the job may run in "
                 "subnet-b (vpc.subnets); set vpc.subnets to [subnet-a]")


def test_read_write_channel_on_scratch():
    (w,) = check(SPEC.replace("path: /coco}", "path: /coco}\n    mode: rw"))
    assert w.startswith("data.coco: read-write channel on a SCRATCH_2 file system: nothing written there is exported")


def test_unknown_outputs_skip_their_checks():
    partial = {"mrk-role": {"RoleArn": "arn:aws:iam::123456789012:role/r"}, "mrk-fsx": {"FileSystemId": "fs-0123456789abcdef0"},
               "mrk-vpc": {"PrivateSubnet1Id": "subnet-z"}}
    assert check(SPEC.replace("/mpirun-kit:0.1.0", "/other:1"), outputs=partial) == ()


def test_role_outputs_from_template_defaults():
    role = role_outputs_from_template(load_template(str(REPO / "cfn" / "sagemaker-role.yaml")),
                                      {"BucketName": "mrk-artifacts"})
    assert role == {"RoleBucket": "mrk-artifacts", "RolePrefix": "mpirun-kit", "RoleImageRepository": "mpirun-kit",
                    "RoleS3Uri": "s3://mrk-artifacts/mpirun-kit",
                    "SubmitRoleArn": "arn:aws:iam::123456789012:role/<SubmitRole>"}  # per-job role (issue 26)


def test_validate_notices_the_missing_key_channel(tmp_path, capsys):
    from mpirun_kit.cli.main import main
    spec = tmp_path / "j.yaml"
    spec.write_text(SPEC.replace("  mpirun-keys:\n    s3: s3://mrk-artifacts/mpirun-kit/keys/${job_name}/\n", ""))
    assert main(["validate", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "  warning: data: 2-host SageMaker job without the 'mpirun-keys' channel" in out


def test_bucket_default_kms_key_is_found_and_checked(moto):
    """A bucket encrypting with a customer-managed key: plan needs the role's kms:Decrypt on it."""
    import boto3

    from mpirun_kit.stack.infra import bucket_kms_keys, job_buckets
    s3 = boto3.client("s3", region_name="us-west-2", endpoint_url=moto)
    kms = boto3.client("kms", region_name="us-west-2", endpoint_url=moto)
    key = kms.create_key()["KeyMetadata"]["Arn"]
    for bucket in ("mrk-artifacts", "plain"):
        s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    s3.put_bucket_encryption(Bucket="mrk-artifacts", ServerSideEncryptionConfiguration={"Rules": [
        {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key}}]})
    written = load_job_text(SPEC, "j.yaml")
    assert job_buckets(resolve_stack_refs(written, OUTPUTS.__getitem__)) == ("mrk-artifacts",)
    assert bucket_kms_keys(s3, ["mrk-artifacts", "plain", "missing"]) == (key,)
    (w,) = check(kms_keys=bucket_kms_keys(s3, ["mrk-artifacts"]))
    assert w.startswith(f"kms: the job's objects are encrypted with {key}, but role stack mrk-role may decrypt with "
                        "no customer-managed key")


def test_plan_reports_the_kms_key_the_role_lacks(moto, tmp_path, capsys, monkeypatch):
    """`plan` end to end: stack outputs given on the command line, the bucket's key read from S3 (moto)."""
    import boto3

    from mpirun_kit.cli.main import main
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto)
    s3 = boto3.client("s3", region_name="us-west-2", endpoint_url=moto)
    key = boto3.client("kms", region_name="us-west-2", endpoint_url=moto).create_key()["KeyMetadata"]["Arn"]
    s3.create_bucket(Bucket="mrk-artifacts", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    s3.put_bucket_encryption(Bucket="mrk-artifacts", ServerSideEncryptionConfiguration={"Rules": [
        {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key}}]})
    spec = tmp_path / "j.yaml"
    spec.write_text(SPEC.replace("sagemaker:\n", "sagemaker:\n    region: us-west-2\n", 1))
    flags = [f"--stack-output={s}.{k}={v}" for s, out in OUTPUTS.items() for k, v in out.items()]
    assert main(["plan", str(spec), *flags]) == 0
    out = capsys.readouterr().out
    assert f"kms: the job's objects are encrypted with {key}, but role stack mrk-role may decrypt with no " \
           f"customer-managed key; deploy the role with --param KmsKeyArn={key}" in out


# --- issue 26: shared storage that cannot leak, one home per job -----------------------------------------

PER_JOB = {**OUTPUTS["mrk-role"], "SubmitRoleArn": "arn:aws:iam::123456789012:role/s"}


def test_fsx_link_over_the_bucket_root_is_refused():
    """Before issue 26 nothing compared the FSx link with the keys: the walk-through linked s3://$BUCKET."""
    from mpirun_kit.stack.infra import fsx_link_refusals

    written = load_job_text(SPEC, "j.yaml")
    for link in ("s3://mrk-artifacts", "s3://mrk-artifacts/mpirun-kit", "s3://mrk-artifacts/mpirun-kit/keys/j1"):
        outputs = {**OUTPUTS, "mrk-fsx": {**OUTPUTS["mrk-fsx"], "S3DataPath": link}}
        (r,) = fsx_link_refusals(written, resolve_stack_refs(written, outputs.__getitem__), outputs)
        assert r.startswith(f"data.coco: file system fs-0123456789abcdef0 (stack mrk-fsx) is linked to {link}, which "
                            "covers the role's keys/ prefix")
        assert r.endswith("Link a data prefix instead: `mpirun_kit stack deploy mrk-fsx --template cfn/fsx.yaml "
                          "--param S3DataPath=s3://mrk-artifacts/datasets` (data outside the role's keys/ and jobs/)")
    for link in ("s3://mrk-artifacts/datasets", "s3://mrk-artifacts/mpirun-kit/data", "s3://other/mpirun-kit", ""):
        outputs = {**OUTPUTS, "mrk-fsx": {**OUTPUTS["mrk-fsx"], "S3DataPath": link}}
        assert fsx_link_refusals(written, resolve_stack_refs(written, outputs.__getitem__), outputs) == ()


def test_fsx_link_over_the_jobs_checkpoints_is_refused_without_role_outputs():
    from mpirun_kit.stack.infra import fsx_link_refusals

    written = load_job_text(SPEC, "j.yaml")
    outputs = {**OUTPUTS, "mrk-role": {"RoleArn": "arn:aws:iam::1:role/r"},
               "mrk-fsx": {**OUTPUTS["mrk-fsx"], "S3DataPath": "s3://mrk-artifacts/mpirun-kit/j"}}
    (r,) = fsx_link_refusals(written, resolve_stack_refs(written, outputs.__getitem__), outputs)
    assert "covers target.sagemaker.output_s3, checkpoint.s3:" in r


def test_plan_refuses_the_leaking_link(tmp_path, capsys):
    from mpirun_kit.cli import main as cli_main

    spec = tmp_path / "j.yaml"
    spec.write_text(SPEC)
    flags = [f"--stack-output={s}.{k}={v}" for s, o in OUTPUTS.items() for k, v in o.items()]
    rc = cli_main.main(["plan", str(spec), "--region", "us-west-2", *flags,
                        "--stack-output=mrk-fsx.S3DataPath=s3://mrk-artifacts"])
    assert rc == 64
    assert "is linked to s3://mrk-artifacts, which covers the role's keys/ prefix" in capsys.readouterr().err


def test_fsx_channel_outside_the_linked_data_directory():
    """PERSISTENT_2 fills /data (FileSystemPath), not the root: a channel at /coco reads an empty directory."""
    outputs = {**OUTPUTS, "mrk-fsx": {**OUTPUTS["mrk-fsx"], "DeploymentType": "PERSISTENT_2",
                                      "DataDirectoryPath": "/abcd/data"}}
    (w,) = check(outputs=outputs)
    assert w == ("data.coco.fsx.path: /coco is outside the directory the file system's S3 link fills (/abcd/data, "
                 "stack output DataDirectoryPath): the job would read an empty directory; set path: /data/coco")
    assert check(SPEC.replace("path: /coco", "path: /data/coco"), outputs=outputs) == ()
    scratch = {**OUTPUTS, "mrk-fsx": {**OUTPUTS["mrk-fsx"], "DataDirectoryPath": "/abcd"}}
    assert check(outputs=scratch) == ()


def test_per_job_role_needs_per_job_paths():
    """The per-job role lets a job write only under jobs/<its name>/: a shared checkpoint prefix would fail
    (and before issue 26 it let the second job's --resume auto continue the first's run)."""
    outputs = {**OUTPUTS, "mrk-role": PER_JOB}
    ws = check(outputs=outputs)
    assert ws == (
        "target.sagemaker.output_s3: s3://mrk-artifacts/mpirun-kit/j/output is outside the job's own prefix "
        "s3://mrk-artifacts/mpirun-kit/jobs/${job_name}/, the only place the role lets a job write (and the only one "
        "its --resume auto may see); set it to ${stack:mrk-role.RoleS3Uri}/jobs/${job_name}/output",
        "checkpoint.s3: s3://mrk-artifacts/mpirun-kit/j/checkpoints is outside the job's own prefix "
        "s3://mrk-artifacts/mpirun-kit/jobs/${job_name}/, the only place the role lets a job write (and the only one "
        "its --resume auto may see); set it to ${stack:mrk-role.RoleS3Uri}/jobs/${job_name}/checkpoints")
    fixed = SPEC.replace("{s3: s3://mrk-artifacts/mpirun-kit/j/checkpoints}",
                         "{s3: 's3://mrk-artifacts/mpirun-kit/j/checkpoints'}").replace(
        "mpirun-kit/j/", "mpirun-kit/jobs/${job_name}/")
    assert check(fixed, outputs=outputs) == ()
