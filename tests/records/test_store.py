"""The job record store (mpirun_kit/records/store.py): real SQLite files, real processes writing at once."""
from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.records import SUPERVISOR_CMD, JobState, RecordStore, default_state_dir, process_start
from mpirun_kit.records.store import command_digest, process_argv


def _create_many(state: str, runs: str, n: int, q) -> None:
    store = RecordStore(state)
    q.put([store.create("same-spec", "local", spec="/x/job.yaml", runs_root=runs).job_id for _ in range(n)])


def test_every_submission_gets_its_own_id_and_run_directory_even_from_processes_at_once(tmp_path):
    """Issue #28: two runs of one spec shared runs/NAME/launch.  Four processes making 10 records each of one
    spec at once: 40 ids, 40 directories, none shared, all in the one store."""
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_create_many, args=(str(tmp_path / "state"), str(tmp_path / "runs"), 10, q))
             for _ in range(4)]
    for p in procs:
        p.start()
    ids = [i for _ in procs for i in q.get(timeout=120)]
    for p in procs:
        p.join(60)
    assert len(ids) == len(set(ids)) == 40
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(ids)
    assert {r.job_id for r in RecordStore(tmp_path / "state").list()} == set(ids)
    assert all(i.startswith("same-spec-") for i in ids)


def test_a_run_directory_that_exists_is_never_reused(tmp_path, monkeypatch):
    from mpirun_kit.records import store as S

    ids = iter(["x-aaaaaa", "x-aaaaaa", "x-bbbbbb"])
    monkeypatch.setattr(S, "make_job_id", lambda name: next(ids))
    (tmp_path / "runs" / "x-aaaaaa").mkdir(parents=True)   # left by another store, or a copy
    rec = RecordStore(tmp_path / "state").create("x", "local", spec=None, runs_root=tmp_path / "runs")
    assert rec.job_id == "x-bbbbbb" and rec.run_dir == str(tmp_path / "runs" / "x-bbbbbb")


def test_get_by_id_prefix_and_native_name_and_the_errors(tmp_path):
    store = RecordStore(tmp_path)
    a = store.create("train", "sagemaker", spec=None, runs_root=None, native="train-20261127-101500")
    b = store.create("train", "local", spec=None, runs_root=tmp_path / "runs")
    assert store.get(a.job_id) == a and store.get("train-20261127-101500").job_id == a.job_id
    assert store.get(b.job_id[:-2]).job_id == b.job_id or len({a.job_id[:-2], b.job_id[:-2]}) == 1
    with pytest.raises(SpecError, match=rf"no job 'nope' in the job records \({tmp_path / 'jobs.db'}\); "
                                        r"`mpirun_kit jobs` lists the jobs recorded there"):
        store.get("nope")
    with pytest.raises(SpecError, match=r"job 'train' is ambiguous: it starts 2 job ids \(.*\); give more of it"):
        store.get("train")
    # LIKE's wildcards in a reference are taken literally
    with pytest.raises(SpecError, match="no job 'tr%'"):
        store.get("tr%")


def test_update_finish_and_list_filters(tmp_path):
    store = RecordStore(tmp_path / "s")
    a = store.create("one", "local", spec=str(tmp_path / "one.yaml"), runs_root=tmp_path / "r", now=1.0)
    b = store.create("two", "sim", spec=str(tmp_path / "two.yaml"), runs_root=tmp_path / "r", now=2.0)
    store.update(a.job_id, state=JobState.RUNNING, supervisor_pid=os.getpid(), details={"grace_s": 3})
    done = store.finish(b.job_id, state=JobState.FAILED, exit_code=3, source="job", reason="rank 1 exited",
                        root_cause={"rank": 1, "host": "algo-2", "exit_code": 3, "signal": None})
    assert (done.state, done.exit_code, done.root_cause["host"]) == (JobState.FAILED, 3, "algo-2")
    # an ended job keeps its end: a later writer (a late cancel) does not overwrite it
    assert store.finish(b.job_id, state=JobState.CANCELLED, exit_code=143).state == JobState.FAILED
    assert [r.job_id for r in store.list()] == [b.job_id, a.job_id]   # newest first
    assert [r.job_id for r in store.list(states=[JobState.RUNNING])] == [a.job_id]
    assert [r.job_id for r in store.list(spec=str(tmp_path / "two.yaml"))] == [b.job_id]
    assert [r.job_id for r in store.list(spec="one")] == [a.job_id]
    assert [r.job_id for r in store.list(target="sim")] == [b.job_id]
    got = store.get(a.job_id)
    assert (got.details, got.supervisor_pid, got.state.terminal) == (
        {"grace_s": 3, SUPERVISOR_CMD: command_digest(process_argv(os.getpid()))}, os.getpid(), False)   # recorded itself
    with pytest.raises(TypeError, match="unknown record fields"):
        store.update(a.job_id, colour="red")


def test_an_unwritable_store_names_the_file_and_the_remedy(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SpecError, match=r"job records: cannot open .*file/sub/jobs.db \(.*\); set --state-dir or "
                                        r"MPIRUN_KIT_STATE_DIR to a writable directory"):
        RecordStore(blocker / "sub").list()


def test_the_store_follows_xdg_and_the_override():
    assert default_state_dir({"HOME": "/h"}) == Path("/h/.local/state/mpirun_kit")
    assert default_state_dir({"HOME": "/h", "XDG_STATE_HOME": "/x"}) == Path("/x/mpirun_kit")
    assert default_state_dir({"HOME": "/h", "XDG_STATE_HOME": "/x", "MPIRUN_KIT_STATE_DIR": "/o"}) == Path("/o")


def test_process_start_tells_a_reused_pid_from_the_process_recorded():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        start = process_start(p.pid)
        assert start is not None and start == process_start(p.pid)
        assert process_start(os.getpid()) != start
    finally:
        p.kill()
        p.wait()
    assert process_start(p.pid) is None
