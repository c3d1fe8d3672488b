"""Ranks on the master's host get the same allow-listed environment as ranks on other hosts (issue 12,
finding 6): a variable set only in the launching environment, not allow-listed, never reaches a rank.
Real mpirun through `mpirun_kit submit` (target local)."""
from __future__ import annotations

import textwrap

import pytest

from mpirun_kit.cli.main import main

pytestmark = pytest.mark.mpi


def test_a_local_rank_does_not_inherit_the_masters_environment(tmp_path, monkeypatch, capfd):
    (tmp_path / "prog.py").write_text(
        "import os\nos.write(1, ('seen %s %s\\n' % (os.environ.get('H3_UNLISTED'), os.environ.get('H3_LISTED'))).encode())\n")
    job = tmp_path / "job.yaml"
    job.write_text(textwrap.dedent(f"""\
        apiVersion: mpirun_kit/v1
        kind: Job
        name: rank-env
        program:
          command: [python3, {tmp_path / 'prog.py'}]
        resources: {{processes_per_host: 1}}
        env: {{H3_LISTED: yes-listed, OMP_NUM_THREADS: 1}}
        output: {{local_path: {tmp_path / 'out'}}}
        """))
    monkeypatch.setenv("H3_UNLISTED", "from-the-master")
    assert main(["submit", str(job)]) == 0
    out = capfd.readouterr().out
    assert "seen None yes-listed" in out, out
