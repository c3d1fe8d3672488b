"""The job spec, declared once: frozen dataclasses (``JobSpec``) whose fields carry their schema.

Place in the data flow: ``load.py`` parses YAML, checks it against ``JOB_SCHEMA``
(with file/line/key-path messages) and builds a ``JobSpec`` with ``shape.decode``;
``compile.py`` turns a JobSpec plus a target into a ``model.LaunchSpec`` and target settings.

Each field says here, once, what the YAML key takes (``shape.key``: bounds, patterns, choices, the
key's name where it differs); ``JOB_SCHEMA`` is generated from these declarations (shape.json_schema)
and so is the value built from a checked mapping (shape.decode).  Defaults live here only: in the
dataclasses, copied into the schema's ``default`` annotations for editors.  ``JOB_SCHEMA`` is published
as ``job.schema.json`` next to this file (``python -m mpirun_kit.cli.schema`` rewrites it; a test keeps
the two identical) so editors can validate specs::

    # yaml-language-server: $schema=../mpirun_kit/spec/job.schema.json

String values anywhere may reference CloudFormation stack outputs as
``${stack:STACK.OutputKey}``; they are resolved at plan time (compile.py), so
the schema only checks them as strings.
"""
from __future__ import annotations

import json
import re
import typing
from dataclasses import dataclass, fields, make_dataclass
from pathlib import Path

from .launch_spec import Timeouts
from .shape import NAME, SCALAR, STR, Pairs, json_schema, key

API_VERSION = "mpirun_kit/v1"

#: the references a spec's strings may hold (``${data:NAME}``, ``${stack:STACK.Key}``, ...): checked in
#: checks.py, resolved per target in compile.py.
#: ``${...}``; ``$${`` is a literal ``${`` (compile.py ``expand_macros`` drops the first ``$``), never a reference
MACRO_RE = re.compile(r"(?<!\$)\$\{([^}]*)\}")
STACK_RE = re.compile(r"^stack:([A-Za-z][A-Za-z0-9-]*)\.([A-Za-z0-9]+)$")
KIND = "Job"
TARGETS = ("local", "sim", "ssh", "sagemaker", "slurm")
SCHEMA_PATH = Path(__file__).with_name("job.schema.json")

S3_URI = r"^(s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?|\$\{stack:.+\}.*)$"
ABS = "^/"
# A leading '-' would reach ssh/mpirun as an option (-oProxyCommand=...), so names start with anything else.
_HOST_SLOTS = {"type": "string", "pattern": r"^[^\s:\-][^\s:]*(:[1-9][0-9]*)?$",
               "description": "'name' or 'name:slots' (no whitespace; not starting with '-')"}


@dataclass(frozen=True)
class SshTarget:
    """Hosts reached with paramiko; ``hosts`` entries are ``name`` or ``name:slots``."""

    hosts: tuple[str, ...] = key((), min_items=1, items=_HOST_SLOTS)
    user: str = "root"
    port: int = key(22, minimum=1, maximum=65535)
    identity_file: str | None = None
    #: host keys are verified against this file (RejectPolicy: unknown hosts fail).
    known_hosts: str = "~/.ssh/known_hosts"
    #: python on the remote hosts (with mpirun_kit installed).
    python: str = "python3"
    #: directory on every host where the launch spec is shipped.
    workdir: str = key("/tmp/mpirun-kit-job", pattern=ABS)
    connect_timeout_s: float = key(10.0, exclusive_minimum=0)


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
    time: str | None = key(None, accepts={"type": ["string", "integer"]},
                           doc="sbatch --time: minutes, H:MM:SS or D-HH:MM:SS")
    gpus_per_node: int | None = key(None, minimum=0)
    exclusive: bool = False
    #: pyxis/enroot: every rank runs in this image (srun --container-image), with these mounts.
    container_image: str | None = None
    container_mounts: tuple[str, ...] = ()
    #: more sbatch options, each one argv item ("--constraint=a100", "--mail-type=END").
    sbatch_options: tuple[str, ...] = ()
    #: "user@host" (or "user@host:port") of a login node to run sbatch on over ssh; None = this machine.
    login: str | None = key(None, pattern=r"^[^\s@\-][^\s@]*@[^\s@:\-][^\s@:]*(:[1-9][0-9]*)?$",
                            doc="user@host[:port] of a login node (sbatch over ssh)")
    identity_file: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    #: a simulated cluster brought up with `mpirun_kit sim up --slurm --name NAME` (its algo-1 is the login node).
    sim: str | None = key(None, pattern="^[a-z0-9]{1,12}$")
    sim_root: str | None = key(None, pattern=ABS)
    #: a directory every node sees (shared file system): each job's scripts, logs and result go under it.
    workdir: str = key("/tmp/mpirun-kit-slurm", pattern=ABS)
    #: the interpreter with mpirun_kit installed on the nodes.
    python: str = "python3"
    #: how ranks start: srun --mpi=pmix (direct launch) or mpirun inside the allocation (Open MPI plm:slurm).
    launch: str = key("srun", enum=("srun", "mpirun"))
    #: requeue the job when a node fails or it is preempted (sbatch --requeue); retries count the requeues.
    requeue: bool = False
    #: "USR1@90": the batch step gets SIGUSR1 90 s before the time limit (sbatch --signal=B:USR1@90).
    signal: str | None = key(None, pattern="^[A-Z0-9]+@[0-9]+$",
                             doc="SIGNAL@SECONDS before the time limit, e.g. USR1@90")


