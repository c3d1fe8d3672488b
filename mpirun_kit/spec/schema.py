"""The job spec: frozen dataclasses (``JobSpec``) and the JSON Schema they are checked against.

Place in the data flow: ``load.py`` parses YAML, checks it against ``JOB_SCHEMA``
(with file/line/key-path messages) and builds a ``JobSpec``; ``compile.py`` turns
a JobSpec plus a target into a ``model.LaunchSpec`` and target settings.

Defaults live here only: in the dataclasses, and mirrored in the schema's
``default`` annotations for editors.  ``JOB_SCHEMA`` is published as
``job.schema.json`` next to this file (``python -m mpirun_kit.cli.schema``
rewrites it; a test keeps the two identical) so editors can validate specs::

    # yaml-language-server: $schema=../mpirun_kit/spec/job.schema.json

String values anywhere may reference CloudFormation stack outputs as
``${stack:STACK.OutputKey}``; they are resolved at plan time (compile.py), so
the schema only checks them as strings.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

# The LaunchSpec's schema and the fast check live apart so that an entrypoint checks its spec without
# building the job spec's dataclasses and schema (~7 ms of CPU per host on the launch path).
from .launch_schema import _NAME, _SECONDS, _STR, _STRLIST, _obj

API_VERSION = "mpirun_kit/v1"

#: the references a spec's strings may hold (``${data:NAME}``, ``${stack:STACK.Key}``, ...): checked in
#: checks.py, resolved per target in compile.py.
MACRO_RE = re.compile(r"\$\{([^}]*)\}")
STACK_RE = re.compile(r"^stack:([A-Za-z][A-Za-z0-9-]*)\.([A-Za-z0-9]+)$")
KIND = "Job"
TARGETS = ("local", "sim", "ssh", "sagemaker", "slurm")
SCHEMA_PATH = Path(__file__).with_name("job.schema.json")

Pairs = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class SshTarget:
    """Hosts reached with paramiko; ``hosts`` entries are ``name`` or ``name:slots``."""

    hosts: tuple[str, ...] = ()
    user: str = "root"
    port: int = 22
    identity_file: str | None = None
    #: host keys are verified against this file (RejectPolicy: unknown hosts fail).
    known_hosts: str = "~/.ssh/known_hosts"
    #: python on the remote hosts (with mpirun_kit installed).
    python: str = "python3"
    #: directory on every host where the launch spec is shipped.
    workdir: str = "/tmp/mpirun-kit-job"
    connect_timeout_s: float = 10.0


@dataclass(frozen=True)
class SimTarget:
    """The simulated multi-host cluster (mpirun_kit.sim) on this machine."""

    #: directory for the cluster's per-host state; None = a temporary directory.
    root: str | None = None


@dataclass(frozen=True)
class SlurmTarget:
    """A Slurm cluster: one batch script submitted with sbatch, here, over ssh (``login``) or on a sim cluster."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    #: Slurm's time limit (sbatch --time: "30", "1:00:00", "2-00:00:00"); None = the partition's.
    time: str | None = None
    gpus_per_node: int | None = None
    exclusive: bool = False
    #: pyxis/enroot: every rank runs in this image (srun --container-image), with these mounts.
    container_image: str | None = None
    container_mounts: tuple[str, ...] = ()
    #: more sbatch options, each one argv item ("--constraint=a100", "--mail-type=END").
    sbatch_options: tuple[str, ...] = ()
    #: "user@host" (or "user@host:port") of a login node to run sbatch on over ssh; None = this machine.
    login: str | None = None
    identity_file: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    #: a simulated cluster brought up with `mpirun_kit sim up --slurm --name NAME` (its algo-1 is the login node).
    sim: str | None = None
    sim_root: str | None = None
    #: a directory every node sees (shared file system): each job's scripts, logs and result go under it.
    workdir: str = "/tmp/mpirun-kit-slurm"
    #: the interpreter with mpirun_kit installed on the nodes.
    python: str = "python3"
    #: how ranks start: srun --mpi=pmix (direct launch) or mpirun inside the allocation (Open MPI plm:slurm).
    launch: str = "srun"
    #: requeue the job when a node fails or it is preempted (sbatch --requeue); retries count the requeues.
    requeue: bool = False
    #: "USR1@90": the batch step gets SIGUSR1 90 s before the time limit (sbatch --signal=B:USR1@90).
    signal: str | None = None


