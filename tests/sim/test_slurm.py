"""`mpirun_kit sim up --slurm` for real: Slurm's daemons in the simulated hosts, used through the CLI, and
`sim down` leaving nothing (daemons, spools, sockets, the munge key, namespaces).

Every command is a fresh `mpirun_kit` process, as a user types them: sim up, submit (target slurm, no
--wait: the job runs on Slurm), status, logs, cancel, submit --wait, sim down.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mpirun_kit.sim.layout import plan_layout
from mpirun_kit.sim.slurm import plan_slurm, render_slurm_conf

pytestmark = pytest.mark.sim
NAME = "tslurmcli"
MK = [sys.executable, "-m", "mpirun_kit.cli.main"]


def mk(*args: str, env: dict, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([*MK, *args], capture_output=True, text=True, env=env, timeout=timeout)


def test_slurm_conf_is_a_value():
    s = plan_slurm(plan_layout("c1", 2, "/r"))
    conf = render_slurm_conf(s)
    assert "SlurmctldHost=algo-1" in conf and "MpiDefault=pmix" in conf
    assert "NodeName=algo-2 NodeAddr=10.233.0.2 CPUs=8" in conf
    assert "SlurmdSpoolDir=/r/%n/slurm/spool" in conf          # per host, inside the cluster's directory
    assert s.munge_key == Path("/r/algo-1/slurm/munge.key")


def test_sim_up_slurm_submit_status_logs_cancel_down(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the simulated cluster needs root")
    root = tmp_path / "sim"
    env = {**os.environ, "MPIRUN_KIT_STATE_DIR": str(tmp_path / "state")}
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent("""\
        import os, signal, sys, time
        def stop(*_):
            print("checkpoint written", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        print("up", os.environ["PMIX_RANK"], flush=True)
        if os.environ.get("QUICK"):
            sys.exit(0)
        time.sleep(300)  # slurm-cli-sleeper
        """))
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps({
        "apiVersion": "mpirun_kit/v1", "kind": "Job", "name": "clijob",
        "program": {"command": [sys.executable, str(prog)]}, "resources": {"hosts": 2, "processes_per_host": 1},
        "pinning": "none",
        "target": {"type": "slurm", "slurm": {"sim": NAME, "sim_root": str(root), "workdir": str(tmp_path / "work")}}}))
    up = mk("sim", "up", "--hosts", "2", "--name", NAME, "--root", str(root), "--slurm", env=env)
    try:
        assert up.returncode == 0, up.stderr
        info = mk("sim", "exec", "--name", NAME, "--root", str(root), "algo-1", "--",
                  "env", f"SLURM_CONF={root}/algo-1/slurm/etc/slurm.conf", "sinfo", "-h", "-o", "%D %t", env=env)
        assert info.stdout.split() == ["2", "idle"], info

        sub = mk("submit", str(job), "--json", env=env)
        assert sub.returncode == 0, sub.stderr
        job_id = json.loads(sub.stdout.splitlines()[-1])["job_id"]
        logs = ""
        for _ in range(150):   # the ranks' lines appear once Slurm runs the job
            logs = mk("logs", job_id, env=env).stdout
            if logs.count(" up ") == 2:
                break
            subprocess.run(["sleep", "0.2"])
        assert sorted(logs.splitlines()) == ["[0 algo-1] up 0", "[1 algo-2] up 1"]
        status = json.loads(mk("status", job_id, "--json", env=env).stdout)
        assert (status["state"], status["target"]) == ("running", "slurm")
        assert mk("logs", job_id, "--rank", "1", env=env).stdout.splitlines() == ["[1 algo-2] up 1"]

        cancel = mk("cancel", job_id, env=env)
        assert cancel.returncode == 0, cancel.stderr
        status = json.loads(mk("status", job_id, "--json", env=env).stdout)
        assert (status["state"], status["exit_code"], status["root_cause"]) == ("cancelled", 143, None), status
        # Every rank's SIGTERM handler ran before the end: the master stopped them through the result channel.
        assert mk("logs", job_id, env=env).stdout.count("checkpoint written") == 2
        for host in ("algo-1", "algo-2"):
            left = mk("sim", "exec", "--name", NAME, "--root", str(root), host, "--", "pgrep", "-af",
                      "slurm-cli-sleeper|mpirun_kit.cli|mpirun_kit.rank", env=env)
            assert left.stdout.strip() == "", left.stdout

        spec = json.loads(job.read_text())
        (tmp_path / "quick.yaml").write_text(json.dumps({**spec, "env": {"QUICK": "1"}}))
        done = mk("submit", str(tmp_path / "quick.yaml"), "--wait", env=env)
        assert done.returncode == 0, done.stderr
    finally:
        down = mk("sim", "down", "--name", NAME, "--root", str(root), env=env)
    assert down.returncode == 0, down.stderr
    assert not root.exists()
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"mrk-{NAME}-" not in netns
    daemons = subprocess.run(["pgrep", "-af", "slurmctld|slurmd|munged|slurmstepd"], capture_output=True,
                             text=True).stdout
    assert str(root) not in daemons


def test_readme_slurm_example(tmp_path):
    """The Slurm example of README.md and docs/guide/slurm.md (the same block), run as written: a sim cluster with
    Slurm (default name and root), the all-reduce job on it through target slurm, and sim down leaving nothing."""
    if os.geteuid() != 0:
        pytest.skip("the simulated cluster needs root")
    repo = Path(__file__).resolve().parents[2]
    blocks = set()
    for page in ("README.md", "docs/guide/slurm.md"):
        text = (repo / page).read_text()
        marker = "<!-- shell: tested-by tests/sim/test_slurm.py::test_readme_slurm_example -->\n```bash\n"
        assert marker in text, page
        blocks.add(text.split(marker, 1)[1].split("```", 1)[0])
    (block,) = blocks   # the two pages show the same commands
    env = {**os.environ, "MPIRUN_KIT_STATE_DIR": str(tmp_path / "state"),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    try:
        res = subprocess.run(["bash", "-ec", block], cwd=repo, capture_output=True, text=True, env=env, timeout=600)
    finally:
        subprocess.run([*MK, "sim", "down"], env=env, capture_output=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "[0 algo-1] allreduce check ok world=6 expected=21.0" in res.stdout, res.stdout[-3000:]
    assert "mrk-sim-" not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
