"""The deploy plan is a pure value: built from a template and --param values, compared whole."""
from __future__ import annotations

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.stack import DeployRequest, load_template, make_deploy_request, parse_param_args
from mpirun_kit.stack.request import required_capabilities
from mpirun_kit.stack.template import parse_template

AZS = {"AvailabilityZone1": "us-west-2a", "AvailabilityZone2": "us-west-2b"}
VPC_PARAMS = ("AvailabilityZone1", "AvailabilityZone2", "AvailabilityZone3", "VpcCidr", "PrivateSubnet1Cidr",
              "PrivateSubnet2Cidr", "PrivateSubnet3Cidr", "PublicSubnetCidr", "PublicSubnet2Cidr", "PublicSubnet3Cidr",
              "CreateNatGateway", "NatGatewayPerZone")


def test_vpc_request_value():
    t = load_template("cfn/vpc.yaml")
    req = make_deploy_request("mrk-vpc", t, {**AZS, "CreateNatGateway": "false"}, "mrk-1")
    assert req == DeployRequest(
        stack_name="mrk-vpc", template_path="cfn/vpc.yaml", change_set_name="mrk-1",
        parameters=(("AvailabilityZone1", "us-west-2a"), ("AvailabilityZone2", "us-west-2b"),
                    ("CreateNatGateway", "false")),
        template_parameters=VPC_PARAMS, capabilities=(), no_echo=frozenset(), template_body=t.body)


def test_render_is_the_dry_run_text():
    t = load_template("cfn/vpc.yaml")
    req = make_deploy_request("mrk-vpc", t, AZS, "mrk-1")
    assert req.render().splitlines()[:8] == [
        "stack:        mrk-vpc",
        "template:     cfn/vpc.yaml",
        "change set:   mrk-1 (CREATE if the stack does not exist, else UPDATE)",
        "capabilities: (none)",
        "termination protection: unchanged",
        "parameters:",
        "  AvailabilityZone1 = us-west-2a",
        "  AvailabilityZone2 = us-west-2b",
    ]
    assert "  CreateNatGateway: default on create, current value on update" in req.render().splitlines()


def test_api_parameters_create_vs_update():
    req = make_deploy_request("mrk-vpc", load_template("cfn/vpc.yaml"), AZS, "mrk-1")
    given = [{"ParameterKey": "AvailabilityZone1", "ParameterValue": "us-west-2a"},
             {"ParameterKey": "AvailabilityZone2", "ParameterValue": "us-west-2b"}]
    assert req.api_parameters(None) == given
    # On update a parameter the user did not give keeps its current value, never the default.
    assert req.api_parameters({"AvailabilityZone1": "x", "CreateNatGateway": "false", "Gone": "y"}) == [
        *given, {"ParameterKey": "CreateNatGateway", "UsePreviousValue": True}]


def test_role_template_needs_capability_iam():
    assert required_capabilities(load_template("cfn/sagemaker-role.yaml")) == ("CAPABILITY_IAM",)


def test_named_iam_and_transform_capabilities():
    t = parse_template("t.yaml", "Transform: AWS::Serverless-2016-10-31\nResources:\n"
                       "  R: {Type: AWS::IAM::Role, Properties: {RoleName: fixed, AssumeRolePolicyDocument: {}}}\n")
    assert required_capabilities(t) == ("CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND")


def test_no_echo_masked_in_render():
    t = parse_template("t.yaml", "Parameters: {Token: {Type: String, NoEcho: true}}\n"
                       "Resources: {T: {Type: AWS::SNS::Topic}}\n")
    req = make_deploy_request("s", t, {"Token": "hunter2"}, "c")
    assert "  Token = ****" in req.render().splitlines()
    assert "hunter2" not in req.render()


@pytest.mark.parametrize("name", ["1vpc", "my_vpc", "", "a" * 129])
def test_bad_stack_name(name):
    with pytest.raises(SpecError) as e:
        make_deploy_request(name, load_template("cfn/vpc.yaml"), AZS, "c")
    assert str(e.value) == (f"stack name {name!r} is not valid; expected a letter, then letters, digits or "
                            "hyphens, at most 128 characters (e.g. mrk-vpc)")


def test_bad_change_set_name():
    with pytest.raises(SpecError, match=r"change set name 'cs_1' is not valid; expected a letter"):
        make_deploy_request("s", load_template("cfn/vpc.yaml"), AZS, "cs_1")


def test_template_rules_checked_for_the_given_values():
    t = load_template("tests/cfn/bad/fsx-param-driven.yaml")
    assert make_deploy_request("s", t, {}, "c").parameters == ()
    with pytest.raises(SpecError) as e:
        make_deploy_request("s", t, {"DeploymentType": "PERSISTENT_2"}, "c")
    assert str(e.value) == (
        "tests/cfn/bad/fsx-param-driven.yaml: breaks mpirun_kit's template rules with these parameters:\n"
        "  FSX_S3_LINK Lustre: PERSISTENT_2 does not support ImportPath; link S3 with an "
        "AWS::FSx::DataRepositoryAssociation instead (or use SCRATCH_2)")


def test_parse_param_args():
    assert parse_param_args(["A=1", "B=x=y", "C=a,b", "D="]) == {"A": "1", "B": "x=y", "C": "a,b", "D": ""}


@pytest.mark.parametrize("item", ["A", "=1"])
def test_parse_param_args_needs_key_value(item):
    with pytest.raises(SpecError) as e:
        parse_param_args([item])
    assert str(e.value) == f"--param {item!r}: expected KEY=VALUE (e.g. --param CreateNatGateway=false)"


def test_parse_param_args_twice():
    with pytest.raises(SpecError, match=r"--param A given twice \('1' and '2'\); give it once"):
        parse_param_args(["A=1", "A=2"])


def test_parameter_value_over_cloudformation_limit_is_refused_locally():
    """CloudFormation refuses a parameter value over 4096 bytes; botocore's validator does not."""
    t = parse_template("t.yaml", "Parameters:\n  Note: {Type: String}\nResources:\n  T: {Type: AWS::SNS::Topic}\n")
    with pytest.raises(SpecError) as e:
        make_deploy_request("s", t, {"Note": "n" * 4097}, "c")
    assert str(e.value) == ("t.yaml: the CreateChangeSet request breaks AWS's limits (1 problem(s)); AWS would refuse "
                            "it:\n  Parameters[0].ParameterValue: 4097 bytes, over CloudFormation's 4096-byte parameter "
                            "value limit")
