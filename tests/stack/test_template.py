"""Local template and parameter checks: every problem is a SpecError naming the value and the fix."""
from __future__ import annotations

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.stack.template import (NO_VALUE, UNKNOWN, check_parameters, evaluate, load_template,
                                       parse_template, rule_violations)

VPC = "cfn/vpc.yaml"
FSX = "cfn/fsx.yaml"
AZS = {"AvailabilityZone1": "us-west-2a", "AvailabilityZone2": "us-west-2b"}

SMALL = """\
Parameters:
  Size:
    Type: Number
    MinValue: 1
    MaxValue: 8
  Name:
    Type: String
    Default: abc
    MinLength: 2
    MaxLength: 4
  Secret:
    Type: String
    Default: x
    NoEcho: true
    AllowedValues: [x, y]
  Zones:
    Type: CommaDelimitedList
    Default: a,b
    AllowedValues: [a, b, c]
Resources:
  Topic:
    Type: AWS::SNS::Topic
"""


@pytest.fixture
def small():
    return parse_template("small.yaml", SMALL)


def test_unknown_template_path_lists_the_templates_there():
    with pytest.raises(SpecError) as e:
        load_template("cfn/vcp.yaml")
    assert str(e.value) == ("template cfn/vcp.yaml: no such file; templates in cfn/: "
                            "efs.yaml, fsx.yaml, sagemaker-role.yaml, vpc.yaml")


def test_unknown_template_in_missing_folder_points_at_cfn():
    with pytest.raises(SpecError, match=r"template nowhere/x.yaml: no such file; the templates are in cfn/ \(vpc.yaml"):
        load_template("nowhere/x.yaml")


def test_unparsable_template_names_its_line():
    # the unclosed [ is reported where the input ends: line 3
    with pytest.raises(SpecError, match=r"^bad.yaml:3: not a readable CloudFormation template \(.*\); expected YAML"):
        parse_template("bad.yaml", "Resources:\n  A: [\n")


def test_template_without_resources():
    with pytest.raises(SpecError, match="^x.yaml: no Resources section; a CloudFormation template needs at least one"):
        parse_template("x.yaml", "Parameters: {}\n")


