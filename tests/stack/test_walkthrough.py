"""The AWS walk-through (docs/aws-walkthrough.md), run as written: deploy, plan, keys, submit, stack down.

The block is taken from the page (the ```bash fence after "**The walk-through.**"), so page and
test cannot drift; it runs as one bash script under ``set -euo pipefail`` with the real
``mpirun_kit`` and ``aws`` commands, against a moto server on 127.0.0.1 (tests/stack/patched_moto.py:
stock moto plus change-set outputs, FSx resources through CloudFormation, UpdateTerminationProtection
and what AWS deletes with a stack, which moto lacks) whose account is not moto's default
(MOTO_ACCOUNT_ID), with a bucket name chosen at random and no default region in the environment
(the page passes --region). moto accepts requests AWS refuses, so the request ``submit --dry-run``
prints is checked against AWS's own limits (mpirun_kit.stack.limits), and ``plan`` must print no
warning: the role reaches the image, every S3 URI and the key channel; the FSx channel is in the
job's subnet.  After ``stack down`` only what the page's "What stays" names is left.

Only the values the page sets at its top (region, zone ids, bucket, data prefix) are changed:
us-west-2 with two zones and no default region, eu-central-1 with three zones (the page's comment)
and another default region set (issue 26: the page ran only in us-west-2).  What the FSx link
would import is listed: no job secret or checkpoint is under it.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from moto_process import free_port, moto_process

from mpirun_kit.stack.limits import check_request

REPO = Path(__file__).resolve().parents[2]
MARK = "@@mrk-walkthrough-step"


PAGE = REPO / "docs" / "aws-walkthrough.md"
ACCOUNT = "210987654321"  # not moto's default 123456789012: nothing may depend on it


def page_block() -> str:
    text = PAGE.read_text()
    start = text.index("**The walk-through.**")
    m = re.compile(r"```bash\n(.*?)```", re.S).search(text, start)
    assert m, "docs/aws-walkthrough.md: no ```bash block after **The walk-through.**"
    return m.group(1)


#: the values the page's block sets at its top, as ``NAME=value  # comment`` lines.
VALUE_LINE = re.compile(r"^([A-Z][A-Z0-9_]*)=(\S+)(\s+#.*)?$", re.M)


def with_values(block: str, values: dict) -> str:
    """The block with the values of its top lines replaced (the only things a user chooses)."""
    top = dict(m.group(1, 2) for m in VALUE_LINE.finditer(block))
    assert set(values) <= set(top), f"the page's block sets {sorted(top)}, the test wants {sorted(values)}"
    return VALUE_LINE.sub(lambda m: f"{m.group(1)}={values.get(m.group(1), m.group(2))}{m.group(3) or ''}", block)


def commands(block: str, zones: int) -> list[str]:
    """The block's commands (continuations joined); three zones adds what the page's comment says."""
    extra = re.search(r"#\s*three zones: add (.+)$", block, re.M)
    assert extra, "docs/aws-walkthrough.md: no '# three zones: add ...' line"
    out, current = [], ""
    for line in block.splitlines():
        if line.lstrip().startswith("#") and not current:
            continue
        current += line.rstrip("\\").rstrip() + " " if line.rstrip().endswith("\\") else line
        if not line.endswith("\\"):
            out.append(current.strip())
            current = ""
    out = [c for c in out if c]
    if zones == 3:
        out = [c.replace("--template cfn/vpc.yaml", "--template cfn/vpc.yaml " + extra.group(1).strip(), 1)
               for c in out]
    return out


@pytest.fixture
def patched_moto():
    port = free_port()
    env = {**os.environ, "MOTO_ACCOUNT_ID": ACCOUNT}
    with moto_process([sys.executable, str(REPO / "tests" / "stack" / "patched_moto.py"), str(port)], port,
                      timeout_s=60, what="patched moto server", stdout=subprocess.PIPE, text=True, env=env) as url:
        yield url


def run_walkthrough(url: str, zones: int, tmp_path: Path, values: dict,
                    default_region: str | None = None) -> list[tuple[str, str]]:
    """Run the page's commands in one bash; return (command, its combined output) per step."""
    import boto3

    region, bucket = values["REGION"], values["BUCKET"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k not in ("CI", *VALUES_SET)}
    env.update({"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_MAX_ATTEMPTS": "1", "AWS_EC2_METADATA_DISABLED": "true", "HOME": str(tmp_path),
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"})
    if default_region:  # a default that is not the page's region: --region must win everywhere
        env["AWS_DEFAULT_REGION"] = default_region
    s3 = boto3.client("s3", region_name=region, endpoint_url=url, aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    # the page's prerequisite: the user's own bucket, in the region, with the data under the data prefix
    if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region})
    s3.put_object(Bucket=bucket, Key=f"{values['DATA']}/coco/annotations/instances_val2017.json", Body=b"{}")
    steps = commands(with_values(page_block(), values), zones)
    script = "set -euo pipefail\n" + "".join(f"echo '{MARK} {i}'\n{c}\n" for i, c in enumerate(steps))
    r = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=540)
    parts = re.split(rf"^{MARK} (\d+)\n", r.stdout, flags=re.M)
    outputs = {int(parts[i]): parts[i + 1] for i in range(1, len(parts) - 1, 2)}
    done = [(steps[i], outputs.get(i, "")) for i in range(len(steps))]
    ran = max(outputs) if outputs else -1
    assert r.returncode == 0, f"step {ran} failed (exit {r.returncode}): {steps[ran]}\n{outputs.get(ran, r.stdout)[-3000:]}"
    return done


