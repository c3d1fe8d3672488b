"""service/requests.py: the typed values the job service takes and gives (no argparse namespace crosses)."""
from __future__ import annotations

from mpirun_kit.core import verbosity
from mpirun_kit.records import JobRecord
from mpirun_kit.service.requests import JobHandle, SubmitRequest
from mpirun_kit.targets.base import SubmitOptions


def test_a_request_becomes_the_targets_options_with_its_records_id_and_run_directory():
    req = SubmitRequest("jobs/x.yaml", job_name="n", wait=True, keep_keys=True, resume_from="old",
                        verbosity=verbosity.QUIET)
    rec = JobRecord("x-abc123", "x", "local", run_dir="/runs/x-abc123")
    assert req.options(rec) == SubmitOptions(wait=True, job_name="n", keep_keys=True, resume_from="old",
                                             job_id="x-abc123", run_dir="/runs/x-abc123", verbosity=verbosity.QUIET)
    # a dry run has no record: no job id, no run directory
    assert req.options() == SubmitOptions(wait=True, job_name="n", keep_keys=True, resume_from="old",
                                          verbosity=verbosity.QUIET)


def test_a_handle_is_the_records_names():
    rec = JobRecord("x-abc123", "x", "slurm", run_dir="/r", native="42")
    assert JobHandle.of(rec) == JobHandle("x-abc123", "x", "slurm", "/r", "42")
