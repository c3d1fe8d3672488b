"""cli/resolve.py: one region for a job and its stacks, offline dry runs, stacks in another region.

The CLI runs as a real process with the environment each case names: no AWS variables and HOME
in an empty directory (no ~/.aws), so "without AWS" means what it means for a user.  The
other-region case reads a real moto server on 127.0.0.1 (fake credentials).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpirun_kit.stack.resolve import Unresolved, resolve_region, resolve_stacks

REPO = Path(__file__).resolve().parents[2]


def run(tmp_path: Path, *argv: str, **env: str) -> subprocess.CompletedProcess:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    base.update(HOME=str(home), AWS_EC2_METADATA_DISABLED="true", AWS_MAX_ATTEMPTS="1", **env)
    return subprocess.run([str(Path(sys.executable).parent / "mpirun_kit"), *argv], cwd=REPO, env=base, text=True,
                          capture_output=True, timeout=120)


def test_region_comes_from_the_flag_then_the_spec_then_the_aws_default():
    assert resolve_region("eu-west-1", "us-west-2", "us-east-1") == ("eu-west-1", "--region")
    assert resolve_region(None, "us-west-2", "us-east-1") == ("us-west-2", "target.sagemaker.region")
    assert resolve_region(None, None, "us-east-1") == ("us-east-1", "the AWS configuration")
    assert resolve_region(None, None, None) == (None, "nowhere")


def test_plan_without_aws_shows_each_unresolved_reference_and_what_resolves_it(tmp_path):
    """Issue 22 item 4: failed (exit 69) before, unless given every output with --stack-output."""
    r = run(tmp_path, "plan", "jobs/maskrcnn.yaml", "--region", "us-west-2",
            "--stack-output", "mrk-fsx.FileSystemId=fs-0123456789abcdef0")
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines()[0] == "mpirun_kit: region us-west-2 (from --region)"
    assert "  stack      mrk-vpc.PrivateSubnet1Id = ${stack:mrk-vpc.PrivateSubnet1Id}\n" in r.stdout
    assert "  stack      mrk-fsx.FileSystemId = fs-0123456789abcdef0\n" in r.stdout
    assert ("! ${stack:mrk-vpc.PrivateSubnet1Id}, ${stack:mrk-vpc.SecurityGroupId}: unresolved (CloudFormation "
            "describe_stacks: no AWS credentials found; set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), "
            "shown as written; they resolve once AWS is reachable and the stack exists (`mpirun_kit stack deploy "
            "mrk-vpc --template cfn/vpc.yaml --region us-west-2`), or pass --stack-output "
            "mrk-vpc.PrivateSubnet1Id=VALUE --stack-output mrk-vpc.SecurityGroupId=VALUE") in r.stdout
    # the one given output of mrk-fsx is not listed as unresolved; the other one is
    assert "! ${stack:mrk-fsx.LustreMountName}: unresolved" in r.stdout
    assert "--template cfn/sagemaker-role.yaml" in r.stdout and "--template cfn/fsx.yaml" in r.stdout


def test_submit_dry_run_without_aws_prints_the_request_with_the_references(tmp_path):
    r = run(tmp_path, "submit", "jobs/maskrcnn.yaml", "--region", "us-west-2", "--dry-run", "--json", "--job-name", "j-1")
    assert r.returncode == 0, r.stderr
    req = json.loads(r.stdout)["request"]
    assert req["region"] == "us-west-2"
    create = req["CreateTrainingJob"]
    assert create["RoleArn"] == "${stack:mrk-role.RoleArn}"
    assert create["AlgorithmSpecification"]["TrainingImage"] == "${stack:mrk-role.RoleImageRepository}:0.1.0"
    keys = {c["ChannelName"]: c for c in create["InputDataConfig"]}["mpirun-keys"]
    assert keys["DataSource"]["S3DataSource"]["S3Uri"] == "${stack:mrk-role.RoleS3Uri}/keys/j-1/"
    assert r.stderr.count(": unresolved (") == 3


def test_submit_without_aws_still_refuses(tmp_path):
    """Only the dry run is offline: a real submit needs every value."""
    r = run(tmp_path, "submit", "jobs/maskrcnn.yaml", "--region", "us-west-2", "--job-name", "j-1")
    assert r.returncode == 69, r.stderr
    assert "could not read the outputs of stack(s) mrk-role, mrk-fsx, mrk-vpc" in r.stderr


def test_the_region_flag_is_the_jobs_region_too(tmp_path):
    """--region reads the stacks there and creates the job there (the request said the spec's region before)."""
    r = run(tmp_path, "submit", "jobs/maskrcnn.yaml", "--region", "us-west-2", "--dry-run", "--json", "--job-name", "j-1",
            "--region", "eu-west-1")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["request"]["region"] == "eu-west-1"
    assert "mpirun_kit: region eu-west-1 (from --region)" in r.stderr


def test_quiet_drops_the_region_line(tmp_path):
    r = run(tmp_path, "plan", "jobs/maskrcnn.yaml", "-q")
    assert r.returncode == 0 and "region" not in r.stderr


def test_outputs_given_for_some_keys_read_the_rest_from_cloudformation():
    calls = []

    def fetch(stack):
        calls.append(stack)
        return {"A": "from-cfn", "B": "b"}
    out = resolve_stacks((("s", "A"), ("s", "B"), ("t", "C")), {"s": {"A": "given"}, "t": {"C": "c"}}, "r", fetch)
    assert out == {"s": {"A": "given", "B": "b"}, "t": {"C": "c"}} and calls == ["s"]


def test_offline_keeps_a_missing_stack_an_error():
    """AWS answered that the stack does not exist: a dry run does not hide that."""
    from mpirun_kit.errors import ClusterError, SpecError
    from mpirun_kit.stack.aws import StackNotFoundError

    def fetch(stack):
        if stack == "gone":
            raise StackNotFoundError(stack, "us-west-2")
        raise ClusterError("CloudFormation describe_stacks: cannot reach the endpoint")
    with pytest.raises(SpecError, match="stack 'gone' does not exist in region us-west-2"):
        resolve_stacks((("gone", "A"), ("far", "B")), {}, "us-west-2", fetch, offline=True)
    out = resolve_stacks((("far", "B"),), {}, "us-west-2", fetch, offline=True)
    assert isinstance(out["far"], Unresolved) and out["far"]["B"] == "${stack:far.B}"


def test_stacks_in_another_region_are_refused_in_one_line(moto, tmp_path):
    """The stacks were deployed with the AWS default region (us-east-1); the spec says us-west-2."""
    import boto3

    cf = boto3.client("cloudformation", region_name="us-east-1", endpoint_url=moto)
    template = {"Resources": {"T": {"Type": "AWS::SNS::Topic"}},
                "Outputs": {"RoleArn": {"Value": "arn:aws:iam::123456789012:role/r"}}}
    cf.create_stack(StackName="mrk-role", TemplateBody=json.dumps(template))
    r = run(tmp_path, "plan", "jobs/maskrcnn.yaml", "--region", "us-west-2", AWS_ENDPOINT_URL=moto,
            AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    assert r.returncode == 64, r.stderr
    assert r.stderr.splitlines()[-1] == (
        "mpirun_kit: error: stack 'mrk-role' is in region us-east-1, not in us-west-2, where this job resolves "
        "its stacks; pass --region us-east-1 (or set target.sagemaker.region: us-east-1), or deploy the stack "
        "in us-west-2")


def test_a_stack_elsewhere_is_named_with_its_region_without_a_default_region(moto, tmp_path):
    """Issue 26: with no AWS default region only the default was probed, so a stack in eu-central-1 was
    reported as missing without its region."""
    import boto3

    cf = boto3.client("cloudformation", region_name="eu-central-1", endpoint_url=moto)
    template = {"Resources": {"T": {"Type": "AWS::SNS::Topic"}},
                "Outputs": {"RoleArn": {"Value": "arn:aws:iam::123456789012:role/r"}}}
    cf.create_stack(StackName="mrk-role", TemplateBody=json.dumps(template))
    r = run(tmp_path, "plan", "jobs/maskrcnn.yaml", "--region", "us-west-2", AWS_ENDPOINT_URL=moto,
            AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    assert r.returncode == 64, r.stderr
    assert r.stderr.splitlines()[-1] == (
        "mpirun_kit: error: stack 'mrk-role' is in region eu-central-1, not in us-west-2, where this job resolves "
        "its stacks; pass --region eu-central-1 (or set target.sagemaker.region: eu-central-1), or deploy the stack "
        "in us-west-2")


@pytest.mark.parametrize("command", [("plan", "--json"), ("submit", "--dry-run")])
def test_plan_and_submit_read_the_stacks_of_the_users_prefix(moto, tmp_path, command):
    """Issue 37 finding 4: ``${stack:mrk-role.RoleArn}`` is the stack ``<prefix>-role`` of the prefix in the user's
    configuration (MPIRUN_KIT_CONFIG_DIR here), so two people's plans of one spec read their own role stacks."""
    import boto3

    cf = boto3.client("cloudformation", region_name="us-west-2", endpoint_url=moto)
    for who in ("alice", "bob"):
        template = {"Resources": {"T": {"Type": "AWS::SNS::Topic"}},
                    "Outputs": {"RoleArn": {"Value": f"arn:aws:iam::123456789012:role/{who}-job"}}}
        cf.create_stack(StackName=f"mrk-{who}-role", TemplateBody=json.dumps(template))
    given = ["--stack-output", "mrk-role.SubmitRoleArn=arn:aws:iam::123456789012:role/submit",
             "--stack-output", "mrk-role.RoleS3Uri=s3://b/mpirun-kit",
             "--stack-output", "mrk-role.RoleImageRepository=123456789012.dkr.ecr.us-west-2.amazonaws.com/mpirun-kit",
             "--stack-output", "mrk-fsx.FileSystemId=fs-0123456789abcdef0", "--stack-output", "mrk-fsx.LustreMountName=abcdefgh",
             "--stack-output", "mrk-vpc.PrivateSubnet1Id=subnet-0123456789abcdef0", "--stack-output", "mrk-vpc.SecurityGroupId=sg-0123456789abcdef0"]
    for who in ("alice", "bob"):
        config = tmp_path / who
        config.mkdir()
        (config / "config").write_text(f"stack_prefix = mrk-{who}\n")
        r = run(tmp_path, command[0], "jobs/maskrcnn.yaml", "--region", "us-west-2", command[1], *given,
                AWS_ENDPOINT_URL=moto, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                MPIRUN_KIT_CONFIG_DIR=str(config))
        assert r.returncode == 0, r.stderr
        assert f"arn:aws:iam::123456789012:role/{who}-job" in r.stdout
        assert f"arn:aws:iam::123456789012:role/{'bob' if who == 'alice' else 'alice'}-job" not in r.stdout


def test_a_spec_that_names_no_stack_leaves_the_configuration_alone(tmp_path):
    """The stack prefix is read (and the first time written) only for a spec that names a stack: a Slurm or local
    job never writes the user's configuration file."""
    fresh = tmp_path / "fresh"
    r = run(tmp_path, "plan", "jobs/allreduce-bench.yaml", MPIRUN_KIT_CONFIG_DIR=str(fresh))
    assert r.returncode == 0, r.stderr
    assert not fresh.exists() and "stack prefix" not in r.stderr
    r = run(tmp_path, "plan", "jobs/maskrcnn.yaml", MPIRUN_KIT_CONFIG_DIR=str(fresh), LOGNAME="fay", USER="fay")
    assert r.returncode == 0, r.stderr
    assert "mpirun_kit: stack prefix 'mrk-fay' (your stacks are mrk-fay-vpc" in r.stderr
    assert (fresh / "config").read_text().endswith("stack_prefix = mrk-fay\n")
    assert "${stack:mrk-role.RoleArn}" in r.stdout   # unresolved without AWS, shown as written
