"""Target ``sagemaker``: a CreateTrainingJob request built from the job, and following it.

Place in the data flow: CompiledJob + a job name (chosen by the caller, never
here) -> ``build_request`` (a pure dict, what ``submit --dry-run`` prints) ->
``run`` calls ``create_training_job`` and, with ``--wait``, follows the status
and the CloudWatch logs until the job ends (``SageMakerChild`` under the one
supervisor, exec/supervisor.py, which can also stop it: StopTrainingJob),
returning an exit code that matches the job's.  Clients and the clock are injected (moto/Stubber in tests).

On every host SageMaker starts the training image, whose entrypoint is
``mpirun_kit entrypoint``: it reads the LaunchSpec from the hyperparameter
``model.LAUNCH_SPEC_HYPERPARAMETER``, elects algo-1 and runs mpirun.
"""
from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..core import verbosity
from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..errors import ClusterError, ExitCode, SpecError
from ..exec.result import exit_code_from_failure
from ..spec.launch_spec import LAUNCH_SPEC_HYPERPARAMETER
from ..spec.compile import JOB_NAME_REF, CompiledJob, checkpoint_path, with_job_name
from ..stack.infra import JOB_TAG, KEY_CHANNEL
from ..redact import redact_value
from .base import DryRun, StatusLine, SubmitOptions, Target
from .outcome import Outcome, outcome_of

#: SageMaker's limit on one hyperparameter value.
HYPERPARAMETER_MAX = 2500
LOG_GROUP = "/aws/sagemaker/TrainingJobs"
#: Regexes over the training module's rank-0 lines (mpirun_kit.maskrcnn.train) and the allreduce bench.
METRIC_DEFINITIONS = (
    {"Name": "train:loss", "Regex": r"step=\d+ loss=([-+0-9.eE]+)"},
    {"Name": "train:lr", "Regex": r"step=\d+ .*?\blr=([-+0-9.eE]+)"},
    {"Name": "train:images_per_s", "Regex": r"images_per_s=([-+0-9.eE]+)"},
    {"Name": "val:bbox_mAP", "Regex": r"bbox_mAP=([0-9.]+)"},
    {"Name": "val:segm_mAP", "Regex": r"segm_mAP=([0-9.]+)"},
    {"Name": "allreduce:busbw_GBps", "Regex": r"busbw_GBps=([0-9.]+)"},
)
#: The master's progress lines (observe/hang.py ``progress_lines``, every ``PROGRESS_LOG_S``): the job's
#: lowest and highest step, then one metric per host (its slowest rank's step).
PROGRESS_METRICS = (
    {"Name": "progress:min_step", "Regex": r"mpirun_kit: progress job min_step=(\d+) "},
    {"Name": "progress:max_step", "Regex": r"mpirun_kit: progress job min_step=\d+ max_step=(\d+)"},
)
#: SageMaker accepts at most this many metric definitions per job.
MAX_METRIC_DEFINITIONS = 40


def metric_definitions(hosts) -> list[dict]:
    """The training metrics, the job's progress, and per-host progress for as many hosts as the limit allows
    (metric names are fixed in the request, so each host needs its own; the first hosts get them)."""
    out = [dict(m) for m in METRIC_DEFINITIONS + PROGRESS_METRICS]
    room = MAX_METRIC_DEFINITIONS - len(out)
    out += [{"Name": f"progress:{h}", "Regex": rf"mpirun_kit: progress host={re.escape(h)} step=(\d+)"}
            for h in list(hosts)[:room]]
    return out
TERMINAL = ("Completed", "Failed", "Stopped")
#: where a job's TensorBoard event files go on every host (SageMaker's default LocalPath); the trainer's
#: ``--tensorboard-dir`` and ``tensorboard_s3`` meet here.
TENSORBOARD_LOCAL_PATH = "/opt/ml/output/tensorboard"


def directory_path(mount_name: str, path: str) -> str:
    """FSx for Lustre DirectoryPath: ``/<MountName>/<path inside the file system>``."""
    inner = "/".join(p for p in path.split("/") if p)
    return f"/{mount_name}" + (f"/{inner}" if inner else "")




def _channel(ch) -> dict:
    if ch.kind == "s3":
        source = {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": ch.s3,
                                   "S3DataDistributionType": "FullyReplicated"}}
    elif ch.kind == "fsx":
        source = {"FileSystemDataSource": {"FileSystemId": ch.fsx_id, "FileSystemType": "FSxLustre",
                                           "FileSystemAccessMode": ch.mode,
                                           "DirectoryPath": directory_path(ch.fsx_mount_name, ch.path)}}
    else:
        source = {"FileSystemDataSource": {"FileSystemId": ch.efs_id, "FileSystemType": "EFS",
                                           "FileSystemAccessMode": ch.mode,
                                           "DirectoryPath": "/" + "/".join(p for p in ch.path.split("/") if p)}}
    return {"ChannelName": ch.name, "DataSource": source, "InputMode": "File"}