def test_template_too_big_for_inline_body(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("Resources:\n  T: {Type: AWS::SNS::Topic}\n" + "# padding\n" * 6000)
    with pytest.raises(SpecError, match=r"big.yaml: 60\d\d\d bytes, over CloudFormation's 51200-byte limit .*; split it"):
        load_template(str(big))


def test_parameters_parsed_as_cloudformation_strings():
    t = load_template(FSX)
    cap = t.parameter("StorageCapacity")
    assert (cap.type, cap.default, cap.min_value) == ("Number", "1200", 1200)
    assert t.parameter("Nope") is None


def test_missing_required_parameter():
    t = load_template(VPC)
    with pytest.raises(SpecError) as e:
        check_parameters(t, {"AvailabilityZone1": "us-west-2a"})
    assert str(e.value) == (
        "cfn/vpc.yaml: invalid parameters:\n"
        "  missing required parameter AvailabilityZone2 (Availability zone of private subnet 2; must differ "
        "from zone 1.); pass --param AvailabilityZone2=VALUE")


def test_unknown_parameter_lists_known_ones(small):
    with pytest.raises(SpecError) as e:
        check_parameters(small, {"Size": "2", "Colour": "red"})
    assert str(e.value) == ("small.yaml: invalid parameters:\n"
                            "  unknown parameter 'Colour'; small.yaml has: Name, Secret, Size, Zones")


def test_allowed_values_and_pattern_violations_all_reported_at_once():
    t = load_template(FSX)
    with pytest.raises(SpecError) as e:
        check_parameters(t, {"SubnetId": "subnet-XYZ", "SecurityGroupId": "sg-0a", "DeploymentType": "SCRATCH_3"})
    assert str(e.value).splitlines() == [
        "cfn/fsx.yaml: invalid parameters:",
        "  parameter SubnetId='subnet-XYZ' does not match AllowedPattern ^subnet-[0-9a-f]+$ "
        "(a subnet id such as subnet-0123456789abcdef0)",
        "  parameter DeploymentType='SCRATCH_3' is not allowed; expected one of: 'SCRATCH_2', 'PERSISTENT_2'",
    ]


def test_number_checks(small):
    with pytest.raises(SpecError) as e:
        check_parameters(small, {"Size": "many"})
    assert "parameter Size='many' is not a number; expected Number" in str(e.value)
    with pytest.raises(SpecError, match=r"parameter Size='9' is above MaxValue 8"):
        check_parameters(small, {"Size": "9"})
    with pytest.raises(SpecError, match=r"parameter Size='0' is below MinValue 1"):
        check_parameters(small, {"Size": "0"})


def test_length_checks(small):
    with pytest.raises(SpecError, match=r"parameter Name='abcde' is longer than MaxLength 4"):
        check_parameters(small, {"Size": "1", "Name": "abcde"})
    with pytest.raises(SpecError, match=r"parameter Name='a' is shorter than MinLength 2"):
        check_parameters(small, {"Size": "1", "Name": "a"})


def test_no_echo_value_is_never_shown(small):
    with pytest.raises(SpecError) as e:
        check_parameters(small, {"Size": "1", "Secret": "hunter2"})
    assert "parameter Secret=**** is not allowed" in str(e.value)
    assert "hunter2" not in str(e.value)


def test_list_parameter_checked_per_item(small):
    assert check_parameters(small, {"Size": "1", "Zones": "a,c"})["Zones"] == ["a", "c"]
    with pytest.raises(SpecError, match=r"parameter Zones='a,d' is not allowed; expected one of: 'a', 'b', 'c'"):
        check_parameters(small, {"Size": "1", "Zones": "a,d"})


def test_effective_values_are_given_plus_defaults(small):
    assert check_parameters(small, {"Size": "3"}) == {"Size": "3", "Name": "abc", "Secret": "x", "Zones": ["a", "b"]}


def test_template_rules_checked_locally():
    """fsx.yaml's Rules refuse throughput on SCRATCH_2 before CloudFormation would."""
    t = load_template(FSX)
    base = {"SubnetId": "subnet-0a", "SecurityGroupId": "sg-0a"}
    with pytest.raises(SpecError) as e:
        check_parameters(t, {**base, "PerUnitStorageThroughput": "250"})
    assert str(e.value) == (
        "cfn/fsx.yaml: invalid parameters:\n  rule ScratchThroughputIsFixed: SCRATCH_2 has a fixed throughput; "
        "leave PerUnitStorageThroughput empty (or use DeploymentType=PERSISTENT_2)")
    with pytest.raises(SpecError, match="rule PersistentNeedsThroughput: PERSISTENT_2 needs PerUnitStorageThroughput"):
        check_parameters(t, {**base, "DeploymentType": "PERSISTENT_2"})
    assert check_parameters(t, {**base, "DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": "500"})


def test_vpc_rule_distinct_zones():
    t = load_template(VPC)
    with pytest.raises(SpecError, match="rule DistinctZones: AvailabilityZone1 and AvailabilityZone2 must be different"):
        check_parameters(t, {"AvailabilityZone1": "us-west-2a", "AvailabilityZone2": "us-west-2a"})


def test_rules_using_unknown_values_are_left_to_cloudformation():
    t = parse_template("r.yaml", """\
Parameters: {A: {Type: String, Default: x}}
Rules:
  R:
    Assertions:
      - Assert: !Equals [!Ref AWS::Region, us-east-1]
        AssertDescription: only us-east-1
Resources: {T: {Type: AWS::SNS::Topic}}
""")
    assert rule_violations(t, {"A": "x"}) == []


def test_evaluator():
    conds = {"P": {"Fn::Equals": [{"Ref": "Kind"}, "PERSISTENT_2"]}}
    node = {"A": {"Fn::If": ["P", 1, {"Ref": "AWS::NoValue"}]}, "B": {"Fn::GetAtt": ["X", "Y"]},
            "C": [{"Ref": "AWS::NoValue"}, "kept"], "D": {"Fn::And": [{"Condition": "P"}, True]}}
    assert evaluate(node, {"Kind": "PERSISTENT_2"}, conds) == {"A": 1, "B": UNKNOWN, "C": ["kept"], "D": True}
    assert evaluate(node, {"Kind": "SCRATCH_2"}, conds) == {"B": UNKNOWN, "C": ["kept"], "D": False}
    assert evaluate({"Fn::If": ["P", 1, 2]}, {}, conds) is UNKNOWN
    assert evaluate({"Ref": "AWS::NoValue"}, {}, {}) is NO_VALUE
    assert evaluate({"Fn::Or": [{"Fn::Equals": [{"Ref": "Q"}, "a"]}, {"Fn::Equals": ["a", "a"]}]}, {}, {}) is True
