"""A SageMaker training job the records do not hold (submitted elsewhere, or by the SageMaker SDK), by its name.

Place in the data flow: the lifecycle commands take a job id; when the records (records/) hold none of that
name, the job service asks SageMaker once (``describe_unrecorded``), as before records existed, and
``status``, ``logs`` and ``cancel`` then work on that training job through the sagemaker target's calls
(targets/sagemaker.py).  When SageMaker does not know the name either (or cannot be asked: no region) the id
is no job at all, and the error says where the records are and that `mpirun_kit jobs` lists them: a
mistyped local id must not read as an AWS problem.
"""
from __future__ import annotations

import re

from ..errors import ClusterError, ExitCode, MpirunKitError, NoSuchJobError, SpecError, translate

#: SageMaker's TrainingJobName rule.
JOB_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
#: what ``status`` shows of an unrecorded training job (describe_training_job's keys).
STATUS_KEYS = ("TrainingJobName", "TrainingJobStatus", "SecondaryStatus", "FailureReason", "TrainingStartTime",
               "TrainingEndTime", "BillableTimeInSeconds")


class UnaskedJobError(NoSuchJobError):
    """Not in the records, and SageMaker could not be asked (credentials, network): AWS's exit code, 69."""

    exit_code = ExitCode.UNREACHABLE


def check_job_name(name: str) -> str:
    """Refuse a name SageMaker would refuse, before any AWS call (and before a region is needed)."""
    if not JOB_NAME.fullmatch(name):
        raise SpecError(f"training job name {name!r} is not valid; expected 1-63 letters, digits or hyphens, "
                        "starting and ending with a letter or digit (the name `submit` printed)")
    return name


def clients(name: str, region: str | None):
    """(sagemaker, logs) clients for the training job ``name`` (checked first) in ``region``."""
    from ..targets.sagemaker import make_clients

    check_job_name(name)
    return make_clients(region)


def describe_unrecorded(name: str, region: str | None, missing: NoSuchJobError) -> dict:
    """SageMaker's description of the training job ``name``, which the records do not hold (``missing`` says so).

    Raises:
        NoSuchJobError: no such job: not a name SageMaker takes, no region to ask in, or SageMaker has none
            (naming the records and `mpirun_kit jobs`); an ``UnaskedJobError`` when SageMaker could not be asked.
    """
    def none(why: str, kind: type[NoSuchJobError] = NoSuchJobError) -> NoSuchJobError:
        return kind(f"no such job in the records: {name!r} is not in {missing.db} (`mpirun_kit jobs` lists "
                    f"the jobs there; give --state-dir if it was submitted with another), and {why}",
                    name, missing.db)

    if not JOB_NAME.fullmatch(name):
        raise none("it is not a SageMaker training job name either")
    from botocore.exceptions import ClientError, NoRegionError

    from ..targets.sagemaker import make_clients
    try:
        sm, _ = make_clients(region)
        return sm.describe_training_job(TrainingJobName=name)
    except NoRegionError:
        raise none("no AWS region is configured to look for a SageMaker training job of that name "
                   "(--region REGION)") from None
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ValidationException":   # SageMaker's "not found"
            raise none(f"SageMaker in {sm.meta.region_name} has no training job of that name") from None
        raise none(f"SageMaker could not be asked about it ({translate(exc)})", UnaskedJobError) from exc
    except Exception as exc:  # noqa: BLE001 - only the environment's errors (translate), others are bugs
        known = exc if isinstance(exc, MpirunKitError) else translate(exc)
        if known is None:
            raise
        raise none(f"SageMaker could not be asked about it ({known})", UnaskedJobError) from exc


def unrecorded_status(desc: dict) -> tuple[dict, list[dict], int]:
    """What ``status`` shows of ``desc`` (describe_training_job's answer): the view, the last five transitions and
    the exit code it stands for (0 until the job ended)."""
    from ..targets.sagemaker import TERMINAL, exit_code_for

    view = {k: desc[k] for k in STATUS_KEYS if k in desc}
    code = exit_code_for(desc) if desc.get("TrainingJobStatus") in TERMINAL else 0
    return view, list(desc.get("SecondaryStatusTransitions", [])[-5:]), code


def stop_unrecorded(name: str, region: str | None) -> None:
    """StopTrainingJob for the training job ``name``: SageMaker sends SIGTERM to every host, then ends it.

    Raises:
        ClusterError: SageMaker refused (its message, and how to see whether the job already ended).
    """
    from botocore.exceptions import ClientError

    sm, _ = clients(name, region)
    try:
        sm.stop_training_job(TrainingJobName=name)
    except ClientError as exc:
        raise ClusterError(f"could not stop training job {name!r}: "
                           f"{exc.response.get('Error', {}).get('Message', exc)}; `mpirun_kit status {name}` "
                           "shows whether it already ended") from exc
