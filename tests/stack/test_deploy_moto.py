"""`mpirun_kit stack` end to end against a real moto server on 127.0.0.1.

moto gaps these tests live with (see the module docstrings of test_deploy_stubbed.py for
the paths that need AWS's behaviour): stacks created through change sets have no
Outputs, AWS::EC2::SecurityGroupEgress is skipped, no stack events per resource, and
deleting the VPC stack raises DependencyViolation because moto leaks its resources.
"""
from __future__ import annotations

import pytest

from mpirun_kit.stack import get_outputs, resolve_stack_ref
from mpirun_kit.stack.aws import StackNotFoundError
from mpirun_kit.stack.outputs import OutputNotFoundError

VPC_ARGS = ("--template", "cfn/vpc.yaml", "--param", "AvailabilityZone1=us-west-2a",
            "--param", "AvailabilityZone2=us-west-2b")
FAST = ("--poll", "0.1", "--timeout", "60")


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch):
    from pathlib import Path
    monkeypatch.chdir(Path(__file__).resolve().parents[2])


def _stack(cf, name):
    return cf.describe_stacks(StackName=name)["Stacks"][0]


def _tagged(ec2, kind, name):
    if kind == "subnet":
        return ec2.describe_subnets(Filters=[{"Name": "tag:Name", "Values": [name]}])["Subnets"][0]["SubnetId"]
    return ec2.describe_security_groups(Filters=[{"Name": "tag:Name", "Values": [name]}])["SecurityGroups"][0]["GroupId"]


def test_vpc_create_no_change_update(cli, cf, ec2, on_moto):
    r = cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, "--yes", *FAST)
    assert (r.rc, r.out.splitlines()[0]) == (0, "stack mrk-vpc: created"), r.err
    assert "Add     TrainingSecurityGroup" in r.err and "CREATE_COMPLETE" in r.err
    assert _stack(cf, "mrk-vpc")["StackStatus"] == "CREATE_COMPLETE"
    # the EFA self-ingress really exists on the group moto created
    sg = ec2.describe_security_groups(GroupIds=[_tagged(ec2, "sg", "mrk-vpc-training")])["SecurityGroups"][0]
    assert [(p["IpProtocol"], [g["GroupId"] for g in p["UserIdGroupPairs"]]) for p in sg["IpPermissions"]
            if p["IpProtocol"] == "-1"] == [("-1", [sg["GroupId"]])]

    again = cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, "--yes", *FAST)
    assert (again.rc, again.out.splitlines()[0]) == (0, "stack mrk-vpc: no-changes")
    assert "stack mrk-vpc: no changes; it already matches cfn/vpc.yaml and these parameters" in again.err

    upd = cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, "--param", "CreateNatGateway=false", "--yes", *FAST)
    assert (upd.rc, upd.out.splitlines()[0]) == (0, "stack mrk-vpc: updated"), upd.err
    params = {p["ParameterKey"]: p["ParameterValue"] for p in _stack(cf, "mrk-vpc")["Parameters"]}
    assert (params["CreateNatGateway"], params["AvailabilityZone2"]) == ("false", "us-west-2b")

    # a parameter left out on update keeps its current value, not the template default ('true')
    kept = cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, "--yes", *FAST)
    assert kept.out.splitlines()[0] == "stack mrk-vpc: no-changes"


def test_efs_deploy_then_delete(cli, cf, ec2, on_moto):
    assert cli("stack", "deploy", "net", *VPC_ARGS, "--yes", *FAST).rc == 0
    subnets = [_tagged(ec2, "subnet", f"net-private-{i}") for i in (1, 2)]
    storage_sg = _tagged(ec2, "sg", "net-storage")
    r = cli("stack", "deploy", "shared", "--template", "cfn/efs.yaml", "--param", f"SubnetId1={subnets[0]}",
            "--param", f"SubnetId2={subnets[1]}", "--param", f"SecurityGroupId={storage_sg}", "--yes", "--json", *FAST)
    assert r.rc == 0, r.err
    assert '"outcome": "created"' in r.out
    import boto3
    efs = boto3.client("efs", region_name="us-west-2", endpoint_url=on_moto)
    (fs,) = efs.describe_file_systems()["FileSystems"]
    assert fs["Encrypted"] is True
    assert sorted(m["SubnetId"] for m in efs.describe_mount_targets(FileSystemId=fs["FileSystemId"])["MountTargets"]) \
        == sorted(subnets)

    d = cli("stack", "delete", "shared", "--yes", *FAST)
    assert (d.rc, d.out) == (0, "stack shared: DELETE_COMPLETE\n"), d.err
    listed = cli("stack", "list")
    assert [line.split()[:2] for line in listed.out.splitlines()] == [["net", "CREATE_COMPLETE"]]


