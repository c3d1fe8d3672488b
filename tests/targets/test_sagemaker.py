"""SageMaker target: the request as a whole value, then against a moto server on 127.0.0.1.

moto is unfaithful in two places, so those tests use botocore's Stubber instead and
say so: describe_training_job drops Environment and always reports Completed (no
InProgress -> Failed sequence), and there is no stop_training_job.
"""
from __future__ import annotations

import io
import json
import re
import time

import boto3
import pytest
from botocore.stub import Stubber

from mpirun_kit.errors import ClusterError, SpecError
from mpirun_kit.exec.result import RankFailure, failure_file_text, job_result
from mpirun_kit.spec.launch_spec import LAUNCH_SPEC_HYPERPARAMETER, LaunchSpec
from mpirun_kit.spec.compile import compile_job
from mpirun_kit.spec.load import load_job_text
from mpirun_kit.targets import sagemaker as T

from .sagemaker_specs import OUTPUTS, SECRET_SPEC, SPEC

from clock_kit import FakeClock


def compiled(text: str = SPEC):
    return compile_job(load_job_text(text, "mrcnn.yaml"), python="python", resolver=OUTPUTS.__getitem__)


def test_request_whole_value():
    c = compiled()
    req = T.build_request(c, "mrcnn-20260101-000000")
    spec = LaunchSpec.from_json(req["HyperParameters"][LAUNCH_SPEC_HYPERPARAMETER])
    assert spec == c.launch
    assert spec.program == ("python", "-m", "mpirun_kit.maskrcnn.train", "--data-dir", "/opt/ml/input/data/coco",
                            "--output-dir", "/opt/ml/checkpoints")
    env = {"FI_EFA_USE_HUGE_PAGE": "0", "NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "^docker,lo,veth"}
    assert dict(spec.env) == env
    assert req == {
        "TrainingJobName": "mrcnn-20260101-000000",
        "RoleArn": "arn:aws:iam::123456789012:role/mrk",
        "AlgorithmSpecification": {"TrainingImage": "1.dkr.ecr.us-west-2.amazonaws.com/mrk:1",
                                   "TrainingInputMode": "File",
                                   "MetricDefinitions": T.metric_definitions(["algo-1", "algo-2"]),
                                   "EnableSageMakerMetricsTimeSeries": True},
        "HyperParameters": {LAUNCH_SPEC_HYPERPARAMETER: c.launch.to_json()},
        "Environment": env,
        "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "VolumeSizeInGB": 100},
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 7200},
        "EnableManagedSpotTraining": True,
        "EnableNetworkIsolation": False,
        "EnableInterContainerTrafficEncryption": False,
        "Tags": [{"Key": "team", "Value": "vision"}],
        "InputDataConfig": [
            {"ChannelName": "coco", "InputMode": "File", "DataSource": {"FileSystemDataSource": {
                "FileSystemId": "fs-0123456789abcdef0", "FileSystemType": "FSxLustre", "FileSystemAccessMode": "ro",
                "DirectoryPath": "/abcd/coco/2017"}}},
            {"ChannelName": "home", "InputMode": "File", "DataSource": {"FileSystemDataSource": {
                "FileSystemId": "fs-0abcdef0123456789", "FileSystemType": "EFS", "FileSystemAccessMode": "rw",
                "DirectoryPath": "/users/a"}}},
            {"ChannelName": "extra", "InputMode": "File", "DataSource": {"S3DataSource": {
                "S3DataType": "S3Prefix", "S3Uri": "s3://bucket/extra", "S3DataDistributionType": "FullyReplicated"}}},
        ],
        "CheckpointConfig": {"S3Uri": "s3://bucket/ckpt", "LocalPath": "/opt/ml/checkpoints"},
        "VpcConfig": {"Subnets": ["subnet-1"], "SecurityGroupIds": ["sg-1"]},
        "RetryStrategy": {"MaximumRetryAttempts": 2},
    }


def test_directory_path():
    assert [T.directory_path("m", p) for p in ("/", "", "/a/b/", "a")] == ["/m", "/m", "/m/a/b", "/m/a"]


