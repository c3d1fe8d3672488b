"""Pure helpers: progress lines, root-cause choice, env exports of outputs."""
from __future__ import annotations

import shlex
import subprocess
from datetime import datetime, timezone

from mpirun_kit.stack import StackEvent, env_name, first_failure, render_env
from mpirun_kit.stack.deploy import Change, render_changes


def ev(i, t, lid, rtype, status, reason=""):
    return StackEvent(f"e{i}", f"2026-11-21T21:00:{t:02d}+00:00", lid, rtype, status, reason)


def test_first_failure_skips_cancellations_and_the_stack_itself():
    events = [
        ev(5, 9, "mrk", "AWS::CloudFormation::Stack", "ROLLBACK_IN_PROGRESS", "The following resource(s) failed"),
        ev(4, 8, "Subnet", "AWS::EC2::Subnet", "CREATE_FAILED", "Resource creation cancelled"),
        ev(3, 7, "Lustre", "AWS::FSx::FileSystem", "CREATE_FAILED", "Invalid PerUnitStorageThroughput"),
        ev(2, 6, "Lustre", "AWS::FSx::FileSystem", "CREATE_IN_PROGRESS"),
    ]
    assert first_failure(events) == events[2]


def test_first_failure_falls_back_and_can_be_none():
    only_cancelled = [ev(1, 1, "A", "T", "CREATE_FAILED", "Resource creation cancelled")]
    assert first_failure(only_cancelled) == only_cancelled[0]
    assert first_failure([ev(1, 1, "A", "T", "CREATE_COMPLETE")]) is None


def test_event_from_api_and_line():
    raw = {"EventId": "x1", "Timestamp": datetime(2026, 11, 21, 21, 0, 5, tzinfo=timezone.utc),
           "LogicalResourceId": "Vpc", "ResourceType": "AWS::EC2::VPC", "ResourceStatus": "CREATE_FAILED",
           "ResourceStatusReason": "quota"}
    e = StackEvent.from_api(raw)
    assert e == StackEvent("x1", "2026-11-21T21:00:05+00:00", "Vpc", "AWS::EC2::VPC", "CREATE_FAILED", "quota")
    assert e.line() == "21:00:05  CREATE_FAILED                Vpc (AWS::EC2::VPC)  quota"
    # moto leaves the resource out for types it skips: still a line, never a KeyError.
    assert StackEvent.from_api({"EventId": "x2"}).line() == "  ?                            ? (?)"


def test_change_table():
    table = render_changes((Change("Add", "Vpc", "AWS::EC2::VPC"),
                            Change("Modify", "Lustre", "AWS::FSx::FileSystem", "True", "fs-1")))
    assert table.splitlines() == [
        "ACTION  RESOURCE  TYPE                  REPLACEMENT     PHYSICAL ID",
        "Add     Vpc       AWS::EC2::VPC         -               -",
        "Modify  Lustre    AWS::FSx::FileSystem  yes (replaced)  fs-1",
    ]
    assert render_changes(()) == "(no resource changes)"


def test_env_names():
    assert env_name("mrk-vpc", "SecurityGroupId") == "MRK_MRK_VPC_SECURITYGROUPID"
    assert env_name("fsx.1", "LustreMountName") == "MRK_FSX_1_LUSTREMOUNTNAME"


def test_env_exports_are_shell_safe():
    outputs = {"B": "it's $HOME; rm -rf /", "A": "subnet-1,subnet-2"}
    text = render_env("s", outputs)
    assert text.splitlines() == [
        "export MRK_S_A=subnet-1,subnet-2",
        "export MRK_S_B=" + shlex.quote("it's $HOME; rm -rf /"),
    ]
    # A real shell reads back exactly the values.
    got = subprocess.run(["sh", "-c", text + '\nprintf "%s|%s" "$MRK_S_A" "$MRK_S_B"'],
                         capture_output=True, text=True, check=True).stdout
    assert got == "subnet-1,subnet-2|it's $HOME; rm -rf /"


def test_stack_level_rollback_reason_is_the_failure():
    """Issue 15: an empty export fails no resource; the stack's own ROLLBACK_IN_PROGRESS carries the reason."""
    events = [
        ev(1, 1, "mrk-vpc", "AWS::CloudFormation::Stack", "CREATE_IN_PROGRESS", "User Initiated"),
        ev(2, 5, "Vpc", "AWS::EC2::VPC", "CREATE_COMPLETE"),
        ev(3, 9, "mrk-vpc", "AWS::CloudFormation::Stack", "ROLLBACK_IN_PROGRESS",
           "Template error: Exported values must not be empty or whitespace-only"),
        ev(4, 12, "Vpc", "AWS::EC2::VPC", "DELETE_COMPLETE"),
        ev(5, 13, "mrk-vpc", "AWS::CloudFormation::Stack", "ROLLBACK_COMPLETE"),
    ]
    assert first_failure(events) == events[2]


def test_update_rollback_reason_is_the_failure():
    events = [ev(1, 1, "s", "AWS::CloudFormation::Stack", "UPDATE_ROLLBACK_IN_PROGRESS", "Export s-X cannot be updated"),
              ev(2, 2, "s", "AWS::CloudFormation::Stack", "UPDATE_ROLLBACK_COMPLETE")]
    assert first_failure(events) == events[0]


def test_a_resource_that_fails_to_delete_in_the_rollback_does_not_hide_the_cause():
    """Issue 21 item 6: the stack-level cause came first; the ENI that would not delete came after, in the
    rollback. The old first_failure returned the DELETE_FAILED (the first failed resource event)."""
    events = [
        ev(1, 1, "mrk-vpc", "AWS::CloudFormation::Stack", "CREATE_IN_PROGRESS", "User Initiated"),
        ev(2, 5, "Vpc", "AWS::EC2::VPC", "CREATE_COMPLETE"),
        ev(3, 9, "mrk-vpc", "AWS::CloudFormation::Stack", "ROLLBACK_IN_PROGRESS",
           "Template error: Exported values must not be empty or whitespace-only"),
        ev(4, 12, "Vpc", "AWS::EC2::VPC", "DELETE_FAILED", "The vpc has dependencies and cannot be deleted"),
        ev(5, 13, "mrk-vpc", "AWS::CloudFormation::Stack", "ROLLBACK_FAILED"),
    ]
    assert first_failure(events) == events[2]


def test_a_resource_failure_before_the_rollback_is_still_the_cause():
    events = [
        ev(1, 2, "Fsx", "AWS::FSx::FileSystem", "CREATE_FAILED", "Insufficient capacity in us-west-2a"),
        ev(2, 3, "mrk-fsx", "AWS::CloudFormation::Stack", "ROLLBACK_IN_PROGRESS", "The following resource(s) failed"),
        ev(3, 6, "Sg", "AWS::EC2::SecurityGroup", "DELETE_FAILED", "resource sg-1 has a dependent object"),
    ]
    assert first_failure(events) == events[0]