def test_a_resource_the_endpoint_rejects_is_a_cluster_error(cli, ec2, on_moto, monkeypatch):
    """A real failure on moto: two EFS mount targets in one zone (moto answers execute with an error)."""
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore would retry the unreadable answer 4 times
    assert cli("stack", "deploy", "net", *VPC_ARGS, "--yes", *FAST).rc == 0
    same_zone = [_tagged(ec2, "subnet", "net-private-1"), _tagged(ec2, "subnet", "net-public")]
    r = cli("stack", "deploy", "shared", "--template", "cfn/efs.yaml", "--param", f"SubnetId1={same_zone[0]}",
            "--param", f"SubnetId2={same_zone[1]}", "--param", f"SecurityGroupId={_tagged(ec2, 'sg', 'net-storage')}",
            "--yes", *FAST)
    assert r.rc == 69
    assert "mpirun_kit: error: CloudFormation execute_change_set for stack 'shared'" in r.err
    assert "mount target already exists in this AZ" in r.err


def test_outputs_of_a_created_stack(cli, cf, on_moto):
    """moto fills Outputs for create_stack (not for change sets): the outputs path on real moto values."""
    body = open("cfn/vpc.yaml").read()
    cf.create_stack(StackName="v", TemplateBody=body, Parameters=[
        {"ParameterKey": "AvailabilityZone1", "ParameterValue": "us-west-2a"},
        {"ParameterKey": "AvailabilityZone2", "ParameterValue": "us-west-2b"},
        {"ParameterKey": "AvailabilityZone3", "ParameterValue": "us-west-2c"}])
    outputs = get_outputs("v", cf)
    assert sorted(outputs) == ["PrivateSubnet1Id", "PrivateSubnet2Id", "PrivateSubnet3Id", "PrivateSubnetIds",
                               "SecurityGroupId", "StorageSecurityGroupId", "VpcId"]
    assert outputs["PrivateSubnetIds"] == ",".join(outputs[f"PrivateSubnet{i}Id"] for i in (1, 2, 3))
    assert outputs["SecurityGroupId"].startswith("sg-") and outputs["VpcId"].startswith("vpc-")
    assert resolve_stack_ref("v", "VpcId", cf) == outputs["VpcId"]

    env = cli("stack", "outputs", "v", "--env")
    assert f"export MRK_V_VPCID={outputs['VpcId']}" in env.out.splitlines()
    js = cli("stack", "outputs", "v", "--json")
    import json
    assert json.loads(js.out) == outputs

    with pytest.raises(OutputNotFoundError) as e:
        resolve_stack_ref("v", "LustreMountName", cf)
    assert str(e.value) == ("${stack:v.LustreMountName}: stack 'v' has no output 'LustreMountName'; its outputs "
                            "are: PrivateSubnet1Id, PrivateSubnet2Id, PrivateSubnet3Id, PrivateSubnetIds, "
                            "SecurityGroupId, StorageSecurityGroupId, VpcId")


def test_unknown_stack(cli, cf, on_moto):
    with pytest.raises(StackNotFoundError) as e:
        get_outputs("nope", cf)
    assert str(e.value) == ("stack 'nope' does not exist in region us-west-2; check the name with `mpirun_kit "
                            "stack list` or create it with `mpirun_kit stack deploy nope --template cfn/...`")
    r = cli("stack", "outputs", "nope")
    assert r.rc == 64 and "stack 'nope' does not exist in region us-west-2" in r.err


