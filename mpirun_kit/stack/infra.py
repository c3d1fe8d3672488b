"""A job against the infrastructure it names: what ``plan`` reports before anything is sent.

Place in the data flow: after a job spec is loaded and its ``${stack:NAME.Key}``
references resolved (cli/resolve.py ``compile_with_stack_values``), before any request
is built.  Inputs are values: the job as written (to see which stack a value came
from), the job as resolved, and the outputs of the stacks it names.  Nothing here
calls AWS (cli/resolve.py reads the buckets' default KMS keys with ``bucket_kms_keys``,
best effort, and passes them in); every check whose facts are missing (a stack output given by hand
without the role's outputs, a literal role ARN) is skipped, never guessed.

Checks (each a warning line; SageMaker would fail the job, not refuse the request):

  keys       a multi-host SageMaker job without the ``mpirun-keys`` channel (``keys
             install --sagemaker`` fails on every host), or with one whose URI does not
             name ``${job_name}`` (keys are derived for the exact training-job name).
  image      the image is not in the ECR repository the role may pull from
             (role stack output ``RoleImageRepository``).
  s3         an S3 URI (output, checkpoints, channels) outside ``s3://RoleBucket/RolePrefix/``.
  kms        an S3 KMS key the job's objects use that the role may not decrypt with
             (``RoleKmsKeyArn``).
  fsx        an FSx channel whose file system's subnet (fsx stack output ``SubnetId``) is
             not the only subnet the job may run in, a read-write channel on SCRATCH_2
             (nothing written there is exported to S3), or a channel path outside the
             directory the S3 link fills (output ``DataDirectoryPath``: ``/data`` on PERSISTENT_2).
  per job    with a per-job role (role stack output ``SubmitRoleArn``): checkpoints, output and
             TensorBoard outside ``RoleS3Uri/jobs/${job_name}/``, the key channel outside
             ``RoleS3Uri/keys/${job_name}/``, other channels outside ``RoleS3Uri/data/`` (JOB_LAYOUT).

Refusals (``fsx_link_refusals``; plan and submit stop, exit 64): an FSx file system linked
(output ``S3DataPath``) to a prefix that holds, or lies inside, the role's keys/ or jobs/
prefixes or the job's own checkpoint, output or key paths: every host that mounts it would read
every job's secret and checkpoints, whatever its IAM role.

cfn/sagemaker-role.yaml's defaults are checked against jobs/ with the same function
(``role_outputs_from_template``; rule DEFAULTS_AGREE in rules.check_repository).
"""
from __future__ import annotations

import re
from typing import Iterable, Mapping

from ..spec import schema as S
from ..spec.compile import JOB_NAME_REF  # what a spec's S3 paths name the training job by
from .template import Template

#: the input channel ``keys install --sagemaker`` reads the job secret from (sshkeys.SAGEMAKER_SECRET_PATH).
KEY_CHANNEL = "mpirun-keys"
#: where a per-job role (cfn/sagemaker-role.yaml) lets a job reach, under s3://RoleBucket/RolePrefix/:
#: its keys (read), its own home (read/write; ``${job_name}`` is the session tag JOB_TAG) and shared data (read).
JOB_LAYOUT = {"keys": "keys", "jobs": "jobs", "data": "data"}
#: the session tag that carries the job name from the submit role into the execution role.
JOB_TAG = "mpirun-kit-job"
_STACK_REF = re.compile(r"^\$\{stack:([A-Za-z][A-Za-z0-9-]*)\.([A-Za-z0-9]+)\}$")
_S3_URI = re.compile(r"^s3://([^/]+)/?(.*)$")


def _stack_of(value: str | None, key: str) -> str | None:
    """The stack a value was taken from, when it is exactly ``${stack:NAME.key}``."""
    m = _STACK_REF.match(value or "")
    return m.group(1) if m and m.group(2) == key else None