def build_request(compiled: CompiledJob, job_name: str) -> dict:
    """The CreateTrainingJob request, as a plain dict.  Pure: the name is an argument.

    ``${job_name}`` in every S3 path (checkpoint, output, TensorBoard, channels) becomes
    ``job_name`` (spec/compile.py ``with_job_name``): each job has its own prefixes, so its
    ``--resume auto`` sees only its own checkpoints and its keys are its own.  The request is checked against every AWS limit
    (mpirun_kit.stack.limits: lengths, counts, patterns, enums, the 28-day runtime).

    Raises:
        SpecError: the serialized LaunchSpec is longer than SageMaker accepts in a
            hyperparameter, or the request breaks any other limit AWS enforces.
    """
    job = with_job_name(compiled.job, job_name)
    sm = job.target.sagemaker
    launch_json = compiled.launch.to_json()
    if len(launch_json) > HYPERPARAMETER_MAX:
        raise SpecError(f"{job.source}: the launch spec is {len(launch_json)} characters as JSON but a SageMaker "
                        f"hyperparameter holds at most {HYPERPARAMETER_MAX}; shorten program.args/env (move long "
                        "settings into a config file on the data channel)")
    req: dict[str, Any] = {
        "TrainingJobName": job_name,
        "RoleArn": sm.role,
        "AlgorithmSpecification": {
            "TrainingImage": job.image,
            "TrainingInputMode": "File",
            "MetricDefinitions": metric_definitions(h.name for h in compiled.hosts),
            "EnableSageMakerMetricsTimeSeries": True,
        },
        "HyperParameters": {LAUNCH_SPEC_HYPERPARAMETER: launch_json},
        # The container's own environment: the tuned NCCL/EFA variables (also carried by the LaunchSpec).
        "Environment": dict(compiled.tuning.env),
        "ResourceConfig": {"InstanceType": job.resources.instance_type, "InstanceCount": len(compiled.hosts),
                           "VolumeSizeInGB": sm.volume_size_gb},
        "OutputDataConfig": {"S3OutputPath": sm.output_s3},
        "StoppingCondition": {"MaxRuntimeInSeconds": sm.max_run_s},
        "EnableManagedSpotTraining": job.spot.enabled,
        # MPI needs every host to reach every other: SageMaker's default, kept explicit.
        "EnableNetworkIsolation": False,
        # Off on purpose (SageMaker's default, kept explicit): it wraps every host-to-host packet in IPsec,
        # which AWS documents as lengthening distributed training, and MPI/NCCL traffic is all of this job's
        # traffic. The traffic stays in the job's private subnet, its security group admits only itself, and
        # ssh between hosts is keyed per job (docs/threat-model.md, "The shared role").
        "EnableInterContainerTrafficEncryption": False,
        "Tags": [{"Key": k, "Value": v} for k, v in sm.tags],
    }
    if job.data:
        req["InputDataConfig"] = [_channel(ch) for ch in job.data]
    if job.spot.enabled:
        req["StoppingCondition"]["MaxWaitTimeInSeconds"] = job.spot.max_wait_s or 2 * sm.max_run_s
    if job.checkpoint.s3:
        req["CheckpointConfig"] = {"S3Uri": job.checkpoint.s3, "LocalPath": checkpoint_path(job)}
    if job.vpc.subnets:
        req["VpcConfig"] = {"Subnets": list(job.vpc.subnets), "SecurityGroupIds": list(job.vpc.security_groups)}
    if job.retries:
        req["RetryStrategy"] = {"MaximumRetryAttempts": job.retries}
    if sm.submit_role:
        # The execution role's session gets the submit session's tag mpirun-kit-job=<name> (run() assumes
        # the submit role with it): the role's S3 and KMS statements reach only this job's prefixes.
        req["SessionChainingConfig"] = {"EnableSessionTagChaining": True}
    if sm.tensorboard_s3:
        # SageMaker uploads what the program writes under LocalPath to S3OutputPath while the job runs.
        req["TensorBoardOutputConfig"] = {"S3OutputPath": sm.tensorboard_s3, "LocalPath": TENSORBOARD_LOCAL_PATH}
    from ..stack.limits import validate_request

    validate_request("sagemaker", "CreateTrainingJob", req, source=job.source)
    return req


@dataclass(frozen=True)
class SageMakerRequest:
    """What ``run`` does for a SageMaker job (the target's typed request, base.Target's ``R``)."""

    region: str | None
    logs: bool                      # follow the job's CloudWatch logs (with --wait)
    submit_role: str | None         # target.sagemaker.submit_role: assumed, tagged with the job's name, to submit
    # The request sent as is (``create_training_job(**CreateTrainingJob)``); the field has the API call's own
    # name so the printed dry run reads as that call.
    CreateTrainingJob: dict


def redact_request(request: dict) -> dict:
    """The request as printed (``plain(SageMakerRequest)``): secret-looking Environment and HyperParameters
    values as ``***``, and no ``submit_role`` when there is none.

    Only those two maps carry user values; everything else (Tags with their "Key",
    KmsKeyId, ...) prints exactly as it is sent.
    """
    out = dict(request)
    if out.get("submit_role") is None:
        out.pop("submit_role", None)
    req = dict(out.get("CreateTrainingJob") or {})
    for field in ("Environment", "HyperParameters"):
        if field in req:
            req[field] = redact_value(req[field])
    out["CreateTrainingJob"] = req
    return out