def test_bad_input_fails_before_any_api_call(cli, cf, on_moto):
    missing = cli("stack", "deploy", "mrk-vpc", "--template", "cfn/vpc.yaml", "--yes")
    assert missing.rc == 64
    assert ("cfn/vpc.yaml: invalid parameters:\n  missing required parameter AvailabilityZone1" in missing.err)
    bad = cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, "--param", "CreateNatGateway=maybe", "--yes")
    assert bad.rc == 64
    assert "parameter CreateNatGateway='maybe' is not allowed; expected one of: 'true', 'false'" in bad.err
    nofile = cli("stack", "deploy", "mrk-vpc", "--template", "cfn/nope.yaml", "--yes")
    assert nofile.rc == 64 and "template cfn/nope.yaml: no such file; templates in cfn/:" in nofile.err
    assert cf.list_stacks()["StackSummaries"] == []


def test_no_terminal_needs_yes(cli, cf, on_moto):
    r = cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, tty=False)
    assert r.rc == 64
    assert r.err == ("mpirun_kit: error: stack deploy mrk-vpc: stdin is not a terminal, so nobody can confirm the "
                     "change; rerun with --yes to deploy without asking\n")
    assert cf.list_stacks()["StackSummaries"] == []
    d = cli("stack", "delete", "mrk-vpc", tty=False)
    assert (d.rc, "rerun with --yes to delete without asking" in d.err) == (64, True)


def test_declined_change_set_leaves_nothing(cli, cf, on_moto):
    r = cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, *FAST, stdin="n\n", tty=True)
    assert r.rc == 1
    assert "execute change set mrk-" in r.err and "stack mrk-vpc: change set discarded, nothing changed" in r.err
    live = [s for s in cf.list_stacks()["StackSummaries"] if s["StackStatus"] != "DELETE_COMPLETE"]
    assert live == []


def test_confirmed_at_the_prompt(cli, cf, on_moto):
    r = cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, *FAST, stdin="y\n", tty=True)
    assert (r.rc, r.out.splitlines()[0]) == (0, "stack mrk-vpc: created"), r.err


def test_dry_run_makes_no_call(cli, monkeypatch):
    # No moto here and an endpoint nobody listens on: any call would fail with exit 69.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    r = cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, "--dry-run")
    assert r.rc == 0, r.err
    assert r.out.startswith("stack:        mrk-vpc\ntemplate:     cfn/vpc.yaml\nchange set:   mrk-")
    assert "  AvailabilityZone1 = us-west-2a\n" in r.out


def test_unreachable_endpoint_is_a_cluster_error(cli, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    for k, v in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-west-2",
                 "AWS_MAX_ATTEMPTS": "1"}.items():
        monkeypatch.setenv(k, v)
    r = cli("stack", "list")
    assert r.rc == 69
    assert "CloudFormation list_stacks: cannot reach the endpoint" in r.err


def test_dry_run_json_shows_termination_protection(cli, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    import json
    r = cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, "--termination-protection", "--dry-run", "--json")
    assert r.rc == 0, r.err
    assert json.loads(r.out)["termination_protection"] is True


def test_nat_gateway_per_zone_routes_each_subnet_to_its_own_zone(cli, cf, ec2, on_moto):
    r = cli("stack", "deploy", "net", *VPC_ARGS, "--param", "AvailabilityZone3=us-west-2c",
            "--param", "NatGatewayPerZone=true", "--yes", *FAST)
    assert r.rc == 0, r.err
    nats = {n["NatGatewayId"]: n["SubnetId"] for n in ec2.describe_nat_gateways()["NatGateways"]}
    zone_of = {s["SubnetId"]: s["AvailabilityZone"] for s in ec2.describe_subnets()["Subnets"]}
    assert sorted(zone_of[s] for s in nats.values()) == ["us-west-2a", "us-west-2b", "us-west-2c"]
    # moto keeps no subnet associations made through CloudFormation; the association resource's
    # physical id is the route table it names.
    table_of = {r.get("LogicalResourceId"): r.get("PhysicalResourceId")
                for r in cf.describe_stack_resources(StackName="net")["StackResources"]}
    for i in (1, 2, 3):
        subnet = _tagged(ec2, "subnet", f"net-private-{i}")
        (table,) = ec2.describe_route_tables(RouteTableIds=[table_of[f"PrivateSubnet{i}Routes"]])["RouteTables"]
        (nat,) = [rt["NatGatewayId"] for rt in table["Routes"] if rt.get("DestinationCidrBlock") == "0.0.0.0/0"]
        assert zone_of[nats[nat]] == zone_of[subnet], f"private subnet {i} leaves through another zone's NAT"


