"""The README's AWS walk-through, run as written: deploy vpc -> fsx -> efs -> role, plan, keys, submit.

The block is taken from README.md (the ```bash fence after "**The walk-through.**"), so README
and test cannot drift; it runs under bash with the real ``mpirun_kit`` and ``aws`` commands,
against a moto server on 127.0.0.1 (tests/stack/patched_moto.py: stock moto plus change-set
outputs, FSx resources through CloudFormation and UpdateTerminationProtection, which moto
lacks).  moto accepts requests AWS refuses, so the request ``submit --dry-run`` prints is
checked here against AWS's own limits (mpirun_kit.stack.limits), and ``plan`` must print no
warning: the role reaches the image, every S3 URI and the key channel; the FSx channel is in
the job's subnet.  Two zones (the README's command) and three (the README's comment).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from moto_process import free_port, moto_process

from mpirun_kit.stack.limits import check_request

REPO = Path(__file__).resolve().parents[2]
MARK = "@@mrk-walkthrough-step"


def readme_block() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("**The walk-through.**")
    m = re.compile(r"```bash\n(.*?)```", re.S).search(text, start)
    assert m, "README.md: no ```bash block after **The walk-through.**"
    return m.group(1)


def commands(block: str, zones: int) -> list[str]:
    """The block's commands (continuations joined); three zones adds what the README's comment says."""
    extra = re.search(r"#\s*three zones: add (.+)$", block, re.M)
    assert extra, "README walk-through: no '# three zones: add ...' line"
    out, current = [], ""
    for line in block.splitlines():
        if line.lstrip().startswith("#") and not current:
            continue
        current += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
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
    with moto_process([sys.executable, str(REPO / "tests" / "stack" / "patched_moto.py"), str(port)], port,
                      timeout_s=60, what="patched moto server", stdout=subprocess.PIPE, text=True) as url:
        yield url


def run_walkthrough(url: str, zones: int, tmp_path: Path) -> list[tuple[str, str]]:
    """Run the README's commands in one bash; return (command, its combined output) per step."""
    import boto3

    env = {**os.environ, "AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-west-2", "AWS_REGION": "us-west-2", "AWS_MAX_ATTEMPTS": "1",
           "AWS_EC2_METADATA_DISABLED": "true", "HOME": str(tmp_path),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("AWS_PROFILE", None)
    env.pop("CI", None)
    s3 = boto3.client("s3", region_name="us-west-2", endpoint_url=url, aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    for bucket in ("mrk-artifacts", "mrk-data"):  # the README's prerequisites
        s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    steps = commands(readme_block(), zones)
    script = "set -eo pipefail\n" + "".join(f"echo '{MARK} {i}'\n{c}\n" for i, c in enumerate(steps))
    r = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=540)
    parts = re.split(rf"^{MARK} (\d+)\n", r.stdout, flags=re.M)
    outputs = {int(parts[i]): parts[i + 1] for i in range(1, len(parts) - 1, 2)}
    done = [(steps[i], outputs.get(i, "")) for i in range(len(steps))]
    ran = max(outputs) if outputs else -1
    assert r.returncode == 0, f"step {ran} failed (exit {r.returncode}): {steps[ran]}\n{outputs.get(ran, r.stdout)[-3000:]}"
    return done


@pytest.mark.parametrize("zones", [2, 3])
def test_readme_walkthrough(patched_moto, zones, tmp_path):
    import boto3

    if shutil.which("aws") is None:  # ops/make-job-keys.sh uploads the job secret with the aws CLI
        if os.environ.get("CI") == "true":
            pytest.fail("the aws CLI is not installed; the README's walk-through needs it (pip install awscli)")
        pytest.skip("the aws CLI is not installed (ops/make-job-keys.sh uploads with it); CI fails here")

    steps = run_walkthrough(patched_moto, zones, tmp_path)
    by_cmd = {cmd.split(" --")[0] if cmd.startswith("mpirun_kit stack deploy") else cmd: out for cmd, out in steps}
    cf = boto3.client("cloudformation", region_name="us-west-2", endpoint_url=patched_moto,
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    stacks = {s["StackName"]: s for s in cf.describe_stacks()["Stacks"]}
    assert sorted(stacks) == ["mrk-efs", "mrk-fsx", "mrk-role", "mrk-vpc"]
    assert {n: s["StackStatus"] for n, s in stacks.items()} == dict.fromkeys(stacks, "CREATE_COMPLETE")
    assert {n: s.get("EnableTerminationProtection", False) for n, s in stacks.items()} == \
        {"mrk-efs": False, "mrk-fsx": True, "mrk-role": False, "mrk-vpc": True}
    vpc = {o["OutputKey"]: o["OutputValue"] for o in stacks["mrk-vpc"]["Outputs"]}
    assert len(vpc["PrivateSubnetIds"].split(",")) == zones
    assert ("PrivateSubnet3Id" in vpc) == (zones == 3)

    (plan_cmd,) = [c for c in by_cmd if c.startswith("mpirun_kit plan ")]
    plan = by_cmd[plan_cmd]
    assert "warning" not in plan.lower(), plan
    assert "job maskrcnn-r50-fpn-1x (jobs/maskrcnn.yaml)" in plan

    (dry_cmd,) = [c for c in by_cmd if c.endswith("--dry-run") and "submit" in c]
    dry = by_cmd[dry_cmd]
    request = json.loads(dry[dry.index("{"):dry.rindex("}") + 1])["CreateTrainingJob"]
    assert check_request("sagemaker", "CreateTrainingJob", request) == ()
    name = request["TrainingJobName"]
    assert re.fullmatch(r"maskrcnn-r50-fpn-1x-\d{8}-\d{6}", name)
    channels = {c["ChannelName"]: c["DataSource"] for c in request["InputDataConfig"]}
    assert channels["mpirun-keys"]["S3DataSource"]["S3Uri"] == f"s3://mrk-artifacts/mpirun-kit/keys/{name}/"
    fsx = {o["OutputKey"]: o["OutputValue"] for o in stacks["mrk-fsx"]["Outputs"]}
    assert channels["coco"]["FileSystemDataSource"]["FileSystemId"] == fsx["FileSystemId"]
    assert request["VpcConfig"]["Subnets"] == [fsx["SubnetId"]] == [vpc["PrivateSubnet1Id"]]
    role = {o["OutputKey"]: o["OutputValue"] for o in stacks["mrk-role"]["Outputs"]}
    assert request["RoleArn"] == role["RoleArn"]

    # the key secret is where the channel points, and submit --wait really created that training job
    s3 = boto3.client("s3", region_name="us-west-2", endpoint_url=patched_moto, aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    keys = s3.list_objects_v2(Bucket="mrk-artifacts", Prefix=f"mpirun-kit/keys/{name}/")["Contents"]
    assert [k["Key"] for k in keys] == [f"mpirun-kit/keys/{name}/job-secret"]
    sm = boto3.client("sagemaker", region_name="us-west-2", endpoint_url=patched_moto, aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    assert sm.describe_training_job(TrainingJobName=name)["RoleArn"] == role["RoleArn"]