def dryrun(compiled: CompiledJob, *, job_name: str, generated_name: bool = False) -> DryRun[SageMakerRequest]:
    """The SageMaker submission as a value: printed through ``redact_request`` (only the request's user
    values), with the warnings a generated ``job_name`` brings (``unnamed_job_warnings``)."""
    sm = compiled.job.target.sagemaker
    warnings = tuple(unnamed_job_warnings(compiled, job_name)) if generated_name else ()
    return DryRun("sagemaker", compiled.job.name,
                  SageMakerRequest(region=sm.region, logs=sm.logs, submit_role=sm.submit_role or None,
                                   CreateTrainingJob=build_request(compiled, job_name)),
                  warnings=warnings, redact=redact_request)


def exit_code_for(desc: dict) -> int:
    """A finished training job's description -> the exit code ``submit --wait`` returns."""
    status = desc.get("TrainingJobStatus")
    if status == "Completed":
        return 0
    if status == "Stopped":
        return ExitCode.SIGTERM
    reason = desc.get("FailureReason", "")
    if desc.get("SecondaryStatus") == "MaxRuntimeExceeded" or "MaxRuntimeExceeded" in reason:
        return ExitCode.TIMEOUT
    # Only the failure file's fixed first line is read: the rest quotes the program's own output.
    # A Failed job never maps to 0, whatever that line says.
    code = exit_code_from_failure(reason)
    return code if code else ExitCode.FAILED


def failure_report(reason: str) -> str | None:
    """A FailureReason that is the master's failure report (its first line ours, after SageMaker's
    ``AlgorithmError: ``), as that report; None for the platform's own reasons."""
    if exit_code_from_failure(reason) is None:
        return None
    return re.sub(r"^[A-Za-z]+Error: ", "", reason, count=1)


class LogFollower:
    """Prints new CloudWatch events of every host's stream, prefixed with the stream's host."""

    def __init__(self, logs_client, job_name: str, out):
        self.client, self.job_name, self.out = logs_client, job_name, out
        self.tokens: dict[str, str | None] = {}

    def poll(self) -> int:
        try:
            streams = self.client.describe_log_streams(logGroupName=LOG_GROUP,
                                                       logStreamNamePrefix=self.job_name + "/").get("logStreams", [])
        except self.client.exceptions.ResourceNotFoundException:
            return 0  # the group appears with the first host's output
        printed = 0
        for s in sorted(streams, key=lambda s: s["logStreamName"]):
            name = s["logStreamName"]
            kw = {"nextToken": self.tokens[name]} if self.tokens.get(name) else {"startFromHead": True}
            resp = self.client.get_log_events(logGroupName=LOG_GROUP, logStreamName=name, **kw)
            host = name.split("/", 1)[-1]
            for e in resp.get("events", []):
                self.out.write(f"[{host}] {e['message'].rstrip()}\n")
                printed += 1
            self.tokens[name] = resp.get("nextForwardToken")
        self.out.flush()
        return printed


#: SageMaker's own stop: SIGTERM to every host's container, SIGKILL 120 s later; then the job ends Stopped.
STOP_GRACE_S = 120.0
#: beyond SageMaker's grace: its status reaches Stopped after the hosts are gone and the output uploaded.
STOP_MARGIN_S = 300.0


class SageMakerChild:
    """A SageMaker training job as the one supervisor's ``Child`` (exec/supervisor.py): the supervisor's loop
    follows it, stops it and drains it, as it does a local process, the ssh sessions and a Slurm job.

    ``poll``: DescribeTrainingJob (and every host's new CloudWatch lines); the job's exit code once it is
    Completed, Failed or Stopped (``exit_code_for``), ``DETACHED`` once ``detached()`` says following ends with
    the job left running (the follow deadline).  ``terminate``: StopTrainingJob (SageMaker sends SIGTERM to
    every host, SIGKILL after STOP_GRACE_S, and ends the job as Stopped); its kill deadline is that grace and
    STOP_MARGIN_S.  ``kill``: nothing stronger exists on SageMaker: the stop already asked is repeated.
    ``drain``: the last log lines, the failure reason, the final description into ``final``.
    """

    #: ``poll``'s answer when following ended with the job left running (``detached``).
    DETACHED = -2

    def __init__(self, client, job_name: str, *, logs_client=None, clock: Clock = SYSTEM_CLOCK, out=None,
                 progress: StatusLine | None = None, final: dict | None = None, detached=lambda: False):
        self.client, self.job_name, self.clock = client, job_name, clock
        self.out = out or sys.stdout
        self.progress = progress or StatusLine(clock=clock)
        self.final, self.detached = final, detached
        self.follower = LogFollower(logs_client, job_name, self.out) if logs_client is not None else None
        self.last: dict | None = None          # the job as SageMaker last described it
        self._shown = None
        self.stops = 0                         # StopTrainingJob requests sent

    def poll(self) -> int | None:
        desc = describe(self.client, self.job_name)
        self.last = desc
        state = (desc.get("TrainingJobStatus"), desc.get("SecondaryStatus"))
        if self.follower is not None:
            _poll(self.follower, self.job_name)
        if state != self._shown:
            self.progress.done(f"sagemaker {self.job_name}: {state[0]} / {state[1]}")
            self._shown = state
        if state[0] in TERMINAL:
            return exit_code_for(desc)
        return self.DETACHED if self.detached() else None

    def _stop(self) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.stop_training_job(TrainingJobName=self.job_name)
        except ClientError as exc:
            # A job that ended meanwhile cannot be stopped; the next poll reads its end.
            if exc.response.get("Error", {}).get("Code") != "ValidationException":
                raise ClusterError(f"could not stop training job {self.job_name!r}: "
                                   f"{exc.response.get('Error', {}).get('Message', exc)}") from exc
        self.stops += 1

    def terminate(self, stop) -> float | None:
        self._stop()
        self.progress.done(f"sagemaker {self.job_name}: stopping ({stop.why}): StopTrainingJob sent")
        return STOP_GRACE_S + STOP_MARGIN_S

    def stopping(self) -> float | None:
        return None

    def kill(self) -> None:
        self._stop()

    def drain(self, deadline: Deadline) -> None:
        if self.follower is not None:
            _poll(self.follower, self.job_name)
        desc = self.last or {}
        if desc.get("TrainingJobStatus") in TERMINAL:
            if desc.get("FailureReason"):
                self.progress.done(f"failure reason: {desc['FailureReason']}")
            if self.final is not None:
                self.final.update(desc)

    def wait(self, seconds: float) -> None:
        self.clock.sleep(seconds)


