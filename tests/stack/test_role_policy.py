"""The role stack's IAM policies, evaluated: job A reaches its own keys and checkpoints, never job B's.

cfn/sagemaker-role.yaml is rendered for an account, region and partition (``render``: Ref, Fn::Sub with
``${!...}`` kept for IAM, Fn::If on the template's conditions, Fn::GetAtt of the roles), and each request
is decided by principalmapper's local policy simulation (``policy_has_matching_statement``: actions and
resources with wildcards and policy variables such as ``${aws:PrincipalTag/mpirun-kit-job}`` substituted
from the request context, and condition operators): allowed when an Allow statement of the role's
policies matches and no Deny does.  moto is not used: its IAM enforcement ignores conditions and policy
variables.

What this evaluator cannot check (each stays for a real account; docs/threat-model.md lists them):
  - policy variables inside condition *values* (the ListBucket ``s3:prefix`` and the KMS
    ``kms:EncryptionContext:aws:s3:arn`` statements): it compares them literally, so only their deny
    side is shown here, and their text is checked instead;
  - trust policies (who may assume the roles, ``aws:SourceArn``, ``sts:TagSession``) and whether
    SageMaker really chains the session tag (SessionChainingConfig);
  - bucket policies, KMS key policies, SCPs, permission boundaries, session policies;
  - case: it matches resources case-insensitively, AWS matches S3 keys case-sensitively.

principalmapper 1.1.5 imports ``Mapping`` from ``collections`` (moved to collections.abc in Python
3.10); the alias is restored before its import, nothing else of it is changed.
"""
from __future__ import annotations

import collections
import collections.abc
import re
from pathlib import Path

import pytest

for _name in ("Mapping", "MutableMapping"):  # principalmapper 1.1.5 predates Python 3.10
    if not hasattr(collections, _name):
        setattr(collections, _name, getattr(collections.abc, _name))

from principalmapper.querying import local_policy_simulation as lps  # noqa: E402  (setup.cfg [test])
from principalmapper.util.case_insensitive_dict import CaseInsensitiveDict  # noqa: E402