@dataclass(frozen=True)
class SageMakerTarget:
    role: str = ""
    region: str | None = None
    #: S3 URI for model artifacts / output (OutputDataConfig.S3OutputPath).
    output_s3: str = key("", pattern=S3_URI)
    max_run_s: int = key(86400, minimum=1)
    volume_size_gb: int = key(100, minimum=1)
    tags: Pairs = ()
    #: stream CloudWatch logs while waiting (`submit --wait`).
    logs: bool = True
    #: secret-looking env/hyperparameter names sent anyway: SageMaker shows both in plain text to anyone
    #: who can describe the job, so such a name is an error unless listed here.
    allow_plaintext_secrets: tuple[str, ...] = ()
    #: S3 URI for TensorBoard event files (TensorBoardOutputConfig): what the program writes under
    #: /opt/ml/output/tensorboard is uploaded there while the job runs; "" = no TensorBoard output.
    tensorboard_s3: str = key("", pattern=S3_URI)
    #: role ``submit`` assumes, with the session tag ``mpirun-kit-job=<job name>``, to create the job
    #: (role stack output SubmitRoleArn): SageMaker chains that tag into the execution role's session
    #: (SessionChainingConfig), which scopes the job's S3 and KMS access to its own prefixes.  "" = no tag.
    submit_role: str = ""


@dataclass(frozen=True)
class LocalTarget:
    """This machine: no settings (the section exists so that every target type has one)."""


@dataclass(frozen=True)
class Target:
    type: str = key("local", enum=TARGETS)
    local: LocalTarget = key(factory=LocalTarget)
    sim: SimTarget = key(factory=SimTarget)
    slurm: SlurmTarget = key(factory=SlurmTarget)
    ssh: SshTarget = key(factory=SshTarget)
    sagemaker: SageMakerTarget = key(factory=SageMakerTarget)


#: target type -> its settings' dataclass: the YAML section ``target.<type>`` (Target's field of that name).
TARGET_SETTINGS: dict[str, type] = {n: tp for n, tp in typing.get_type_hints(Target).items() if n != "type"}


def _auto_is_none(value):
    return None if value == "auto" else value


@dataclass(frozen=True)
class Resources:
    instance_type: str | None = None
    #: host count (ssh: the length of target.ssh.hosts when omitted).
    hosts: int | None = key(None, minimum=1)
    #: ranks per host; None ("auto" in YAML) = the instance's GPU count (1 without GPUs).
    processes_per_host: int | None = key(None, accepts={"anyOf": [{"type": "integer", "minimum": 1},
                                                                   {"const": "auto"}]}, read=_auto_is_none)


@dataclass(frozen=True)
class Program:
    """What every rank runs: ``python -m module args...`` or ``command args...``."""

    module: str | None = None
    command: tuple[str, ...] = key((), min_items=1)
    args: tuple[str, ...] = key((), items=SCALAR)
    working_dir: str | None = None


@dataclass(frozen=True)
class Mpi:
    flavour: str = key("auto", enum=("auto", "openmpi4", "openmpi5", "mpich"))
    mca: Pairs = ()
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tuning:
    #: "auto" (by instance family), "none", or a preset name (presets.PRESETS).
    profile: str = key("auto", doc="auto | none | p3dn | p4d | p5 | g5 | p3 | cpu")
    #: aws-ofi-nccl version in the image; only versions < 1.7 get legacy knobs.
    aws_ofi_nccl: str | None = None
    #: "auto" (the family table), "true" or "false" (YAML's booleans are taken as that text).
    efa: str = key("auto", enum=("auto", True, False))


