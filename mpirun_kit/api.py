"""The Python API: ``submit``, ``status``, ``jobs``, ``cancel`` and ``logs`` as library calls that return values.

Place in the data flow: the same path as the `mpirun_kit` commands (cli/submit.py's ``begin``,
``supervise`` and ``start_detached``; the job's target for the lifecycle), without the printing: a
call returns a ``JobStatus`` (targets/base.py) or lines, and raises the one exception hierarchy
(errors.MpirunKitError: ``SpecError`` for a bad spec or an unknown job, ``ClusterError`` for an
unreachable host or platform...).  The job records are the CLI's (the same store: ``state_dir``, else
``$MPIRUN_KIT_STATE_DIR``, ``$XDG_STATE_HOME/mpirun_kit``, ``~/.local/state/mpirun_kit``), so a job
submitted here is seen by `mpirun_kit jobs` and the other way round.

    from mpirun_kit import api

    job = api.submit("jobs/allreduce-bench.yaml")             # detached: returns once it runs
    api.status(job.job_id).state                              # JobState.RUNNING
    for line in api.logs(job.job_id, rank=0, follow=True):    # until it ends
        print(line)
    api.status(job.job_id).exit_code                          # 0
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Iterator, Sequence

from .records import JobState
from .targets.base import JobStatus

__all__ = ["submit", "status", "jobs", "cancel", "logs", "JobStatus", "JobState"]


def _args(spec: str | os.PathLike | None = None, *, state_dir: str | os.PathLike | None = None,
          **kw) -> argparse.Namespace:
    """The namespace cli/submit.py's functions read, as the command line would fill it."""
    base = {"spec": str(spec) if spec is not None else None, "target": None, "region": None, "stack_output": [],
            "json": False, "dry_run": False, "wait": False, "job_name": None, "keep_keys": False,
            "resume_from": None, "detach": False, "quiet": True, "verbose": 0,
            "state_dir": str(state_dir) if state_dir is not None else None}
    return argparse.Namespace(**{**base, **kw})


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
    from .cli.submit import begin, compile_for_submit, start_detached, supervise
    from .targets import get_target

    args = _args(spec, state_dir=state_dir, target=target, region=region, stack_output=list(stack_outputs),
                 job_name=job_name, detach=detach)
    compiled = compile_for_submit(args, report=lambda line: None)
    tgt = get_target(compiled.job.target.type)
    store, rec, dry, opts = begin(args, compiled, tgt)
    if detach:
        start_detached(store, rec)
    else:
        supervise(store, rec, tgt, dry, opts, started=time.time(), tee=False)
    return status(rec.job_id, state_dir=store.dir)


def status(job_id: str, *, state_dir: str | os.PathLike | None = None) -> JobStatus:
    """The job's state now and, once it ended, its exit code, source, reason and root cause.

    Raises:
        SpecError: no such job in the records (an ambiguous prefix names the candidates).
    """
    from .cli.jobs import describe_job

    return describe_job(*_record(job_id, state_dir))


def jobs(*, states: Sequence[JobState | str] = (), spec: str | None = None, target: str | None = None,
         limit: int | None = 50, state_dir: str | os.PathLike | None = None) -> list[JobStatus]:
    """The recorded jobs, newest first, each as its target describes it now (``states``, ``spec``: filters)."""
    from .cli.common_flags import store_of
    from .targets import get_target

    records = store_of(_args(state_dir=state_dir)).list(spec=spec, target=target)
    wanted = {JobState(s) for s in states}
    out = [s for r in records for s in get_target(r.target).list([r]) if not wanted or s.state in wanted]
    return out[:limit] if limit else out


def cancel(job_id: str, *, state_dir: str | os.PathLike | None = None) -> JobStatus:
    """Stop the job on every host (SIGTERM, its grace period, SIGKILL); its status once nothing of it runs
    (SageMaker: once StopTrainingJob was accepted).  A job that already ended is left as it is."""
    from .cli.jobs import cancel_job

    return cancel_job(*_record(job_id, state_dir))[0]


def logs(job_id: str, *, rank: int | None = None, follow: bool = False,
         state_dir: str | os.PathLike | None = None) -> Iterator[str]:
    """The job's output lines, each behind ``[rank host]`` (``rank``: only that rank's); with ``follow``, new
    lines as they come until the job ends."""
    _, rec = _record(job_id, state_dir)
    from .targets import get_target

    return get_target(rec.target).logs(rec, rank=rank, follow=follow)


def _record(job_id: str, state_dir):
    from .cli.common_flags import store_of

    store = store_of(_args(state_dir=state_dir))
    return store, store.get(job_id)
