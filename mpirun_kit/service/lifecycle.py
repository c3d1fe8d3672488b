"""Following a recorded job: its status, a cancel, the exit code a status stands for, the sim-orphan sweep.

Place in the data flow: the record comes from the store (records/), the work from the job's target
(targets/base.py ``Target.describe``, ``cancel``, ``list``); what a target learns that the record did
not know yet (a lost job, a platform job that ended) is written back to the record here.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from ..errors import ExitCode
from ..records import JobRecord, JobState, RecordStore
from ..targets.base import JobStatus, Target


def target_of(rec: JobRecord) -> Target:
    from ..targets import get_target

    return get_target(rec.target)


def describe_job(store: RecordStore, rec: JobRecord) -> JobStatus:
    """The job's status from its target, its end written to the record when the record did not know it yet
    (a lost job, a SageMaker job that ended)."""
    status = with_record(target_of(rec).describe(rec), rec)
    if status.state != rec.state and status.state.terminal:
        store.finish(rec.job_id, state=status.state, exit_code=status.exit_code, source=status.source,
                     reason=status.reason, root_cause=status.root_cause)
    return status


def with_record(status: JobStatus, rec: JobRecord) -> JobStatus:
    """``status`` with what the record alone knows, whatever the target: its planned nodes and who submitted it."""
    return dataclasses.replace(status, nodes=rec.details.get("nodes"), user=rec.details.get("user"))


def cancel_job(store: RecordStore, rec: JobRecord) -> tuple[JobStatus, bool]:
    """Cancel the job ``rec`` through its target -> (its status after, whether it had ended before).

    The record says a cancel was asked for first, so the supervisor records the end as cancelled; a
    supervisor killed after the grace period wrote no end, so it is written here."""
    target = target_of(rec)
    before = describe_job(store, rec)
    if before.state.terminal:
        return before, True
    rec = store.update(rec.job_id, cancel_requested=True)
    status = target.cancel(rec)
    if status.state == JobState.LOST or not (target.platform or status.state.terminal):
        store.finish(rec.job_id, state=JobState.CANCELLED, exit_code=status.exit_code or ExitCode.SIGKILL,
                     source="user", reason="cancelled (`mpirun_kit cancel`): its supervisor was killed after the "
                                           "grace period")
    elif status.state.terminal:
        store.finish(rec.job_id, state=status.state, exit_code=status.exit_code, source=status.source,
                     reason=status.reason, root_cause=status.root_cause)
    return with_record(target.describe(store.get(rec.job_id)) if not target.platform else status, rec), False


def list_jobs(store: RecordStore, *, states=None, spec: str | None = None, target: str | None = None,
              limit: int | None = 50) -> list[JobStatus]:
    """The recorded jobs, newest first, each as its target describes it now (``states``, ``spec``, ``target``:
    filters; ``limit``: at most that many after the state filter, None or 0: all)."""
    from ..targets import get_target

    wanted = [JobState(s) for s in states] if states else None
    records = store.list(spec=spec, target=target, limit=limit if not wanted else None)
    by_target: dict[str, list] = {}
    for r in records:
        by_target.setdefault(r.target, []).append(r)
    statuses = {s.job_id: s for t, recs in by_target.items() for s in get_target(t).list(recs)}
    rows = [with_record(statuses[r.job_id], r) for r in records if r.job_id in statuses]
    if wanted:
        rows = [s for s in rows if s.state in wanted][:limit or None]
    return rows


def status_code(status: JobStatus) -> int:
    """The exit code a status stands for (``status``'s): 0 while the job is pending or running, else the job's
    own (70: lost)."""
    if not status.state.terminal:
        return 0
    if status.state == JobState.LOST:
        return ExitCode.LAUNCH_FAILED
    return int(status.exit_code or 0)


def sweep_orphans(report: Callable[[str], None] | None = None, *, euid: int | None = None) -> list[str]:
    """Tear down the sim clusters whose supervisor died by SIGKILL (sim/cluster.py), each said to ``report``;
    run before every submit and job listing.  Root only (the namespaces are root's); cheap when none is
    recorded."""
    import os

    if (os.geteuid() if euid is None else euid) != 0:
        return []
    from ..sim.cluster import sweep_orphans as sweep

    return sweep(report=report)