def test_unresolved_stack_output_message():
    with pytest.raises(SpecError, match=r"mrcnn.yaml: stack 'mrk-fsx' has no output 'FileSystemId'; its outputs "
                                        r"are Other$"):
        compile_job(load_job_text(SPEC, "mrcnn.yaml"),
                    resolver={"mrk-role": {"RoleArn": "r"}, "mrk-fsx": {"Other": "x"}}.__getitem__)
    with pytest.raises(SpecError, match=r"\$\{stack:mrk-role.RoleArn\} needs the stack's outputs"):
        compile_job(load_job_text(SPEC, "mrcnn.yaml"))


def test_launch_spec_too_long_for_a_hyperparameter():
    long = SPEC.replace("env: {NCCL_DEBUG: INFO}", "env: {NCCL_DEBUG: INFO, BIG: " + "x" * 2600 + "}")
    with pytest.raises(SpecError, match=r"the launch spec is \d+ characters as JSON but a SageMaker hyperparameter "
                                        r"holds at most 2500"):
        T.build_request(compiled(long), "n")


def test_metric_regexes_match_the_training_lines():
    lines = ["[0 algo-1] step=120 loss=0.84 lr=0.02 loss_mask=0.3 images_per_s=31.5 eta_s=100",
             "[0 algo-1] bbox_mAP=0.5120 segm_mAP=0.4700 skipped_images=0",
             "[0 algo-1] allreduce backend=nccl world=16 hosts=2 bytes=1048576 busbw_GBps=41.250"]
    found = {}
    for m in T.METRIC_DEFINITIONS:
        for line in lines:
            hit = re.search(m["Regex"], line)
            if hit:
                found[m["Name"]] = float(hit.group(1))
    assert found == {"train:loss": 0.84, "train:lr": 0.02, "train:images_per_s": 31.5, "val:bbox_mAP": 0.512,
                     "val:segm_mAP": 0.47, "allreduce:busbw_GBps": 41.25}


def test_progress_metrics_read_the_masters_progress_lines():
    """Issue 14 item 6: per-host progress as SageMaker metrics, from the lines the master logs (observe/hang.py)."""
    from mpirun_kit.observe.hang import RankProgress, progress_lines

    hosts = {0: "algo-1", 1: "algo-1", 2: "algo-10", 3: "algo-10"}
    lines = progress_lines({0: RankProgress(12, 0.0), 1: RankProgress(11, 0.0), 2: RankProgress(30, 0.0),
                            3: RankProgress(None, 0.0)}, hosts)
    defs = T.metric_definitions(f"algo-{i}" for i in range(1, 11))
    found = {}
    for m in defs:
        for line in lines:
            hit = re.search(m["Regex"], "[algo-1] " + line)
            if hit:
                assert m["Name"] not in found, (m, line)     # algo-1's regex must not match algo-10's line
                found[m["Name"]] = int(hit.group(1))
    assert found == {"progress:algo-1": 11, "progress:algo-10": 30, "progress:min_step": 11,
                     "progress:max_step": 30}


def test_progress_metrics_stay_within_sagemakers_40_definitions():
    defs = T.metric_definitions(f"algo-{i}" for i in range(1, 257))
    assert len(defs) == 40 and defs[-1]["Name"] == "progress:algo-32"
    req = T.build_request(compiled(SPEC.replace("hosts: 2}", "hosts: 64}")), "n")   # AWS's own limits pass
    assert len(req["AlgorithmSpecification"]["MetricDefinitions"]) == 40


def test_tensorboard_output_config_when_the_spec_asks():
    assert "TensorBoardOutputConfig" not in T.build_request(compiled(), "n")
    text = SPEC.replace("    tags: {team: vision}\n", "    tags: {team: vision}\n    tensorboard_s3: s3://bucket/tb\n")
    req = T.build_request(compiled(text), "n")
    assert req["TensorBoardOutputConfig"] == {"S3OutputPath": "s3://bucket/tb", "LocalPath": "/opt/ml/output/tensorboard"}
    bad = SPEC.replace("    tags: {team: vision}\n", "    tags: {team: vision}\n    tensorboard_s3: /tmp/tb\n")
    with pytest.raises(SpecError, match=r"target\.sagemaker\.tensorboard_s3"):
        compiled(bad)


