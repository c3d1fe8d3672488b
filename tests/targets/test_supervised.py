"""targets/supervised.py: what is known of a job this machine supervises, from its record and run directory alone.

Real files in a private run directory and a real, ended process as the supervisor that is gone; cancel of a
live supervisor is tested where one runs (tests/service/test_lifecycle.py, tests/records/test_store_attacks.py).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from mpirun_kit.errors import ExitCode
from mpirun_kit.exec.result import JobResult
from mpirun_kit.records import JobRecord, JobState
from mpirun_kit.targets import supervised


@pytest.mark.parametrize("code, cancelled, state", [
    (0, False, JobState.SUCCEEDED),
    (0, True, JobState.SUCCEEDED),           # it ended well before the cancel reached it
    (3, False, JobState.FAILED),
    (3, True, JobState.CANCELLED),
    (int(ExitCode.SIGTERM), False, JobState.CANCELLED),
    (int(ExitCode.INTERRUPTED), False, JobState.CANCELLED),
    (128 + signal.SIGHUP, False, JobState.CANCELLED),
    (int(ExitCode.HUNG), False, JobState.FAILED),
])
def test_state_of_an_exit_code(code, cancelled, state):
    assert supervised.state_of(code, cancelled=cancelled) == state


def test_rank_filter_keeps_one_ranks_lines_behind_any_host_prefix():
    keep = supervised.rank_filter(1)
    assert keep("[1 node-a] step 3")
    assert keep("[node-b] [1 node-a] step 3")      # a host prefix before the rank's
    assert not keep("[10 node-a] step 3")
    assert not keep("[0 node-a] rank 1 said this")
    assert not keep("rank 1 says")
    assert supervised.rank_filter(None)("anything")


def _gone_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _record(tmp_path, state=JobState.RUNNING, **kw) -> JobRecord:
    run = tmp_path / "run"
    run.mkdir(mode=0o700, exist_ok=True)
    return JobRecord("hello-abc123", "hello", "local", state=state, run_dir=str(run),
                     supervisor_pid=_gone_pid(), supervisor_start=1, **kw)


def _write(path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    os.chmod(path, 0o600)


def test_a_running_job_whose_supervisor_left_nothing_is_lost(tmp_path):
    rec = _record(tmp_path)
    st = supervised.describe(rec)
    assert st.state == JobState.LOST
    assert f"its supervisor (pid {rec.supervisor_pid}) ended without a result" in st.reason


def test_a_running_job_whose_supervisor_left_its_outcome_ended_as_the_outcome_says(tmp_path):
    rec = _record(tmp_path)
    result = JobResult(exit_code=3, reason="rank 1 failed", cause="rank_failed")
    _write(rec.path("outcome"), {"exit_code": 3, "source": "job", "reason": "rank 1 failed",
                                 "root_cause": None, "result": result.to_dict()})
    st = supervised.describe(rec)
    assert (st.state, st.exit_code, st.source, st.reason) == (JobState.FAILED, 3, "job", "rank 1 failed")
    assert st.result == result


def test_the_outcome_file_wins_over_a_result_json_made_before_the_rename(tmp_path):
    rec = _record(tmp_path)
    _write(rec.path("result"), {"exit_code": 7})
    assert supervised.read_result(rec) == {"exit_code": 7}
    _write(rec.path("outcome"), {"exit_code": 0})
    assert supervised.read_result(rec) == {"exit_code": 0}


def test_an_unreadable_outcome_is_none_and_an_outcome_without_a_result_wraps_none(tmp_path):
    rec = _record(tmp_path)
    _write(rec.path("outcome"), "{not json")
    assert supervised.read_result(rec) is None
    assert supervised.job_result({"exit_code": 1}) is None
    assert supervised.job_result(None) is None


def test_logs_read_every_line_or_one_ranks_and_the_last_unfinished_one(tmp_path):
    rec = _record(tmp_path, state=JobState.SUCCEEDED)
    _write(rec.path("output"), "[0 a] one\n[1 b] two\n[0 a] three\n[1 b] unfinished")
    assert list(supervised.logs(rec)) == ["[0 a] one", "[1 b] two", "[0 a] three", "[1 b] unfinished"]
    assert list(supervised.logs(rec, rank=1)) == ["[1 b] two", "[1 b] unfinished"]


def test_cancel_of_an_ended_job_signals_nothing_and_says_how_it_ended(tmp_path):
    rec = _record(tmp_path, state=JobState.SUCCEEDED, exit_code=0)
    rec = JobRecord(**{**rec.__dict__, "supervisor_pid": os.getpid(), "supervisor_start": None})
    st = supervised.cancel(rec)   # our own pid: a signal would end this test
    assert (st.state, st.exit_code) == (JobState.SUCCEEDED, 0)
