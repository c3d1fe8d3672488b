"""``submit --wait`` follows a 48-hour job with a submit-role session that lasts one hour (issue 37, finding 2).

A stub AWS, said so: moto's sessions never expire and its training jobs end at once, so neither the
expiry nor a long job can happen there.  The stub's STS issues sessions that expire ``DurationSeconds``
after the injected clock's now; its SageMaker and S3 answer ``ExpiredTokenException`` (as AWS does) to a
request whose credentials have expired, reading them as botocore's signer does
(``get_frozen_credentials``, which renews self-renewing credentials); the job runs 48 hours of the
injected clock.
"""
from __future__ import annotations

import datetime as dt
import io

import pytest
from botocore.exceptions import ClientError

from mpirun_kit.errors import ClusterError
from mpirun_kit.targets import sagemaker as T

from clock_kit import FakeClock

from .test_sagemaker import PER_JOB, compiled

ROLE = "arn:aws:iam::123456789012:role/mrk-submit"
JOB_S = 48 * 3600.0
SUBMIT = (PER_JOB.replace("    tags: {team: vision}\n", f"    tags: {{team: vision}}\n    submit_role: {ROLE}\n")
          .replace("max_run_s: 3600", "max_run_s: 172800"))   # jobs/maskrcnn.yaml's 48 hours


class StubAWS:
    """STS, SageMaker, S3 and Logs of one account, on ``clock``; ``own_expires``: when the caller's own
    credentials expire (AssumeRole answers ExpiredToken from then on), None for never."""

    def __init__(self, clock, own_expires=None):
        self.clock, self.own_expires = clock, own_expires
        self.expiry: dict[str, float] = {}       # session token -> when it expires
        self.assumed = 0
        self.objects: dict[str, bytes] = {}
        self.started = None

    def _expired(self, op):
        raise ClientError({"Error": {"Code": "ExpiredTokenException",
                                     "Message": "The security token included in the request is expired"}}, op)

    def _check(self, credentials, op):
        if credentials is None:
            return
        token = (credentials["SessionToken"] if isinstance(credentials, dict)
                 else credentials.get_frozen_credentials().token)
        if self.clock.time() >= self.expiry[token]:
            self._expired(op)

    def __call__(self, service, region, credentials=None):
        aws = self

        class Client:
            def assume_role(self, **kw):
                if aws.own_expires is not None and aws.clock.time() >= aws.own_expires:
                    aws._expired("AssumeRole")
                aws.assumed += 1
                token = f"token-{aws.assumed}"
                aws.expiry[token] = aws.clock.time() + kw["DurationSeconds"]
                return {"Credentials": {"AccessKeyId": "AK", "SecretAccessKey": "SK", "SessionToken": token,
                                        "Expiration": dt.datetime.fromtimestamp(aws.expiry[token], dt.timezone.utc)}}

            def create_training_job(self, **kw):
                aws._check(credentials, "CreateTrainingJob")
                aws.started = aws.clock.time()
                return {"TrainingJobArn": f"arn:aws:sagemaker:us-west-2:123456789012:training-job/{kw['TrainingJobName']}"}

            def describe_training_job(self, **kw):
                aws._check(credentials, "DescribeTrainingJob")
                done = aws.clock.time() - aws.started >= JOB_S
                return {"TrainingJobStatus": "Completed" if done else "InProgress",
                        "SecondaryStatus": "Completed" if done else "Training"}

            def put_object(self, **kw):
                aws._check(credentials, "PutObject")
                assert kw["IfNoneMatch"] == "*" and kw["Key"] not in aws.objects
                aws.objects[kw["Key"]] = kw["Body"]

            def delete_object(self, **kw):
                aws._check(credentials, "DeleteObject")
                aws.objects.pop(kw["Key"], None)

            def describe_log_streams(self, **kw):
                aws._check(credentials, "DescribeLogStreams")
                return {"logStreams": []}

        return Client()


def test_wait_follows_a_48_hour_job_and_removes_its_secret():
    """Before: the one-hour session expired, every DescribeTrainingJob answered ExpiredTokenException, and
    --wait exited saying to check the job's name, with the secret left in S3."""
    clock = FakeClock()
    aws = StubAWS(clock)
    out = io.StringIO()
    dry = T.dryrun(compiled(SUBMIT), job_name="alice--mrcnn-long")
    assert T.run(dry, wait=True, aws=aws, out=out, clock=clock, poll_s=600) == 0
    assert "job secret s3://bucket/mpirun-kit/keys/alice--mrcnn-long/job-secret removed (the job has ended)" \
        in out.getvalue()
    assert aws.objects == {}
    assert clock.time() - aws.started >= JOB_S
    # renewed about every 45 minutes (botocore renews in a session's last 15), not on every request
    assert 48 <= aws.assumed <= 2 * 48 + 2


def test_credentials_that_cannot_be_renewed_say_so_and_where_the_secret_stays():
    """The caller's own credentials expire at hour 5: no renewal; the error says the job keeps running, how
    to follow it again and where its secret stays (it is still needed), not 'check the name'."""
    clock = FakeClock()
    aws = StubAWS(clock, own_expires=clock.time() + 5 * 3600)
    dry = T.dryrun(compiled(SUBMIT), job_name="alice--mrcnn-long")
    with pytest.raises(ClusterError) as err:
        T.run(dry, wait=True, aws=aws, out=io.StringIO(), clock=clock, poll_s=600)
    text = str(err.value)
    assert "could not renew the submit role's session for training job alice--mrcnn-long" in text
    assert "The job keeps running: renew them (`aws sso login`, or new keys) and follow it with " \
           "`mpirun_kit status alice--mrcnn-long`" in text
    assert "The job secret stays at s3://bucket/mpirun-kit/keys/alice--mrcnn-long/job-secret while the job " \
           "runs: remove it after the job" in text
    assert "check the name" not in text
    assert list(aws.objects) == ["mpirun-kit/keys/alice--mrcnn-long/job-secret"]


def test_an_expired_token_while_following_is_named_as_such():
    """ExpiredTokenException from DescribeTrainingJob (credentials that do not renew): the message names the
    expiry and the way to follow again, not the job's name."""
    clock = FakeClock()
    aws = StubAWS(clock)
    creds = aws("sts", None).assume_role(DurationSeconds=3600)["Credentials"]
    aws.started = clock.time()
    sm = aws("sagemaker", None, creds)
    clock.advance(3601)
    with pytest.raises(ClusterError, match=r"following training job alice--x: AWS refused the request because the "
                                           r"credentials have expired .*; the job keeps running\. Renew them"):
        T.follow(sm, "alice--x", clock=clock, out=io.StringIO())
