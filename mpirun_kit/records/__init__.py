"""Job records: one row per submission, on every target, in one local SQLite store.

Place in the data flow: ``submit`` makes a record (a job id and a run directory that is never
reused) before its target runs anything, keeps the record's state up to date while it
supervises the job, and ends it with the job's result; ``jobs``, ``status``, ``logs`` and
``cancel`` read it back and hand it to the job's target (targets/base.py ``Target.describe``,
``cancel``, ``logs``, ``list``).  The state vocabulary (``JobState``) lives here, shared by every
target.  Standard library only; the store's location is the CLI's to choose (it reads the
environment), never this package's.
"""
from .store import (GONE, NOT_SUPERVISOR, OTHER_USER, RUN_FILES, STATE_DIR_VAR, SUPERVISOR_CMD, JobRecord, JobState,
                    RecordStore, default_state_dir, process_start, supervisor_problem)

__all__ = ["JobRecord", "JobState", "RecordStore", "RUN_FILES", "STATE_DIR_VAR", "default_state_dir", "process_start",
           "supervisor_problem", "GONE", "OTHER_USER", "NOT_SUPERVISOR", "SUPERVISOR_CMD"]