def test_vpc_takes_zone_ids_and_prints_both(cli, cf, ec2, on_moto):
    """Issue 21 item 4: zone ids are the same physical zone in every account; names are not (moto maps
    usw2-az1 to us-west-2b, as an account may)."""
    r = cli("stack", "deploy", "mrk-vpc", "--template", "cfn/vpc.yaml", "--param", "AvailabilityZone1=usw2-az1",
            "--param", "AvailabilityZone2=us-west-2a", "--yes", *FAST)
    assert r.rc == 0, r.err
    assert "mpirun_kit: zone AvailabilityZone1: us-west-2b = usw2-az1\n" in r.err
    assert "mpirun_kit: zone AvailabilityZone2: us-west-2a = usw2-az2\n" in r.err
    params = {p["ParameterKey"]: p["ParameterValue"] for p in _stack(cf, "mrk-vpc")["Parameters"]}
    assert (params["AvailabilityZone1"], params["AvailabilityZone2"]) == ("us-west-2b", "us-west-2a")
    subnet = ec2.describe_subnets(SubnetIds=[_tagged(ec2, "subnet", "mrk-vpc-private-1")])["Subnets"][0]
    assert subnet["AvailabilityZone"] == "us-west-2b"


def test_an_unknown_zone_lists_the_regions_zones(cli, on_moto):
    r = cli("stack", "deploy", "mrk-vpc", "--template", "cfn/vpc.yaml", "--param", "AvailabilityZone1=usw2-az9",
            "--param", "AvailabilityZone2=us-west-2a", "--yes", *FAST)
    assert r.rc == 64
    assert r.err.splitlines()[-1] == (
        "mpirun_kit: error: --param AvailabilityZone1=usw2-az9: region us-west-2 has no such zone; its zones (name "
        "(id)) are: us-west-2a (usw2-az2), us-west-2b (usw2-az1), us-west-2c (usw2-az3), us-west-2d (usw2-az4)")


def test_dry_run_cannot_map_a_zone_id(cli, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    r = cli("stack", "deploy", "mrk-vpc", "--template", "cfn/vpc.yaml", "--param", "AvailabilityZone1=usw2-az1",
            "--param", "AvailabilityZone2=us-west-2a", "--dry-run")
    assert r.rc == 64
    assert "AvailabilityZone1=usw2-az1: a zone id maps to this account's zone name only through AWS" in r.err


def test_deploy_notes_the_monthly_cost_and_the_region(cli, on_moto):
    r = cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, "--yes", *FAST)
    assert r.rc == 0, r.err
    assert r.err.startswith("mpirun_kit: region us-west-2 (from the AWS configuration)\n")
    assert "mpirun_kit: cost: 1 NAT gateway(s) cost $32.85/month while the stack exists" in r.err


