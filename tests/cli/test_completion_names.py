"""Completion of names that are not files (issue #28 item 6): `sim down --name` offered the current
directory's file names; a job ID now completes from the job records."""
from __future__ import annotations

import os

from mpirun_kit.records import RecordStore

from .test_main_usage import _complete


def test_sim_down_name_offers_clusters_never_file_names(tmp_path):
    """Fails before the fix: argcomplete's default for a flag without choices is file names (README.md, ...)."""
    candidates = set(_complete("mpirun_kit sim down --name ", tmp_path)) - {""}
    assert not candidates & {"README.md", "setup.cfg", "mpirun_kit", "tests"}, candidates


def test_a_job_id_completes_from_the_records(tmp_path):
    rec = RecordStore(os.environ["MPIRUN_KIT_STATE_DIR"]).create("hello", "local", spec=None, runs_root=None)
    for verb in ("status", "logs", "cancel"):
        assert rec.job_id in _complete(f"mpirun_kit {verb} hel", tmp_path), verb
