"""stack/prefix.py and its users: whose stacks ``mrk-*`` names mean (issue #37, finding 4).

Before: the names ``mrk-vpc``, ``mrk-role`` were fixed in jobs/ and the docs, so a second person's ``stack
deploy mrk-role`` updated the first one's stack.  Now ``mrk-`` stands for the user's prefix (``mrk-<user>``
by default, written once in their configuration file), in job specs and on the stack commands alike.
The CLI cases run against a real moto server on 127.0.0.1; each test has its own configuration
directory (tests/conftest.py ``user_config``), never the user's ~/.config.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.stack.aws import StackNotFoundError
from mpirun_kit.stack.prefix import (AS_WRITTEN, StackNames, check_prefix, config_file, default_prefix,
                                     load_stack_names, read_prefix, write_prefix)
from mpirun_kit.stack.resolve import cloudformation_outputs, resolve_stacks

REPO = Path(__file__).resolve().parents[2]
ROLE = {"Resources": {"T": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {"RoleArn": {"Value": "arn:aws:iam::123456789012:role/ROLE"}}}


def test_the_configuration_file_is_the_private_dir_then_xdg_then_home():
    assert config_file("/c", "/x", "/h") == Path("/c/config")
    assert config_file(None, "/x", "/h") == Path("/x/mpirun_kit/config")
    assert config_file(None, None, "/h") == Path("/h/.config/mpirun_kit/config")


def test_the_default_prefix_is_the_users_name_made_a_stack_name():
    assert default_prefix("alice") == "mrk-alice"
    assert default_prefix("Bob.Smith@corp") == "mrk-bob-smith-corp"
    assert default_prefix("___") == "mrk"


def test_mrk_stands_for_the_prefix_other_names_are_as_written():
    names = StackNames("mrk-alice", "test")
    assert names.of("mrk-vpc") == "mrk-alice-vpc"
    assert names.of("mrk-alice-vpc") == "mrk-alice-vpc"   # already the stack's own name
    assert names.of("team-vpc") == "team-vpc"
    assert AS_WRITTEN.of("mrk-vpc") == "mrk-vpc" and StackNames("mrk", "t").of("mrk-role") == "mrk-role"


def test_a_prefix_that_cannot_begin_a_stack_name_is_refused_with_where_it_came_from(tmp_path):
    bad = tmp_path / "config"
    bad.write_text("# mine\nstack_prefix = 9lives\n")
    with pytest.raises(SpecError) as e:
        read_prefix(bad)
    assert str(e.value) == (f"{bad}:2: stack prefix '9lives' cannot begin a CloudFormation stack name; expected a "
                            "letter, then letters, digits and '-' (at most 64, not ending in '-'), e.g. "
                            "stack_prefix = mrk-alice")
    with pytest.raises(SpecError):
        check_prefix("mrk-", "x")


def test_the_default_is_written_once_and_kept(tmp_path):
    path = tmp_path / "cfg" / "config"
    names, said = load_stack_names(path, "alice")
    assert names.prefix == "mrk-alice" and said.startswith("stack prefix 'mrk-alice' (your stacks are mrk-alice-vpc")
    assert read_prefix(path) == "mrk-alice" and oct(path.stat().st_mode & 0o777) == "0o600"
    again, said = load_stack_names(path, "bob")     # another login name later: the saved prefix stays
    assert (again.prefix, said) == ("mrk-alice", None)
    path.write_text("# keep me\nstack_prefix = mrk-alice\n")
    write_prefix(path, "mrk-team2")
    assert path.read_text() == "# keep me\nstack_prefix = mrk-team2\n"


def test_a_spec_reads_the_stacks_of_its_user(moto):
    """Two people on one account, one spec: ``${stack:mrk-role.RoleArn}`` reads each one's own stack."""
    import boto3

    cf = boto3.client("cloudformation", region_name="us-west-2", endpoint_url=moto)
    for who in ("alice", "bob"):
        body = json.dumps(ROLE).replace("ROLE", who)
        cf.create_stack(StackName=f"mrk-{who}-role", TemplateBody=body)

    def aws(service, region):
        return boto3.client(service, region_name=region, endpoint_url=moto)
    for who in ("alice", "bob"):
        fetch = cloudformation_outputs("us-west-2", None, aws=aws, names=StackNames(f"mrk-{who}", "t"),
                                       probe=lambda region, default: [])
        out = resolve_stacks((("mrk-role", "RoleArn"),), {}, "us-west-2", fetch)
        assert out["mrk-role"]["RoleArn"] == f"arn:aws:iam::123456789012:role/{who}"


