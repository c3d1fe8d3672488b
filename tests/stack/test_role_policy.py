"""The role stack's IAM policies, evaluated: job A reaches its own keys and checkpoints, never job B's.

cfn/sagemaker-role.yaml is rendered for an account, region and partition (``render``: Ref, Fn::Sub with
``${!...}`` kept for IAM, Fn::If on the template's conditions, Fn::GetAtt of the roles), and each request
is decided by principalmapper's local policy simulation (``policy_has_matching_statement``: actions and
resources with wildcards and policy variables such as ``${aws:PrincipalTag/mpirun-kit-job}`` substituted
from the request context, and condition operators): allowed when an Allow statement of the role's
policies matches and no Deny does.  moto is not used: its IAM enforcement ignores conditions and policy
variables.

The evaluator compares policy variables inside condition *values* literally; ``bind`` substitutes them
from the request context first, as IAM does (a statement whose variable has no value matches nothing), so
the submit role's trust (the job tag must begin with the caller's principal tag ``mpirun-kit-user``) is
decided here.  Trust policies are evaluated as policies: their ``Principal`` is not (the test gives the
context of a principal the trust names).

What this evaluator cannot check (each stays for a real account; docs/threat-model.md lists them):
  - the KMS ``kms:EncryptionContext:aws:s3:arn`` statements: their text is checked instead;
  - who may assume the roles (``Principal``, ``aws:SourceArn``) and whether SageMaker really chains the
    session tag (SessionChainingConfig) as an ``aws:RequestTag`` of the execution role's AssumeRole;
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


def _like(pattern: str, value: str) -> bool:
    """IAM's StringLike: ``*`` and ``?`` are wildcards, every other character literal.  principalmapper 1.1.5
    escapes only ``.``, ``$`` and ``^``, so its ``*+*`` matched every value (``+`` read as a regex quantifier);
    this replaces its comparison, nothing else of it."""
    return re.fullmatch("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern),
                        value, flags=re.DOTALL) is not None


lps._expand_str_and_compare = _like


def trust_policies(params=PARAMS) -> dict[str, dict]:
    """Role logical id -> its trust policy (AssumeRolePolicyDocument), rendered."""
    t = load_template(str(REPO / "cfn" / "sagemaker-role.yaml"))
    conditions = {"HasKmsKey": bool(params.get("KmsKeyArn"))}
    return {lid: render(res["Properties"]["AssumeRolePolicyDocument"], params, conditions)
            for lid, res in t.resources.items() if res["Type"] == "AWS::IAM::Role"}


TRUST = trust_policies()
_VAR = re.compile(r"\$\{([^}]+)\}")


def bind(doc: dict, context: dict) -> dict:
    """``doc`` with the policy variables of its condition values taken from ``context`` (IAM's substitution,
    which the evaluator does not do); a statement with a variable the context lacks is left out (IAM: it
    matches nothing)."""
    out = []
    for st in doc["Statement"]:
        missing = []

        def sub(v):
            if isinstance(v, list):
                return [sub(x) for x in v]
            if not isinstance(v, str):
                return v

            def one(m):
                if m.group(1) not in context:
                    missing.append(m.group(1))
                    return m.group(0)
                return str(context[m.group(1)])
            return _VAR.sub(one, v)
        cond = {op: {k: sub(v) for k, v in kv.items()} for op, kv in (st.get("Condition") or {}).items()}
        if not missing:
            out.append({**st, **({"Condition": cond} if cond else {})})
    return {**doc, "Statement": out}


def decide(docs: list[dict], action: str, resource: str, context: dict) -> bool:
    ctx = CaseInsensitiveDict(context)
    docs = [bind(d, context) for d in docs]
    if any(lps.policy_has_matching_statement(d, "Deny", action, resource, ctx) for d in docs):
        return False
    return any(lps.policy_has_matching_statement(d, "Allow", action, resource, ctx) for d in docs)


def allowed(role: str, action: str, resource: str, **context: str) -> bool:
    ctx = CaseInsensitiveDict(context)
    docs = [bind(d, context) for d in POLICIES[role]]
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


USER = "aws:PrincipalTag/mpirun-kit-user"


def may_assume_submit(user: str | None, job_tag: str) -> bool:
    """Whether a principal of the account with principal tag mpirun-kit-user=``user`` (None: untagged) may
    assume the submit role with the session tag mpirun-kit-job=``job_tag`` (AssumeRole and TagSession)."""
    ctx = {"aws:RequestTag/mpirun-kit-job": job_tag, "aws:TagKeys": ["mpirun-kit-job"]}
    if user is not None:
        ctx[USER] = user
    role = f"arn:aws:iam::{ACCOUNT}:role/SubmitRole"
    return all(decide([TRUST["SubmitRole"]], a, role, ctx) for a in ("sts:AssumeRole", "sts:TagSession"))


def test_a_job_name_belongs_to_the_user_whose_tag_begins_it():
    """Finding 1 (issue 37): the trust accepted any tag value, so anyone could pose as any job."""
    assert may_assume_submit("alice", "alice--maskrcnn-1")
    assert may_assume_submit("team2", "team2--job-b")
    for user, tag in (("alice", "bob--maskrcnn-1"),   # another user's job
                      ("team2", "team2-job-b"),       # no '--': team2-job could be another user's tag
                      ("team2", "team2--"),           # no name after the owner
                      ("alice", "alice"),
                      (None, "alice--maskrcnn-1"),    # a principal without mpirun-kit-user assumes nothing
                      ("", "--maskrcnn-1")):
        assert not may_assume_submit(user, tag), (user, tag)


@pytest.mark.parametrize("tag", ["alice--job-b/checkpoints", "alice--job:b", "alice--job.b", "alice--job_b",
                                 "alice--job b", "alice--Job-b", "alice--job=b", "alice--job+b", "alice--j@b",
                                 "alice--job-"])
def test_tag_values_outside_the_job_name_alphabet_are_refused(tag):
    """A '/' in the tag widened keys/<tag>/ and jobs/<tag>/ to another job's sub-prefix; upper case is not
    what SageMaker's lower-case ARNs name."""
    assert not may_assume_submit("alice", tag)
    ctx = {"aws:RequestTag/mpirun-kit-job": tag, "aws:SourceAccount": ACCOUNT,
           "aws:SourceArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{tag.lower()}"}
    role = f"arn:aws:iam::{ACCOUNT}:role/ExecutionRole"
    assert not decide([TRUST["ExecutionRole"]], "sts:TagSession", role, ctx)
    ok = dict(ctx, **{"aws:RequestTag/mpirun-kit-job": "alice--job-b"})
    assert decide([TRUST["ExecutionRole"]], "sts:TagSession", role, ok)


