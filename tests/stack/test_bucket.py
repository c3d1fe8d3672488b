"""The role stack's bucket guarded, and secrets of ended jobs swept (issue 37, findings 2 and 5), on the moto server.

`stack bucket` printed nothing and did not exist: no bucket policy, Block Public Access, versioning or lifecycle
rule was set or checked, and nothing removed the secret of a job submitted without --wait.  moto keeps the
bucket's settings as AWS does (it does not enforce the TLS policy: that stays for a real account), and its
training jobs are Completed at once.
"""
from __future__ import annotations

import json

import boto3
import pytest

from mpirun_kit.stack.bucket import KEYS_EXPIRE_DAYS, bucket_findings, sweep_job_keys

B = ("--bucket", "team-bucket", "--prefix", "mpirun-kit", "--region", "us-west-2")


@pytest.fixture
def s3(moto):
    c = boto3.client("s3", region_name="us-west-2", endpoint_url=moto)
    c.create_bucket(Bucket="team-bucket", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    return c


def _remedy_json(line: str) -> dict:
    return json.loads(line.split("'")[1])


def test_a_bare_bucket_lacks_four_guards_and_each_remedy_fixes_it(cli, s3, on_moto):
    r = cli("stack", "bucket", *B)
    assert r.rc == 1, r.err
    lines = r.out.splitlines()
    assert len(lines) == 4, r.out
    bpa, tls, ver, life = lines
    assert bpa.startswith("bucket team-bucket: Block Public Access is off (BlockPublicAcls, IgnorePublicAcls, "
                          "BlockPublicPolicy, RestrictPublicBuckets)")
    assert "aws s3api put-public-access-block --bucket team-bucket --region us-west-2" in bpa
    assert tls.startswith("bucket team-bucket: has no bucket policy (aws:SecureTransport): requests without TLS are "
                          "served. Add the statement: aws s3api put-bucket-policy")
    assert ver.startswith("bucket team-bucket: versioning is off")
    assert f"no lifecycle rule expires mpirun-kit/keys/ within {KEYS_EXPIRE_DAYS} days" in life
    # the printed remedies, applied as printed
    s3.put_public_access_block(Bucket="team-bucket", PublicAccessBlockConfiguration={
        f: True for f in ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")})
    s3.put_bucket_policy(Bucket="team-bucket", Policy=json.dumps(_remedy_json(tls)))
    s3.put_bucket_versioning(Bucket="team-bucket", VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_lifecycle_configuration(Bucket="team-bucket", LifecycleConfiguration=_remedy_json(life))
    ok = cli("stack", "bucket", *B)
    assert (ok.rc, ok.out) == (0, "bucket team-bucket: Block Public Access on, TLS required, versioning on, "
                                  "mpirun-kit/keys/ expires\n"), ok.err


def test_a_policy_that_allows_plain_http_and_a_rule_for_another_prefix_are_findings(s3):
    s3.put_bucket_policy(Bucket="team-bucket", Policy=json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::123456789012:root"}, "Action": "s3:GetObject",
        "Resource": "arn:aws:s3:::team-bucket/*"}]}))
    s3.put_bucket_lifecycle_configuration(Bucket="team-bucket", LifecycleConfiguration={"Rules": [{
        "ID": "x", "Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 7}}]})
    text = "\n".join(bucket_findings(s3, "team-bucket", "mpirun-kit"))
    assert "has a policy that does not deny plain HTTP" in text
    assert "no lifecycle rule expires mpirun-kit/keys/" in text


def test_sweep_deletes_ended_jobs_secrets_and_keeps_running_ones(cli, s3, moto, on_moto):
    for job in ("alice--ended", "alice--running", "alice--never-created"):
        s3.put_object(Bucket="team-bucket", Key=f"mpirun-kit/keys/{job}/job-secret", Body=b"s")
    s3.put_object(Bucket="team-bucket", Key="mpirun-kit/jobs/alice--ended/checkpoints/x", Body=b"c")
    status = {"alice--ended": "Completed", "alice--running": "InProgress"}
    now = s3.head_object(Bucket="team-bucket", Key="mpirun-kit/keys/alice--ended/job-secret")["LastModified"].timestamp()
    # within the grace period, a job SageMaker does not know keeps its secret (submit puts it just before creating)
    assert sweep_job_keys(s3, "team-bucket", "mpirun-kit", status.get, now=now + 60, delete=False) == [
        ("mpirun-kit/keys/alice--ended/job-secret", "training job alice--ended is Completed")]
    gone = sweep_job_keys(s3, "team-bucket", "mpirun-kit", status.get, now=now + 7200)
    assert [k for k, _ in gone] == ["mpirun-kit/keys/alice--ended/job-secret",
                                    "mpirun-kit/keys/alice--never-created/job-secret"]
    left = [o["Key"] for o in s3.list_objects_v2(Bucket="team-bucket")["Contents"]]
    assert left == ["mpirun-kit/jobs/alice--ended/checkpoints/x", "mpirun-kit/keys/alice--running/job-secret"]


def test_sweep_keys_command_asks_sagemaker(cli, s3, moto, on_moto):
    """Through the CLI: moto's training job is Completed at once, so its secret is swept; --dry-run lists only."""
    sm = boto3.client("sagemaker", region_name="us-west-2", endpoint_url=moto)
    sm.create_training_job(TrainingJobName="alice--done", RoleArn="arn:aws:iam::123456789012:role/r",
                           AlgorithmSpecification={"TrainingImage": "i", "TrainingInputMode": "File"},
                           OutputDataConfig={"S3OutputPath": "s3://team-bucket/o"},
                           ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
                           StoppingCondition={"MaxRuntimeInSeconds": 60})
    s3.put_object(Bucket="team-bucket", Key="mpirun-kit/keys/alice--done/job-secret", Body=b"s")
    dry = cli("stack", "sweep-keys", *B, "--dry-run")
    assert (dry.rc, dry.out) == (0, "would delete s3://team-bucket/mpirun-kit/keys/alice--done/job-secret "
                                    "(training job alice--done is Completed)\n"), dry.err
    refused = cli("stack", "sweep-keys", *B)
    assert refused.rc == 64 and "rerun with --yes" in refused.err
    done = cli("stack", "sweep-keys", *B, "--yes")
    assert done.out.startswith("deleted s3://team-bucket/mpirun-kit/keys/alice--done/job-secret"), done.err
    assert s3.list_objects_v2(Bucket="team-bucket").get("KeyCount") == 0
