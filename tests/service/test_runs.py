"""service/runs.py: a job's record and run directory, made before its target runs anything and ended once.

The targets here are the real local target with one step replaced (its ``prepare`` failing): the record's
bookkeeping is what is under test, and no job needs to run for it."""
from __future__ import annotations

import json

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.records import RUN_FILES, JobState, RecordStore
from mpirun_kit.service.compile import compile_spec
from mpirun_kit.service.requests import SubmitRequest
from mpirun_kit.service.runs import begin, error_outcome, load_request, outcome_json, runs_root
from mpirun_kit.targets.local import LocalTarget
from mpirun_kit.targets.outcome import Outcome


def local_spec(tmp_path, name="s"):
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(f"apiVersion: mpirun_kit/v1\nkind: Job\nname: {name}\nprogram: {{command: ['true']}}\n")
    return str(spec)


def test_begin_records_the_job_and_its_request_in_a_run_directory_of_its_own(tmp_path):
    spec = local_spec(tmp_path)
    store = RecordStore(tmp_path / "state")
    compiled, _, _ = compile_spec(spec, default_region=lambda: None)
    swept = []
    sub = begin(store, SubmitRequest(spec), compiled, LocalTarget(), sweep=lambda: swept.append(1))
    rec = store.get(sub.record.job_id)
    assert swept == [1] and rec.state == JobState.PENDING and rec.spec == spec
    assert rec.run_dir == str(tmp_path / "runs" / "s" / rec.job_id)   # runs/NAME beside the spec
    for key in ("spec", "plan", "request"):
        assert rec.path(key).is_file(), key
    target, dry, opts = load_request(rec)
    assert (target.name, dry, opts) == ("local", sub.dry, sub.opts)


def test_a_failed_prepare_ends_the_record_as_failed_with_the_errors_first_line(tmp_path):
    class Refusing(LocalTarget):
        def prepare(self, compiled, opts=None):
            raise SpecError("no room on this machine\nsecond line")

    spec = local_spec(tmp_path)
    store = RecordStore(tmp_path / "state")
    compiled, _, _ = compile_spec(spec, default_region=lambda: None)
    with pytest.raises(SpecError):
        begin(store, SubmitRequest(spec), compiled, Refusing())
    [rec] = store.list()
    assert (rec.state, rec.exit_code, rec.source, rec.reason) == (JobState.FAILED, 64, "launcher",
                                                                  "no room on this machine")


def test_a_sagemaker_jobs_run_directories_are_under_the_store(tmp_path):
    class Job:
        name = "mrk"

        class target:
            type = "sagemaker"

    class Compiled:
        job = Job

    store = RecordStore(tmp_path / "state")
    assert runs_root(Compiled, store, tmp_path) == tmp_path / "state" / "runs" / "mrk"


def test_the_outcome_line_carries_the_record(tmp_path):
    store = RecordStore(tmp_path / "state")
    rec = store.create("j", "local", spec=None, runs_root=tmp_path / "runs")
    out = Outcome("local", "j", 3, "job", "rank 0 on localhost exited with code 3")
    line = json.loads(outcome_json(out, rec))
    assert (line["job_id"], line["run_dir"], line["exit_code"], line["source"]) == (rec.job_id, rec.run_dir, 3, "job")
    assert RUN_FILES["request"] == "request.json"


def test_an_error_before_the_spec_compiled_is_the_launchers():
    out = error_outcome("sim", None, None, SpecError("bad spec"), started=0.0)
    assert (out.target, out.job, out.exit_code, out.source, out.reason) == ("sim", None, 64, "launcher", "bad spec")