@dataclass(frozen=True)
class SageMakerTarget:
    role: str = ""
    region: str | None = None
    #: S3 URI for model artifacts / output (OutputDataConfig.S3OutputPath).
    output_s3: str = ""
    max_run_s: int = 86400
    volume_size_gb: int = 100
    tags: Pairs = ()
    #: stream CloudWatch logs while waiting (`submit --wait`).
    logs: bool = True
    #: secret-looking env/hyperparameter names sent anyway: SageMaker shows both in plain text to anyone
    #: who can describe the job, so such a name is an error unless listed here.
    allow_plaintext_secrets: tuple[str, ...] = ()
    #: S3 URI for TensorBoard event files (TensorBoardOutputConfig): what the program writes under
    #: /opt/ml/output/tensorboard is uploaded there while the job runs; "" = no TensorBoard output.
    tensorboard_s3: str = ""
    #: role ``submit`` assumes, with the session tag ``mpirun-kit-job=<job name>``, to create the job
    #: (role stack output SubmitRoleArn): SageMaker chains that tag into the execution role's session
    #: (SessionChainingConfig), which scopes the job's S3 and KMS access to its own prefixes.  "" = no tag.
    submit_role: str = ""


#: target type -> its settings' dataclass: the YAML section ``target.<type>`` has exactly its fields
#: (load.py builds it field by field; tests/spec/test_schema.py holds the schema's keys to the fields).
TARGET_SETTINGS: dict[str, type] = {"ssh": SshTarget, "sim": SimTarget, "slurm": SlurmTarget,
                                    "sagemaker": SageMakerTarget}


@dataclass(frozen=True)
class Target:
    type: str = "local"
    ssh: SshTarget = field(default_factory=SshTarget)
    sim: SimTarget = field(default_factory=SimTarget)
    slurm: SlurmTarget = field(default_factory=SlurmTarget)
    sagemaker: SageMakerTarget = field(default_factory=SageMakerTarget)


@dataclass(frozen=True)
class Resources:
    instance_type: str | None = None
    #: host count (ssh: the length of target.ssh.hosts when omitted).
    hosts: int | None = None
    #: ranks per host; None = the instance's GPU count (1 without GPUs).
    processes_per_host: int | None = None


@dataclass(frozen=True)
class Program:
    """What every rank runs: ``python -m module args...`` or ``command args...``."""

    module: str | None = None
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    working_dir: str | None = None


@dataclass(frozen=True)
class Mpi:
    flavour: str = "auto"
    mca: Pairs = ()
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tuning:
    #: "auto" (by instance family), "none", or a preset name (presets.PRESETS).
    profile: str = "auto"
    #: aws-ofi-nccl version in the image; only versions < 1.7 get legacy knobs.
    aws_ofi_nccl: str | None = None
    #: "auto" (the family table), "true" or "false".
    efa: str = "auto"


@dataclass(frozen=True)
class Channel:
    """One data channel; exactly one of s3 / efs / fsx / local is set."""

    name: str
    s3: str | None = None
    #: EFS: file system id and path inside it.
    efs_id: str | None = None
    #: FSx for Lustre: file system id, mount name (FSx's MountName) and path inside it.
    fsx_id: str | None = None
    fsx_mount_name: str | None = None
    path: str = "/"
    #: a directory on the hosts (local/sim/ssh targets).
    local: str | None = None
    mode: str = "ro"
    #: where ranks see it; None = /opt/ml/input/data/<name> (SageMaker's place).
    mount: str | None = None

    @property
    def kind(self) -> str:
        if self.s3 is not None:
            return "s3"
        if self.efs_id is not None:
            return "efs"
        if self.fsx_id is not None:
            return "fsx"
        return "local"