def test_a_missing_stack_of_yours_says_the_mapping_and_the_way_back(moto):
    """Stacks deployed as ``mrk-role`` before prefixes: the error names both names and `stack prefix mrk`."""
    import boto3

    boto3.client("cloudformation", region_name="us-west-2", endpoint_url=moto).create_stack(
        StackName="mrk-role", TemplateBody=json.dumps(ROLE))
    fetch = cloudformation_outputs(
        "us-west-2", None, names=StackNames("mrk-carol", "from /cfg/config"), probe=lambda region, default: [],
        aws=lambda service, region: boto3.client(service, region_name=region, endpoint_url=moto))
    with pytest.raises(StackNotFoundError) as e:
        fetch("mrk-role")
    assert str(e.value) == (
        "stack 'mrk-carol-role' ('mrk-role' as written: 'mrk-' stands for your stack prefix 'mrk-carol', from "
        "/cfg/config) does not exist in region us-west-2; create it with `mpirun_kit stack deploy mrk-role "
        "--template cfn/...` (it deploys mrk-carol-role), or, for stacks deployed under the names as written, run "
        "`mpirun_kit stack prefix mrk`")


VPC_ARGS = ("--template", "cfn/vpc.yaml", "--param", "AvailabilityZone1=us-west-2a",
            "--param", "AvailabilityZone2=us-west-2b")


def test_stack_commands_use_the_same_names(cli, cf, on_moto, monkeypatch, tmp_path):
    """`stack prefix` sets the prefix; deploy, outputs and delete of ``mrk-role`` then act on PREFIX-role."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("MPIRUN_KIT_CONFIG_DIR", str(tmp_path / "cfg"))
    r = cli("stack", "prefix", "mrk-team2")
    assert r.rc == 0 and r.out.startswith("stack prefix mrk-team2 (from "), r.err
    assert "mrk-vpc is mrk-team2-vpc" in r.out
    r = cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, "--dry-run")
    assert r.rc == 0 and r.out.startswith("stack:        mrk-team2-vpc\n"), r.err
    cf.create_stack(StackName="mrk-team2-role", TemplateBody=json.dumps(ROLE))
    r = cli("stack", "outputs", "mrk-role", "--env")
    assert r.out.strip() == "export MRK_MRK_ROLE_ROLEARN=arn:aws:iam::123456789012:role/ROLE", r.err
    assert "stack mrk-role is mrk-team2-role (stack prefix mrk-team2" in r.err
    r = cli("stack", "delete", "mrk-role", "--yes", "--take-over", "--poll", "0.1", "--timeout", "60")
    assert r.rc == 0 and r.out.strip() == "stack mrk-team2-role: DELETE_COMPLETE", r.err
    cf.create_stack(StackName="mrk-team2-role", TemplateBody=json.dumps(ROLE))
    r = cli("stack", "down", "--stacks", "mrk-role", "--yes", "--poll", "0.1", "--timeout", "60")
    assert r.rc == 0 and r.out.startswith("deleted: mrk-team2-role"), r.err
    r = cli("stack", "prefix", "9")
    assert r.rc == 64 and "stack prefix NEW: stack prefix '9' cannot begin" in r.err


def test_the_first_command_writes_the_users_default(cli, monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("MPIRUN_KIT_CONFIG_DIR", str(tmp_path / "fresh"))
    monkeypatch.setenv("LOGNAME", "dora")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")   # the dry run makes no call
    r = cli("stack", "deploy", "mrk-vpc", *VPC_ARGS, "--dry-run")
    assert r.rc == 0 and r.out.startswith("stack:        mrk-dora-vpc\n"), r.err
    assert f"stack prefix 'mrk-dora' (your stacks are mrk-dora-vpc, mrk-dora-role, ...; 'mrk-' in stack names " \
           f"stands for it), saved in {tmp_path / 'fresh' / 'config'}" in r.err
    assert read_prefix(tmp_path / "fresh" / "config") == "mrk-dora"
