"""status, logs --rank and cancel of a recorded SageMaker job (issue #28), through the CLI in this process.

botocore's Stubber answers the SageMaker and CloudWatch Logs calls: moto cannot move a training job from
InProgress to Failed or Stopped, nor hold the CloudWatch streams SageMaker writes (the same reason as
tests/targets/test_sagemaker.py's stubbed tests).  The record is the one `submit` makes (the store, the
training job's name as its native name, the region in its details).
"""
from __future__ import annotations

import json

import boto3
from botocore.stub import Stubber

from mpirun_kit.cli.main import main
from mpirun_kit.records import JobState, RecordStore
from mpirun_kit.targets import sagemaker as T

from .test_sagemaker import _desc, _report


def recorded(state_dir) -> str:
    store = RecordStore(state_dir)
    rec = store.create("train", "sagemaker", spec="/jobs/train.yaml", runs_root=None, native="j",
                       details={"region": "us-west-2"})
    store.update(rec.job_id, state=JobState.RUNNING)
    return rec.job_id


def clients(monkeypatch):
    sm = boto3.client("sagemaker", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    logs = boto3.client("logs", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    regions = []
    monkeypatch.setattr(T, "make_clients", lambda region: (regions.append(region), (sm, logs))[1])
    return Stubber(sm), Stubber(logs), regions


def test_status_of_a_recorded_job_asks_sagemaker_and_maps_the_state(job_records, monkeypatch, capsys):
    job = recorded(job_records)
    sm, _, regions = clients(monkeypatch)
    sm.add_response("describe_training_job", _desc("InProgress", "Starting"), {"TrainingJobName": "j"})
    sm.add_response("describe_training_job", _desc("InProgress", "Training"), {"TrainingJobName": "j"})
    sm.add_response("describe_training_job", _desc("Failed", "Failed", _report(3, "algo-2", 7)),
                    {"TrainingJobName": "j"})
    with sm:
        states = []
        for code in (0, 0, 7):
            assert main(["status", job, "--json"]) == code
            states.append(json.loads(capsys.readouterr().out))
    assert [s["state"] for s in states] == ["pending", "running", "failed"]
    assert states[0]["detail"] == "InProgress / Starting" and states[0]["native"] == "j"
    end = states[2]
    assert (end["exit_code"], end["source"], end["root_cause"]) == (
        7, "job", {"rank": 3, "host": "algo-2", "exit_code": 7, "signal": None})
    assert regions == ["us-west-2"] * 3
    # the end is recorded: the next status, and `jobs`, need no AWS call
    assert RecordStore(job_records).get(job).state == JobState.FAILED
    assert main(["status", job]) == 7
    assert "state       failed" in capsys.readouterr().out


def test_cancel_stops_the_training_job_and_logs_keep_one_rank(job_records, monkeypatch, capsys):
    job = recorded(job_records)
    sm, logs, _ = clients(monkeypatch)
    for _ in range(2):   # cancel's own look, then the target's (a job that ended is not stopped)
        sm.add_response("describe_training_job", _desc("InProgress", "Training"), {"TrainingJobName": "j"})
    sm.add_response("stop_training_job", {}, {"TrainingJobName": "j"})
    sm.add_response("describe_training_job", _desc("Stopping", "Stopping"), {"TrainingJobName": "j"})
    streams = {"logStreams": [{"logStreamName": "j/algo-1-1700000000"}]}
    logs.add_response("describe_log_streams", streams,
                      {"logGroupName": T.LOG_GROUP, "logStreamNamePrefix": "j/"})
    events = {"events": [{"timestamp": 1, "message": m} for m in
                         ("[0 algo-1] step 1", "[1 algo-2] step 1", "mpirun_kit: launching", "[1 algo-2] step 2")],
              "nextForwardToken": "f1"}
    logs.add_response("get_log_events", events, {"logGroupName": T.LOG_GROUP,
                                                 "logStreamName": "j/algo-1-1700000000", "startFromHead": True})
    with sm, logs:
        assert main(["logs", job, "--rank", "1"]) == 0
        assert capsys.readouterr().out == "[algo-1-1700000000] [1 algo-2] step 1\n[algo-1-1700000000] [1 algo-2] step 2\n"
        assert main(["cancel", job]) == 0
        assert capsys.readouterr().out == f"job {job}: running; the platform stops it on every host\n"
    sm.assert_no_pending_responses()
    assert RecordStore(job_records).get(job).cancel_requested


def test_a_sagemaker_name_the_store_does_not_know_is_asked_for_directly(monkeypatch, capsys):
    """As before records existed: `status NAME` for a job submitted elsewhere (tests/targets/test_sagemaker.py
    covers its stop and status output)."""
    sm, _, _ = clients(monkeypatch)
    sm.add_response("describe_training_job", _desc("Completed", "Completed"), {"TrainingJobName": "j"})
    with sm:
        assert main(["status", "j", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["TrainingJobStatus"] == "Completed"
