"""Root cause = first failure by time; exit codes for codes and signals; the 1024-char failure text."""
from mpirun_kit.exec.result import FAILURE_REASON_LIMIT, JobResult, RankFailure, failure_text, job_result, \
    rank_failure_from_report
from mpirun_kit.exec.signals import signal_name


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


# -- issue 12, finding 4: the exit code travels in one fixed first line, and only that line is read ----------
import pytest  # noqa: E402

from mpirun_kit.exec.result import exit_code_from_failure, failure_file_text  # noqa: E402
from mpirun_kit.targets.sagemaker import exit_code_for  # noqa: E402


def _sagemaker_failed(text: str) -> dict:
    """What DescribeTrainingJob returns for a failed job: SageMaker prefixes the failure file's text."""
    return {"TrainingJobStatus": "Failed", "SecondaryStatus": "Failed",
            "FailureReason": ("AlgorithmError: " + text)[:FAILURE_REASON_LIMIT]}


@pytest.mark.parametrize("result", [
    job_result(137, None, (RankFailure(5, "algo-3", None, "SIGKILL", 5.0),)),
    job_result(None, "SIGKILL", ()),                       # mpirun itself killed: the master lost
    job_result(1, None, (), ("worker exited with code 0",)),  # the program's own last line names code 0
    job_result(3, None, (RankFailure(1, "h", 3, None, 1.0),), ("exit code 9",) * 200),
    job_result(0, None, (), interrupted_by="SIGTERM"),
])
def test_sagemaker_exit_code_round_trips_through_the_failure_file(result):
    text = failure_file_text(result.exit_code, result.summary)
    assert text.startswith(f"mpirun_kit exit_code={result.exit_code}\n") and len(text) <= FAILURE_REASON_LIMIT
    assert exit_code_for(_sagemaker_failed(text)) == result.exit_code != 0


@pytest.mark.parametrize("reason", [
    "AlgorithmError: worker exited with code 0",
    "AlgorithmError: root cause: rank 0 on algo-1 exited with code 0",
    "AlgorithmError: mpirun_kit exit_code=0\nroot cause: nothing",
    "AlgorithmError: some text\nmpirun_kit exit_code=0",
    "InternalServerError: We encountered an internal error.",
    "",
])
def test_a_failed_job_never_maps_to_0(reason):
    assert exit_code_for({"TrainingJobStatus": "Failed", "SecondaryStatus": "Failed", "FailureReason": reason}) == 1


def test_only_the_first_line_is_read():
    assert exit_code_from_failure("mpirun_kit exit_code=137\nmpirun_kit exit_code=3") == 137
    assert exit_code_from_failure("x\nmpirun_kit exit_code=3") is None
    assert exit_code_from_failure("mpirun_kit exit_code=999") is None
    assert exit_code_from_failure("ClientError: mpirun_kit exit_code=74") == 74
