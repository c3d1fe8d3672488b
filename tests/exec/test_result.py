"""exec/result.py: the root cause is the first failure by time; the result is JSON first and its text is generated from
it; the failure file's first line is that JSON's head, the only part any reader takes (issue 31 item 1)."""
import json

import pytest

from mpirun_kit.exec.result import FAILURE_HEADER, FAILURE_REASON_LIMIT, JobResult, RankFailure, error_result, \
    exit_code_from_failure, failure_file_text, failure_text, job_result, rank_failure_from_report, \
    result_from_failure, result_from_message, split_failure
from mpirun_kit.exec.signals import signal_name
from mpirun_kit.targets.sagemaker import exit_code_for

FIRST = RankFailure(3, "algo-2", 3, None, 100.0)
LATE = RankFailure(0, "algo-1", None, "SIGTERM", 101.0)


def test_signal_names():
    assert signal_name(9) == "SIGKILL" and signal_name(15) == "SIGTERM" and signal_name(99) == "signal 99"


def test_report_parsing():
    assert rank_failure_from_report({"rank": 1, "host": "h", "exit_code": 0, "signal": None, "t": 1.0}) is None
    assert rank_failure_from_report({"rank": 1, "host": "h", "exit_code": None, "signal": "SIGKILL", "t": 2.5}) \
        == RankFailure(1, "h", None, "SIGKILL", 2.5)


def test_root_cause_is_first_by_time():
    r = job_result(3, None, (LATE, FIRST), ("mpirun: job aborted",))
    assert (r.exit_code, r.root_cause, r.failures, r.source, r.kind) == (3, FIRST, (FIRST, LATE), "job", "rank_failed")
    assert r.summary == ("root cause: rank 3 on algo-2 exited with code 3 (first seen 00:01:40.000Z)\n"
                         "1 more rank(s) failed after it: rank 0@algo-1 SIGTERM\n"
                         "mpirun output (last lines):\nmpirun: job aborted")
    assert r.text(tail=False) == r.summary.split("\nmpirun output")[0]


def test_the_json_carries_the_root_cause_as_data():
    d = json.loads(job_result(3, None, (LATE, FIRST), ("mpirun: job aborted",)).to_json())
    assert {k: d[k] for k in ("version", "exit_code", "source", "cause", "reason", "interrupted_by", "rejections",
                              "failures_total")} == {
        "version": 1, "exit_code": 3, "source": "job", "cause": "rank_failed", "reason": "", "interrupted_by": None,
        "rejections": {}, "failures_total": 2}
    assert d["root_cause"] == {"rank": 3, "host": "algo-2", "exit_code": 3, "signal": None, "first_seen": 100.0}
    assert [f["rank"] for f in d["failures"]] == [3, 0]
    assert d["launcher"] == {"exit_code": 3, "signal": None, "tail": ["mpirun: job aborted"]}


@pytest.mark.parametrize("result", [
    job_result(3, None, (LATE, FIRST), ("mpirun: job aborted",)),
    job_result(None, "SIGKILL", ()),
    job_result(1, None, (FIRST,), interrupted_by="SIGTERM"),
    JobResult(74, reason="host lost: worker algo-3 stopped answering", cause="host_lost", tail=("x",),
              rejections={"mac": 2}),
    error_result(75, "worker algo-2: no heartbeat"),
    JobResult(0),
])
def test_the_json_round_trips_and_the_text_comes_from_it(result):
    back = JobResult.from_dict(json.loads(result.to_json()))
    assert back == result or (back.to_dict() == result.to_dict())
    assert back.text() == result.text()


@pytest.mark.parametrize("bad,word", [
    ({"version": 2, "exit_code": 3, "cause": "rank_failed"}, "version"),
    ({"version": 1, "exit_code": 300, "cause": "rank_failed"}, "exit_code"),
    ({"version": 1, "exit_code": 3, "cause": "oops"}, "cause"),
    ({"version": 1, "exit_code": 3, "cause": "rank_failed", "root_cause": {"rank": "x"}}, "rank failure"),
    ({"version": 1, "exit_code": 3, "cause": "rank_failed", "launcher": {"tail": [1]}}, "launcher"),
    ("mpirun_kit exit_code=3", "version"),
])
def test_a_result_that_is_not_one_is_refused_by_name(bad, word):
    with pytest.raises(ValueError, match=word):
        JobResult.from_dict(bad)


def test_a_worker_gets_the_masters_result_as_data():
    sent = job_result(3, None, (LATE, FIRST))
    assert result_from_message({"exit_code": 3, "result": sent.to_dict()}) == sent
    garbled = result_from_message({"exit_code": 3, "result": {"version": 1}})
    assert (garbled.exit_code, garbled.kind) == (3, "launch_failed")
    assert garbled.reason.startswith("the master sent exit code 3 with a result that cannot be read (exit_code 'None' is not an integer 0-255)")


def test_the_json_is_bounded_for_the_channel():
    many = tuple(RankFailure(r, f"h{r}", 1, None, float(r)) for r in range(500))
    d = job_result(1, None, many, ("x" * 10_000,) * 50).to_dict()
    assert len(d["failures"]) == 64 and d["failures_total"] == 500 and len(d["launcher"]["tail"]) == 12
    assert len(json.dumps(d)) < 64 * 1024
    assert JobResult.from_dict(d).text().startswith("root cause: rank 0 on h0 exited with code 1 (first seen")
    assert "499 more rank(s) failed after it" in JobResult.from_dict(d).text()