def follow(client, job_name: str, *, logs_client=None, clock: Clock = SYSTEM_CLOCK, out=None,
           poll_s: float = 5.0, timeout_s: float | None = None, progress: StatusLine | None = None,
           final: dict | None = None, level: int = verbosity.VERBOSE,
           requested: Callable[[], Any] | None = None) -> int:
    """Follow a training job to its end under the one supervisor (``SageMakerChild``); return its exit code
    (see ``exit_code_for``).

    Args:
        client: boto3 SageMaker client.
        logs_client: boto3 CloudWatch Logs client; None follows status only.
        timeout_s: give up following after this long (the job keeps running).
        final: if given, filled with the job's last description (its FailureReason is our failure report).
        requested: asked each tick: a ``Stop`` (exec/supervisor.py) stops the job (StopTrainingJob) and
            follows it to its end; None (``submit --wait``): Ctrl-C stops following, never the job.

    Raises:
        ClusterError: the job is unknown, or following timed out.
    """
    from ..exec.supervisor import Phase, Supervisor

    progress = progress or StatusLine(clock=clock, level=level)
    deadline = Deadline(clock, timeout_s)
    child = SageMakerChild(client, job_name, logs_client=logs_client, clock=clock, out=out, progress=progress,
                           final=final, detached=deadline.expired)

    def show(phase: Phase) -> None:
        state = (child.last or {}).get("TrainingJobStatus"), (child.last or {}).get("SecondaryStatus")
        if phase is Phase.RUNNING and state[0] not in TERMINAL:
            progress.update(f"sagemaker {job_name}: {state[0]} / {state[1]} (Ctrl-C stops following, not the job)")

    ended = Supervisor(child, clock=clock, tick_s=poll_s, on_tick=show, requested=requested,
                       grace_s=STOP_GRACE_S + STOP_MARGIN_S, deadline_what="following the job").run()
    if ended.returncode == SageMakerChild.DETACHED:
        raise ClusterError(f"training job {job_name} still {(child.last or {}).get('TrainingJobStatus')} after "
                           f"{timeout_s:g}s of following; it keeps running: `mpirun_kit status {job_name}`, "
                           f"`mpirun_kit stop {job_name}`")
    if ended.returncode is None:   # stopped, and SageMaker never reported its end within the grace
        raise ClusterError(f"training job {job_name}: StopTrainingJob was sent but the job did not end within "
                           f"{STOP_GRACE_S + STOP_MARGIN_S:g}s; `mpirun_kit status {job_name}` shows it")
    return ended.returncode


def _poll(follower: LogFollower, job_name: str) -> None:
    from botocore.exceptions import ClientError

    try:
        follower.poll()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in EXPIRED_CODES:
            raise expired_error(job_name, exc) from exc
        raise


def describe(client, job_name: str) -> dict:
    """describe_training_job with an actionable error for unknown names."""
    from botocore.exceptions import ClientError

    try:
        return client.describe_training_job(TrainingJobName=job_name)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in EXPIRED_CODES:
            raise expired_error(job_name, exc) from exc
        raise ClusterError(f"training job {job_name!r}: {exc.response.get('Error', {}).get('Message', exc)}; check "
                           "the name (`aws sagemaker list-training-jobs`) and the region") from exc


def expired_error(job_name: str, exc: Exception) -> ClusterError:
    """Following a job with credentials that expired: the job is not the problem, and it keeps running."""
    return ClusterError(f"following training job {job_name}: AWS refused the request because the credentials "
                        f"have expired ({exc}); the job keeps running. Renew them (`aws sso login`, or new keys) "
                        f"and follow it again: `mpirun_kit status {job_name}`, `mpirun_kit logs {job_name} "
                        "--follow`")


def make_clients(region: str | None) -> tuple[Any, Any]:
    import boto3

    return boto3.client("sagemaker", region_name=region), boto3.client("logs", region_name=region)


