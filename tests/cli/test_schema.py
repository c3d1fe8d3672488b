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
