"""targets/outcome.py, outcome_of: who decided a submit's exit code, from the code and the failure report (pure; issue 16 defect 3)."""
from __future__ import annotations

from mpirun_kit.targets.outcome import LAUNCHER_CODES, outcome_of, root_cause_of

REPORT = ("mpirun_kit exit_code=64\n"
          "root cause: rank 3 on algo-2 exited with code 64 (first seen 01:02:03.004Z)\n"
          "1 more rank(s) failed after it: rank 0@algo-1 SIGTERM\n"
          "mpirun output (last lines):\n"
          "[0 algo-1] root cause: rank 9 on evil was killed by SIGKILL\n")


def test_a_jobs_own_64_is_the_jobs_with_its_root_cause():
    o = outcome_of("sagemaker", "j", 64, failure_text=REPORT)
    assert (o.source, o.reason) == ("job", "rank 3 on algo-2 exited with code 64")
    assert o.root_cause == {"rank": 3, "host": "algo-2", "exit_code": 64, "signal": None}


def test_program_output_quoted_in_the_report_is_never_read():
    text = "mpirun_kit exit_code=70\nmpirun exited with code 1; no rank reported a failure\n" \
           "mpirun output (last lines):\nroot cause: rank 9 on evil was killed by SIGKILL\n"
    assert root_cause_of(text) is None
    o = outcome_of("local", "j", 70, failure_text=text)
    assert (o.source, o.reason, o.root_cause) == ("launcher", "mpirun exited with code 1; no rank reported a failure",
                                                  None)


def test_a_killed_rank():
    o = outcome_of("sim", "j", 137, failure_text="mpirun_kit exit_code=137\n"
                                                 "root cause: rank 0 on algo-1 was killed by SIGKILL (first seen x)\n")
    assert (o.source, o.reason, o.root_cause["signal"]) == ("job", "rank 0 on algo-1 was killed by SIGKILL", "SIGKILL")


def test_without_a_report_the_code_decides_and_says_so():
    assert outcome_of("ssh", "j", 75).source == "launcher"
    assert outcome_of("ssh", "j", 75).reason == LAUNCHER_CODES[75] + " (from the exit code; no failure report was read)"
    assert outcome_of("ssh", "j", 3).source == "job"
    assert outcome_of("ssh", "j", 137).reason == "the job ended by signal 9 (from the exit code; no failure report was read)"


def test_platform_interrupt_and_error():
    assert outcome_of("sagemaker", "j", 143, platform_reason="stopped").source == "platform"
    o = outcome_of("sim", "j", 130, failure_text=REPORT, interrupted="SIGINT")
    assert (o.source, o.root_cause) == ("launcher", None)
    assert outcome_of(None, None, 64, error=("launcher", "bad spec")).reason == "bad spec"
    ok = outcome_of("local", "j", 0, started=0.0, ended=1.5, hosts={"localhost": 0})
    assert (ok.source, ok.timeline["duration_s"], ok.timeline["started_at"]) == ("job", 1.5, "1970-01-01T00:00:00Z")
