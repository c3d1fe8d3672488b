"""Two jobs of one spec at once (issue #40 item 1): on one host, and on the simulated cluster, where both jobs'
masters are hosts named algo-1.  Before, the result channel's port was a fixed 29411 (a second master on the same
host failed with "Address already in use"), and two simulated jobs collided in Open MPI's session directory
(`orte_init ... No permission (-17)`, blamed on a rank).

Real processes end to end: `mpirun_kit submit` as a user runs it, real mpirun, namespaces and sshd per host.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mpirun_kit.entrypoint.common import JOB_PORT_BASE, JOB_PORT_SPAN, job_result_port

#: each rank holds its MPI session for 3 s, so the two jobs' sessions overlap
HOLD = "from mpi4py import MPI; import time; MPI.COMM_WORLD.Barrier(); time.sleep(3); MPI.COMM_WORLD.Barrier()"


def test_a_multi_host_jobs_port_is_its_own_and_the_same_on_every_host():
    """Every host derives the same port from the job's secret; another run (another secret) gets another one."""
    hosts = ("algo-1", "algo-2")
    a = job_result_port(b"k" * 32, hosts, "j")
    assert a == job_result_port(b"k" * 32, tuple(reversed(hosts)), "j")
    assert JOB_PORT_BASE <= a < JOB_PORT_BASE + JOB_PORT_SPAN
    assert len({job_result_port(bytes([i]) * 32, hosts, "j") for i in range(20)}) > 15
    # no secret: the hosts and the job's name
    assert job_result_port(None, hosts, "j") == job_result_port(None, hosts, "j") != job_result_port(None, hosts, "k")


def spec(d: Path, target: str, hosts: int) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    p = d / "two.yaml"
    p.write_text(textwrap.dedent(f"""\
        apiVersion: mpirun_kit/v1
        kind: Job
        name: two
        target: {{type: {target}}}
        resources: {{hosts: {hosts}, processes_per_host: 2}}
        program: {{command: [{sys.executable}, -c, {json.dumps(HOLD)}]}}
        """))
    return p


def run_two(path: Path, cwd: Path) -> list[tuple[int, str, str]]:
    argv = [sys.executable, "-m", "mpirun_kit.cli.main", "submit", str(path), "--json", "-q"]
    procs = [subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    out = []
    for p in procs:
        o, e = p.communicate(timeout=240)
        out.append((p.returncode, o, e))
    return out


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_two_launches_on_one_host_at_once(tmp_path):
    """No result_port anywhere: each master binds a port of its own (before: both 29411, the second exited 70)."""
    procs = [subprocess.Popen([sys.executable, "-m", "mpirun_kit.cli.main", "launch", "--hosts", "localhost:2",
                               "--opt-ml", str(tmp_path / f"j{i}"), "--", sys.executable, "-c",
                               "import time; time.sleep(2)"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=100)
        assert p.returncode == 0, err


@pytest.mark.sim
@pytest.mark.timeout(300)
def test_two_simulated_jobs_of_one_spec_at_once(tmp_path):
    for code, out, err in run_two(spec(tmp_path, "sim", 2), tmp_path):
        assert code == 0, (out, err)
        assert json.loads(out.splitlines()[-1])["exit_code"] == 0


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_each_run_has_its_own_mpi_session_directory(tmp_path):
    """The sim collision needs both mpiruns at one pid in one host name (so the end-to-end test above can pass by
    luck on the old code); the cause is checked here: each run's Open MPI session base is its own (the ranks see
    it in mpirun's environment), and it is gone after the run."""
    seen = []
    for i in range(2):
        r = subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main", "launch", "--hosts", "localhost:1",
                            "--opt-ml", str(tmp_path / f"j{i}"), "--", sys.executable, "-c",
                            "import os; print('BASE', os.environ.get('OMPI_MCA_orte_tmpdir_base'))"],
                           capture_output=True, text=True, timeout=100)
        assert r.returncode == 0, r.stderr
        seen.append(r.stdout.split("BASE ", 1)[1].split()[0])
    assert seen[0] != seen[1] and all(s.startswith("/tmp/mpirun_kit-") for s in seen), seen
    assert not any(Path(s).exists() for s in seen)
