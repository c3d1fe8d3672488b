"""stack/aws.py: every CloudFormation error becomes one of ours, naming the call, the stack and what to do.

Real botocore clients: refusals come from botocore's Stubber (the responses AWS gives, no network), the missing
credentials and the unreachable endpoint from a client with none and a closed port on 127.0.0.1.  Whole stack
commands against moto: test_deploy_moto.py.
"""
from __future__ import annotations

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber

from mpirun_kit.errors import ClusterError, SpecError
from mpirun_kit.stack.aws import StackNotFoundError, call


def _client(monkeypatch, **kw):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    return boto3.client("cloudformation", region_name="eu-west-1",
                        config=Config(retries={"total_max_attempts": 1}, connect_timeout=5), **kw)


def test_a_missing_stack_is_the_users_error_naming_the_region_and_the_remedy(monkeypatch):
    cf = _client(monkeypatch)
    with Stubber(cf) as stub:
        stub.add_client_error("describe_stacks", "ValidationError", "Stack with id mrk-vpc does not exist")
        with pytest.raises(StackNotFoundError) as e:
            call(cf, "describe_stacks", "mrk-vpc", StackName="mrk-vpc")
    assert isinstance(e.value, SpecError) and e.value.stack_name == "mrk-vpc"
    assert str(e.value) == ("stack 'mrk-vpc' does not exist in region eu-west-1; check the name with `mpirun_kit "
                            "stack list` or create it with `mpirun_kit stack deploy mrk-vpc --template cfn/...`")


def test_another_refusal_names_the_call_the_stack_and_awss_words(monkeypatch):
    cf = _client(monkeypatch)
    with Stubber(cf) as stub:
        stub.add_client_error("delete_stack", "AccessDenied", "User is not authorized")
        with pytest.raises(ClusterError, match=r"^CloudFormation delete_stack for stack 'mrk-vpc' failed: "
                                               r"AccessDenied: User is not authorized$"):
            call(cf, "delete_stack", "mrk-vpc", StackName="mrk-vpc")
        stub.add_client_error("list_stacks", "Throttling", "Rate exceeded")
        with pytest.raises(ClusterError, match=r"^CloudFormation list_stacks failed: Throttling: Rate exceeded$"):
            call(cf, "list_stacks", "*")                       # account-wide: no stack named


def test_no_credentials_says_where_to_set_them(monkeypatch, tmp_path):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    cf = boto3.session.Session().client("cloudformation", region_name="eu-west-1")
    with pytest.raises(ClusterError, match=r"^CloudFormation list_stacks: no AWS credentials found; set AWS_PROFILE"):
        call(cf, "list_stacks", "*")


def test_an_endpoint_that_cannot_be_reached_says_what_to_check(monkeypatch):
    cf = _client(monkeypatch, endpoint_url="http://127.0.0.1:9")   # the discard port: nothing listens
    with pytest.raises(ClusterError, match=r"^CloudFormation describe_stacks for stack 'mrk-vpc': cannot reach the "
                                           r"endpoint .*; check --endpoint-url / --region and the network$"):
        call(cf, "describe_stacks", "mrk-vpc", StackName="mrk-vpc")