def make_client(service: str, region: str | None, credentials: Any = None) -> Any:
    """A boto3 client; with ``credentials`` (an AssumeRole answer's dict, or botocore credentials such as
    ``submit_credentials``' self-renewing ones), as that role session."""
    import boto3

    if credentials is None or isinstance(credentials, dict):
        kw = {} if credentials is None else {"aws_access_key_id": credentials["AccessKeyId"],
                                             "aws_secret_access_key": credentials["SecretAccessKey"],
                                             "aws_session_token": credentials["SessionToken"]}
        return boto3.client(service, region_name=region, **kw)
    import botocore.session
    from botocore.credentials import CredentialProvider

    class _Given(CredentialProvider):
        METHOD = "mpirun-kit-submit-role"

        def load(self):
            return credentials
    session = botocore.session.Session()
    session.get_component("credential_provider").insert_before("env", _Given())
    return boto3.session.Session(botocore_session=session, region_name=region).client(service)


def _s3_split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len("s3://"):].partition("/")
    return bucket, key


#: a job name the submit role's trust accepts (cfn/sagemaker-role.yaml OwnJobNamesOnly, JobNameAlphabet): the
#: caller's principal tag mpirun-kit-user, ``--``, the rest; lower-case letters, digits and hyphens only.
OWNED_JOB_NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*--[a-z0-9]+(-+[a-z0-9]+)*")


def check_owned_name(job_name: str, role_arn: str) -> None:
    """Refuse, before anything reaches AWS, a job name the submit role's trust refuses.

    Raises:
        SpecError: the name does not read ``<your mpirun-kit-user tag>--<name>`` in lower case.
    """
    if OWNED_JOB_NAME.fullmatch(job_name) is None or len(job_name) > 63:
        raise SpecError(f"job name {job_name!r}: the submit role {role_arn} (target.sagemaker.submit_role) lets "
                        "each person name only jobs that begin with their own IAM principal tag mpirun-kit-user "
                        "and '--', in lower-case letters, digits and hyphens, at most 63 characters: submit with "
                        f"--job-name YOURTAG--{job_name.lower().replace('--', '-')[:40]} (your administrator "
                        "sets the tag on your IAM user or role)")


def submit_session(sts: Any, role_arn: str, job_name: str) -> dict:
    """Credentials of the submit role, tagged ``mpirun-kit-job=<job_name>`` (SageMaker chains the tag into the
    execution role's session: the job reaches only its own prefixes)."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        return sts.assume_role(RoleArn=role_arn, RoleSessionName=job_name[:64], DurationSeconds=3600,
                               Tags=[{"Key": JOB_TAG, "Value": job_name}])["Credentials"]
    except NoCredentialsError as exc:
        # Nothing reached AWS: the roles, image and quota are not the problem.
        raise ClusterError(f"AssumeRole {role_arn} for job {job_name}: no AWS credentials found; set AWS_PROFILE, "
                           "or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run `aws configure`") from exc
    except (BotoCoreError, ClientError) as exc:
        raise ClusterError(f"could not assume the submit role {role_arn} with the session tag {JOB_TAG}={job_name}: "
                           f"{exc}; its trust admits only names that begin with your own IAM principal tag "
                           f"mpirun-kit-user and '--' (is {job_name.split('--')[0]!r} your tag?), and you need "
                           "sts:AssumeRole and sts:TagSession on it (role stack output SubmitRoleArn)") from exc


#: the error codes of a request signed with credentials that have expired.
EXPIRED_CODES = frozenset({"ExpiredToken", "ExpiredTokenException", "RequestExpired"})


def submit_credentials(sts: Any, role_arn: str, job_name: str, *, clock: Clock = SYSTEM_CLOCK) -> Any:
    """The submit role's session (``submit_session``) as botocore credentials that renew themselves.

    A session lasts an hour (``SubmitRole`` MaxSessionDuration; AWS allows no more when your own credentials
    are a role session), a job up to 28 days: before each request in the session's last 15 minutes botocore
    assumes the role again with your own credentials, so ``submit --wait`` follows a 48-hour job and removes
    its secret at the end.  ``clock.time()`` is the time the expiry is compared with.
    """
    from datetime import datetime, timezone

    from botocore.credentials import RefreshableCredentials
    from botocore.utils import parse_timestamp

    def fetch(first: bool = False) -> dict:
        try:
            c = submit_session(sts, role_arn, job_name)
        except ClusterError as exc:
            if first:
                raise
            raise ClusterError(f"could not renew the submit role's session for training job {job_name} ({exc}); "
                               "your own AWS credentials have probably expired. The job keeps running: renew "
                               f"them (`aws sso login`, or new keys) and follow it with `mpirun_kit status "
                               f"{job_name}` / `mpirun_kit logs {job_name} --follow`") from exc
        exp = c["Expiration"]
        return {"access_key": c["AccessKeyId"], "secret_key": c["SecretAccessKey"], "token": c["SessionToken"],
                "expiry_time": exp.isoformat() if hasattr(exp, "isoformat") else str(exp)}
    first = fetch(first=True)
    return RefreshableCredentials(first["access_key"], first["secret_key"], first["token"],
                                  parse_timestamp(first["expiry_time"]), refresh_using=fetch, method="assume-role",
                                  time_fetcher=lambda: datetime.fromtimestamp(clock.time(), timezone.utc))


def key_channel_uri(request: dict) -> str | None:
    """The S3 prefix of the request's key channel (``mpirun-keys``), if it has one."""
    for ch in request.get("InputDataConfig") or ():
        if ch["ChannelName"] == KEY_CHANNEL and "S3DataSource" in ch["DataSource"]:
            return ch["DataSource"]["S3DataSource"]["S3Uri"]
    return None


