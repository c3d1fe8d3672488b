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
job's subnet.  After ``stack down`` only what the page's "What stays" names is left.  Two zones
(the page's command) and three (its comment).
"""
from __future__ import annotations

import json
import os
import re
import shutil
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


def run_walkthrough(url: str, zones: int, tmp_path: Path, bucket: str) -> list[tuple[str, str]]:
    """Run the page's commands in one bash; return (command, its combined output) per step."""
    import boto3

    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k not in ("CI", "REGION", "BUCKET")}
    env.update({"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_MAX_ATTEMPTS": "1", "AWS_EC2_METADATA_DISABLED": "true", "HOME": str(tmp_path),
                "REGION": "us-west-2", "BUCKET": bucket,
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"})
    s3 = boto3.client("s3", region_name="us-west-2", endpoint_url=url, aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    # the page's prerequisite: the user's own bucket, in the region
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    steps = commands(page_block(), zones)
    script = "set -euo pipefail\n" + "".join(f"echo '{MARK} {i}'\n{c}\n" for i, c in enumerate(steps))
    r = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=540)
    parts = re.split(rf"^{MARK} (\d+)\n", r.stdout, flags=re.M)
    outputs = {int(parts[i]): parts[i + 1] for i in range(1, len(parts) - 1, 2)}
    done = [(steps[i], outputs.get(i, "")) for i in range(len(steps))]
    ran = max(outputs) if outputs else -1
    assert r.returncode == 0, f"step {ran} failed (exit {r.returncode}): {steps[ran]}\n{outputs.get(ran, r.stdout)[-3000:]}"
    return done


def clients(url: str) -> dict:
    import boto3

    kw = {"region_name": "us-west-2", "endpoint_url": url, "aws_access_key_id": "testing",
          "aws_secret_access_key": "testing"}
    return {name: boto3.client(name, **kw) for name in ("cloudformation", "s3", "sagemaker", "ec2", "efs", "fsx")}


@pytest.mark.parametrize("zones", [2, 3])
def test_the_walkthrough_on_another_account(patched_moto, zones, tmp_path):
    if shutil.which("aws") is None:  # ops/make-job-keys.sh uploads the job secret with the aws CLI
        if os.environ.get("CI") == "true":
            pytest.fail("the aws CLI is not installed; the walk-through needs it (pip install awscli)")
        pytest.skip("the aws CLI is not installed (ops/make-job-keys.sh uploads with it); CI fails here")

    bucket = f"mrk-test-{uuid.uuid4().hex[:12]}"
    steps = run_walkthrough(patched_moto, zones, tmp_path, bucket)
    by_cmd = dict(steps)
    c = clients(patched_moto)

    (vpc_cmd,) = [cmd for cmd in by_cmd if cmd.startswith("mpirun_kit stack deploy mrk-vpc")]
    vpc_out = by_cmd[vpc_cmd]
    assert "mpirun_kit: region us-west-2 (from --region)" in vpc_out
    # moto maps usw2-az1 to us-west-2b (names differ by account; ids do not)
    assert "mpirun_kit: zone AvailabilityZone1: us-west-2b = usw2-az1" in vpc_out
    assert "mpirun_kit: cost: 1 NAT gateway(s) cost $" in vpc_out
    (fsx_cmd,) = [cmd for cmd in by_cmd if cmd.startswith("mpirun_kit stack deploy mrk-fsx")]
    assert "mpirun_kit: cost: 2400 GiB of FSx for Lustre SCRATCH_2 costs $" in by_cmd[fsx_cmd]

    (plan_cmd,) = [cmd for cmd in by_cmd if cmd.startswith("mpirun_kit plan ")]
    plan = by_cmd[plan_cmd]
    assert "warning" not in plan.lower(), plan
    assert "job maskrcnn-r50-fpn-1x (jobs/maskrcnn.yaml)" in plan
    assert f"  stack      mrk-role.RoleImageRepository = {ACCOUNT}.dkr.ecr.us-west-2.amazonaws.com/mpirun-kit\n" in plan
    assert f"  stack      mrk-role.RoleS3Uri = s3://{bucket}/mpirun-kit\n" in plan
    assert "  cost       4 x ml.p5.48xlarge for up to 48 h = 192 instance-hours, up to $" in plan

    (dry_cmd,) = [cmd for cmd in by_cmd if cmd.endswith("--dry-run") and "submit" in cmd]
    dry = by_cmd[dry_cmd]
    request = json.loads(dry[dry.index("{"):dry.rindex("}") + 1])["CreateTrainingJob"]
    assert check_request("sagemaker", "CreateTrainingJob", request) == ()
    name = request["TrainingJobName"]
    assert re.fullmatch(r"maskrcnn-r50-fpn-1x-\d{8}-\d{6}", name)
    assert request["AlgorithmSpecification"]["TrainingImage"] == \
        f"{ACCOUNT}.dkr.ecr.us-west-2.amazonaws.com/mpirun-kit:0.1.0"
    assert request["RoleArn"].startswith(f"arn:aws:iam::{ACCOUNT}:role/")
    channels = {ch["ChannelName"]: ch["DataSource"] for ch in request["InputDataConfig"]}
    assert channels["mpirun-keys"]["S3DataSource"]["S3Uri"] == f"s3://{bucket}/mpirun-kit/keys/{name}/"
    assert request["OutputDataConfig"]["S3OutputPath"] == f"s3://{bucket}/mpirun-kit/maskrcnn/output"
    assert request["CheckpointConfig"]["S3Uri"] == f"s3://{bucket}/mpirun-kit/maskrcnn/checkpoints"
    assert len(request["VpcConfig"]["Subnets"]) == 1
    # submit --wait really created that training job, with the role the stack made
    assert c["sagemaker"].describe_training_job(TrainingJobName=name)["RoleArn"] == request["RoleArn"]
    # the job's secret was made, then deleted with --delete
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
    assert f"aws efs delete-file-system --file-system-id {fs['FileSystemId']} --region us-west-2" in down
    assert [b["Name"] for b in c["s3"].list_buckets()["Buckets"]] == [bucket]
    # what stays is what the page says stays
    stays = PAGE.read_text().split("## What stays", 1)[1]
    assert "EFS file system" in stays and "your bucket" in stays


def test_the_page_runs_the_block_it_shows():
    """The page's deploy block is the one the test runs, and sets nothing a user would not."""
    block = page_block()
    assert "--region \"$REGION\"" in block and "AWS_DEFAULT_REGION" not in block
    assert not re.search(r"[0-9]{12}|mrk-artifacts", block)
    assert block.rstrip().splitlines()[-1].startswith("mpirun_kit stack down")
