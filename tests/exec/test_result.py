"""Root cause = first failure by time; exit codes for codes and signals; the 1024-char failure text."""
from mpirun_kit.exec.result import FAILURE_REASON_LIMIT, JobResult, RankFailure, failure_text, job_result, \
    rank_failure_from_report, signal_name


def test_signal_names():
    assert signal_name(9) == "SIGKILL" and signal_name(15) == "SIGTERM" and signal_name(99) == "signal 99"


def test_report_parsing():
    assert rank_failure_from_report({"rank": 1, "host": "h", "exit_code": 0, "signal": None, "t": 1.0}) is None
    assert rank_failure_from_report({"rank": 1, "host": "h", "exit_code": None, "signal": "SIGKILL", "t": 2.5}) \
        == RankFailure(1, "h", None, "SIGKILL", 2.5)


def test_root_cause_is_first_by_time():
    late = RankFailure(0, "algo-1", None, "SIGTERM", 101.0)
    first = RankFailure(3, "algo-2", 3, None, 100.0)
    r = job_result(3, None, (late, first), ("mpirun: job aborted",))
    assert (r.exit_code, r.root_cause, r.failures) == (3, first, (first, late))
    assert r.summary == ("root cause: rank 3 on algo-2 exited with code 3 (first seen 00:01:40.000Z)\n"
                         "1 more rank(s) failed after it: rank 0@algo-1 SIGTERM\n"
                         "mpirun output (last lines):\nmpirun: job aborted")


def test_signal_death_maps_to_128_plus_n():
    r = job_result(137, None, (RankFailure(2, "algo-3", None, "SIGKILL", 5.0),))
    assert r.exit_code == 137
    assert r.summary.startswith("root cause: rank 2 on algo-3 was killed by SIGKILL")


def test_no_rank_report():
    assert job_result(0, None, ()) == JobResult(0, None, (), "")
    r = job_result(1, None, ())
    assert r.exit_code == 1 and r.summary.startswith("mpirun exited with code 1; no rank reported a failure")
    r = job_result(None, "SIGKILL", ())
    assert (r.exit_code, r.summary) == (137, "mpirun was killed by SIGKILL; no rank reported a failure")


def test_interrupted_wins():
    r = job_result(1, None, (RankFailure(0, "h", None, "SIGTERM", 1.0),), interrupted_by="SIGTERM")
    assert r.exit_code == 143
    assert r.summary.startswith("the job was stopped by SIGTERM sent to the master entrypoint\nroot cause: rank 0")


def test_failure_text_limit():
    text = failure_text(["root cause: x", "y" * 5000])
    assert len(text) == FAILURE_REASON_LIMIT and text.startswith("root cause: x\n") and text.endswith("\n...")