def test_stack_down_deletes_in_order_and_says_what_stays(cli, cf, ec2, on_moto):
    """Issue 21 item 5: EFS is DeletionPolicy Retain; `stack delete` said only DELETE_COMPLETE."""
    import boto3

    assert cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, "--yes", *FAST).rc == 0
    subnets = [_tagged(ec2, "subnet", f"mrk-vpc-private-{i}") for i in (1, 2)]
    r = cli("stack", "deploy", "mrk-efs", "--template", "cfn/efs.yaml", "--param", f"SubnetId1={subnets[0]}",
            "--param", f"SubnetId2={subnets[1]}", "--param", f"SecurityGroupId={_tagged(ec2, 'sg', 'mrk-vpc-storage')}",
            "--yes", *FAST)
    assert r.rc == 0, r.err
    efs = boto3.client("efs", region_name="us-west-2", endpoint_url=on_moto)
    (fs,) = efs.describe_file_systems()["FileSystems"]
    # stock moto cannot delete the VPC stack (it keeps the S3 endpoint and route tables): the whole
    # teardown runs in test_walkthrough.py on the patched server; here the role (absent) and EFS.
    down = cli("stack", "down", "--stacks", "mrk-role,mrk-efs", "--yes", *FAST)
    assert down.rc == 0, down.err
    assert "stack mrk-role: not there, skipped" in down.err and "deleting stack mrk-efs" in down.err
    assert down.out == (
        "deleted: mrk-efs\n"
        f"kept: AWS::EFS::FileSystem {fs['FileSystemId']} (stack mrk-efs, FileSystem: DeletionPolicy Retain, so its "
        "data outlives the stack; it keeps billing). Delete it once you no longer need it: aws efs delete-file-system "
        f"--file-system-id {fs['FileSystemId']} --region us-west-2\n"
        # issue 26: what no template names stays too: the file system's automatic backups
        f"kept: AWS::Backup::RecoveryPoint arn:aws:elasticfilesystem:us-west-2:123456789012:file-system/"
        f"{fs['FileSystemId']} (stack mrk-efs, FileSystem backups: BackupPolicy ENABLED: its automatic backups stay "
        "in the vault aws/efs/automatic-backup-vault until their retention ends; they bill as backup storage). "
        "Delete it once you no longer need it: aws backup list-recovery-points-by-resource --resource-arn "
        f"arn:aws:elasticfilesystem:us-west-2:123456789012:file-system/{fs['FileSystemId']} --region us-west-2\n")
    assert [s["StackName"] for s in cf.list_stacks(StackStatusFilter=["CREATE_COMPLETE"])["StackSummaries"]] == \
        ["mrk-vpc"]
    assert [f["FileSystemId"] for f in efs.describe_file_systems()["FileSystems"]] == [fs["FileSystemId"]]


def test_stack_down_needs_yes_without_a_terminal(cli, on_moto):
    r = cli("stack", "down")
    assert (r.rc, r.err.splitlines()[-1]) == (64, "mpirun_kit: error: stack down: stdin is not a terminal, so "
                                                  "nobody can confirm the deletion; rerun with --yes to delete "
                                                  "without asking")


def test_an_update_keeps_the_previous_values_of_parameters_not_given(cli, cf, ec2, on_moto):
    """Issue 26 (cli/stack.py:77): --param's help says the others keep their value on update, but every
    required parameter was demanded again (exit 64 before any call)."""
    assert cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, "--yes", *FAST).rc == 0
    subnets = [_tagged(ec2, "subnet", f"mrk-vpc-private-{i}") for i in (1, 2)]
    sg = _tagged(ec2, "sg", "mrk-vpc-storage")
    assert cli("stack", "deploy", "mrk-efs", "--template", "cfn/efs.yaml", "--param", f"SubnetId1={subnets[0]}",
               "--param", f"SubnetId2={subnets[1]}", "--param", f"SecurityGroupId={sg}", "--yes", *FAST).rc == 0
    # moto fails executing this update (HTTP 500 on the access point), so the change set is reviewed and declined:
    # what counts is that the update got there, with only RootDirectory given
    r = cli("stack", "deploy", "mrk-efs", "--template", "cfn/efs.yaml", "--param", "RootDirectory=/teams/vision",
            *FAST, stdin="n\n", tty=True)
    assert r.rc == 1, r.err
    assert "updating stack mrk-efs from cfn/efs.yaml" in r.err and "missing required parameter" not in r.err
    params = {p["ParameterKey"]: p["ParameterValue"] for p in cf.describe_stacks(StackName="mrk-efs")["Stacks"][0]["Parameters"]}
    assert (params["SubnetId1"], params["SubnetId2"], params["SecurityGroupId"]) == (subnets[0], subnets[1], sg)
    # a new stack still needs them, and says which
    new = cli("stack", "deploy", "mrk-efs-2", "--template", "cfn/efs.yaml", "--yes", *FAST)
    assert new.rc == 64 and "missing required parameter SubnetId1" in new.err


