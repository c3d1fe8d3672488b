"""deploy/delete flows where moto cannot answer like CloudFormation: scripted with botocore's Stubber.

Stubbed (and why):
- FSx stacks: moto has no AWS::FSx::* resources, so an FSx deploy and its outputs
  (LustreMountName) are scripted as AWS answers them;
- outputs after a change set: moto never fills Outputs on the change-set path;
- rollback: moto never rolls back (a failing resource makes execute_change_set return HTTP 500);
- "no changes" as AWS reports it (a FAILED change set; moto refuses the change set instead);
- slow stacks and the deadline, driven by the fake clock.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from botocore.stub import ANY

from mpirun_kit.errors import ClusterError
from mpirun_kit.stack import (Change, DeployResult, StackEvent, StackFailedError, StackTimeoutError, delete,
                              deploy, load_template, make_deploy_request)

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 21, 21, 0, 0, tzinfo=timezone.utc)
CS_ID = "arn:aws:cloudformation:us-west-2:123456789012:changeSet/mrk-1/abc"
FSX_PARAMS = {"SubnetId": "subnet-0a1b", "SecurityGroupId": "sg-0a1b", "DeploymentType": "PERSISTENT_2",
              "PerUnitStorageThroughput": "250", "S3DataPath": "s3://data-bucket/coco"}


def stack_id(name):
    return f"arn:aws:cloudformation:us-west-2:123456789012:stack/{name}/1"


def stack(name, status, outputs=None, params=None, reason=None):
    s = {"StackName": name, "StackId": stack_id(name), "CreationTime": T0, "StackStatus": status}
    if outputs:
        s["Outputs"] = [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()]
    if params:
        s["Parameters"] = [{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()]
    if reason:
        s["StackStatusReason"] = reason
    return {"Stacks": [s]}


def event(name, n, seconds, lid, rtype, status, reason=None):
    e = {"StackId": stack_id(name), "EventId": f"ev-{n}", "StackName": name, "Timestamp": T0 + timedelta(seconds=seconds),
         "LogicalResourceId": lid, "ResourceType": rtype, "ResourceStatus": status}
    if reason:
        e["ResourceStatusReason"] = reason
    return e


def events(*evs):
    """DescribeStackEvents answers newest first."""
    return {"StackEvents": list(reversed(evs))}


def no_stack(stub, name):
    stub.add_client_error("describe_stacks", service_error_code="ValidationError",
                          service_message=f"Stack with id {name} does not exist", expected_params={"StackName": name})


@pytest.fixture
def fsx_request(monkeypatch):
    monkeypatch.chdir(REPO)
    return make_deploy_request("mrk-fsx", load_template("cfn/fsx.yaml"), FSX_PARAMS, "mrk-1")


def test_fsx_create_with_outputs_after_change_set(stubbed, clock, fsx_request):
    client, stub = stubbed
    name = "mrk-fsx"
    review = event(name, 0, 0, name, "AWS::CloudFormation::Stack", "REVIEW_IN_PROGRESS", "User Initiated")
    begin = event(name, 1, 10, name, "AWS::CloudFormation::Stack", "CREATE_IN_PROGRESS", "User Initiated")
    fs_begin = event(name, 2, 11, "FileSystem", "AWS::FSx::FileSystem", "CREATE_IN_PROGRESS")
    fs_done = event(name, 3, 600, "FileSystem", "AWS::FSx::FileSystem", "CREATE_COMPLETE")
    dra_done = event(name, 4, 700, "S3Association", "AWS::FSx::DataRepositoryAssociation", "CREATE_COMPLETE")
    done = event(name, 5, 701, name, "AWS::CloudFormation::Stack", "CREATE_COMPLETE")
    outputs = {"FileSystemId": "fs-0123", "DNSName": "fs-0123.fsx.us-west-2.amazonaws.com",
               "LustreMountName": "abcdefgh", "DataDirectoryPath": "/abcdefgh/data"}

    no_stack(stub, name)
    stub.add_response("create_change_set", {"Id": CS_ID, "StackId": stack_id(name)}, {
        "StackName": name, "ChangeSetName": "mrk-1", "ChangeSetType": "CREATE", "TemplateBody": ANY,
        "Description": "mpirun_kit stack deploy cfn/fsx.yaml",
        "Parameters": [{"ParameterKey": k, "ParameterValue": v} for k, v in sorted(FSX_PARAMS.items())]})
    stub.add_response("describe_change_set", {"Status": "CREATE_IN_PROGRESS"}, {"ChangeSetName": CS_ID})
    stub.add_response("describe_change_set", {"Status": "CREATE_COMPLETE", "Changes": [
        {"Type": "Resource", "ResourceChange": {"Action": "Add", "LogicalResourceId": "FileSystem",
                                                "ResourceType": "AWS::FSx::FileSystem"}},
        {"Type": "Resource", "ResourceChange": {"Action": "Add", "LogicalResourceId": "S3Association",
                                                "ResourceType": "AWS::FSx::DataRepositoryAssociation"}}]},
        {"ChangeSetName": CS_ID})
    stub.add_response("describe_stack_events", events(review), {"StackName": name})
    stub.add_response("execute_change_set", {}, {"ChangeSetName": CS_ID})
    stub.add_response("describe_stack_events", events(review, begin, fs_begin), {"StackName": name})
    stub.add_response("describe_stacks", stack(name, "CREATE_IN_PROGRESS"), {"StackName": name})
    stub.add_response("describe_stack_events", events(review, begin, fs_begin, fs_done, dra_done, done),
                      {"StackName": name})
    stub.add_response("describe_stacks", stack(name, "CREATE_COMPLETE", outputs), {"StackName": name})
    stub.add_response("describe_stacks", stack(name, "CREATE_COMPLETE", outputs), {"StackName": name})

    lines = []
    asked = []
    result = deploy(fsx_request, client, confirm=lambda ch: asked.append(ch) or True, report=lines.append,
                    clock=clock, timeout_s=3600, poll_s=5)
    changes = (Change("Add", "FileSystem", "AWS::FSx::FileSystem"),
               Change("Add", "S3Association", "AWS::FSx::DataRepositoryAssociation"))
    assert result == DeployResult("mrk-fsx", "created", changes, tuple(sorted(outputs.items())))
    assert asked == [changes]
    assert clock.sleeps == [5, 5]
    assert "\n".join(lines).splitlines() == [
        "creating stack mrk-fsx from cfn/fsx.yaml (change set mrk-1)",
        "ACTION  RESOURCE       TYPE                                 REPLACEMENT  PHYSICAL ID",
        "Add     FileSystem     AWS::FSx::FileSystem                 -            -",
        "Add     S3Association  AWS::FSx::DataRepositoryAssociation  -            -",
        "  21:00:10  CREATE_IN_PROGRESS           mrk-fsx (AWS::CloudFormation::Stack)  User Initiated",
        "  21:00:11  CREATE_IN_PROGRESS           FileSystem (AWS::FSx::FileSystem)",
        "  21:10:00  CREATE_COMPLETE              FileSystem (AWS::FSx::FileSystem)",
        "  21:11:40  CREATE_COMPLETE              S3Association (AWS::FSx::DataRepositoryAssociation)",
        "  21:11:41  CREATE_COMPLETE              mrk-fsx (AWS::CloudFormation::Stack)",
    ]


def test_rollback_reports_first_failing_resource(stubbed, clock, fsx_request):
    client, stub = stubbed
    name = "mrk-fsx"
    review = event(name, 0, 0, name, "AWS::CloudFormation::Stack", "REVIEW_IN_PROGRESS")
    fs_failed = event(name, 1, 20, "FileSystem", "AWS::FSx::FileSystem", "CREATE_FAILED",
                      "Resource handler returned message: \"Subnet subnet-0a1b not found\" (HandlerErrorCode: NotFound)")
    cancelled = event(name, 2, 21, "S3Association", "AWS::FSx::DataRepositoryAssociation", "CREATE_FAILED",
                      "Resource creation cancelled")
    rolling = event(name, 3, 22, name, "AWS::CloudFormation::Stack", "ROLLBACK_IN_PROGRESS",
                    "The following resource(s) failed to create: [FileSystem, S3Association].")
    rolled = event(name, 4, 40, name, "AWS::CloudFormation::Stack", "ROLLBACK_COMPLETE")

    no_stack(stub, name)
    stub.add_response("create_change_set", {"Id": CS_ID}, {**{k: ANY for k in (
        "StackName", "ChangeSetName", "ChangeSetType", "TemplateBody", "Description", "Parameters")}})
    stub.add_response("describe_change_set", {"Status": "CREATE_COMPLETE", "Changes": []}, {"ChangeSetName": CS_ID})
    stub.add_response("describe_stack_events", events(review), {"StackName": name})
    stub.add_response("execute_change_set", {}, {"ChangeSetName": CS_ID})
    stub.add_response("describe_stack_events", events(review, fs_failed, cancelled, rolling, rolled), {"StackName": name})
    stub.add_response("describe_stacks", stack(name, "ROLLBACK_COMPLETE"), {"StackName": name})

    lines = []
    with pytest.raises(StackFailedError) as e:
        deploy(fsx_request, client, confirm=lambda ch: True, report=lines.append, clock=clock, poll_s=5)
    assert str(e.value) == (
        "stack 'mrk-fsx' ended ROLLBACK_COMPLETE; first failure: FileSystem (AWS::FSx::FileSystem) CREATE_FAILED: "
        "Resource handler returned message: \"Subnet subnet-0a1b not found\" (HandlerErrorCode: NotFound). "
        "Fix the cause and deploy again (a stack that was never created must be deleted first: "
        "`mpirun_kit stack delete mrk-fsx`)")
    assert e.value.exit_code == 69
    assert (e.value.status, e.value.failure) == ("ROLLBACK_COMPLETE", StackEvent.from_api(fs_failed))
    assert lines[-1] == "  21:00:40  ROLLBACK_COMPLETE            mrk-fsx (AWS::CloudFormation::Stack)"


def test_aws_no_changes_is_success_with_current_outputs(stubbed, clock, fsx_request):
    client, stub = stubbed
    name = "mrk-fsx"
    current = {**FSX_PARAMS, "Compression": "LZ4"}
    stub.add_response("describe_stacks", stack(name, "UPDATE_COMPLETE", {"LustreMountName": "abcdefgh"}, current),
                      {"StackName": name})
    stub.add_response("create_change_set", {"Id": CS_ID}, {
        "StackName": name, "ChangeSetName": "mrk-1", "ChangeSetType": "UPDATE", "TemplateBody": ANY,
        "Description": ANY,
        "Parameters": [*({"ParameterKey": k, "ParameterValue": v} for k, v in sorted(FSX_PARAMS.items())),
                       {"ParameterKey": "Compression", "UsePreviousValue": True}]})
    stub.add_response("describe_change_set", {"Status": "FAILED", "StatusReason": (
        "The submitted information didn't contain changes. Submit different information to create a change set.")},
        {"ChangeSetName": CS_ID})
    stub.add_response("delete_change_set", {}, {"ChangeSetName": CS_ID})
    result = deploy(fsx_request, client, confirm=lambda ch: pytest.fail("nothing to confirm"), report=lambda s: None,
                    clock=clock)
    assert result == DeployResult("mrk-fsx", "no-changes", (), (("LustreMountName", "abcdefgh"),))


def test_failed_change_set_reason(stubbed, clock, fsx_request):
    client, stub = stubbed
    no_stack(stub, "mrk-fsx")
    stub.add_response("create_change_set", {"Id": CS_ID}, None)
    stub.add_response("describe_change_set", {"Status": "FAILED", "StatusReason": "Requires capabilities : [CAPABILITY_IAM]"},
                      {"ChangeSetName": CS_ID})
    with pytest.raises(StackFailedError) as e:
        deploy(fsx_request, client, confirm=lambda ch: True, report=lambda s: None, clock=clock)
    assert str(e.value) == ("change set mrk-1 of stack 'mrk-fsx' failed: Requires capabilities : [CAPABILITY_IAM]; "
                            "fix the template or parameters and deploy again")


def test_deadline_with_heartbeat(stubbed, clock, fsx_request):
    client, stub = stubbed
    name = "mrk-fsx"
    no_stack(stub, name)
    stub.add_response("create_change_set", {"Id": CS_ID}, None)
    stub.add_response("describe_change_set", {"Status": "CREATE_COMPLETE"}, {"ChangeSetName": CS_ID})
    stub.add_response("describe_stack_events", events(), {"StackName": name})
    stub.add_response("execute_change_set", {}, {"ChangeSetName": CS_ID})
    for _ in range(4):  # t = 0, 20, 40, 60
        stub.add_response("describe_stack_events", events(), {"StackName": name})
        stub.add_response("describe_stacks", stack(name, "CREATE_IN_PROGRESS"), {"StackName": name})
    lines = []
    with pytest.raises(StackTimeoutError) as e:
        deploy(fsx_request, client, confirm=lambda ch: True, report=lines.append, clock=clock, timeout_s=60, poll_s=20)
    assert str(e.value) == ("stack 'mrk-fsx' still CREATE_IN_PROGRESS after 60 s (--timeout); CloudFormation "
                            "carries on: check again with `mpirun_kit stack list`, or wait longer with a larger --timeout")
    assert clock.sleeps == [20, 20, 20]
    assert lines[-1] == "  ... mrk-fsx: CREATE_IN_PROGRESS (40 s)"


@pytest.mark.parametrize("status", ["ROLLBACK_COMPLETE", "ROLLBACK_FAILED"])
def test_failed_create_must_be_deleted_first(stubbed, clock, fsx_request, status):
    client, stub = stubbed
    stub.add_response("describe_stacks", stack("mrk-fsx", status), {"StackName": "mrk-fsx"})
    with pytest.raises(StackFailedError) as e:
        deploy(fsx_request, client, confirm=lambda ch: True, report=lambda s: None, clock=clock)
    assert str(e.value) == (f"stack 'mrk-fsx' is {status}: its creation failed, and such a stack cannot be updated; "
                            "delete it with `mpirun_kit stack delete mrk-fsx` and deploy again")


def test_busy_stack(stubbed, clock, fsx_request):
    client, stub = stubbed
    stub.add_response("describe_stacks", stack("mrk-fsx", "UPDATE_IN_PROGRESS"), {"StackName": "mrk-fsx"})
    with pytest.raises(ClusterError) as e:
        deploy(fsx_request, client, confirm=lambda ch: True, report=lambda s: None, clock=clock)
    assert str(e.value) == ("stack 'mrk-fsx' is busy (UPDATE_IN_PROGRESS); wait for it to finish "
                            "(`mpirun_kit stack list`) and deploy again")


def test_access_denied_is_a_cluster_error(stubbed, clock, fsx_request):
    client, stub = stubbed
    stub.add_client_error("describe_stacks", service_error_code="AccessDenied",
                          service_message="User: arn:aws:iam::1:user/x is not authorized to perform: "
                          "cloudformation:DescribeStacks", http_status_code=403)
    with pytest.raises(ClusterError) as e:
        deploy(fsx_request, client, confirm=lambda ch: True, report=lambda s: None, clock=clock)
    assert str(e.value) == ("CloudFormation describe_stacks for stack 'mrk-fsx' failed: AccessDenied: User: "
                            "arn:aws:iam::1:user/x is not authorized to perform: cloudformation:DescribeStacks")


def test_delete_failed_names_the_resource(stubbed, clock):
    client, stub = stubbed
    name = "mrk-vpc"
    sid = stack_id(name)
    old = event(name, 0, 0, name, "AWS::CloudFormation::Stack", "CREATE_COMPLETE")
    start = event(name, 1, 5, name, "AWS::CloudFormation::Stack", "DELETE_IN_PROGRESS", "User Initiated")
    vpc = event(name, 2, 30, "Vpc", "AWS::EC2::VPC", "DELETE_FAILED",
                "The vpc 'vpc-1' has dependencies and cannot be deleted.")
    failed = event(name, 3, 31, name, "AWS::CloudFormation::Stack", "DELETE_FAILED")
    stub.add_response("describe_stacks", stack(name, "CREATE_COMPLETE"), {"StackName": name})
    stub.add_response("describe_stack_events", events(old), {"StackName": sid})
    stub.add_response("delete_stack", {}, {"StackName": sid})
    stub.add_response("describe_stack_events", events(old, start, vpc, failed), {"StackName": sid})
    stub.add_response("describe_stacks", stack(name, "DELETE_FAILED"), {"StackName": sid})
    with pytest.raises(StackFailedError) as e:
        delete(name, client, report=lambda s: None, clock=clock)
    assert str(e.value).startswith("stack 'mrk-vpc' ended DELETE_FAILED; first failure: Vpc (AWS::EC2::VPC) "
                                   "DELETE_FAILED: The vpc 'vpc-1' has dependencies and cannot be deleted.")


def test_stack_level_failure_reason_is_printed(stubbed, clock, fsx_request):
    """A failure no resource carries (an empty export) comes from the stack's ROLLBACK_IN_PROGRESS event."""
    client, stub = stubbed
    name = "mrk-fsx"
    review = event(name, 0, 0, name, "AWS::CloudFormation::Stack", "REVIEW_IN_PROGRESS")
    done = event(name, 1, 20, "FileSystem", "AWS::FSx::FileSystem", "CREATE_COMPLETE")
    rolling = event(name, 2, 22, name, "AWS::CloudFormation::Stack", "ROLLBACK_IN_PROGRESS",
                    "Template error: Exported values must not be empty or whitespace-only")
    rolled = event(name, 3, 40, name, "AWS::CloudFormation::Stack", "ROLLBACK_COMPLETE")
    no_stack(stub, name)
    stub.add_response("create_change_set", {"Id": CS_ID}, None)
    stub.add_response("describe_change_set", {"Status": "CREATE_COMPLETE", "Changes": []}, {"ChangeSetName": CS_ID})
    stub.add_response("describe_stack_events", events(review), {"StackName": name})
    stub.add_response("execute_change_set", {}, {"ChangeSetName": CS_ID})
    stub.add_response("describe_stack_events", events(review, done, rolling, rolled), {"StackName": name})
    stub.add_response("describe_stacks", stack(name, "ROLLBACK_COMPLETE"), {"StackName": name})
    with pytest.raises(StackFailedError) as e:
        deploy(fsx_request, client, confirm=lambda ch: True, report=lambda s: None, clock=clock, poll_s=5)
    assert str(e.value).startswith(
        "stack 'mrk-fsx' ended ROLLBACK_COMPLETE; first failure: mrk-fsx (AWS::CloudFormation::Stack) "
        "ROLLBACK_IN_PROGRESS: Template error: Exported values must not be empty or whitespace-only. ")


