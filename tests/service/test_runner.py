"""service/runner.py: ``JobService``, typed in and out, with real mpirun and ranks on this machine."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from jobs_kit import local_spec as spec, mrk

from mpirun_kit.records import JobState, RecordStore
from mpirun_kit.service.requests import JobHandle, SubmitRequest
from mpirun_kit.service.runner import JobService

pytestmark = pytest.mark.mpi


def test_submit_returns_a_handle_that_every_verb_takes(tmp_path):
    svc = JobService(RecordStore(tmp_path / "state"))
    req = SubmitRequest(spec(tmp_path, "fg", "[sh, -c, 'echo hi; exit $((OMPI_COMM_WORLD_RANK * 4))']"))
    handle = svc.submit(req)
    assert isinstance(handle, JobHandle) and (handle.name, handle.target) == ("fg", "local")
    status = svc.wait(handle, timeout_s=0)
    assert (status.state, status.exit_code, status.source) == (JobState.FAILED, 4, "job")
    assert status.root_cause == {"rank": 1, "host": "localhost", "exit_code": 4, "signal": None}
    assert svc.describe(handle.job_id) == status
    # the whole JobResult the master wrote, wrapped (issue 38): `status --json` carries it as exec/result.py has it
    written = json.loads((Path(handle.run_dir) / "output" / "result.json").read_text())
    assert status.result.to_dict() == written and written["failures"] and written["launcher"]["tail"]
    shown = json.loads(mrk("status", handle.job_id, "--json", "--state-dir", str(svc.store.dir), check=4).stdout)
    assert shown["result"] == written
    # (what the ranks print reaches output.log through this process's fd 1, which pytest's capture bypasses:
    # tests/test_api.py reads a detached job's lines)
    assert all(isinstance(line, str) for line in svc.logs(handle))
    assert svc.cancel(handle) == (status, True)    # an ended job is left as it is
    assert [s.job_id for s in svc.list(states=[JobState.FAILED])] == [handle.job_id]


def test_a_dry_run_records_nothing(tmp_path):
    svc = JobService(RecordStore(tmp_path / "state"))
    dry = svc.dry_run(SubmitRequest(spec(tmp_path, "dry", "['true']")))
    assert (dry.target, dry.job) == ("local", "dry")
    assert svc.list() == []
