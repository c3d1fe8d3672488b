"""Stops said once (issue #40 item 6): a SIGHUP to `submit` (a closed terminal) is one exit code and one source
everywhere: submit's exit and --json, stderr, the failure file and the record.  Before, the record said 129 while
stderr and the failure file said 143 (SIGTERM, source launcher): the launcher was sent SIGTERM for it.

Real processes: `mpirun_kit submit` of a local job, real mpirun and ranks; the signal sent as a terminal would.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from jobs_kit import LONG, mrk

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(150)]


@pytest.mark.parametrize("target", ["local", pytest.param("sim", marks=pytest.mark.sim)])
def test_sighup_to_submit_is_129_and_the_users_everywhere(tmp_path, target):
    spec = tmp_path / "hup.yaml"
    hosts = 2 if target == "sim" else 1
    spec.write_text(textwrap.dedent(f"""\
        apiVersion: mpirun_kit/v1
        kind: Job
        name: hup
        target: {{type: {target}}}
        resources: {{hosts: {hosts}, processes_per_host: 2}}
        program: {{command: [{sys.executable}, -c, {json.dumps(LONG)}]}}
        """))
    p = subprocess.Popen([sys.executable, "-m", "mpirun_kit.cli.main", "submit", str(spec), "--json"], cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 90
    while not list(tmp_path.glob("runs/hup/*/output.log")) or "tick" not in \
            next(tmp_path.glob("runs/hup/*/output.log")).read_text(errors="replace"):
        assert time.monotonic() < end and p.poll() is None, p.communicate()
        time.sleep(0.2)
    p.send_signal(signal.SIGHUP)
    out, err = p.communicate(timeout=60)
    line = json.loads(out.splitlines()[-1])
    assert (p.returncode, line["exit_code"], line["source"]) == (129, 129, "user"), (out, err)
    assert "job stopped with exit code 129" in err and "exit code 143" not in err, err   # (the ranks got SIGTERM: 143 each)
    failure = open(line["failure_file"]).read()
    head = json.loads(failure.splitlines()[0].split(" ", 2)[2])
    assert (head["exit_code"], head["source"], head["cause"]) == (129, "user", "interrupted"), failure
    record = json.loads(mrk("status", line["job_id"], "--json", cwd=tmp_path).stdout)
    assert (record["exit_code"], record["source"]) == (129, "user"), record