def moto_clients(url):
    return lambda region: (boto3.client("sagemaker", region_name="us-west-2", endpoint_url=url),
                           boto3.client("logs", region_name="us-west-2", endpoint_url=url))


def test_create_against_moto_and_follow_logs(moto):
    dry = T.dryrun(compiled(), job_name="mrcnn-moto-1")
    out = io.StringIO()
    assert T.run(dry, clients=moto_clients(moto), out=out) == 0
    assert out.getvalue().startswith("created arn:aws:sagemaker:us-west-2:")
    sm, logs = moto_clients(moto)(None)
    desc = sm.describe_training_job(TrainingJobName="mrcnn-moto-1")
    req = dry.request.CreateTrainingJob
    for key in ("RoleArn", "HyperParameters", "InputDataConfig", "OutputDataConfig", "ResourceConfig",
                "StoppingCondition", "VpcConfig", "CheckpointConfig", "EnableManagedSpotTraining"):
        assert desc[key] == req[key], key
    assert desc["AlgorithmSpecification"]["TrainingImage"] == req["AlgorithmSpecification"]["TrainingImage"]
    # CloudWatch logs as SageMaker writes them: one stream per host under the job's name.
    logs.create_log_group(logGroupName=T.LOG_GROUP)
    for host, msg in (("algo-1-1700000000", "[0 algo-1] step=10 loss=1.5"), ("algo-2-1700000000", "worker up")):
        logs.create_log_stream(logGroupName=T.LOG_GROUP, logStreamName=f"mrcnn-moto-1/{host}")
        logs.put_log_events(logGroupName=T.LOG_GROUP, logStreamName=f"mrcnn-moto-1/{host}",
                            # now: CloudWatch (and moto) drop events older than 14 days
                            logEvents=[{"timestamp": int(time.time() * 1000), "message": msg}])
    out = io.StringIO()
    clock = FakeClock()
    assert T.follow(sm, "mrcnn-moto-1", logs_client=logs, clock=clock, out=out,
                    progress=T.StatusLine(stream=io.StringIO(), clock=clock)) == 0
    assert out.getvalue() == ("[algo-1-1700000000] [0 algo-1] step=10 loss=1.5\n"
                              "[algo-2-1700000000] worker up\n")


def test_unknown_job_message(moto):
    sm, _ = moto_clients(moto)(None)
    with pytest.raises(ClusterError, match=r"training job 'nope': .*; check the name"):
        T.describe(sm, "nope")


