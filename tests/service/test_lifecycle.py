"""service/lifecycle.py: a recorded job's status through its target, written back to the record; the exit code
a status stands for; listing with filters."""
from __future__ import annotations

from mpirun_kit.errors import ExitCode
from mpirun_kit.records import JobState, RecordStore
from mpirun_kit.service import lifecycle
from mpirun_kit.targets.base import JobStatus


def test_a_running_record_whose_supervisor_is_gone_is_lost_and_the_record_learns_it(tmp_path):
    store = RecordStore(tmp_path / "state")
    rec = store.create("j", "local", spec=None, runs_root=tmp_path / "runs")
    rec = store.update(rec.job_id, state=JobState.RUNNING, supervisor_pid=2 ** 22 + 1, supervisor_start=1)
    status = lifecycle.describe_job(store, rec)
    assert status.state == JobState.LOST
    assert store.get(rec.job_id).state == JobState.LOST
    assert lifecycle.status_code(status) == ExitCode.LAUNCH_FAILED


def test_status_code_is_zero_until_the_end_then_the_jobs():
    status = lambda state, code=None: JobStatus("j", "j", "local", state, exit_code=code)  # noqa: E731
    assert [lifecycle.status_code(status(s)) for s in (JobState.PENDING, JobState.RUNNING)] == [0, 0]
    assert lifecycle.status_code(status(JobState.FAILED, 4)) == 4
    assert lifecycle.status_code(status(JobState.CANCELLED, 143)) == 143


def test_list_filters_by_state_and_target_newest_first(tmp_path):
    store = RecordStore(tmp_path / "state")
    ids = []
    for i, (target, end) in enumerate((("local", JobState.SUCCEEDED), ("local", JobState.FAILED),
                                       ("sim", JobState.FAILED))):
        rec = store.create(f"j{i}", target, spec=None, runs_root=tmp_path / "runs", now=100.0 + i)
        store.finish(rec.job_id, state=end, exit_code=0 if end == JobState.SUCCEEDED else 1)
        ids.append(rec.job_id)
    assert [s.job_id for s in lifecycle.list_jobs(store)] == ids[::-1]
    assert [s.job_id for s in lifecycle.list_jobs(store, states=["failed"])] == [ids[2], ids[1]]
    assert [s.job_id for s in lifecycle.list_jobs(store, states=["failed"], target="local")] == [ids[1]]
    assert [s.job_id for s in lifecycle.list_jobs(store, states=["failed"], limit=1)] == [ids[2]]


def test_the_orphan_sweep_is_roots_only():
    assert lifecycle.sweep_orphans(euid=1000) == []