@pytest.mark.parametrize("action,resource", [
    ("sagemaker:DescribeTrainingJob", f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/bob--job-b"),
    ("sagemaker:StopTrainingJob", f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/bob--job-b"),
    ("sagemaker:CreateTrainingJob", f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/bob--job-b"),
    ("s3:GetObject", obj("keys/bob--job-b/job-secret")),
    ("s3:PutObject", obj("keys/bob--job-b/job-secret")),
    ("s3:DeleteObject", obj("keys/bob--job-b/job-secret")),
    ("logs:GetLogEvents", f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/sagemaker/TrainingJobs:log-stream:"
                          "bob--job-b/algo-1-1700000000"),
])
def test_no_session_alice_may_get_reaches_bobs_job(action, resource):
    """Every tag alice's trust lets her carry (here the ones an attacker would try) is denied on bob's job; her
    own job's request is allowed (the statement is the one that decides)."""
    tries = ["alice--job-b", "alice--bob--job-b", "bob--job-b", "alice--job-b/../bob--job-b", "alice--x"]
    carried = [t for t in tries if may_assume_submit("alice", t)]
    assert carried == ["alice--job-b", "alice--bob--job-b", "alice--x"]
    for tag in carried:
        assert not allowed("SubmitRole", action, resource, **job(tag)), tag
    assert allowed("SubmitRole", action, resource.replace("bob--job-b", "alice--job-b"), **job("alice--job-b"))


@pytest.mark.parametrize("action", ["logs:CreateLogStream", "logs:PutLogEvents"])
def test_a_job_writes_only_its_own_log_streams(action):
    """Issue 37, finding 7: job A's session could create and write streams of job B in the shared group."""
    group = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/sagemaker/TrainingJobs"
    a = job("alice--job-a")
    assert allowed("ExecutionRole", action, f"{group}:log-stream:alice--job-a/algo-1-1700000000", **a)
    for other in ("bob--job-b/algo-1-1700000000", "alice--job-a-other/algo-1", "x"):
        assert not allowed("ExecutionRole", action, f"{group}:log-stream:{other}", **a), other
    assert not allowed("ExecutionRole", action, f"{group}:log-stream:alice--job-a/algo-1")  # no tag, no stream