def clients(url: str, region: str) -> dict:
    import boto3

    kw = {"region_name": region, "endpoint_url": url, "aws_access_key_id": "testing",
          "aws_secret_access_key": "testing"}
    return {name: boto3.client(name, **kw) for name in ("cloudformation", "s3", "sagemaker", "ec2", "efs", "fsx")}


VALUES_SET = ("REGION", "ZONE1", "ZONE2", "ZONE3", "BUCKET", "DATA", "ME")
#: (region, zone ids 1-3 as the page takes them, the names moto gives them, zones, a default region or None)
REGIONS = {
    "us-west-2": (("usw2-az1", "usw2-az2", "usw2-az3"), ("us-west-2b", "us-west-2a", "us-west-2c"), 2, None),
    "eu-central-1": (("euc1-az2", "euc1-az3", "euc1-az1"), ("eu-central-1b", "eu-central-1c", "eu-central-1a"), 3,
                     "us-east-1"),
}


@pytest.mark.parametrize("region", sorted(REGIONS))
def test_the_walkthrough_on_another_account(patched_moto, region, tmp_path):
    ids, names, zones, default = REGIONS[region]
    bucket = f"mrk-test-{uuid.uuid4().hex[:12]}"
    values = {"REGION": region, "ZONE1": ids[0], "ZONE2": ids[1], "ZONE3": ids[2], "BUCKET": bucket,
              "DATA": "datasets"}
    c = clients(patched_moto, region)
    # what the FSx link must never hold: a kept job secret and another job's checkpoint, beside the data
    c["s3"].create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region})
    for key in ("mpirun-kit/keys/earlier-job/job-secret", "mpirun-kit/jobs/earlier-job/checkpoints/model_0000100.pth"):
        c["s3"].put_object(Bucket=bucket, Key=key, Body=b"x")
    steps = run_walkthrough(patched_moto, zones, tmp_path, values, default)
    by_cmd = dict(steps)

    (vpc_cmd,) = [cmd for cmd in by_cmd if cmd.startswith("mpirun_kit stack deploy mrk-vpc")]
    vpc_out = by_cmd[vpc_cmd]
    assert f"mpirun_kit: region {region} (from --region)" in vpc_out
    # zone names differ by account; ids do not (moto's mapping here)
    for i in range(zones):
        assert f"mpirun_kit: zone AvailabilityZone{i + 1}: {names[i]} = {ids[i]}" in vpc_out
    assert "mpirun_kit: cost: 1 NAT gateway(s) cost $" in vpc_out
    (fsx_cmd,) = [cmd for cmd in by_cmd if cmd.startswith("mpirun_kit stack deploy mrk-fsx")]
    assert "mpirun_kit: cost: 2400 GiB of FSx for Lustre SCRATCH_2 costs $" in by_cmd[fsx_cmd]
    # what the link would import: the data prefix's objects, no job secret, no checkpoint
    (link,) = re.findall(r'S3DataPath="([^"]+)"', fsx_cmd)
    assert link.replace("$BUCKET", bucket).replace("$DATA", values["DATA"]) == f"s3://{bucket}/datasets"
    imported = [o["Key"] for o in c["s3"].list_objects_v2(Bucket=bucket, Prefix="datasets/").get("Contents", [])]
    assert imported == ["datasets/coco/annotations/instances_val2017.json"]
    everything = [o["Key"] for o in c["s3"].list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert any("/keys/" in k for k in everything) and any("/checkpoints/" in k for k in everything)

    (plan_cmd,) = [cmd for cmd in by_cmd if cmd.startswith("mpirun_kit plan ")]
    plan = by_cmd[plan_cmd]
    assert "warning" not in plan.lower(), plan
    assert "job maskrcnn-r50-fpn-1x (jobs/maskrcnn.yaml)" in plan
    assert f"  stack      mrk-role.RoleImageRepository = {ACCOUNT}.dkr.ecr.{region}.amazonaws.com/mpirun-kit\n" in plan
    assert f"  stack      mrk-role.RoleS3Uri = s3://{bucket}/mpirun-kit\n" in plan
    assert "  cost       4 x ml.p5.48xlarge for up to 48 h = 192 instance-hours, up to $" in plan

    (dry_cmd,) = [cmd for cmd in by_cmd if cmd.endswith("--dry-run") and "submit" in cmd]
    dry = by_cmd[dry_cmd]
    request = json.loads(dry[dry.index("{"):dry.rindex("}") + 1])["CreateTrainingJob"]
    assert check_request("sagemaker", "CreateTrainingJob", request) == ()
    name = request["TrainingJobName"]
    assert re.fullmatch(r"alice--maskrcnn-r50-fpn-1x-\d{8}-\d{6}", name)
    assert request["AlgorithmSpecification"]["TrainingImage"] == \
        f"{ACCOUNT}.dkr.ecr.{region}.amazonaws.com/mpirun-kit:0.1.0"
    assert request["RoleArn"].startswith(f"arn:aws:iam::{ACCOUNT}:role/")
    assert request["SessionChainingConfig"] == {"EnableSessionTagChaining": True}
    channels = {ch["ChannelName"]: ch["DataSource"] for ch in request["InputDataConfig"]}
    assert channels["mpirun-keys"]["S3DataSource"]["S3Uri"] == f"s3://{bucket}/mpirun-kit/keys/{name}/"
    assert request["OutputDataConfig"]["S3OutputPath"] == f"s3://{bucket}/mpirun-kit/jobs/{name}/output"
    assert request["CheckpointConfig"]["S3Uri"] == f"s3://{bucket}/mpirun-kit/jobs/{name}/checkpoints"
    assert len(request["VpcConfig"]["Subnets"]) == 1
    # submit --wait really created that training job, with the role the stack made, in the page's region
    assert c["sagemaker"].describe_training_job(TrainingJobName=name)["RoleArn"] == request["RoleArn"]
    (run_cmd,) = [cmd for cmd in by_cmd if "submit" in cmd and "--wait" in cmd]
    assert f"job secret made and uploaded to s3://{bucket}/mpirun-kit/keys/{name}/job-secret" in by_cmd[run_cmd]
    # ... and removed the job's secret once the job had ended
    assert c["s3"].list_objects_v2(Bucket=bucket, Prefix=f"mpirun-kit/keys/{name}/").get("KeyCount") == 0

    # after `stack down`: no stack, no VPC of ours, no FSx; the EFS file system (Retain) and the bucket stay
    (down_cmd,) = [cmd for cmd in by_cmd if cmd.startswith("mpirun_kit stack down")]
    down = by_cmd[down_cmd]
    live = [s["StackName"] for s in c["cloudformation"].describe_stacks()["Stacks"]
            if s["StackStatus"] != "DELETE_COMPLETE"]
    assert live == []
    order = [down.index(f"deleting stack {s}") for s in ("mrk-role", "mrk-efs", "mrk-fsx", "mrk-vpc")]
    assert order == sorted(order), down
    assert "stack mrk-vpc: termination protection off" in down and "stack mrk-fsx: termination protection off" in down
    assert [v["VpcId"] for v in c["ec2"].describe_vpcs()["Vpcs"] if not v.get("IsDefault")] == []
    assert c["fsx"].describe_file_systems()["FileSystems"] == []
    (fs,) = c["efs"].describe_file_systems()["FileSystems"]
    assert (f"kept: AWS::EFS::FileSystem {fs['FileSystemId']} (stack mrk-efs, FileSystem: DeletionPolicy Retain"
            in down)
    assert f"aws efs delete-file-system --file-system-id {fs['FileSystemId']} --region {region}" in down
    # and what no template names (issue 26): the EFS backups and the training jobs' log group
    assert (f"kept: AWS::Backup::RecoveryPoint arn:aws:elasticfilesystem:{region}:{ACCOUNT}:file-system/"
            f"{fs['FileSystemId']} (stack mrk-efs, FileSystem backups: BackupPolicy ENABLED") in down
    assert ("kept: AWS::Logs::LogGroup /aws/sagemaker/TrainingJobs (stack mrk-role, training logs: SageMaker writes "
            f"every training job's logs there") in down
    # issue 37: the group is every user's; only one's own jobs' streams are deleted
    assert "delete-log-group" not in down
    assert f"aws logs delete-log-stream --log-group-name /aws/sagemaker/TrainingJobs --log-stream-name JOB/HOST " \
           f"--region {region}" in down
    assert [b["Name"] for b in c["s3"].list_buckets()["Buckets"]] == [bucket]
    # what stays is what the page says stays
    stays = PAGE.read_text().split("## What stays", 1)[1]
    assert "EFS file system" in stays and "your bucket" in stays


def test_the_page_runs_the_block_it_shows():
    """The page's deploy block is the one the test runs, and sets nothing a user would not."""
    block = page_block()
    assert "--region \"$REGION\"" in block and "AWS_DEFAULT_REGION" not in block
    assert not re.search(r"[0-9]{12}|mrk-artifacts", block)
    # issue 26: the values a user chooses are set once at the top; no region or zone id below them
    top = [m.group(1) for m in VALUE_LINE.finditer(block)]
    assert top == list(VALUES_SET)
    body = block.split("\nDATA=", 1)[1].split("\n", 1)[1]
    assert not re.search(r"us-west-2|usw2-az", body), body
    assert 'S3DataPath="s3://$BUCKET/$DATA"' in body
    assert block.rstrip().splitlines()[-1].startswith("mpirun_kit stack down")
