"""The Python API: the job service (service/) re-exported, and one-call forms of its verbs.

Place in the data flow: beside the CLI, above the job service, never through the CLI.  The service
is typed throughout: ``JobService(store).submit(SubmitRequest(spec)) -> JobHandle``, then ``wait``,
``describe``, ``cancel``, ``logs`` and ``list`` (torchx's Runner); ``service()`` makes one over the
CLI's record store.  The functions below (``submit``, ``status``, ``jobs``, ``cancel``, ``logs``) are
that, one call each, returning a ``JobStatus`` (targets/base.py) or lines and raising the one exception
hierarchy (errors.MpirunKitError: ``SpecError`` for a bad spec or an unknown job, ``ClusterError`` for
an unreachable host or platform...).  The job records are the CLI's (the same store: ``state_dir``,
else ``$MPIRUN_KIT_STATE_DIR``, ``$XDG_STATE_HOME/mpirun_kit``, ``~/.local/state/mpirun_kit``), so a
job submitted here is seen by `mpirun_kit jobs` and the other way round.  Like the CLI, this module is
a front door: it reads the environment (the state directory, ``AWS_ENDPOINT_URL``, the allow-listed variables
a multi-host job takes with it) and passes it down.

    from mpirun_kit import api

    job = api.submit("jobs/allreduce-bench.yaml")             # detached: returns once it runs
    api.status(job.job_id).state                              # JobState.RUNNING
    for line in api.logs(job.job_id, rank=0, follow=True):    # until it ends
        print(line)
    api.status(job.job_id).exit_code                          # 0
"""
from __future__ import annotations

import os
from typing import Iterator, Mapping, Sequence

from .records import JobState, RecordStore, default_state_dir
from .service.requests import JobHandle, SubmitRequest
from .service.runner import JobService
from .targets.base import JobStatus

__all__ = ["JobService", "SubmitRequest", "JobHandle", "JobStatus", "JobState", "service",
           "submit", "status", "jobs", "cancel", "logs"]


def service(state_dir: str | os.PathLike | None = None, *, environ: Mapping[str, str] | None = None) -> JobService:
    """The job service over the record store in ``state_dir`` (None: the CLI's default, from ``environ``, this
    process's environment unless given), reading stack outputs at ``AWS_ENDPOINT_URL`` when that is set, and
    ``mrk-`` stack names as the user's stack prefix (stack/prefix.py; the configuration file the CLI reads)."""
    env = os.environ if environ is None else environ
    endpoint = env.get("AWS_ENDPOINT_URL") or None

    def aws(name: str, region: str | None):
        import boto3

        return boto3.client(name, region_name=region, endpoint_url=endpoint)

    def stack_names():
        import getpass

        from .stack.prefix import config_file, load_stack_names

        path = config_file(env.get("MPIRUN_KIT_CONFIG_DIR"), env.get("XDG_CONFIG_HOME"), os.path.expanduser("~"))
        return load_stack_names(path, getpass.getuser())[0]

    # the caller's environment: a multi-host job takes its allow-listed variables (WANDB_, CUDA_ ...) with it
    return JobService(RecordStore(state_dir or default_state_dir(env)), aws=aws, stack_names=stack_names,
                      environ=dict(env))


def submit(spec: str | os.PathLike, *, target: str | None = None, detach: bool = True,
           stack_outputs: Sequence[str] = (), region: str | None = None, job_name: str | None = None,
           state_dir: str | os.PathLike | None = None) -> JobStatus:
    """Submit the job spec ``spec`` (on ``target``, else the spec's ``target.type``); its status.

    ``detach`` (the default): return once the job runs under a supervisor of its own, as `submit --detach`
    does; else run it here to its end (its ranks' output goes to this process's stdout and to the run
    directory's output.log) and return how it ended.  ``stack_outputs``: ``STACK.KEY=VALUE`` strings,
    as ``--stack-output``; ``job_name``: the SageMaker training job's name.

    Raises:
        SpecError: the spec is invalid (every problem listed); ClusterError: a host or AWS is unreachable.
    """
    svc = service(state_dir)
    handle = svc.submit(SubmitRequest(str(spec), target=target, region=region, stack_outputs=tuple(stack_outputs),
                                      job_name=job_name, detach=detach))
    return svc.describe(handle)


def status(job_id: str, *, state_dir: str | os.PathLike | None = None) -> JobStatus:
    """The job's state now and, once it ended, its exit code, source, reason and root cause.

    Raises:
        SpecError: no such job in the records (an ambiguous prefix names the candidates).
    """
    return service(state_dir).describe(job_id)


def jobs(*, states: Sequence[JobState | str] = (), spec: str | None = None, target: str | None = None,
         limit: int | None = 50, state_dir: str | os.PathLike | None = None) -> list[JobStatus]:
    """The recorded jobs, newest first, each as its target describes it now (``states``, ``spec``: filters)."""
    return service(state_dir).list(states=states, spec=spec, target=target, limit=limit)


def cancel(job_id: str, *, state_dir: str | os.PathLike | None = None) -> JobStatus:
    """Stop the job on every host (SIGTERM, its grace period, SIGKILL); its status once nothing of it runs
    (SageMaker: once StopTrainingJob was accepted).  A job that already ended is left as it is."""
    return service(state_dir).cancel(job_id)[0]


def logs(job_id: str, *, rank: int | None = None, follow: bool = False,
         state_dir: str | os.PathLike | None = None) -> Iterator[str]:
    """The job's output lines, each behind ``[rank host]`` (``rank``: only that rank's); with ``follow``, new
    lines as they come until the job ends."""
    return service(state_dir).logs(job_id, rank=rank, follow=follow)
