"""stack/deploy.py's values and rules: change-set rows, whose stack it is, what a deleted stack leaves behind.

Deploy, delete and teardown against CloudFormation run in test_deploy_moto.py (moto server) and
test_deploy_stubbed.py (botocore's Stubber, for what moto cannot do); the change table's text in
test_events_outputs.py.  Here: the pure parts those reach only on some paths, on plain dicts.
"""
from __future__ import annotations

import pytest

from mpirun_kit.errors import ClusterError
from mpirun_kit.stack.deploy import (OWNER_TAG, TRAINING_LOG_GROUP, Change, Retained, check_owner,
                                     left_outside_stacks, owner_of)

ARN = "arn:aws-us-gov:cloudformation:us-gov-west-1:123456789012:stack/mrk-efs/abc"


def test_a_change_set_row_from_the_api_and_what_is_missing():
    raw = {"ResourceChange": {"Action": "Modify", "LogicalResourceId": "Fs", "ResourceType": "AWS::EFS::FileSystem",
                              "Replacement": "True", "PhysicalResourceId": "fs-1"}}
    assert Change.from_api(raw) == Change("Modify", "Fs", "AWS::EFS::FileSystem", "True", "fs-1")
    assert Change.from_api({}) == Change("?", "?", "?", "", "")


def test_the_owner_is_the_owner_tag():
    stack = {"StackName": "mrk-vpc", "Tags": [{"Key": "x", "Value": "y"}, {"Key": OWNER_TAG, "Value": "alice"}]}
    assert owner_of(stack) == "alice"
    assert owner_of({"StackName": "mrk-vpc"}) is None


@pytest.mark.parametrize("tag, me", [(None, "bob"), ("alice", "alice"), ("alice", None)])
def test_an_untagged_stack_your_own_or_no_known_caller_passes(tag, me):
    tags = [{"Key": OWNER_TAG, "Value": tag}] if tag else []
    check_owner({"StackName": "mrk-vpc", "Tags": tags}, me, "delete")


def test_another_persons_stack_is_refused_with_a_prefix_of_your_own():
    stack = {"StackName": "mrk-vpc", "Tags": [{"Key": OWNER_TAG, "Value": "arn:aws:iam::1:user/alice"}]}
    with pytest.raises(ClusterError) as e:
        check_owner(stack, "arn:aws:iam::1:user/Bob.Smith@example", "update")
    text = str(e.value)
    assert text.startswith(f"stack mrk-vpc belongs to arn:aws:iam::1:user/alice (its tag {OWNER_TAG}), not to you "
                           "(arn:aws:iam::1:user/Bob.Smith@example): you would update their stack")
    assert "`mpirun_kit stack prefix mrk-bob-smith`" in text and "mrk-vpc is then mrk-bob-smith-vpc" in text
    assert text.endswith("pass --take-over")


def test_a_kept_file_systems_backups_and_the_training_logs_are_named_after_teardown():
    kept = (Retained("mrk-efs", "Fs", "AWS::EFS::FileSystem", "fs-9"),
            Retained("mrk-role", "Bucket", "AWS::S3::Bucket", "my-bucket"))
    left = left_outside_stacks(kept, ("mrk-role", "mrk-efs"), {"mrk-efs": ARN})
    assert [(r.stack_name, r.resource_type, r.physical_id) for r in left] == [
        ("mrk-efs", "AWS::Backup::RecoveryPoint",
         "arn:aws-us-gov:elasticfilesystem:us-gov-west-1:123456789012:file-system/fs-9"),
        ("mrk-role", "AWS::Logs::LogGroup", TRAINING_LOG_GROUP)]
    assert left_outside_stacks(kept[1:], ("mrk-efs",), {}) == ()   # no file system kept, the role stack stays


def test_how_to_delete_what_is_kept_and_never_the_shared_log_group():
    assert Retained("s", "B", "AWS::S3::Bucket", "bkt").delete_command("eu-west-1") == \
        "aws s3 rb s3://bkt --force --region eu-west-1"
    shared = Retained("s", "L", "AWS::Logs::LogGroup", TRAINING_LOG_GROUP).delete_command(None)
    assert shared.startswith("keep the group") and "delete-log-group" not in shared
    assert Retained("s", "Q", "AWS::SQS::Queue", "q-1").delete_command(None) == \
        "delete AWS::SQS::Queue q-1 with its service's console or CLI"