def test_stack_down_refuses_while_training_jobs_run_in_its_subnets(cli, cf, ec2, on_moto, monkeypatch):
    """Issue 26: `stack down` deleted FSx and the VPC under running training jobs. Stubber for SageMaker
    (validated by the service model): moto's training jobs are Completed at once, never InProgress."""
    import boto3
    from botocore.stub import Stubber

    from mpirun_kit.cli import stack as cli_stack

    assert cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, "--yes", *FAST).rc == 0
    subnet = _tagged(ec2, "subnet", "mrk-vpc-private-1")
    sm = boto3.client("sagemaker", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(sm)
    job = {"TrainingJobName": "team-a-1", "TrainingJobArn": "arn:aws:sagemaker:us-west-2:123456789012:training-job/team-a-1",
           "ModelArtifacts": {"S3ModelArtifacts": ""}, "TrainingJobStatus": "InProgress", "SecondaryStatus": "Training",
           "AlgorithmSpecification": {"TrainingInputMode": "File"},
           "ResourceConfig": {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 2, "VolumeSizeInGB": 100},
           "StoppingCondition": {"MaxRuntimeInSeconds": 3600}, "CreationTime": 1_763_000_000,
           "VpcConfig": {"Subnets": [subnet], "SecurityGroupIds": ["sg-1"]}}
    stub.add_response("list_training_jobs", {"TrainingJobSummaries": [
        {k: job[k] for k in ("TrainingJobName", "TrainingJobArn", "CreationTime", "TrainingJobStatus")}]},
        {"StatusEquals": "InProgress", "MaxResults": 100})
    stub.add_response("describe_training_job", job, {"TrainingJobName": "team-a-1"})
    real = cli_stack._client
    monkeypatch.setattr(cli_stack, "_client", lambda args, service="cloudformation":
                        sm if service == "sagemaker" else real(args, service))
    with stub:
        r = cli("stack", "down", "--stacks", "mrk-vpc", "--yes", *FAST)
    assert r.rc == 69
    assert r.err.splitlines()[-1] == (
        "mpirun_kit: error: stack down: training job(s) team-a-1 are running in these stacks' subnets; deleting the "
        "VPC and file systems under them fails them. Wait for them (`mpirun_kit status NAME`), stop them "
        "(`mpirun_kit stop NAME`), or pass --force")
    assert [s["StackName"] for s in cf.list_stacks(StackStatusFilter=["CREATE_COMPLETE"])["StackSummaries"]] == \
        ["mrk-vpc"]


@pytest.mark.parametrize("link", ["s3://team-bucket/mpirun-kit", "s3://team-bucket/mpirun-kit/keys/"])
def test_deploy_refuses_an_fsx_link_over_the_secrets_before_any_call(cli, cf, on_moto, link):
    """Issue 37, finding 3: `stack deploy` checks the template's refusal before calling AWS (no stack)."""
    r = cli("stack", "deploy", "mrk-fsx", "--template", "cfn/fsx.yaml", "--param", "SubnetId=subnet-0123",
            "--param", "SecurityGroupId=sg-0123", "--param", f"S3DataPath={link}", "--yes", *FAST)
    assert r.rc == 64, r.err
    assert f"parameter S3DataPath='{link}' does not match AllowedPattern" in r.err
    assert "never the role stack's keys/ or jobs/" in r.err
    assert cf.list_stacks()["StackSummaries"] == []


def test_stack_down_refuses_while_something_else_uses_the_vpc_and_names_it(cli, cf, ec2, on_moto):
    """Issue 37, finding 4: `stack down` deleted mrk-vpc while another stack's file system sat in its subnet
    (unlisted, still billing).  Here a network interface no stack of --stacks made (a colleague's file
    system's) is in the VPC: down refuses and names it, and deletes nothing."""
    assert cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, "--yes", *FAST).rc == 0
    subnet = _tagged(ec2, "subnet", "mrk-vpc-private-1")
    eni = ec2.create_network_interface(SubnetId=subnet, Description="EFS mount target for fs-0colleague1 "
                                       "(fsmt-0abc)")["NetworkInterface"]
    r = cli("stack", "down", "--stacks", "mrk-vpc", "--yes", *FAST)
    assert r.rc == 69, r.err
    assert (f"stack down: the VPC of mrk-vpc is still in use by what these stacks did not make: network interface "
            f"{eni['NetworkInterfaceId']} in {eni['VpcId']} (EFS mount target for fs-0colleague1 (fsmt-0abc)). "
            "Delete those first") in r.err
    assert _stack(cf, "mrk-vpc")["StackStatus"] == "CREATE_COMPLETE"


