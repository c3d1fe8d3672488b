"""service/supervise.py: the one process that supervises a recorded job writes its end whatever happened.

The target is the real local target with ``run`` replaced: what the supervisor records is under test (the
real runs are tests/service/test_runner.py's and tests/test_api.py's)."""
from __future__ import annotations

import json
import os

import pytest

from mpirun_kit.errors import LaunchError, NoSuchJobError
from mpirun_kit.records import JobState, RecordStore
from mpirun_kit.service.compile import compile_spec
from mpirun_kit.service.requests import SubmitRequest
from mpirun_kit.service.runs import begin
from mpirun_kit.service.supervise import run_recorded, supervise
from mpirun_kit.targets.local import LocalTarget
from mpirun_kit.targets.outcome import outcome_of


def recorded(tmp_path, target):
    spec = tmp_path / "s.yaml"
    spec.write_text("apiVersion: mpirun_kit/v1\nkind: Job\nname: s\nprogram: {command: ['true']}\n")
    store = RecordStore(tmp_path / "state")
    compiled, _, _ = compile_spec(str(spec), default_region=lambda: None)
    return store, begin(store, SubmitRequest(str(spec)), compiled, target)


def test_the_supervisor_records_itself_then_the_end(tmp_path):
    seen = []

    class Ends3(LocalTarget):
        def run(self, dry, opts=None, *, started=None):
            seen.append(store.get(sub.record.job_id))
            return outcome_of("local", dry.job, 3, started=started, ended=started)

    store, sub = recorded(tmp_path, Ends3())
    out = supervise(store, sub, started=1.0, tee=False)
    assert out.exit_code == 3
    assert (seen[0].state, seen[0].supervisor_pid) == (JobState.RUNNING, os.getpid())
    rec = store.get(sub.record.job_id)
    assert (rec.state, rec.exit_code, rec.source) == (JobState.FAILED, 3, "job")
    assert json.loads(rec.path("outcome").read_text())["job_id"] == rec.job_id


def test_an_error_of_ours_while_running_still_ends_the_record(tmp_path):
    class Breaks(LocalTarget):
        def run(self, dry, opts=None, *, started=None):
            raise LaunchError("mpirun vanished")

    store, sub = recorded(tmp_path, Breaks())
    with pytest.raises(LaunchError):
        supervise(store, sub, started=1.0, tee=False)
    rec = store.get(sub.record.job_id)
    assert (rec.state, rec.exit_code, rec.source, rec.reason) == (JobState.FAILED, 70, "launcher", "mpirun vanished")


def test_running_an_unknown_record_names_the_store(tmp_path):
    store = RecordStore(tmp_path / "state")
    with pytest.raises(NoSuchJobError, match="no job 'nope' in the job records"):
        run_recorded(store, "nope")