def put_job_keys(s3: Any, prefix_uri: str, job_name: str) -> str:
    """Make the job's secret and upload it as ``<prefix>/job-secret`` only if no object is there; its URI.

    The put is conditional (``IfNoneMatch='*'``, S3 answers 412 when the key exists): a secret submit did not
    make (one planted under a name before its owner's submit, or left from an earlier job of the same name)
    is never used, and the job is not created.  The object takes the bucket's default encryption.

    Raises:
        ClusterError: an object is already there, or the upload was refused.
    """
    import secrets

    from botocore.exceptions import ClientError

    from ..exec.sshkeys import SECRET_BYTES, SECRET_FILE_NAME, derive_material, format_secret

    bucket, prefix = _s3_split(prefix_uri)
    key = f"{prefix.rstrip('/')}/{SECRET_FILE_NAME}" if prefix else SECRET_FILE_NAME
    uri = f"s3://{bucket}/{key}"
    secret = secrets.token_bytes(SECRET_BYTES)
    derive_material(secret, job_name)  # a name the keys cannot be derived for fails here, not on the hosts
    try:
        s3.put_object(Bucket=bucket, Key=key, Body=format_secret(secret).encode(), IfNoneMatch="*")
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code"))
        if code in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
            raise ClusterError(f"a job secret already exists at {uri} and this submit did not make it: job "
                               f"{job_name} was not created. Someone may have planted it, or an earlier job of "
                               "this name left it: choose another --job-name, or, if it is your own leftover, "
                               f"remove it (`aws s3 rm {uri}`) and submit again") from exc
        raise ClusterError(f"could not upload the job secret to {uri}: {exc}; the submit role (or you) needs "
                           "s3:PutObject on the job's key prefix") from exc
    return uri


def delete_job_keys(s3: Any, uri: str) -> None:
    bucket, key = _s3_split(uri)
    s3.delete_object(Bucket=bucket, Key=key)


def seed_checkpoints(s3: Any, checkpoint_uri: str, job_name: str, other: str) -> tuple[str, int]:
    """Copy job ``other``'s checkpoints into this job's (empty) checkpoint prefix: resuming another job's run
    is explicit (``submit --resume-from``); ``--resume auto`` alone sees only the job's own.  Returns
    (the source prefix, objects copied)."""
    parts = checkpoint_uri[len("s3://"):].split("/")
    if job_name not in parts[1:]:
        raise SpecError(f"--resume-from {other}: checkpoint.s3 ({checkpoint_uri}) does not name the job "
                        f"(${{job_name}}), so every job shares it and there is nothing to copy; give each job its "
                        "own: checkpoint.s3: .../jobs/${job_name}/checkpoints")
    src = "s3://" + "/".join(other if i and p == job_name else p for i, p in enumerate(parts))
    (sb, sk), (db, dk) = _s3_split(src), _s3_split(checkpoint_uri)
    sk, dk = sk.rstrip("/") + "/", dk.rstrip("/") + "/"
    if s3.list_objects_v2(Bucket=db, Prefix=dk, MaxKeys=1).get("KeyCount"):
        # A name already used: copying would overwrite that job's checkpoints and its last_checkpoint.
        raise SpecError(f"--resume-from {other}: s3://{db}/{dk} already holds checkpoints of a job named {job_name}; "
                        "resuming into it would overwrite them. Submit with a new --job-name")
    copied = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=sb, Prefix=sk):
        for obj in page.get("Contents") or ():
            s3.copy_object(Bucket=db, Key=dk + obj["Key"][len(sk):], CopySource={"Bucket": sb, "Key": obj["Key"]})
            copied += 1
    if not copied:
        raise SpecError(f"--resume-from {other}: no checkpoints under {src}; check the job name "
                        "(`aws sagemaker list-training-jobs`)")
    return src, copied