@dataclass(frozen=True)
class Location:
    """Checkpoint or output location: an S3 URI (SageMaker) and/or a path on the hosts."""

    s3: str | None = None
    local_path: str | None = None


@dataclass(frozen=True)
class Vpc:
    subnets: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Spot:
    enabled: bool = False
    max_wait_s: int | None = None


@dataclass(frozen=True)
class JobTimeouts:
    """Mirrors model.Timeouts; None fields keep the launcher's defaults."""

    ssh_ready_s: float | None = None
    ssh_ready_per_host_s: float | None = None
    daemon_wait_s: float | None = None
    daemon_wait_per_host_s: float | None = None
    master_connect_s: float | None = None
    master_silence_s: float | None = None
    worker_silence_s: float | None = None
    job_s: float | None = None
    grace_s: float | None = None
    stall_s: float | None = None
    hang_abort_s: float | None = None


@dataclass(frozen=True)
class JobSpec:
    """A whole job spec file, validated; ``source`` is the file it came from."""

    name: str
    program: Program
    api_version: str = API_VERSION
    description: str = ""
    target: Target = field(default_factory=Target)
    resources: Resources = field(default_factory=Resources)
    image: str | None = None
    hyperparameters: Pairs = ()
    env: Pairs = ()
    env_forward: tuple[str, ...] = ()
    mpi: Mpi = field(default_factory=Mpi)
    tuning: Tuning = field(default_factory=Tuning)
    pinning: str = "auto"
    data: tuple[Channel, ...] = ()
    checkpoint: Location = field(default_factory=Location)
    output: Location = field(default_factory=Location)
    vpc: Vpc = field(default_factory=Vpc)
    timeouts: JobTimeouts = field(default_factory=JobTimeouts)
    retries: int = 0
    spot: Spot = field(default_factory=Spot)
    source: str = "<spec>"


# --- JSON Schema ------------------------------------------------------------------------

_SCALAR = {"type": ["string", "number", "boolean"]}
_S3 = {"type": "string", "pattern": r"^(s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?|\$\{stack:.+\}.*)$"}
_ABS = {"type": "string", "pattern": "^/"}
# A leading '-' would reach ssh/mpirun as an option (-oProxyCommand=...), so names start with anything else.
_HOST_SLOTS = {"type": "string", "pattern": r"^[^\s:\-][^\s:]*(:[1-9][0-9]*)?$",
               "description": "'name' or 'name:slots' (no whitespace; not starting with '-')"}

