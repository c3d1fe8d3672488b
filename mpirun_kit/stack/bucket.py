"""The role stack's bucket, guarded: what it lacks, with the command that fixes each; and the sweep of secrets
that jobs left behind.

Place in the data flow: the role stack's outputs (RoleBucket, RolePrefix) + an S3 client ->
``bucket_findings`` (a list of lines, each ending in its remedy; ``mpirun_kit stack bucket`` prints them)
and ``sweep_job_keys`` (``mpirun_kit stack sweep-keys``: deletes ``PREFIX/keys/<job>/`` of jobs that have
ended).  The bucket is the user's, not a stack's (the role stack takes its name), so its settings are
checked and the remedy printed rather than set here.

What a bucket holding job secrets and checkpoints needs (issue 37):
  - Block Public Access, all four settings: no ACL or policy can make an object public;
  - a bucket policy that denies requests without TLS (``aws:SecureTransport`` false);
  - versioning: an overwritten or deleted checkpoint can be brought back;
  - a lifecycle rule that expires ``PREFIX/keys/`` after at most ``KEYS_EXPIRE_DAYS`` days: a backstop
    for the secret of a job submitted without ``--wait`` whose owner never removed it.
"""
from __future__ import annotations

import json
from typing import Any, Callable

#: the longest SageMaker job (28 days) and a day: a secret older than this belongs to no running job.
KEYS_EXPIRE_DAYS = 29
#: a secret of a job SageMaker does not know is left alone this long: submit puts it just before
#: CreateTrainingJob.
SWEEP_GRACE_S = 3600.0
_TERMINAL = ("Completed", "Failed", "Stopped")


def _code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def _get(call: Callable[[], Any], missing: tuple[str, ...]) -> Any:
    """``call()``; None when S3 answers that the setting does not exist."""
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - botocore ClientError; anything else propagates below
        if _code(exc) in missing:
            return None
        raise


def lifecycle_rule(prefix: str) -> dict:
    """The rule that expires job secrets nobody removed (``put-bucket-lifecycle-configuration``)."""
    return {"ID": "mpirun-kit-expire-job-secrets", "Status": "Enabled",
            "Filter": {"Prefix": f"{prefix.strip('/')}/keys/"},
            "Expiration": {"Days": KEYS_EXPIRE_DAYS},
            "NoncurrentVersionExpiration": {"NoncurrentDays": 1}}


def tls_policy(bucket: str, partition: str = "aws") -> dict:
    """A bucket policy that denies every request not made over TLS."""
    return {"Version": "2012-10-17", "Statement": [{
        "Sid": "DenyWithoutTls", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
        "Resource": [f"arn:{partition}:s3:::{bucket}", f"arn:{partition}:s3:::{bucket}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]}


def _denies_plain_http(policy: dict) -> bool:
    for st in policy.get("Statement") or ():
        cond = (st.get("Condition") or {}).get("Bool") or {}
        if st.get("Effect") == "Deny" and str(cond.get("aws:SecureTransport", "")).lower() == "false":
            return True
    return False


def bucket_findings(s3: Any, bucket: str, prefix: str, *, region: str | None = None) -> list[str]:
    """What bucket ``bucket`` lacks of the four guards (module docstring), one line each with its remedy."""
    r = f" --region {region}" if region else ""
    out = []
    bpa = _get(lambda: s3.get_public_access_block(Bucket=bucket),
               ("NoSuchPublicAccessBlockConfiguration",))
    conf = (bpa or {}).get("PublicAccessBlockConfiguration") or {}
    flags = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")
    if not all(conf.get(f) for f in flags):
        off = [f for f in flags if not conf.get(f)]
        out.append(f"bucket {bucket}: Block Public Access is off ({', '.join(off)}): an ACL or policy can make job "
                   f"secrets and checkpoints public. Turn it on: aws s3api put-public-access-block --bucket {bucket}"
                   f"{r} --public-access-block-configuration " + ",".join(f"{f}=true" for f in flags))
    pol = _get(lambda: s3.get_bucket_policy(Bucket=bucket), ("NoSuchBucketPolicy",))
    if pol is None or not _denies_plain_http(json.loads(pol["Policy"])):
        what = "has no bucket policy" if pol is None else "has a policy that does not deny plain HTTP"
        out.append(f"bucket {bucket}: {what} (aws:SecureTransport): requests without TLS are served. Add the "
                   f"statement: aws s3api put-bucket-policy --bucket {bucket}{r} --policy "
                   f"'{json.dumps(tls_policy(bucket), separators=(',', ':'))}' (merge it into an existing policy: "
                   "put-bucket-policy replaces it)")
    ver = s3.get_bucket_versioning(Bucket=bucket).get("Status")
    if ver != "Enabled":
        out.append(f"bucket {bucket}: versioning is {ver or 'off'}: an overwritten or deleted checkpoint is gone. "
                   f"Turn it on: aws s3api put-bucket-versioning --bucket {bucket}{r} "
                   "--versioning-configuration Status=Enabled")
    life = _get(lambda: s3.get_bucket_lifecycle_configuration(Bucket=bucket), ("NoSuchLifecycleConfiguration",))
    keys = f"{prefix.strip('/')}/keys/"
    if not any(rule.get("Status") == "Enabled"
               and ((rule.get("Filter") or {}).get("Prefix", rule.get("Prefix")) in (keys, keys.rstrip("/")))
               and 0 < int((rule.get("Expiration") or {}).get("Days") or 0) <= KEYS_EXPIRE_DAYS
               for rule in (life or {}).get("Rules") or ()):
        out.append(f"bucket {bucket}: no lifecycle rule expires {keys} within {KEYS_EXPIRE_DAYS} days: the secret "
                   "of a job submitted without --wait stays until someone removes it. Add one: aws s3api "
                   f"put-bucket-lifecycle-configuration --bucket {bucket}{r} --lifecycle-configuration "
                   f"'{json.dumps({'Rules': [lifecycle_rule(prefix)]}, separators=(',', ':'))}' (add it to the "
                   "bucket's existing rules: the call replaces them), or run `mpirun_kit stack sweep-keys` "
                   "after jobs end")
    return out


def sweep_job_keys(s3: Any, bucket: str, prefix: str, status_of: Callable[[str], str | None], *, now: float,
                   grace_s: float = SWEEP_GRACE_S, delete: bool = True) -> list[tuple[str, str]]:
    """Delete the secrets under ``PREFIX/keys/<job>/`` of jobs that have ended; [(key, why)] of those deleted
    (or, with ``delete`` False, that would be).

    ``status_of(job)`` is the training job's status, None when SageMaker does not know it.  A running job's
    secret stays (its hosts read it at start, a retry reads it again); so does an unknown job's for
    ``grace_s`` after it was written (submit puts it just before CreateTrainingJob).
    """
    root = f"{prefix.strip('/')}/keys/"
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=root):
        for obj in page.get("Contents") or ():
            job = obj["Key"][len(root):].split("/", 1)[0]
            if not job:
                continue
            status = status_of(job)
            age = now - obj["LastModified"].timestamp()
            if status in _TERMINAL:
                why = f"training job {job} is {status}"
            elif status is None and age > grace_s:
                why = f"no training job {job} exists, and the secret is {age / 3600:.1f} h old"
            else:
                continue
            if delete:
                s3.delete_object(Bucket=bucket, Key=obj["Key"])
            out.append((obj["Key"], why))
    return out