def run(dry: DryRun[SageMakerRequest], *, wait: bool = False, clients: Callable[[str | None], tuple[Any, Any]] = make_clients,
        clock: Clock = SYSTEM_CLOCK, out=None, poll_s: float = 10.0, final: dict | None = None,
        keep_keys: bool = False, resume_from: str | None = None,
        aws: Callable[..., Any] = make_client, level: int = verbosity.VERBOSE) -> int:
    """Create the training job; with ``wait``, follow it and return its exit code (``final``: see ``follow``).

    Before creating it: with ``target.sagemaker.submit_role``, check the name is the caller's
    (``check_owned_name``) and assume that role tagged with it (``aws("sts", region)``; every later call
    runs as that session, renewed before it expires: ``submit_credentials``); with ``resume_from``, copy
    that job's checkpoints into this job's (empty) prefix (as you, ``aws("s3", region)``); with a key
    channel, make the job's secret and put it there only if nothing is (``put_job_keys``).  The secret is
    removed when the job has ended (``wait``), or when creating it failed, unless ``keep_keys``; when
    following stops first, the error says where it stays.
    """
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    out = out or sys.stdout
    req = dry.request.CreateTrainingJob
    name, region = req["TrainingJobName"], dry.request.region
    creds = None
    if dry.request.submit_role:
        check_owned_name(name, dry.request.submit_role)
        creds = submit_credentials(aws("sts", region), dry.request.submit_role, name, clock=clock)
        sm, logs = aws("sagemaker", region, creds), aws("logs", region, creds)
    else:
        sm, logs = clients(region)
    if resume_from:
        src, n = seed_checkpoints(aws("s3", region), req["CheckpointConfig"]["S3Uri"], name, resume_from) \
            if req.get("CheckpointConfig") else (None, 0)
        if src is None:
            raise SpecError(f"--resume-from {resume_from}: the job has no checkpoint.s3 to resume into")
        out.write(f"resuming from {resume_from}: {n} checkpoint object(s) copied from {src}\n")
    keys_uri = None
    if key_channel_uri(req):
        keys_uri = put_job_keys(aws("s3", region, creds), key_channel_uri(req), name)
        out.write(f"job secret made and uploaded to {keys_uri}\n")
    made = keys_uri is not None

    def remove_keys(why: str) -> None:
        if made and not keep_keys:
            try:
                delete_job_keys(aws("s3", region, creds), keys_uri)
            except (BotoCoreError, ClientError, ClusterError) as exc:
                out.write(f"could not remove the job secret {keys_uri} ({exc}); remove it: `aws s3 rm {keys_uri}` "
                          f"(or `mpirun_kit stack sweep-keys`)\n")
                return
            out.write(f"job secret {keys_uri} removed ({why})\n")
    try:
        resp = sm.create_training_job(**req)
    except NoCredentialsError as exc:
        remove_keys("the job was not created")
        # Nothing reached AWS: the role, image and quota are not the problem.
        raise ClusterError(f"CreateTrainingJob {name}: no AWS credentials found; set AWS_PROFILE, "
                           "or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run `aws configure`") from exc
    except (BotoCoreError, ClientError) as exc:
        remove_keys("the job was not created")
        raise ClusterError(f"CreateTrainingJob {name} was refused: {exc}; check the role, image, "
                           "instance quota and region (`mpirun_kit submit --dry-run` shows the request)") from exc
    out.write(f"created {resp.get('TrainingJobArn', name)}\n")
    out.flush()
    if not wait:
        out.write(f"follow it with: mpirun_kit status {name} / mpirun_kit logs {name} --follow\n")
        if made and not keep_keys:
            out.write(f"the job secret stays at {keys_uri} until you remove it after the job: `aws s3 rm "
                      f"{keys_uri}` (submit --wait removes it itself)\n")
        return 0
    stop = req["StoppingCondition"]
    limit = stop.get("MaxWaitTimeInSeconds", stop["MaxRuntimeInSeconds"]) + 3600
    try:
        code = follow(sm, name, logs_client=logs if dry.request.logs else None,
                      clock=clock, out=out, poll_s=poll_s, timeout_s=limit, final=final, level=level)
    except KeyboardInterrupt:
        out.write(f"stopped following; the job keeps running (mpirun_kit stop {name})\n")
        if made and not keep_keys:
            out.write(f"the job secret stays at {keys_uri}: `aws s3 rm {keys_uri}` after the job\n")
        return ExitCode.INTERRUPTED
    except ClusterError as exc:
        # Following stopped (credentials, a deadline), the job did not: its secret is still needed.
        if made and not keep_keys:
            raise ClusterError(f"{exc}. The job secret stays at {keys_uri} while the job runs: remove it after "
                               f"the job (`aws s3 rm {keys_uri}`, or `mpirun_kit stack sweep-keys` for every "
                               "ended job's)") from exc
        raise
    remove_keys("the job has ended")
    return code