from mpirun_kit.stack import load_template  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ACCOUNT, REGION, BUCKET = "210987654321", "eu-central-1", "team-bucket"
PARAMS = {"BucketName": BUCKET, "VpcId": "vpc-0123", "Prefix": "mpirun-kit", "ImageRepositoryName": "mpirun-kit",
          "KmsKeyArn": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"}
PSEUDO = {"AWS::AccountId": ACCOUNT, "AWS::Region": REGION, "AWS::Partition": "aws", "AWS::URLSuffix": "amazonaws.com",
          "AWS::StackName": "mrk-role"}
TAG = "aws:PrincipalTag/mpirun-kit-job"


def render(value, params, conditions):
    """A template value with Ref, Fn::Sub, Fn::If and Fn::GetAtt (of a role: its ARN) resolved."""
    if isinstance(value, list):
        return [render(v, params, conditions) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (fn, arg), = value.items()
        if fn == "Ref":
            return {**PSEUDO, **params}.get(arg, f"<{arg}>")
        if fn == "Fn::Sub":
            def one(m):
                name = m.group(1)
                if name.startswith("!"):
                    return "${" + name[1:] + "}"   # ${!x}: left for IAM as ${x}
                if "." in name:
                    return f"arn:aws:iam::{ACCOUNT}:role/{name.split('.')[0]}"
                return str({**PSEUDO, **params}[name])
            return re.sub(r"\$\{([^}]+)\}", one, arg)
        if fn == "Fn::If":
            cond, a, b = arg
            return render(a if conditions[cond] else b, params, conditions)
        if fn == "Fn::GetAtt":
            return f"arn:aws:iam::{ACCOUNT}:role/{arg[0]}"
    return {k: render(v, params, conditions) for k, v in value.items()}


def role_policies(params=PARAMS) -> dict[str, list[dict]]:
    """Role logical id -> its policy documents (inline and AWS::IAM::Policy), rendered."""
    t = load_template(str(REPO / "cfn" / "sagemaker-role.yaml"))
    conditions = {"HasKmsKey": bool(params.get("KmsKeyArn"))}
    out: dict[str, list[dict]] = {}
    for lid, res in t.resources.items():
        if res.get("Condition") and not conditions[res["Condition"]]:
            continue
        props = res.get("Properties") or {}
        if res["Type"] == "AWS::IAM::Role":
            out.setdefault(lid, []).extend(render(p["PolicyDocument"], params, conditions)
                                           for p in props.get("Policies") or ())
        elif res["Type"] == "AWS::IAM::Policy":
            for role in props["Roles"]:
                out.setdefault(role["Ref"], []).append(render(props["PolicyDocument"], params, conditions))
    return out


POLICIES = role_policies()


def allowed(role: str, action: str, resource: str, **context: str) -> bool:
    ctx = CaseInsensitiveDict(context)
    docs = POLICIES[role]
    if any(lps.policy_has_matching_statement(d, "Deny", action, resource, ctx) for d in docs):
        return False
    return any(lps.policy_has_matching_statement(d, "Allow", action, resource, ctx) for d in docs)


def obj(key: str) -> str:
    return f"arn:aws:s3:::{BUCKET}/mpirun-kit/{key}"


def job(name: str) -> dict:
    return {TAG: name}


@pytest.mark.parametrize("action", ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"])
def test_job_a_reaches_its_own_checkpoints_and_output_not_job_bs(action):
    a = job("job-a")
    for key in ("jobs/job-a/checkpoints/model_0001000.pth", "jobs/job-a/output/job-a/output/model.tar.gz"):
        assert allowed("ExecutionRole", action, obj(key), **a), key
    for key in ("jobs/job-b/checkpoints/model_0001000.pth", "jobs/job-b/output/model.tar.gz",
                "jobs/job-a-other/checkpoints/x",  # a name that starts like A's is another job
                "jobs/model.pth", "other/job-a/x"):
        assert not allowed("ExecutionRole", action, obj(key), **a), key


def test_job_a_reads_its_own_key_only_and_writes_no_key():
    a = job("job-a")
    assert allowed("ExecutionRole", "s3:GetObject", obj("keys/job-a/job-secret"), **a)
    assert not allowed("ExecutionRole", "s3:GetObject", obj("keys/job-b/job-secret"), **a)
    for action in ("s3:PutObject", "s3:DeleteObject"):  # keys are read-only for the job
        assert not allowed("ExecutionRole", action, obj("keys/job-a/job-secret"), **a)
        assert not allowed("ExecutionRole", action, obj("keys/job-b/job-secret"), **a)


def test_shared_data_is_read_only():
    a = job("job-a")
    assert allowed("ExecutionRole", "s3:GetObject", obj("data/coco/train2017/0001.jpg"), **a)
    assert not allowed("ExecutionRole", "s3:PutObject", obj("data/coco/train2017/0001.jpg"), **a)


def test_a_session_without_the_tag_reaches_no_job():
    """A job created without the submit role's tag: ${aws:PrincipalTag/...} does not resolve, nothing matches."""
    for key in ("keys/job-a/job-secret", "jobs/job-a/checkpoints/x"):
        assert not allowed("ExecutionRole", "s3:GetObject", obj(key))


def test_the_submit_session_creates_and_keys_only_its_own_job():
    a = job("job-a")
    arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/"
    for action in ("sagemaker:CreateTrainingJob", "sagemaker:DescribeTrainingJob", "sagemaker:StopTrainingJob"):
        assert allowed("SubmitRole", action, arn + "job-a", **a)
        assert not allowed("SubmitRole", action, arn + "job-b", **a)
    assert allowed("SubmitRole", "s3:PutObject", obj("keys/job-a/job-secret"), **a)
    assert allowed("SubmitRole", "s3:DeleteObject", obj("keys/job-a/job-secret"), **a)
    assert not allowed("SubmitRole", "s3:PutObject", obj("keys/job-b/job-secret"), **a)
    assert not allowed("SubmitRole", "s3:GetObject", obj("jobs/job-a/checkpoints/x"), **a)
    execution = f"arn:aws:iam::{ACCOUNT}:role/ExecutionRole"
    assert allowed("SubmitRole", "iam:PassRole", execution, **{"iam:PassedToService": "sagemaker.amazonaws.com"})
    assert not allowed("SubmitRole", "iam:PassRole", execution, **{"iam:PassedToService": "ec2.amazonaws.com"})
    assert not allowed("SubmitRole", "iam:PassRole", f"arn:aws:iam::{ACCOUNT}:role/Admin",
                       **{"iam:PassedToService": "sagemaker.amazonaws.com"})


def test_statements_the_evaluator_cannot_decide_name_the_tag():
    """ListBucket's s3:prefix and KMS's encryption context carry the tag in condition values, which the
    evaluator compares literally: here their text is what is checked."""
    text = repr(POLICIES["ExecutionRole"])
    assert f"mpirun-kit/jobs/${{{TAG}}}/*" in text and f"mpirun-kit/keys/${{{TAG}}}/*" in text
    kms = [s for d in POLICIES["ExecutionRole"] for s in d["Statement"] if str(s["Action"]).startswith("kms:")]
    assert len(kms) == 2
    for s in kms:
        arns = s["Condition"]["StringLike"]["kms:EncryptionContext:aws:s3:arn"]
        assert all(f"${{{TAG}}}" in a or a.endswith("/mpirun-kit/data/*") for a in ([arns] if isinstance(arns, str) else arns))
