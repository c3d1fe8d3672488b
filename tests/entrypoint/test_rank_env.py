"""What ranks see of the launching environment, and what the failure file shows of theirs (issue 12,
finding 6): ranks on the master's host get the same allow-listed environment as ranks on other hosts,
and a rank's secret env value never reaches the failure file.  Real mpirun through `mpirun_kit submit`
(target local)."""
from __future__ import annotations

from pathlib import Path

import pytest

from mpirun_kit.cli.main import main

pytestmark = pytest.mark.mpi


def _job(tmp_path: Path, program: str, env: str) -> Path:
    """A one-rank local job running ``program`` (Python source) with spec ``env`` (a YAML flow mapping)."""
    (tmp_path / "prog.py").write_text(program)
    job = tmp_path / "job.yaml"
    job.write_text("apiVersion: mpirun_kit/v1\nkind: Job\nname: rank-env\n"
                   f"program: {{command: [python3, {tmp_path / 'prog.py'}]}}\n"
                   f"resources: {{processes_per_host: 1}}\nenv: {env}\n"
                   f"output: {{local_path: {tmp_path / 'out'}}}\n")
    return job


def test_a_local_rank_inherits_the_shells_environment_but_no_secret(tmp_path, monkeypatch, capfd):
    """Issue #40: a local rank gets the submitting shell's environment, as torchrun's does (before: the allow-list
    only, so H3_UNLISTED was None); a secret-looking name still is not, unless the spec names it."""
    program = ("import os\n"
               "os.write(1, ('seen %s %s %s\\n' % (os.environ.get('H3_UNLISTED'), os.environ.get('H3_LISTED'), "
               "os.environ.get('H3_TOKEN'))).encode())\n")
    job = _job(tmp_path, program, "{H3_LISTED: yes-listed, OMP_NUM_THREADS: 1}")
    monkeypatch.setenv("H3_UNLISTED", "from-the-master")
    monkeypatch.setenv("H3_TOKEN", "t0ken-value")
    assert main(["submit", str(job)]) == 0
    out = capfd.readouterr().out
    assert "seen from-the-master yes-listed None" in out, out


def test_the_failure_file_never_shows_a_ranks_secret_value(tmp_path, capfd):
    """A rank prints its secret bare (no NAME= before it) and fails: the failure file hides the value."""
    program = ("import os, sys\n"
               "os.write(2, ('could not log in with %s\\n' % os.environ['DB_PASSWORD']).encode())\nsys.exit(3)\n")
    job = _job(tmp_path, program, "{DB_PASSWORD: hunter2-pw, OMP_NUM_THREADS: 1}")
    assert main(["submit", str(job)]) == 3
    capfd.readouterr()
    (run_dir,) = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]  # records/: one run directory per run
    failure = (run_dir / "output" / "failure").read_text()
    assert "could not log in with ***" in failure, failure
    assert "hunter2-pw" not in failure