def test_update_rollback_failed_points_to_continue_update_rollback(stubbed, clock, fsx_request):
    client, stub = stubbed
    stub.add_response("describe_stacks", stack("mrk-fsx", "UPDATE_ROLLBACK_FAILED"), {"StackName": "mrk-fsx"})
    with pytest.raises(StackFailedError) as e:
        deploy(fsx_request, client, confirm=lambda ch: True, report=lambda s: None, clock=clock)
    assert str(e.value) == (
        "stack 'mrk-fsx' is UPDATE_ROLLBACK_FAILED: an update failed and so did its rollback, and CloudFormation "
        "accepts no update until the rollback finishes; fix what the rollback could not undo (see the stack "
        "events), then run `aws cloudformation continue-update-rollback --stack-name mrk-fsx` (add "
        "--resources-to-skip for resources that cannot be rolled back) and deploy again")


def test_termination_protection_after_create(stubbed, clock, monkeypatch):
    """CreateChangeSet has no termination-protection parameter: deploy turns it on once the stack exists."""
    monkeypatch.chdir(REPO)
    client, stub = stubbed
    name = "mrk-fsx"
    request = make_deploy_request(name, load_template("cfn/fsx.yaml"), FSX_PARAMS, "mrk-1", termination_protection=True)
    assert "termination protection: on after deploy" in request.render().splitlines()
    review = event(name, 0, 0, name, "AWS::CloudFormation::Stack", "REVIEW_IN_PROGRESS")
    done = event(name, 1, 700, name, "AWS::CloudFormation::Stack", "CREATE_COMPLETE")
    no_stack(stub, name)
    stub.add_response("create_change_set", {"Id": CS_ID}, None)
    stub.add_response("describe_change_set", {"Status": "CREATE_COMPLETE", "Changes": []}, {"ChangeSetName": CS_ID})
    stub.add_response("describe_stack_events", events(review), {"StackName": name})
    stub.add_response("execute_change_set", {}, {"ChangeSetName": CS_ID})
    stub.add_response("describe_stack_events", events(review, done), {"StackName": name})
    stub.add_response("describe_stacks", stack(name, "CREATE_COMPLETE"), {"StackName": name})
    stub.add_response("update_termination_protection", {"StackId": stack_id(name)},
                      {"StackName": name, "EnableTerminationProtection": True})
    stub.add_response("describe_stacks", stack(name, "CREATE_COMPLETE"), {"StackName": name})
    lines = []
    assert deploy(request, client, confirm=lambda ch: True, report=lines.append, clock=clock).outcome == "created"
    assert lines[-1].startswith("stack mrk-fsx: termination protection on")