def test_stack_down_never_advises_deleting_the_shared_training_log_group():
    """Issue 37, finding 4: its advice to delete /aws/sagemaker/TrainingJobs removed every user's logs."""
    from mpirun_kit.stack.deploy import TRAINING_LOG_GROUP, Retained

    cmd = Retained("mrk-role", "training logs", "AWS::Logs::LogGroup", TRAINING_LOG_GROUP).delete_command("us-west-2")
    assert "delete-log-group" not in cmd
    assert cmd.startswith("keep the group (every training job of this account and region logs there); remove only "
                          "your own jobs' streams: aws logs delete-log-stream --log-group-name "
                          "/aws/sagemaker/TrainingJobs --log-stream-name JOB/HOST --region us-west-2")


def test_a_stack_has_an_owner_and_another_person_neither_updates_nor_deletes_it(cli, cf, on_moto, monkeypatch):
    """Issue 37, finding 4: a second user's `stack deploy` became "updating stack mrk-role" with no ownership
    check.  The owner is the caller's identity (STS GetCallerIdentity; moto's is user/moto), tagged on the stack."""
    from mpirun_kit.cli import stack as cli_stack

    assert cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, "--yes", *FAST).rc == 0
    assert {"Key": "mpirun-kit-owner", "Value": "user/moto"} in _stack(cf, "mrk-vpc")["Tags"]
    monkeypatch.setattr(cli_stack, "_owner", lambda args: "user/bob")
    upd = cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, "--param", "CreateNatGateway=false", "--yes", *FAST)
    assert upd.rc == 69
    assert ("stack mrk-vpc belongs to user/moto (its tag mpirun-kit-owner), not to you (user/bob): you would update "
            "their stack, which every job of theirs uses. Choose a stack prefix of your own (`mpirun_kit stack prefix "
            "mrk-bob`: 'mrk-' in stack names stands for it, so mrk-vpc is then mrk-bob-vpc), or, if it is yours to "
            "take over, pass --take-over") in upd.err
    down = cli("stack", "down", "--stacks", "mrk-vpc", "--yes", *FAST)
    assert down.rc == 69 and "stack mrk-vpc belongs to user/moto" in down.err and "you would delete" in down.err
    gone = cli("stack", "delete", "mrk-vpc", "--yes", *FAST)
    assert gone.rc == 69 and "stack mrk-vpc belongs to user/moto" in gone.err and "you would delete" in gone.err
    params = {p["ParameterKey"]: p["ParameterValue"] for p in _stack(cf, "mrk-vpc")["Parameters"]}
    assert params["CreateNatGateway"] == "true"
    took = cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, "--param", "CreateNatGateway=false", "--yes", "--take-over",
               *FAST)
    assert took.rc == 0, took.err
    params = {p["ParameterKey"]: p["ParameterValue"] for p in _stack(cf, "mrk-vpc")["Parameters"]}
    assert params["CreateNatGateway"] == "false"
    # (the update's change set carries Tags owner=user/bob; moto does not apply a change set's tags to the stack)
