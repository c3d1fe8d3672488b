"""`mpirun_kit timeline` takes a job id or a run directory, not only the full path of timeline.json (issue #28
item 6; before, `timeline JOB` and `timeline RUN_DIR` were refused as unreadable files)."""
from __future__ import annotations

import json

import pytest

from mpirun_kit.cli.main import main

pytestmark = pytest.mark.mpi


def test_timeline_by_job_id_run_directory_or_file_and_the_errors(tmp_path, capsys):
    spec = tmp_path / "t.yaml"
    spec.write_text("apiVersion: mpirun_kit/v1\nkind: Job\nname: tl\nresources: {processes_per_host: 2}\n"
                    "program: {command: [echo, hi]}\n")
    assert main(["submit", str(spec), "--json", "-q"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    by_file = None
    for ref in (result["job_id"], result["run_dir"], result["run_dir"] + "/output/timeline.json"):
        assert main(["timeline", ref, "--json"]) == 0, ref
        got = json.loads(capsys.readouterr().out)
        by_file = by_file or got
        assert got == by_file and got["critical_path"], ref
    assert main(["timeline", "nosuchjob"]) == 64
    assert "nosuchjob: no such file, and no job 'nosuchjob' in the job records" in capsys.readouterr().err
    assert main(["timeline", str(tmp_path)]) == 64
    assert (f"{tmp_path}: no timeline.json in this directory or its output/; give a job id, a run directory or "
            "the file itself") in capsys.readouterr().err