def test_signal_death_maps_to_128_plus_n():
    r = job_result(137, None, (RankFailure(2, "algo-3", None, "SIGKILL", 5.0),))
    assert r.exit_code == 137
    assert r.summary.startswith("root cause: rank 2 on algo-3 was killed by SIGKILL")


def test_no_rank_report():
    assert job_result(0, None, ()).ok and job_result(0, None, ()).summary == ""
    r = job_result(1, None, ())
    assert (r.exit_code, r.source, r.kind) == (1, "launcher", "mpirun_failed")
    assert r.summary.startswith("mpirun exited with code 1; no rank reported a failure")
    r = job_result(None, "SIGKILL", ())
    assert (r.exit_code, r.summary) == (137, "mpirun was killed by SIGKILL; no rank reported a failure")


def test_interrupted_wins():
    r = job_result(1, None, (RankFailure(0, "h", None, "SIGTERM", 1.0),), interrupted_by="SIGTERM")
    assert (r.exit_code, r.source, r.kind, r.interrupted_by, r.root_cause) == (143, "user", "interrupted",
                                                                                 "SIGTERM", None)
    assert r.summary == ("the job was stopped by SIGTERM sent to the master entrypoint\n"
                         "1 rank(s) ended by the stop: rank 0@h SIGTERM")


def test_rejections_are_data_and_a_line_of_text():
    r = JobResult(3, reason="rank 1 failed", rejections={"mac": 2, "address": 1}, tail=("last",))
    assert r.to_dict()["rejections"] == {"address": 1, "mac": 2}
    assert r.summary == ("rank 1 failed\nresult channel refused 3 message(s)/connection(s) (address 1, mac 2); see "
                         "the master's log\nmpirun output (last lines):\nlast")


def test_failure_text_limit():
    text = failure_text(["root cause: x", "y" * 5000])
    assert len(text) == FAILURE_REASON_LIMIT and text.startswith("root cause: x\n") and text.endswith("\n...")


# -- the failure file: its first line is the JSON head, the only part any reader takes -------------------------
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
    JobResult(76, reason="hung: " + "stack frame\n" * 500, cause="hung"),
])
def test_the_head_round_trips_through_sagemakers_failure_reason(result):
    text = failure_file_text(result)
    assert text.startswith(FAILURE_HEADER) and len(text) <= FAILURE_REASON_LIMIT
    head, body = split_failure(_sagemaker_failed(text)["FailureReason"])
    assert head == result.head() and body.startswith(result.text(limit=None)[:100])
    assert exit_code_for(_sagemaker_failed(text)) == result.exit_code != 0


@pytest.mark.parametrize("reason", [
    "AlgorithmError: worker exited with code 0",
    "AlgorithmError: root cause: rank 0 on algo-1 exited with code 0",
    "AlgorithmError: mpirun_kit exit_code=0\nroot cause: nothing",
    'AlgorithmError: mpirun_kit result {"version":1,"exit_code":0,"cause":"succeeded","source":"job"}',
    "AlgorithmError: some text\n" + failure_file_text(JobResult(3, FIRST, (FIRST,))),
    "InternalServerError: We encountered an internal error.",
    "",
])
def test_a_failed_job_never_maps_to_0(reason):
    assert exit_code_for({"TrainingJobStatus": "Failed", "SecondaryStatus": "Failed", "FailureReason": reason}) == 1


def test_only_the_first_line_is_read():
    killed, rank3 = failure_file_text(job_result(None, "SIGKILL", ())), failure_file_text(job_result(3, None, (FIRST,)))
    assert exit_code_from_failure(killed + "\n" + rank3) == 137
    assert exit_code_from_failure("x\n" + rank3) is None
    assert exit_code_from_failure(FAILURE_HEADER + '{"version":1,"exit_code":999,"cause":"rank_failed"}') is None
    assert exit_code_from_failure(FAILURE_HEADER + "{not json") is None
    assert exit_code_from_failure("ClientError: " + failure_file_text(error_result(74, "lost"))) == 74
    assert result_from_failure("Note: " + rank3) is None


def test_the_text_quotes_program_output_but_the_head_never_does():
    lying = job_result(1, None, (), ('mpirun_kit result {"version":1,"exit_code":0}', "root cause: rank 9 on evil"))
    head, body = split_failure(failure_file_text(lying))
    assert (head["exit_code"], head["root_cause"], head["cause"]) == (1, None, "mpirun_failed")
    assert "rank 9 on evil" in body


def test_a_deadline_blames_no_rank_and_lists_the_ranks_it_ended():
    """The ranks the deadline's stop killed are consequences (entrypoint/master.py drops the root cause)."""
    from dataclasses import replace

    ended = replace(job_result(143, None, (LATE,)), exit_code=124, cause="timeout", root_cause=None,
                    reason="the job ran past its deadline of 2 s and was stopped")
    assert (ended.source, ended.to_dict()["root_cause"], ended.to_dict()["failures_total"]) == ("launcher", None, 1)
    assert ended.summary == ("the job ran past its deadline of 2 s and was stopped\n"
                             "1 rank(s) ended by the stop: rank 0@algo-1 SIGTERM")
