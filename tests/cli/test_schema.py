"""cli/schema.py: the maintainer command that publishes the job spec's JSON Schema."""
from __future__ import annotations

import json
import subprocess
import sys

from mpirun_kit.cli.schema import main
from mpirun_kit.spec.schema import JOB_SCHEMA, schema_text


def test_publishes_the_schema_value(tmp_path):
    out = tmp_path / "job.schema.json"
    out.write_text("stale")
    assert main([str(out)]) == 0
    assert out.read_text() == schema_text()
    assert json.loads(out.read_text()) == JOB_SCHEMA


def test_runs_as_a_module(tmp_path):
    out = tmp_path / "s.json"
    subprocess.run([sys.executable, "-m", "mpirun_kit.cli.schema", str(out)], check=True)
    assert out.read_text() == schema_text()


def test_help_prints_usage_and_writes_no_file(tmp_path):
    # Before: `python -m mpirun_kit.cli.schema --help` wrote the schema into a file named '--help'.
    res = subprocess.run([sys.executable, "-m", "mpirun_kit.cli.schema", "--help"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "usage:" in res.stdout and "PATH" in res.stdout
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_flag_is_refused(tmp_path):
    res = subprocess.run([sys.executable, "-m", "mpirun_kit.cli.schema", "--bogus"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert res.returncode == 2
    assert "unrecognized arguments: --bogus" in res.stderr
    assert list(tmp_path.iterdir()) == []