JOB_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://github.com/mpirun-kit/mpirun_kit/blob/main/mpirun_kit/spec/job.schema.json",
    "title": "mpirun_kit job spec",
    **_obj({
        "apiVersion": {"const": API_VERSION, "description": "spec version; currently " + API_VERSION},
        "kind": {"const": KIND},
        "name": {"type": "string", "pattern": "^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$",
                 "description": "a job name of letters, digits and '-', at most 63 characters (SageMaker's rule)"},
        "description": _STR,
        "target": _obj({
            "type": {"enum": list(TARGETS), "default": "local"},
            "local": _obj({}),
            "sim": _obj({"root": _STR}),
            "slurm": _obj({
                "partition": _STR, "account": _STR, "qos": _STR,
                "time": {"type": ["string", "integer"], "description": "sbatch --time: minutes, H:MM:SS or D-HH:MM:SS"},
                "gpus_per_node": {"type": "integer", "minimum": 0},
                "exclusive": {"type": "boolean"},
                "container_image": _STR, "container_mounts": _STRLIST,
                "sbatch_options": _STRLIST,
                "login": {"type": "string", "pattern": r"^[^\s@\-][^\s@]*@[^\s@:\-][^\s@:]*(:[1-9][0-9]*)?$",
                          "description": "user@host[:port] of a login node (sbatch over ssh)"},
                "identity_file": _STR, "known_hosts": _STR,
                "sim": {"type": "string", "pattern": "^[a-z0-9]{1,12}$"}, "sim_root": _ABS,
                "workdir": _ABS, "python": _STR,
                "launch": {"enum": ["srun", "mpirun"]},
                "requeue": {"type": "boolean"},
                "signal": {"type": "string", "pattern": "^[A-Z0-9]+@[0-9]+$",
                           "description": "SIGNAL@SECONDS before the time limit, e.g. USR1@90"},
            }),
            "ssh": _obj({
                "hosts": {"type": "array", "minItems": 1, "items": _HOST_SLOTS},
                "user": _STR, "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                "identity_file": _STR, "known_hosts": _STR, "python": _STR, "workdir": _ABS,
                "connect_timeout_s": _SECONDS,
            }),
            "sagemaker": _obj({
                "role": _STR, "region": _STR, "output_s3": _S3,
                "max_run_s": {"type": "integer", "minimum": 1},
                "volume_size_gb": {"type": "integer", "minimum": 1},
                "tags": {"type": "object", "additionalProperties": _SCALAR},
                "logs": {"type": "boolean"},
                "allow_plaintext_secrets": {"type": "array", "items": _STR},
                "tensorboard_s3": _S3, "submit_role": _STR,
            }),
        }, description="where the job runs, and that target's settings"),
        "resources": _obj({
            "instance_type": _STR,
            "hosts": {"type": "integer", "minimum": 1},
            "processes_per_host": {"anyOf": [{"type": "integer", "minimum": 1}, {"const": "auto"}]},
        }),
        "image": _STR,
        "program": _obj({
            "module": _STR,
            "command": {"type": "array", "minItems": 1, "items": _STR},
            "args": {"type": "array", "items": _SCALAR},
            "working_dir": _STR,
        }, description="what every rank runs: `module` (python -m) or `command`, plus args"),
        "hyperparameters": {"type": "object", "additionalProperties": _SCALAR,
                            "description": "appended to the program's args as `--key value`"},
        "env": {"type": "object", "propertyNames": _NAME, "additionalProperties": _SCALAR},
        "env_forward": {"type": "array", "items": _NAME},
        "mpi": _obj({
            "flavour": {"enum": ["auto", "openmpi4", "openmpi5", "mpich"]},
            "mca": {"type": "object", "additionalProperties": _SCALAR},
            "options": _STRLIST,
        }),
        "tuning": _obj({
            "profile": {"type": "string", "description": "auto | none | p3dn | p4d | p5 | g5 | p3 | cpu"},
            "aws_ofi_nccl": {"type": "string"},
            "efa": {"enum": ["auto", True, False]},
        }),
        "pinning": {"enum": ["auto", "none"]},
        "data": {"type": "object", "propertyNames": {"pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]*$"},
                 "additionalProperties": _obj({
                     "s3": _S3,
                     "efs": _obj({"file_system_id": _STR, "path": _STR}, ("file_system_id",)),
                     "fsx": _obj({"file_system_id": _STR, "mount_name": _STR, "path": _STR},
                                 ("file_system_id", "mount_name")),
                     "local": _STR,
                     "mode": {"enum": ["ro", "rw"]},
                     "mount": _ABS,
                 })},
        "checkpoint": _obj({"s3": _S3, "local_path": _STR}),
        "output": _obj({"s3": _S3, "local_path": _STR}),
        "vpc": _obj({"subnets": _STRLIST, "security_groups": _STRLIST}),
        "timeouts": _obj({f.name: _SECONDS for f in fields(JobTimeouts)}),   # the keys are JobTimeouts' fields
        "retries": {"type": "integer", "minimum": 0, "maximum": 30},
        "spot": _obj({"enabled": {"type": "boolean"}, "max_wait_s": {"type": "integer", "minimum": 1}}),
    }, ("apiVersion", "kind", "name", "program")),
}


def schema_text() -> str:
    return json.dumps(JOB_SCHEMA, indent=2, sort_keys=False) + "\n"