@dataclass(frozen=True)
class EfsStorage:
    """A data channel on EFS: the file system and the path inside it."""

    file_system_id: str
    path: str = "/"


@dataclass(frozen=True)
class FsxStorage:
    """A data channel on FSx for Lustre: the file system, its mount name (FSx's MountName) and the path inside it."""

    file_system_id: str
    mount_name: str
    path: str = "/"


@dataclass(frozen=True)
class Channel:
    """One data channel, written in YAML under its name (``data: {train: {...}}``); exactly one of
    s3 / efs / fsx / local is set."""

    name: str = key(name=None)
    s3: str | None = key(None, pattern=S3_URI)
    efs: EfsStorage | None = None
    fsx: FsxStorage | None = None
    #: a directory on the hosts (local/sim/ssh targets).
    local: str | None = None
    mode: str = key("ro", enum=("ro", "rw"))
    #: where ranks see it; None = /opt/ml/input/data/<name> (SageMaker's place).
    mount: str | None = key(None, pattern=ABS)

    @property
    def kind(self) -> str:
        if self.s3 is not None:
            return "s3"
        if self.efs is not None:
            return "efs"
        if self.fsx is not None:
            return "fsx"
        return "local"

    @property
    def efs_id(self) -> str | None:
        return self.efs.file_system_id if self.efs else None

    @property
    def fsx_id(self) -> str | None:
        return self.fsx.file_system_id if self.fsx else None

    @property
    def fsx_mount_name(self) -> str | None:
        return self.fsx.mount_name if self.fsx else None

    @property
    def path(self) -> str:
        """The path inside the EFS or FSx file system ("/" for the others)."""
        storage = self.efs or self.fsx
        return (storage.path if storage else None) or "/"


@dataclass(frozen=True)
class Location:
    """Checkpoint or output location: an S3 URI (SageMaker) and/or a path on the hosts."""

    s3: str | None = key(None, pattern=S3_URI)
    local_path: str | None = None


@dataclass(frozen=True)
class Vpc:
    subnets: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Spot:
    enabled: bool = False
    max_wait_s: int | None = key(None, minimum=1)


#: timeouts: the launcher's waits (launch_spec.Timeouts), each None (the launcher's default) unless the spec
#: sets it, and then a number of seconds > 0.  Made from Timeouts' fields, so a new wait is a key here too.
JobTimeouts = make_dataclass(
    "JobTimeouts", [(f.name, float | None, key(None, minimum=0) if f.name == "hang_abort_s"   # 0: never
                     else key(None, exclusive_minimum=0)) for f in fields(Timeouts)],
    frozen=True, namespace={"__module__": __name__,
                            "__doc__": "Mirrors launch_spec.Timeouts; None fields keep the launcher's defaults."})


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """A whole job spec file, validated; ``source`` is the file it came from.  Fields in the YAML's order."""

    api_version: str = key(API_VERSION, name="apiVersion", const=API_VERSION, required=True,
                           doc="spec version; currently " + API_VERSION)
    kind: str = key(KIND, const=KIND, required=True)
    name: str = key(pattern="^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$",
                    doc="a job name of letters, digits and '-', at most 63 characters (SageMaker's rule)")
    description: str = ""
    target: Target = key(factory=Target, doc="where the job runs, and that target's settings")
    resources: Resources = key(factory=Resources)
    image: str | None = None
    program: Program = key(doc="what every rank runs: `module` (python -m) or `command`, plus args")
    hyperparameters: Pairs = key((), doc="appended to the program's args as `--key value`")
    env: Pairs = key((), names=NAME)
    env_forward: tuple[str, ...] = key((), items=NAME)
    mpi: Mpi = key(factory=Mpi)
    tuning: Tuning = key(factory=Tuning)
    pinning: str = key("auto", enum=("auto", "none"))
    data: tuple[Channel, ...] = key((), keyed_by="name", names={"pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]*$"})
    checkpoint: Location = key(factory=Location)
    output: Location = key(factory=Location)
    vpc: Vpc = key(factory=Vpc)
    timeouts: JobTimeouts = key(factory=JobTimeouts)
    retries: int = key(0, minimum=0, maximum=30)
    spot: Spot = key(factory=Spot)
    #: the file it came from: not a key.
    source: str = key("<spec>", name=None)


JOB_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://github.com/mpirun-kit/mpirun_kit/blob/main/mpirun_kit/spec/job.schema.json",
    "title": "mpirun_kit job spec",
    **json_schema(JobSpec),
}


def schema_text() -> str:
    return json.dumps(JOB_SCHEMA, indent=2, sort_keys=False) + "\n"
