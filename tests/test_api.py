"""The Python API (mpirun_kit/api.py, issue #28 item 6): submit, status, jobs, logs and cancel as library
calls returning values, with real mpirun and ranks on this machine; one store with the CLI's."""
from __future__ import annotations

import json

import pytest
from jobs_kit import LONG, local_spec as spec, mrk, wait_for

from mpirun_kit import api
from mpirun_kit.errors import SpecError
from mpirun_kit.records import JobState

pytestmark = pytest.mark.mpi


def test_submit_in_the_foreground_returns_how_it_ended(tmp_path, capfd):
    done = api.submit(spec(tmp_path, "fg", "[sh, -c, 'exit $((OMPI_COMM_WORLD_RANK * 4))']"), detach=False)
    assert (done.state, done.exit_code, done.source) == (JobState.FAILED, 4, "job")
    assert done.root_cause == {"rank": 1, "host": "localhost", "exit_code": 4, "signal": None}
    assert api.status(done.job_id) == done
    # the CLI sees the same record
    assert json.loads(mrk("status", done.job_id, "--json", check=4).stdout)["state"] == "failed"


def test_submit_detached_then_logs_jobs_and_cancel(tmp_path):
    job = api.submit(spec(tmp_path, "bg", f"[python3, -c, {json.dumps(LONG)}]"))
    assert job.state == JobState.RUNNING and job.target == "local"
    wait_for(lambda: "[0 localhost] tick 1" in list(api.logs(job.job_id)), "rank 0's second line")
    assert all(line.startswith("[1 localhost] ") for line in api.logs(job.job_id, rank=1))
    assert [j.job_id for j in api.jobs(states=["running"])] == [job.job_id]
    end = api.cancel(job.job_id)
    assert (end.state, end.exit_code, end.root_cause) == (JobState.CANCELLED, 143, None)
    assert api.cancel(job.job_id) == end          # an ended job is left as it is
    with pytest.raises(SpecError, match="no job 'nope' in the job records"):
        api.status("nope")


def test_the_api_reads_the_users_stack_prefix_as_the_cli_does(tmp_path):
    """Issue 37 finding 4: ``${stack:mrk-role...}`` means the user's own stacks through the API too."""
    from mpirun_kit import api

    (tmp_path / "config").write_text("stack_prefix = mrk-erin\n")
    svc = api.service(tmp_path / "state", environ={"MPIRUN_KIT_CONFIG_DIR": str(tmp_path)})
    names = svc.stack_names() if callable(svc.stack_names) else svc.stack_names
    assert names.of("mrk-role") == "mrk-erin-role"