def stubbed_sagemaker():
    """Stubber: moto cannot produce an InProgress -> Failed sequence or stop a job."""
    client = boto3.client("sagemaker", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    return client, Stubber(client)


def _report(rank: int, host: str, code: int) -> str:
    """The master's failure file for rank ``rank`` exiting ``code``, as SageMaker puts it in FailureReason."""
    return "AlgorithmError: " + failure_file_text(job_result(code, None, (RankFailure(rank, host, code, None, 43201.0),)))


def _desc(status, secondary, reason=None):
    d = {"TrainingJobName": "j", "TrainingJobArn": "arn:aws:sagemaker:us-west-2:1:training-job/j",
         "ModelArtifacts": {"S3ModelArtifacts": "s3://b/o"}, "TrainingJobStatus": status,
         "SecondaryStatus": secondary, "AlgorithmSpecification": {"TrainingInputMode": "File"},
         "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "VolumeSizeInGB": 100},
         "StoppingCondition": {"MaxRuntimeInSeconds": 3600}, "CreationTime": "2026-01-01T00:00:00Z"}
    if reason:
        d["FailureReason"] = reason
    return d


@pytest.mark.parametrize("final,code", [
    (_desc("Failed", "Failed", _report(3, "algo-2", 7)), 7),
    (_desc("Failed", "MaxRuntimeExceeded", "MaxRuntimeExceeded"), 124),
    (_desc("Stopped", "Stopped"), 143),
    (_desc("Failed", "Failed", "ClientError: out of capacity"), 1),
])
def test_follow_maps_the_end_to_an_exit_code(final, code):
    client, stub = stubbed_sagemaker()
    stub.add_response("describe_training_job", _desc("InProgress", "Starting"), {"TrainingJobName": "j"})
    stub.add_response("describe_training_job", _desc("InProgress", "Training"), {"TrainingJobName": "j"})
    stub.add_response("describe_training_job", final, {"TrainingJobName": "j"})
    clock, err = FakeClock(), io.StringIO()
    with stub:
        assert T.follow(client, "j", clock=clock, poll_s=5, progress=T.StatusLine(stream=err, clock=clock)) == code
    stub.assert_no_pending_responses()
    assert clock.sleeps == [5, 5]
    assert "sagemaker j: InProgress / Starting" in err.getvalue()
    assert f"sagemaker j: {final['TrainingJobStatus']} / {final['SecondaryStatus']}" in err.getvalue()


def test_follow_deadline_message():
    client, stub = stubbed_sagemaker()
    for _ in range(3):
        stub.add_response("describe_training_job", _desc("InProgress", "Training"), {"TrainingJobName": "j"})
    clock = FakeClock()
    with stub, pytest.raises(ClusterError, match=r"training job j still InProgress after 10s of following; it keeps "
                                                 r"running: `mpirun_kit status j`, `mpirun_kit stop j`"):
        T.follow(client, "j", clock=clock, poll_s=5, timeout_s=10, progress=T.StatusLine(stream=io.StringIO(), clock=clock))


def test_stop_and_status_commands(monkeypatch, capsys):
    from mpirun_kit.cli.main import main

    client, stub = stubbed_sagemaker()
    # A name the job records do not hold is SageMaker's when SageMaker knows it: one describe first (cli/jobs.py).
    stub.add_response("describe_training_job", _desc("InProgress", "Training"), {"TrainingJobName": "j"})
    stub.add_response("stop_training_job", {}, {"TrainingJobName": "j"})
    stub.add_response("describe_training_job", _desc("Completed", "Completed"), {"TrainingJobName": "j"})
    stub.add_client_error("stop_training_job", "ValidationException", "Job j is already Completed",
                          expected_params={"TrainingJobName": "j"})
    stub.add_response("describe_training_job",
                      _desc("Failed", "Failed", _report(0, "algo-1", 5)),
                      {"TrainingJobName": "j"})
    monkeypatch.setattr(T, "make_clients", lambda region: (client, None))
    with stub:
        assert main(["stop", "j"]) == 0
        assert main(["stop", "j"]) == 69
        assert main(["status", "j", "--json"]) == 5
    out, err = capsys.readouterr()
    assert "stop requested for j" in out
    assert "could not stop training job 'j': Job j is already Completed; `mpirun_kit status j` shows" in err
    assert '"TrainingJobStatus": "Failed"' in out


def test_create_refused_message():
    client, stub = stubbed_sagemaker()
    stub.add_client_error("create_training_job", "ResourceLimitExceeded", "quota for ml.p4d.24xlarge is 0")
    with stub, pytest.raises(ClusterError, match=r"CreateTrainingJob n was refused: .*quota for ml.p4d.24xlarge is 0.*"
                                                 r"check the role, image, instance quota and region"):
        T.run(T.dryrun(compiled(), job_name="n"), clients=lambda r: (client, None), out=io.StringIO())


def test_dry_run_output_redacts_secrets_but_the_request_keeps_them():
    c = compiled(SECRET_SPEC)
    dry = T.dryrun(c, job_name="n")
    assert dry.request.CreateTrainingJob["Environment"]["WANDB_API_KEY"] == "hunter2"
    for text in (dry.render(), dry.to_json()):
        assert "hunter2" not in text
        assert "WANDB_API_KEY" in text and "***" in text


def test_secret_env_on_sagemaker_is_an_error_unless_allowed():
    """Issue 12: SageMaker shows Environment and HyperParameters to anyone who can describe the job."""
    text = SPEC.replace("env: {NCCL_DEBUG: INFO}", "env: {NCCL_DEBUG: INFO, WANDB_API_KEY: hunter2}\n"
                                                   "hyperparameters: {db_password: x, lr: 0.1}")
    with pytest.raises(SpecError) as e:
        compiled(text)
    assert [line.strip() for line in str(e.value).splitlines()[1:]] == [
        f"mrcnn.yaml:{n}: {path}: looks like a secret, and target sagemaker sends env and hyperparameters in plain "
        "text (DescribeTrainingJob and the console show them to anyone allowed to read the job); fetch it at run "
        "time instead (Secrets Manager through the job's role), or list "
        f"{name!r} in target.sagemaker.allow_plaintext_secrets to send it anyway"
        for n, path, name in ((27, "env.WANDB_API_KEY", "WANDB_API_KEY"),
                              (28, "hyperparameters.db_password", "db_password"))]
    assert compiled(SECRET_SPEC).launch.env  # allowed: compiles (and still warns)


def test_secret_env_on_sagemaker_is_warned_about():
    c = compiled(SECRET_SPEC)
    assert c.warnings == ("env WANDB_API_KEY: SageMaker shows hyperparameters and environment in its console and "
                          "API; fetch secrets at run time (Secrets Manager via the instance role) instead",)


@pytest.mark.parametrize("reason,source,cause,text", [
    # the master's failure report, as SageMaker carries it in FailureReason
    (_report(3, "algo-2", 7), "job", {"rank": 3, "host": "algo-2", "exit_code": 7, "signal": None}, "rank 3 on algo-2 exited with code 7"),
    # a job's own exit code 70 is the job's, not the launcher's: only the report can say so
    (_report(0, "algo-1", 70), "job", {"rank": 0, "host": "algo-1", "exit_code": 70, "signal": None}, "rank 0 on algo-1 exited with code 70"),
    # no report of ours: SageMaker itself ended the job
    ("CapacityError: Unable to provision requested ML compute capacity", "platform", None,
     "failed: CapacityError: Unable to provision requested ML compute capacity"),
])
def test_submit_wait_outcome_reads_the_failure_report_from_failure_reason(reason, source, cause, text):
    client, stub = stubbed_sagemaker()
    stub.add_response("create_training_job", {"TrainingJobArn": "arn:aws:sagemaker:us-west-2:1:training-job/n"})
    stub.add_response("describe_training_job", _desc("Failed", "Failed", reason), {"TrainingJobName": "n"})
    with stub:
        outcome = T.TARGET.run(T.dryrun(compiled(), job_name="n"), T.SubmitOptions(wait=True),
                               clients=lambda r: (client, None), poll_s=0)
    assert outcome.exit_code == (T.exit_code_for({"TrainingJobStatus": "Failed", "FailureReason": reason}))
    assert outcome.exit_code != 0
    assert outcome.source == source
    assert outcome.root_cause == cause
    assert text in outcome.reason


def test_a_job_name_channel_without_job_name_is_warned_about(capsys):
    """Data staged for a job name before submit; a generated name (a timestamp) has none (the key channel's
    secret submit makes itself, issue 26).  The dry run
    returns the warning (the target prints nothing); submit prints it on stderr, --json carries it."""
    from mpirun_kit.targets.base import SubmitOptions

    c = compiled(SPEC.replace("s3: s3://bucket/extra", "s3: s3://bucket/keys/${job_name}/"))
    dry = T.TARGET.prepare(c, SubmitOptions())
    name = dry.request.CreateTrainingJob["TrainingJobName"]
    assert dry.warnings == (
        f"mrcnn.yaml: data channel 'extra' reads s3://bucket/keys/${{job_name}}/, and no "
        f"--job-name was given: this job would be named {name}, for which nothing was staged there, so the channel "
        "would be empty. Stage it under s3://bucket/keys/NAME/ and submit with --job-name NAME",)
    assert json.loads(dry.to_json())["warnings"] == list(dry.warnings)
    assert T.TARGET.prepare(c, SubmitOptions(job_name="mrcnn-1")).warnings == ()
    assert T.TARGET.prepare(compiled(), SubmitOptions()).warnings == ()   # no ${job_name} channel: nothing to say
    assert capsys.readouterr().err == ""


def test_submit_prints_the_dry_runs_warnings(tmp_path, capsys):
    from mpirun_kit.cli.main import main

    spec = tmp_path / "mrcnn.yaml"
    spec.write_text(SPEC.replace("s3: s3://bucket/extra", "s3: s3://bucket/keys/${job_name}/"))
    outputs = [a for stack, keys in OUTPUTS.items() for k, v in keys.items() for a in ("--stack-output", f"{stack}.{k}={v}")]
    assert main(["submit", str(spec), "--dry-run", "--json", *outputs]) == 0
    out, err = capsys.readouterr()
    assert "mpirun_kit: warning: " + f"{spec}: data channel 'extra' reads s3://bucket/keys/${{job_name}}/, and no --job-name" in err
    assert json.loads(out)["warnings"][0].startswith(f"{spec}: data channel 'extra'")
    assert main(["submit", str(spec), "--dry-run", "--job-name", "mrcnn-1", *outputs]) == 0
    assert "data channel" not in capsys.readouterr().err


# --- issue 26: keys made by submit, one home per job, the submit role's tag -------------------------------

PER_JOB = (SPEC.replace("s3: s3://bucket/extra", "s3: s3://bucket/mpirun-kit/keys/${job_name}/")
           .replace("  extra:\n", "  mpirun-keys:\n")
           .replace("checkpoint: {s3: s3://bucket/ckpt}", "checkpoint: {s3: 's3://bucket/mpirun-kit/jobs/${job_name}/checkpoints'}")
           .replace("output_s3: s3://bucket/out", "output_s3: s3://bucket/mpirun-kit/jobs/${job_name}/output"))


def moto_aws(url):
    def make(service, region, credentials=None):
        if credentials is not None and not isinstance(credentials, dict):  # submit_credentials' renewing ones
            frozen = credentials.get_frozen_credentials()
            credentials = {"AccessKeyId": frozen.access_key, "SecretAccessKey": frozen.secret_key,
                           "SessionToken": frozen.token}
        kw = {} if credentials is None else {"aws_access_key_id": credentials["AccessKeyId"],
                                             "aws_secret_access_key": credentials["SecretAccessKey"],
                                             "aws_session_token": credentials["SessionToken"]}
        return boto3.client(service, region_name="us-west-2", endpoint_url=url, **kw)
    return make


def _keys(s3, name):
    return [o["Key"] for o in s3.list_objects_v2(Bucket="bucket", Prefix=f"mpirun-kit/keys/{name}/").get("Contents", [])]


def test_submit_makes_the_jobs_keys_under_its_own_prefix_and_removes_them_after(moto):
    """Before issue 26 every multi-host job needed ops/make-job-keys.sh by hand for its exact name first."""
    from mpirun_kit.exec.sshkeys import derive_material, parse_secret

    aws = moto_aws(moto)
    s3 = aws("s3", "us-west-2")
    s3.create_bucket(Bucket="bucket", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    out = io.StringIO()
    dry = T.dryrun(compiled(PER_JOB), job_name="mrcnn-a")
    assert T.run(dry, clients=moto_clients(moto), aws=aws, out=out, keep_keys=True) == 0
    assert "job secret made and uploaded to s3://bucket/mpirun-kit/keys/mrcnn-a/job-secret\n" in out.getvalue()
    (key,) = _keys(s3, "mrcnn-a")
    derive_material(parse_secret(s3.get_object(Bucket="bucket", Key=key)["Body"].read().decode()), "mrcnn-a")
    # --wait: removed once the job has ended (moto's jobs complete at once)
    out = io.StringIO()
    clock = FakeClock()
    dry = T.dryrun(compiled(PER_JOB), job_name="mrcnn-b")
    assert T.run(dry, wait=True, clients=moto_clients(moto), aws=aws, out=out, clock=clock) == 0
    assert "job secret s3://bucket/mpirun-kit/keys/mrcnn-b/job-secret removed (the job has ended)" in out.getvalue()
    assert _keys(s3, "mrcnn-b") == [] and _keys(s3, "mrcnn-a") != []


def test_a_secret_submit_did_not_make_is_refused_and_left_alone(moto):
    """Issue 37, finding 1: an object planted under a job's key prefix before its owner's submit was used as
    "pre-staged"; now the put is conditional (IfNoneMatch, which the moto server enforces) and the job is not
    created."""
    aws = moto_aws(moto)
    s3 = aws("s3", "us-west-2")
    s3.create_bucket(Bucket="bucket", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    s3.put_object(Bucket="bucket", Key="mpirun-kit/keys/mrcnn-p/job-secret", Body=b"planted")
    out = io.StringIO()
    dry = T.dryrun(compiled(PER_JOB), job_name="mrcnn-p")
    with pytest.raises(ClusterError, match=r"a job secret already exists at s3://bucket/mpirun-kit/keys/mrcnn-p/"
                                           r"job-secret and this submit did not make it: job mrcnn-p was not "
                                           r"created\..*choose another --job-name.*aws s3 rm"):
        T.run(dry, wait=True, clients=moto_clients(moto), aws=aws, out=out, clock=FakeClock())
    assert s3.get_object(Bucket="bucket", Key="mpirun-kit/keys/mrcnn-p/job-secret")["Body"].read() == b"planted"
    sm = moto_clients(moto)("us-west-2")[0]
    assert sm.list_training_jobs()["TrainingJobSummaries"] == []


@pytest.mark.parametrize("name", ["mrcnn-t", "Alice--mrcnn", "alice--Mrcnn", "alice-mrcnn", "alice---mrcnn"])
def test_with_a_submit_role_a_name_without_its_owner_is_refused_before_aws(name):
    """Issue 37, findings 1 and 8: the trust admits only <mpirun-kit-user>--<name> in lower case; the refusal
    comes before AssumeRole (no client is made)."""
    text = PER_JOB.replace("    tags: {team: vision}\n", "    tags: {team: vision}\n"
                           "    submit_role: arn:aws:iam::123456789012:role/mrk-submit\n")
    dry = T.dryrun(compiled(text), job_name=name)

    def no_aws(*a, **k):
        raise AssertionError("nothing may reach AWS")
    with pytest.raises(SpecError, match=rf"job name '{re.escape(name)}': the submit role arn:aws:iam::123456789012:"
                                        r"role/mrk-submit .* begin with their own IAM principal tag mpirun-kit-user "
                                        r"and '--'.*--job-name YOURTAG--"):
        T.run(dry, aws=no_aws, clients=no_aws, out=io.StringIO())


def test_keys_are_removed_when_the_job_is_refused():
    """Stubber: moto accepts any CreateTrainingJob; AWS refuses (here a quota), and the secret must not stay."""
    calls = []

    class S3:
        def put_object(self, **kw):
            assert kw["IfNoneMatch"] == "*"
            calls.append(("put", kw["Key"]))

        def delete_object(self, **kw):
            calls.append(("delete", kw["Key"]))

    sm = boto3.client("sagemaker", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x",
                      endpoint_url="http://127.0.0.1:9")
    dry = T.dryrun(compiled(PER_JOB), job_name="mrcnn-r")
    with Stubber(sm) as stub:
        stub.add_client_error("create_training_job", "ResourceLimitExceeded", "quota")
        with pytest.raises(ClusterError):
            T.run(dry, clients=lambda r: (sm, None), aws=lambda *a: S3(), out=io.StringIO())
    assert calls == [("put", "mpirun-kit/keys/mrcnn-r/job-secret"), ("delete", "mpirun-kit/keys/mrcnn-r/job-secret")]


def test_two_jobs_from_one_spec_have_two_homes_and_resume_auto_sees_only_its_own(moto):
    """The checkpoint prefix SageMaker downloads at start is the job's own: the second job starts fresh
    (before issue 26 both jobs had s3://.../maskrcnn/checkpoints, so the second continued the first's run).
    Continuing another job's run is explicit: --resume-from copies its checkpoints in first."""
    aws = moto_aws(moto)
    s3 = aws("s3", "us-west-2")
    s3.create_bucket(Bucket="bucket", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    a, b = (T.dryrun(compiled(PER_JOB), job_name=n).request.CreateTrainingJob for n in ("mrcnn-a", "mrcnn-b"))
    for field in (("CheckpointConfig", "S3Uri"), ("OutputDataConfig", "S3OutputPath")):
        assert a[field[0]][field[1]] != b[field[0]][field[1]]
    assert T.key_channel_uri(a) != T.key_channel_uri(b)
    s3.put_object(Bucket="bucket", Key="mpirun-kit/jobs/mrcnn-a/checkpoints/model_0001000.pth", Body=b"w")

    def sees(req):  # what SageMaker downloads into /opt/ml/checkpoints at start
        bucket, _, prefix = req["CheckpointConfig"]["S3Uri"][5:].partition("/")
        return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "/").get("Contents", [])]
    assert sees(a) == ["mpirun-kit/jobs/mrcnn-a/checkpoints/model_0001000.pth"]
    assert sees(b) == []
    out = io.StringIO()
    dry_c = T.dryrun(compiled(PER_JOB), job_name="mrcnn-c")
    assert T.run(dry_c, clients=moto_clients(moto), aws=aws, out=out, resume_from="mrcnn-a") == 0
    assert ("resuming from mrcnn-a: 1 checkpoint object(s) copied from s3://bucket/mpirun-kit/jobs/mrcnn-a/checkpoints"
            in out.getvalue())
    assert sees(dry_c.request.CreateTrainingJob) == ["mpirun-kit/jobs/mrcnn-c/checkpoints/model_0001000.pth"]
    with pytest.raises(SpecError, match="--resume-from mrcnn-z: no checkpoints under s3://bucket/mpirun-kit/jobs/"
                                        "mrcnn-z/checkpoints"):
        T.run(T.dryrun(compiled(PER_JOB), job_name="mrcnn-d"), clients=moto_clients(moto), aws=aws,
              out=io.StringIO(), resume_from="mrcnn-z")


def test_submit_role_session_is_tagged_with_the_job_name(moto):
    """With target.sagemaker.submit_role: the request asks for tag chaining, and run() creates the job as the
    submit role's session tagged mpirun-kit-job=<name> (moto records AssumeRole; it does not check trust or tags)."""
    aws = moto_aws(moto)
    s3 = aws("s3", "us-west-2")
    s3.create_bucket(Bucket="bucket", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    text = PER_JOB.replace("    tags: {team: vision}\n", "    tags: {team: vision}\n"
                           "    submit_role: arn:aws:iam::123456789012:role/mrk-submit\n")
    seen = []

    def spy(service, region, credentials=None):
        seen.append((service, credentials is not None))
        client = aws(service, region, credentials)
        if service == "sts":
            real = client.assume_role

            def assume_role(**kw):
                seen.append(kw["Tags"])
                return real(**kw)
            client.assume_role = assume_role
        return client
    dry = T.dryrun(compiled(text), job_name="alice--mrcnn-t")
    assert dry.request.CreateTrainingJob["SessionChainingConfig"] == {"EnableSessionTagChaining": True}
    assert T.run(dry, aws=spy, out=io.StringIO(), keep_keys=True) == 0
    assert seen[:2] == [("sts", False), [{"Key": "mpirun-kit-job", "Value": "alice--mrcnn-t"}]]
    assert ("sagemaker", True) in seen and ("s3", True) in seen
    assert "SessionChainingConfig" not in T.dryrun(compiled(PER_JOB), job_name="x").request.CreateTrainingJob


def test_resume_from_into_a_name_that_has_checkpoints_is_refused(moto):
    """Issue 37, finding 8: --resume-from into an existing job's name overwrote that job's last_checkpoint."""
    aws = moto_aws(moto)
    s3 = aws("s3", "us-west-2")
    s3.create_bucket(Bucket="bucket", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    s3.put_object(Bucket="bucket", Key="mpirun-kit/jobs/mrcnn-a/checkpoints/last_checkpoint", Body=b"a")
    s3.put_object(Bucket="bucket", Key="mpirun-kit/jobs/mrcnn-b/checkpoints/last_checkpoint", Body=b"b")
    with pytest.raises(SpecError, match=r"--resume-from mrcnn-a: s3://bucket/mpirun-kit/jobs/mrcnn-b/checkpoints/ "
                                        r"already holds checkpoints of a job named mrcnn-b; resuming into it would "
                                        r"overwrite them\. Submit with a new --job-name"):
        T.run(T.dryrun(compiled(PER_JOB), job_name="mrcnn-b"), clients=moto_clients(moto), aws=aws,
              out=io.StringIO(), resume_from="mrcnn-a")
    assert s3.get_object(Bucket="bucket", Key="mpirun-kit/jobs/mrcnn-b/checkpoints/last_checkpoint")["Body"].read() == b"b"
