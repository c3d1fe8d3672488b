"""service/unrecorded.py: a SageMaker training job the records do not hold, by its name; a name that is no job
names the records, never an AWS problem (the end-to-end cases, moto and Stubber, are tests/cli/test_main.py's
and tests/targets/test_sagemaker*.py's)."""
from __future__ import annotations

import pytest

from mpirun_kit.errors import NoSuchJobError, SpecError
from mpirun_kit.service.unrecorded import check_job_name, describe_unrecorded, unrecorded_status


def test_a_name_sagemaker_would_refuse_is_refused_before_any_call():
    assert check_job_name("mrk-1") == "mrk-1"
    with pytest.raises(SpecError, match="training job name 'a_b' is not valid; expected 1-63 letters, digits or "
                                        "hyphens"):
        check_job_name("a_b")


def test_an_id_that_is_no_training_job_name_names_the_records():
    missing = NoSuchJobError("no job", "x_1", "/state/jobs.db")
    with pytest.raises(NoSuchJobError, match=r"no such job in the records: 'x_1' is not in /state/jobs.db "
                                             r"\(`mpirun_kit jobs` lists the jobs there.*not a SageMaker training "
                                             r"job name either"):
        describe_unrecorded("x_1", None, missing)


def test_status_of_an_ended_training_job_is_its_code():
    desc = {"TrainingJobName": "j", "TrainingJobStatus": "Completed", "Other": 1,
            "SecondaryStatusTransitions": [{"Status": str(i)} for i in range(7)]}
    view, transitions, code = unrecorded_status(desc)
    assert view == {"TrainingJobName": "j", "TrainingJobStatus": "Completed"}
    assert [t["Status"] for t in transitions] == ["2", "3", "4", "5", "6"] and code == 0
    assert unrecorded_status({"TrainingJobStatus": "InProgress"})[2] == 0