def job_name_for(base: str, now: float) -> str:
    """``base-YYYYmmdd-HHMMSS``, cut to SageMaker's 63 characters."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    return f"{base[:63 - len(stamp) - 1]}-{stamp}"


def unnamed_job_warnings(compiled: CompiledJob, generated: str) -> list[str]:
    """A channel other than the key channel that reads ``${job_name}`` needs its data staged for a name known
    before submit: a generated name (a timestamp) has nothing there.  (The key channel's secret ``submit``
    makes itself, for whatever name the job gets.)"""
    src = compiled.job.source or "the job spec"
    return [f"{src}: data channel {ch.name!r} reads {ch.s3}, and no --job-name was given: this job would be "
            f"named {generated}, for which nothing was staged there, so the channel would be empty. Stage it "
            f"under {ch.s3.split(JOB_NAME_REF)[0]}NAME/ and submit with --job-name NAME"
            for ch in compiled.job.data if ch.s3 and JOB_NAME_REF in ch.s3 and ch.name != KEY_CHANNEL]


class SageMakerTarget(Target[SageMakerRequest]):
    name = "sagemaker"
    request_type = SageMakerRequest
    redact = staticmethod(redact_request)

    def choices(self, compiled, opts: SubmitOptions) -> dict:
        return {"job_name": opts.job_name or job_name_for(compiled.job.name, time.time()),
                "generated_name": opts.job_name is None}

    def dryrun(self, compiled, **choices) -> DryRun[SageMakerRequest]:
        return dryrun(compiled, **choices)

    def run(self, dry: DryRun[SageMakerRequest], opts: SubmitOptions = SubmitOptions(), *, started: float | None = None,
            clients: Callable[[str | None], tuple[Any, Any]] = make_clients, poll_s: float = 10.0) -> Outcome:
        started = time.time() if started is None else started
        final: dict = {}
        code = run(dry, wait=opts.wait, clients=clients, poll_s=poll_s, final=final, keep_keys=opts.keep_keys,
                   resume_from=opts.resume_from, level=opts.verbosity)
        name = dry.request.CreateTrainingJob["TrainingJobName"]
        if not opts.wait:
            return Outcome(self.name, dry.job, code, "platform", f"training job {name} created; it runs on SageMaker "
                           f"(mpirun_kit status {name})")
        if code == ExitCode.INTERRUPTED:
            return Outcome(self.name, dry.job, code, "launcher", f"stopped following; training job {name} keeps running")
        return ended_outcome(dry.job, name, code, final, started=started, ended=time.time())

    def error_source(self, exc: BaseException) -> str:
        # AWS refused or was unreachable: the platform decided, not mpirun_kit.
        return "platform" if isinstance(exc, ClusterError) else "launcher"

    # The lifecycle (base.Target; issue #28): the job lives on SageMaker, found by its training job name.
    platform = True

    def handle(self, dry: DryRun[SageMakerRequest]) -> tuple[str | None, dict]:
        return dry.request.CreateTrainingJob["TrainingJobName"], {"region": dry.request.region}

    def describe(self, record, *, clock: Clock = SYSTEM_CLOCK):
        from ..records import JobState
        from .supervised import describe as recorded, status_of

        if record.native is None or record.state.terminal:
            return recorded(record)   # never created (refused before CreateTrainingJob), or its end is recorded
        sm, _ = make_clients(record.details.get("region"))
        desc = describe(sm, record.native)
        status, secondary = desc.get("TrainingJobStatus"), desc.get("SecondaryStatus")
        detail = f"{status} / {secondary}"
        if status not in TERMINAL:
            running = status == "Stopping" or secondary in ("Training", "Uploading", "Stopping")
            return status_of(record, JobState.RUNNING if running else JobState.PENDING, detail=detail)
        out = ended_outcome(record.name, record.native, exit_code_for(desc), desc)
        state = {"Completed": JobState.SUCCEEDED, "Stopped": JobState.CANCELLED}.get(status, JobState.FAILED)
        return status_of(record, state, exit_code=out.exit_code, source=out.source, reason=out.reason,
                       root_cause=out.root_cause, detail=detail)

    def cancel(self, record, *, clock: Clock = SYSTEM_CLOCK):
        """StopTrainingJob: SageMaker sends SIGTERM to every host, then ends the job as Stopped."""
        from botocore.exceptions import ClientError

        now = self.describe(record, clock=clock)
        if now.state.terminal:
            return now
        sm, _ = make_clients(record.details.get("region"))
        try:
            sm.stop_training_job(TrainingJobName=record.native)
        except ClientError as exc:
            raise ClusterError(f"could not stop training job {record.native!r}: "
                               f"{exc.response.get('Error', {}).get('Message', exc)}; `mpirun_kit status "
                               f"{record.job_id}` shows whether it already ended") from exc
        return self.describe(record, clock=clock)

    def logs(self, record, *, rank: int | None = None, follow: bool = False, clock: Clock = SYSTEM_CLOCK,
             poll_s: float = 10.0):
        """Every host's CloudWatch lines behind ``[host]`` (``rank``: that rank's only), until the job ends."""
        from .supervised import rank_filter

        sm, logs_client = make_clients(record.details.get("region"))
        lines = _Lines()
        follower, keep = LogFollower(logs_client, record.native, lines), rank_filter(rank)
        deadline = Deadline(clock, MAX_FOLLOW_S)
        while True:
            ended = not follow or describe(sm, record.native).get("TrainingJobStatus") in TERMINAL
            follower.poll()
            yield from (line for line in lines.take() if keep(line))
            if ended or deadline.expired():
                return
            clock.sleep(poll_s)


#: SageMaker's longest run (28 days) and a day: how long ``logs --follow`` follows at most.
MAX_FOLLOW_S = 29 * 24 * 3600.0


class _Lines:
    """A stream LogFollower writes to, read back as lines."""

    def __init__(self):
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass

    def take(self) -> list[str]:
        *done, self.text = self.text.split("\n")
        return done


def ended_outcome(job: str, name: str, code: int, final: dict, *, started: float | None = None,
                  ended: float | None = None) -> Outcome:
    """How training job ``name`` ended, from its last description ``final`` and its exit code (exit_code_for)."""
    reason = final.get("FailureReason", "")
    report = failure_report(reason)
    platform = {ExitCode.SIGTERM: f"training job {name} was stopped (StopTrainingJob)",
                ExitCode.TIMEOUT: f"training job {name} ran past its MaxRuntimeInSeconds"}.get(code)
    if platform is None and code != 0 and report is None:
        # No report of ours: SageMaker ended the job (capacity, image pull, instance failure...).
        platform = f"training job {name} failed: {redact_value(reason.splitlines()[0]) if reason else 'no reason given'}"
    return outcome_of("sagemaker", job, code, failure_text=report, platform_reason=platform,
                      started=started, ended=ended)


TARGET = SageMakerTarget()