def key_channel_warnings(job: S.JobSpec) -> tuple[str, ...]:
    """The ssh key channel of a multi-host SageMaker job (needs no stack outputs: validate runs it too)."""
    if job.target.type != "sagemaker" or (job.resources.hosts or 1) < 2:
        return ()
    channel = next((c for c in job.data if c.name == KEY_CHANNEL), None)
    if channel is None:
        return (f"data: {job.resources.hosts}-host SageMaker job without the '{KEY_CHANNEL}' channel: `keys install "
                "--sagemaker` fails on every host. Add data: "
                f"{{{KEY_CHANNEL}: {{s3: s3://BUCKET/PREFIX/keys/{JOB_NAME_REF}/}}}} (with the role stack: "
                f"${{stack:ROLE.RoleS3Uri}}/keys/{JOB_NAME_REF}/); submit makes the job's secret there and removes "
                "it after the job",)
    if channel.kind == "s3" and JOB_NAME_REF not in (channel.s3 or ""):
        return (f"data.{KEY_CHANNEL}.s3: {channel.s3} does not name {JOB_NAME_REF}; the keys are derived for the "
                "exact training-job name, so every job needs its own secret under its own name",)
    return ()


def role_outputs_from_template(template: Template, given: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the role stack's outputs would be for these parameters (defaults where not given).

    ``RoleImageRepository`` is the repository name only here (no account or region).
    """
    values = {p.name: p.default for p in template.parameters if p.default is not None}
    values.update(given or {})
    out = {k: v for k, v in (("RoleBucket", values.get("BucketName")), ("RolePrefix", values.get("Prefix")),
                             ("RoleImageRepository", values.get("ImageRepositoryName")),
                             ("RoleKmsKeyArn", values.get("KmsKeyArn"))) if v}
    if "SubmitRole" in template.resources:  # a per-job role: the per-job layout checks apply
        out["SubmitRoleArn"] = "arn:aws:iam::123456789012:role/<SubmitRole>"
    if "RoleBucket" in out:
        out["RoleS3Uri"] = f"s3://{out['RoleBucket']}" + (f"/{out['RolePrefix']}" if "RolePrefix" in out else "")
    return out


def _image_repository(image: str) -> str:
    """``HOST/REPO:TAG`` or ``HOST/REPO@sha256:..`` -> ``HOST/REPO``."""
    base = image.split("@", 1)[0]
    head, _, last = base.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


def _image_tag(image: str) -> str:
    """``:TAG`` or ``@sha256:...`` of an image reference ("" when it has neither)."""
    if "@" in image:
        return "@" + image.split("@", 1)[1]
    last = image.rpartition("/")[2]
    return ":" + last.split(":", 1)[1] if ":" in last else ""


def _split_registry(repo: str) -> tuple[str, str]:
    """``HOST/NAME`` -> (HOST, NAME); a bare repository name (may hold '/') -> ("", NAME)."""
    head, sep, rest = repo.partition("/")
    return (head, rest) if sep and ("." in head or ":" in head) else ("", repo)


def _repo_matches(image_repo: str, allowed: str) -> bool:
    # A deployed role stack gives the full URI; the template's parameters give the name only.
    a_host, a_name = _split_registry(allowed)
    i_host, i_name = _split_registry(image_repo)
    return i_name == a_name and (not a_host or i_host == a_host)


def _s3_uris(job: S.JobSpec) -> Iterable[tuple[str, str]]:
    sm = job.target.sagemaker
    if sm.output_s3:
        yield "target.sagemaker.output_s3", sm.output_s3
    if sm.tensorboard_s3:
        yield "target.sagemaker.tensorboard_s3", sm.tensorboard_s3
    if job.checkpoint.s3:
        yield "checkpoint.s3", job.checkpoint.s3
    for ch in job.data:
        if ch.s3:
            yield f"data.{ch.name}.s3", ch.s3


def job_buckets(job: S.JobSpec) -> tuple[str, ...]:
    """The S3 buckets a (resolved) job reads or writes."""
    return tuple(dict.fromkeys(m.group(1) for _, uri in _s3_uris(job) if (m := _S3_URI.match(uri))))


def bucket_kms_keys(s3: object, buckets: Iterable[str]) -> tuple[str, ...]:
    """Customer-managed KMS keys the buckets encrypt new objects with by default (GetBucketEncryption).

    SSE-S3 and the AWS-managed ``aws/s3`` key need no grant in the role and are left out.
    A bucket this caller may not inspect is left out too: the check is best effort, the
    job's own access is what counts.  ``s3`` is a boto3 S3 client (injected).
    """
    from botocore.exceptions import BotoCoreError, ClientError

    keys = []
    for bucket in buckets:
        try:
            rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]  # type: ignore[attr-defined]
        except (ClientError, BotoCoreError, KeyError):
            continue
        for rule in rules:
            default = rule.get("ApplyServerSideEncryptionByDefault") or {}
            key = default.get("KMSMasterKeyID", "")
            if default.get("SSEAlgorithm", "").startswith("aws:kms") and key and not key.endswith("alias/aws/s3"):
                keys.append(key)
    return tuple(dict.fromkeys(keys))


def _same_key(used: str, allowed: str) -> bool:
    """A key given as an ARN or a bare id names the same key when the ids agree."""
    return bool(allowed) and (used == allowed or used.rsplit("/", 1)[-1] == allowed.rsplit("/", 1)[-1])


def check_job_infrastructure(written: S.JobSpec, resolved: S.JobSpec,
                             outputs: Mapping[str, Mapping[str, str]], *,
                             kms_keys: Iterable[str] = ()) -> tuple[str, ...]:
    """Warnings for a SageMaker job whose role, storage or network does not fit it.

    Args:
        written: the job as loaded (``${stack:...}`` still in it).
        resolved: the same job with stack outputs substituted.
        outputs: stack name -> its outputs (those known; missing keys skip their check).
        kms_keys: KMS key ARNs the job's S3 objects are encrypted with, where known.
    """
    if resolved.target.type != "sagemaker":
        return ()
    out = list(key_channel_warnings(resolved))
    role_stack = _stack_of(written.target.sagemaker.role, "RoleArn")
    role = outputs.get(role_stack or "", {})
    where = f"role stack {role_stack}" if role_stack else "the role"
    allowed_repo = role.get("RoleImageRepository")
    if allowed_repo and resolved.image and not _repo_matches(_image_repository(resolved.image), allowed_repo):
        tag = _image_tag(resolved.image)
        fix = (f"set image: ${{stack:{role_stack}.RoleImageRepository}}{tag} in the spec (the repository of this "
               "account and region, which docker/build.sh pushes to)" if role_stack else
               f"set image: {allowed_repo}{tag}")
        out.append(f"image: {resolved.image} is not in the ECR repository {where} may pull from ({allowed_repo}); "
                   f"{fix}, or deploy the role with --param ImageRepositoryName=<its repository>")
    bucket, prefix = role.get("RoleBucket"), role.get("RolePrefix")
    if bucket:
        scope = f"s3://{bucket}/{prefix}/" if prefix else f"s3://{bucket}/"
        for path, uri in _s3_uris(resolved):
            m = _S3_URI.match(uri)
            key = m.group(2) if m else ""
            inside = m is not None and m.group(1) == bucket and (
                not prefix or key == prefix or key.startswith(prefix.rstrip("/") + "/"))
            if not inside:
                rest = uri.split("/", 3)[3] if uri.count("/") >= 3 else ""
                if prefix and rest.startswith(prefix.rstrip("/") + "/"):  # right prefix, wrong bucket
                    rest = rest[len(prefix.rstrip("/")) + 1:]
                target = (f"${{stack:{role_stack}.RoleS3Uri}}/{rest}" if role_stack else f"{scope}{rest}").rstrip("/")
                out.append(f"{path}: {uri} is outside what {where} may read and write ({scope}...); set it to "
                           f"{target} in the spec, or deploy the role with --param BucketName=/Prefix= to match")
    if role_stack is not None and role:
        allowed_key = role.get("RoleKmsKeyArn", "")
        for key in dict.fromkeys(kms_keys):
            if not _same_key(key, allowed_key):
                out.append(f"kms: the job's objects are encrypted with {key}, but {where} may decrypt "
                           f"{'with ' + allowed_key if allowed_key else 'with no customer-managed key'}; deploy the "
                           f"role with --param KmsKeyArn={key}")
    subnets = set(resolved.vpc.subnets)
    for w_ch, r_ch in zip(written.data, resolved.data):
        if r_ch.kind != "fsx":
            continue
        fsx = outputs.get(_stack_of(w_ch.fsx_id, "FileSystemId") or "", {})
        fs_subnet = fsx.get("SubnetId")
        if fs_subnet and subnets and subnets != {fs_subnet}:
            others = ", ".join(sorted(subnets - {fs_subnet})) or "none of them"
            out.append(f"data.{r_ch.name}.fsx: file system {r_ch.fsx_id} is in subnet {fs_subnet}, but the job may "
                       f"run in {others} (vpc.subnets); set vpc.subnets to [{fs_subnet}]")
        data_dir = fsx.get("DataDirectoryPath")
        if data_dir and r_ch.fsx_mount_name and not _under(_dir_path(r_ch.fsx_mount_name, r_ch.path), data_dir):
            inner = data_dir.split("/", 2)[2] if data_dir.count("/") >= 2 else ""
            fix = "/" + "/".join(p for p in (inner + "/" + r_ch.path).split("/") if p)
            out.append(f"data.{r_ch.name}.fsx.path: {r_ch.path} is outside the directory the file system's S3 link "
                       f"fills ({data_dir}, stack output DataDirectoryPath): the job would read an empty directory; "
                       f"set path: {fix}")
        if fsx.get("DeploymentType", "").startswith("SCRATCH") and r_ch.mode == "rw":
            out.append(f"data.{r_ch.name}: read-write channel on a {fsx['DeploymentType']} file system: nothing "
                       "written there is exported to S3 and it is lost with the stack; write to checkpoint.s3 / "
                       "output_s3, or use PERSISTENT_2 with ExportToS3=true")
    if bucket and role.get("SubmitRoleArn"):
        out += _per_job_warnings(resolved, f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}", role_stack)
    return tuple(out)


def _dir_path(mount_name: str, path: str) -> str:
    inner = "/".join(p for p in (path or "").split("/") if p)
    return f"/{mount_name}" + (f"/{inner}" if inner else "")


def _under(path: str, top: str) -> bool:
    """``path`` is ``top`` or below it, by whole segments."""
    return path.rstrip("/") == top.rstrip("/") or path.startswith(top.rstrip("/") + "/")


def _per_job_warnings(job: S.JobSpec, root: str, role_stack: str | None) -> list[str]:
    """S3 paths a per-job role would deny (cfn/sagemaker-role.yaml, JOB_LAYOUT): SageMaker fails the job."""
    ref = f"${{stack:{role_stack}.RoleS3Uri}}" if role_stack else root
    home, keys, data = (f"{root}/{JOB_LAYOUT[k]}" for k in ("jobs", "keys", "data"))
    out = []
    for path, uri in _s3_uris(job):
        if path.startswith("data."):
            if path == f"data.{KEY_CHANNEL}.s3":
                if not _under(uri, f"{keys}/{JOB_NAME_REF}"):
                    out.append(f"{path}: {uri} is not the job's own key prefix; the role lets a job read keys only "
                               f"under {keys}/<its name>/: set it to {ref}/{JOB_LAYOUT['keys']}/{JOB_NAME_REF}/")
            elif not (_under(uri, data) or _under(uri, f"{home}/{JOB_NAME_REF}")):
                out.append(f"{path}: {uri} is outside the shared data prefix {data}/, the only inputs every job may "
                           f"read; move the data there and set it to {ref}/{JOB_LAYOUT['data']}/...")
        elif not _under(uri, f"{home}/{JOB_NAME_REF}"):
            what = path.rsplit(".", 1)[-1].replace("_s3", "").replace("s3", "checkpoints")
            out.append(f"{path}: {uri} is outside the job's own prefix {home}/{JOB_NAME_REF}/, the only place the "
                       f"role lets a job write (and the only one its --resume auto may see); set it to "
                       f"{ref}/{JOB_LAYOUT['jobs']}/{JOB_NAME_REF}/{what}")
    return out


def _s3_parts(uri: str) -> tuple[str, str] | None:
    m = _S3_URI.match(uri or "")
    return (m.group(1), m.group(2).rstrip("/")) if m else None


def _overlap(a: tuple[str, str], b: tuple[str, str]) -> bool:
    """Two S3 prefixes of which one holds the other (by whole key segments; "" is the bucket's root)."""
    if a[0] != b[0]:
        return False
    x, y = a[1], b[1]
    return not x or not y or x == y or x.startswith(y + "/") or y.startswith(x + "/")


def fsx_link_refusals(written: S.JobSpec, resolved: S.JobSpec,
                      outputs: Mapping[str, Mapping[str, str]]) -> tuple[str, ...]:
    """Refusals for a job reading an FSx file system whose S3 link covers secrets or checkpoints.

    The link (fsx stack output ``S3DataPath``) exposes every object under it to every host that
    mounts the file system, as root, whatever the host's IAM role; a link that holds the role's
    keys/ or jobs/ prefix, or the job's own checkpoint, output or key paths, leaks them all.
    """
    if resolved.target.type != "sagemaker":
        return ()
    role_stack = _stack_of(written.target.sagemaker.role, "RoleArn")
    role = outputs.get(role_stack or "", {})
    protected: list[tuple[str, str]] = []
    if role.get("RoleBucket"):
        root = f"s3://{role['RoleBucket']}" + (f"/{role['RolePrefix']}" if role.get("RolePrefix") else "")
        protected += [(f"the role's {JOB_LAYOUT[k]}/ prefix", f"{root}/{JOB_LAYOUT[k]}/") for k in ("keys", "jobs")]
    for path, uri in _s3_uris(resolved):
        if path != "data." + KEY_CHANNEL + ".s3" and path.startswith("data."):
            continue
        protected.append((path, uri.split(JOB_NAME_REF, 1)[0] if JOB_NAME_REF in uri else uri))
    out = []
    for w_ch, r_ch in zip(written.data, resolved.data):
        if r_ch.kind != "fsx":
            continue
        fsx_stack = _stack_of(w_ch.fsx_id, "FileSystemId")
        link = (outputs.get(fsx_stack or "", {}) or {}).get("S3DataPath", "")
        parts = _s3_parts(link)
        if not parts:
            continue
        hits = [what for what, uri in protected if (p := _s3_parts(uri)) and _overlap(parts, p)]
        if hits:
            out.append(f"data.{r_ch.name}: file system {r_ch.fsx_id} (stack {fsx_stack}) is linked to {link}, which "
                       f"covers {', '.join(dict.fromkeys(hits))}: every host that mounts it reads those objects as "
                       "root, whatever its IAM role (job secrets, other jobs' checkpoints). Link a data prefix "
                       f"instead: `mpirun_kit stack deploy {fsx_stack} --template cfn/fsx.yaml --param "
                       f"S3DataPath=s3://{parts[0]}/datasets` (data outside the role's keys/ and jobs/)")
    return tuple(out)

