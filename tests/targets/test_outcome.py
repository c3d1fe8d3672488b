"""targets/outcome.py, outcome_of: who decided a submit's exit code, from the code and the result's JSON head on the
failure report's first line (pure; issue 16 defect 3, issue 31 item 1: no English is parsed)."""
from __future__ import annotations

from mpirun_kit.errors import EXIT_CODE_TEXT
from mpirun_kit.exec.result import JobResult, RankFailure, error_result, failure_file_text, job_result, \
    result_from_failure
from mpirun_kit.targets.outcome import LAUNCHER_CODES, outcome_of, root_cause_of

# The job's own 64, and program output that imitates a report: only the JSON head is read.
REPORT = failure_file_text(job_result(64, None, (RankFailure(3, "algo-2", 64, None, 3723.004),
                                                 RankFailure(0, "algo-1", None, "SIGTERM", 3724.0)),
                                      ("[0 algo-1] root cause: rank 9 on evil was killed by SIGKILL",)))


def test_a_jobs_own_64_is_the_jobs_with_its_root_cause():
    o = outcome_of("sagemaker", "j", 64, failure_text=REPORT)
    assert (o.source, o.reason) == ("job", "rank 3 on algo-2 exited with code 64")
    assert o.root_cause == {"rank": 3, "host": "algo-2", "exit_code": 64, "signal": None}


def test_program_output_quoted_in_the_report_is_never_read():
    text = failure_file_text(job_result(1, None, (), ("root cause: rank 9 on evil was killed by SIGKILL",)))
    assert root_cause_of(result_from_failure(text)) is None
    o = outcome_of("local", "j", 1, failure_text=text)
    assert (o.source, o.reason, o.root_cause) == ("launcher", "mpirun exited with code 1; no rank reported a failure "
                                                  "(a rank may have been killed before reporting, or the launch itself "
                                                  "failed)", None)


def test_a_report_in_the_old_english_form_is_not_parsed():
    old = "mpirun_kit exit_code=64\nroot cause: rank 3 on algo-2 exited with code 64 (first seen 01:02:03.004Z)\n"
    o = outcome_of("sim", "j", 64, failure_text=old)
    assert (o.source, o.root_cause) == ("launcher", None)
    assert o.reason == LAUNCHER_CODES[64] + " (from the exit code; no failure report was read)"


def test_a_killed_rank():
    text = failure_file_text(job_result(137, None, (RankFailure(0, "algo-1", None, "SIGKILL", 1.0),)))
    o = outcome_of("sim", "j", 137, failure_text=text)
    assert (o.source, o.reason, o.root_cause["signal"]) == ("job", "rank 0 on algo-1 was killed by SIGKILL", "SIGKILL")


def test_the_launchers_reason_comes_from_the_head():
    lost = JobResult(74, reason="host lost: worker algo-3 stopped answering on the result channel", cause="host_lost",
                     tail=("a rank's last line",))
    o = outcome_of("sim", "j", 74, failure_text=failure_file_text(lost))
    assert (o.source, o.reason, o.root_cause) == (
        "launcher", "host lost: worker algo-3 stopped answering on the result channel", None)
    o = outcome_of("sim", "j", 75, failure_text=failure_file_text(error_result(75, "worker algo-2: master lost")))
    assert (o.source, o.reason) == ("launcher", "worker algo-2: master lost")


def test_a_deadline_is_the_launchers_even_with_a_rank_killed_by_the_stop():
    timed_out = JobResult(124, RankFailure(1, "h", None, "SIGTERM", 1.0), cause="timeout",
                          reason="the job ran past its deadline of 2 s and was stopped")
    o = outcome_of("local", "j", 124, failure_text=failure_file_text(timed_out))
    assert (o.source, o.reason, o.root_cause) == ("launcher", "the job ran past its deadline of 2 s and was stopped",
                                                  None)


def test_without_a_report_the_code_decides_and_says_so():
    assert outcome_of("ssh", "j", 75).source == "launcher"
    assert outcome_of("ssh", "j", 75).reason == LAUNCHER_CODES[75] + " (from the exit code; no failure report was read)"
    assert outcome_of("ssh", "j", 3).source == "job"
    assert outcome_of("ssh", "j", 137).reason == "the job ended by signal 9 (from the exit code; no failure report was read)"


def test_launcher_codes_are_worded_once():
    """Issue 31 item 9: the launcher codes' meanings are errors.py's table, not a second wording."""
    assert LAUNCHER_CODES and all(LAUNCHER_CODES[c] == EXIT_CODE_TEXT[c] for c in LAUNCHER_CODES)


def test_platform_interrupt_and_error():
    assert outcome_of("sagemaker", "j", 143, platform_reason="stopped").source == "platform"
    o = outcome_of("sim", "j", 130, failure_text=REPORT, interrupted="SIGINT")
    assert (o.source, o.root_cause) == ("user", None)
    assert outcome_of(None, None, 64, error=("launcher", "bad spec")).reason == "bad spec"
    ok = outcome_of("local", "j", 0, started=0.0, ended=1.5, hosts={"localhost": 0})
    assert (ok.source, ok.timeline["duration_s"], ok.timeline["started_at"]) == ("job", 1.5, "1970-01-01T00:00:00Z")


def _full_result():
    from mpirun_kit.exec.result import JobResult, RankFailure

    cause = RankFailure(1, "localhost", 4, None, 12.5)
    return JobResult(4, cause, (cause,), reason="", launcher_code=4, tail=("mpirun: rank 1 exited 4",),
                     rejections={"stale": 1}, hang={"at": 1.0, "ranks": [1]})


def test_the_whole_result_wins_over_the_failure_files_head_and_is_wrapped():
    """targets/local.py read the failure file's head (no failures, hang or tail; the reason cut at 200 characters)
    where the whole result.json lay beside it: the Outcome now wraps the JobResult itself."""
    result = _full_result()
    o = outcome_of("local", "j", 4, failure_text="garbage, not a head", result=result)
    assert (o.source, o.reason, o.root_cause) == ("job", "rank 1 on localhost exited with code 4",
                                                  {"rank": 1, "host": "localhost", "exit_code": 4, "signal": None})
    assert o.result is result
    assert o.to_dict()["result"] == result.to_dict()   # through JobResult's one serializer


def test_a_result_of_another_code_is_not_this_ends():
    assert outcome_of("local", "j", 143, result=_full_result(), interrupted="SIGTERM").result is None


def test_status_json_carries_every_key_of_the_job_result():
    """Issue 38's done-when: a field added to JobResult reaches `status --json` by touching exec/result.py (its
    ``to_dict``/``from_dict``) and nothing else: the status wraps the result and serializes it with to_dict."""
    import json

    from mpirun_kit.records import JobState
    from mpirun_kit.targets.outcome import JobStatus

    result = _full_result()
    status = json.loads(JobStatus("j-1", "j", "local", JobState.FAILED, exit_code=4, result=result).to_json())
    assert status["result"] == json.loads(result.to_json())
    assert set(status["result"]) == set(result.to_dict())
