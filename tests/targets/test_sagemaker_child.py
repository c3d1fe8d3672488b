"""targets/sagemaker.py ``SageMakerChild``: a training job followed, stopped and drained by the one supervisor
(exec/supervisor.py), as a local process, the ssh sessions and a Slurm job are (issue #38, item 2).

A stub SageMaker and CloudWatch Logs, said so: moto's training jobs are Completed as soon as they are created
and moto has no StopTrainingJob, so neither a running job nor its stop can happen there.  The stub answers
as AWS documents: StopTrainingJob turns an InProgress job Stopping, then Stopped; on an ended job it is a
ValidationException.  Time is the injected clock's.
"""
from __future__ import annotations

import io

import pytest
from botocore.exceptions import ClientError

from mpirun_kit.core import verbosity
from mpirun_kit.errors import ClusterError, ExitCode
from mpirun_kit.exec.supervisor import Stop, Supervisor
from mpirun_kit.targets import sagemaker as T

from clock_kit import FakeClock


class StubJob:
    """One training job: InProgress for ``runs_s`` of the clock (then ``ends_as``), or until stopped."""

    def __init__(self, clock, runs_s=3600.0, ends_as="Completed", reason=None):
        self.clock, self.runs_s, self.ends_as, self.reason = clock, runs_s, ends_as, reason
        self.started = clock.time()
        self.stopped_at: float | None = None
        self.stops = 0
        self.lines: list[str] = []

    def status(self):
        if self.stopped_at is not None:
            return ("Stopping", "Stopping") if self.clock.time() - self.stopped_at < 30 else ("Stopped", "Stopped")
        if self.clock.time() - self.started >= self.runs_s:
            return self.ends_as, self.ends_as
        return "InProgress", "Training"

    def describe_training_job(self, TrainingJobName):
        status, secondary = self.status()
        desc = {"TrainingJobName": TrainingJobName, "TrainingJobStatus": status, "SecondaryStatus": secondary}
        if status == "Failed" and self.reason:
            desc["FailureReason"] = self.reason
        return desc

    def stop_training_job(self, TrainingJobName):
        self.stops += 1
        if self.status()[0] in T.TERMINAL:
            raise ClientError({"Error": {"Code": "ValidationException",
                                         "Message": f"The job {TrainingJobName} has already ended"}}, "StopTrainingJob")
        self.stopped_at = self.stopped_at if self.stopped_at is not None else self.clock.time()


class StubLogs:
    """One host's stream; ``job.lines`` are its events so far."""

    class exceptions:
        ResourceNotFoundException = KeyError

    def __init__(self, job: StubJob):
        self.job = job

    def describe_log_streams(self, **kw):
        return {"logStreams": [{"logStreamName": kw["logStreamNamePrefix"] + "algo-1-1700000000"}]}

    def get_log_events(self, **kw):
        start = int(kw.get("nextToken") or 0)
        events = [{"message": m} for m in self.job.lines[start:]]
        return {"events": events, "nextForwardToken": str(len(self.job.lines))}


def test_a_stop_asked_of_the_supervisor_is_stop_training_job_and_the_job_is_followed_to_stopped():
    """Before: the follow loop was SageMaker's own and nothing could stop the job through it."""
    clock = FakeClock()
    job = StubJob(clock)
    said, final = io.StringIO(), {}
    asked = iter([None, None, Stop("user", "cancelled", int(ExitCode.SIGTERM), "SIGTERM")])
    code = T.follow(job, "alice--j", clock=clock, out=io.StringIO(), poll_s=10, final=final,
                    progress=T.StatusLine(stream=said, clock=clock, level=verbosity.DEFAULT), requested=lambda: next(asked, None))
    assert code == ExitCode.SIGTERM and job.stops == 1
    assert final["TrainingJobStatus"] == "Stopped"
    lines = [ln.split("mpirun_kit: ", 1)[1].rsplit(" (at ", 1)[0] for ln in said.getvalue().splitlines()]
    assert lines == ["sagemaker alice--j: InProgress / Training",
                     "sagemaker alice--j: stopping (cancelled): StopTrainingJob sent",
                     "sagemaker alice--j: Stopping / Stopping", "sagemaker alice--j: Stopped / Stopped"]


def test_the_child_follows_logs_to_the_end_and_drains_the_last_lines():
    clock = FakeClock()
    job = StubJob(clock, runs_s=25, ends_as="Failed", reason="AlgorithmError: mpirun_kit: rank 3 failed")
    out, final = io.StringIO(), {}
    child = T.SageMakerChild(job, "alice--j", logs_client=StubLogs(job), clock=clock, out=out, final=final)
    job.lines.append("step 1")
    assert child.poll() is None
    clock.advance(30)
    job.lines.append("the last line, written as the job ended")
    ended = Supervisor(child, clock=clock, tick_s=10).run()
    assert ended.returncode == T.exit_code_for(final) and final["TrainingJobStatus"] == "Failed"
    text = out.getvalue()
    assert "[algo-1-1700000000] step 1\n" in text
    assert "[algo-1-1700000000] the last line, written as the job ended\n" in text
    assert job.stops == 0


def test_the_follow_deadline_leaves_the_job_running():
    clock = FakeClock()
    job = StubJob(clock, runs_s=10 ** 9)
    with pytest.raises(ClusterError) as e:
        T.follow(job, "alice--j", clock=clock, out=io.StringIO(), poll_s=10, timeout_s=60)
    assert str(e.value) == ("training job alice--j still InProgress after 60s of following; it keeps running: "
                            "`mpirun_kit status alice--j`, `mpirun_kit stop alice--j`")
    assert job.stops == 0


def test_a_stop_of_a_job_that_just_ended_reads_its_end():
    """StopTrainingJob on an ended job is AWS's ValidationException: not an error, the next poll says how it ended."""
    clock = FakeClock()
    job = StubJob(clock, runs_s=5)
    child = T.SageMakerChild(job, "alice--j", clock=clock, out=io.StringIO())
    assert child.poll() is None
    clock.advance(10)
    assert child.terminate(Stop("user", "cancelled", 143, "SIGTERM")) == T.STOP_GRACE_S + T.STOP_MARGIN_S
    assert child.poll() == 0 and job.stops == 1
