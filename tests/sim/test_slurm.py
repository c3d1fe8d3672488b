"""`mpirun_kit sim up --slurm` for real: Slurm's daemons in the simulated hosts, used through the CLI, and
`sim down` leaving nothing (daemons, spools, sockets, the munge key, namespaces).

Every command is a fresh `mpirun_kit` process, as a user types them.  The lifecycle test (submit with no
--wait: the job runs on Slurm; status, logs, cancel, submit --wait) uses the test run's one Slurm
(tests/conftest.py's ``slurm_cluster``); the README's example brings its own up with `sim up --slurm` and
takes it down with `sim down`, which must leave nothing.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mpirun_kit.sim.layout import plan_layout
from mpirun_kit.sim.slurm import plan_slurm, render_slurm_conf

pytestmark = pytest.mark.sim
MK = [sys.executable, "-m", "mpirun_kit.cli.main"]


def mk(*args: str, env: dict, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([*MK, *args], capture_output=True, text=True, env=env, timeout=timeout)


def test_slurm_conf_is_a_value():
    s = plan_slurm(plan_layout("c1", 2, "/r"))
    conf = render_slurm_conf(s)
    assert "SlurmctldHost=algo-1" in conf and "MpiDefault=pmix" in conf
    assert "NodeName=algo-2 NodeAddr=10.233.0.2 CPUs=8" in conf
    assert "SlurmdSpoolDir=/r/%n/slurm/spool" in conf          # per host, inside the cluster's directory
    # A dead node is DOWN, and a requeued job runs again, within seconds (the node-failure and retry tests).
    for line in ("SlurmdTimeout=5", "MessageTimeout=5", "AuthInfo=cred_expire=5", "SchedulerParameters=bf_interval=1"):
        assert line in conf.splitlines(), line
    assert s.munge_key == Path("/r/algo-1/slurm/munge.key")


def test_submit_status_logs_cancel_through_the_cli_on_the_sim_slurm(slurm_cluster, tmp_path):
    sim, _, _ = slurm_cluster
    name, root = sim.name, sim.layout.root
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
        "target": {"type": "slurm", "slurm": {"sim": name, "sim_root": str(root), "workdir": str(tmp_path / "work")}}}))
    info = mk("sim", "exec", "--name", name, "--root", str(root), "algo-1", "--",
              "env", f"SLURM_CONF={root}/algo-1/slurm/etc/slurm.conf", "sinfo", "-h", "-N", "-o", "%N", env=env)
    assert info.stdout.split() == ["algo-1", "algo-2", "algo-3"], info

    sub = mk("submit", str(job), "--json", env=env)
    assert sub.returncode == 0, sub.stderr
    job_id = json.loads(sub.stdout.splitlines()[-1])["job_id"]
    logs = ""
    from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline

    end = Deadline(SYSTEM_CLOCK, 60)
    while not end.expired():   # the ranks' lines appear once Slurm runs the job
        logs = mk("logs", job_id, env=env).stdout
        if logs.count(" up ") == 2:
            break
        SYSTEM_CLOCK.sleep(0.2)
    assert sorted(logs.splitlines()) == ["[0 algo-1] up 0", "[1 algo-2] up 1"]
    status = json.loads(mk("status", job_id, "--json", env=env).stdout)
    assert (status["state"], status["target"]) == ("running", "slurm")
    assert mk("logs", job_id, "--rank", "1", env=env).stdout.splitlines() == ["[1 algo-2] up 1"]
    # The record keeps Slurm's job id as the job's native name: `jobs` shows it, and it finds the job too.
    slurm_id = (tmp_path / "work" / f"clijob-{job_id}" / "slurm-job-id").read_text().strip()
    listed = json.loads(mk("jobs", "--json", env=env).stdout)
    assert [(j["job_id"], j["native"]) for j in listed] == [(job_id, slurm_id)]
    by_native = mk("status", slurm_id, "--json", env=env)
    assert by_native.returncode == 0, by_native.stderr
    assert (json.loads(by_native.stdout)["job_id"], json.loads(by_native.stdout)["native"]) == (job_id, slurm_id)

    cancel = mk("cancel", job_id, env=env)
    assert cancel.returncode == 0, cancel.stderr
    status = json.loads(mk("status", job_id, "--json", env=env).stdout)
    assert (status["state"], status["exit_code"], status["root_cause"]) == ("cancelled", 143, None), status
    # Every rank's SIGTERM handler ran before the end: the master stopped them through the result channel.
    assert mk("logs", job_id, env=env).stdout.count("checkpoint written") == 2
    for host in ("algo-1", "algo-2"):
        left = mk("sim", "exec", "--name", name, "--root", str(root), host, "--", "pgrep", "-af",
                  f"slurm-cli-sleeper|{tmp_path}", env=env)
        assert left.stdout.strip() == "", left.stdout

    spec = json.loads(job.read_text())
    (tmp_path / "quick.yaml").write_text(json.dumps({**spec, "env": {"QUICK": "1"}}))
    done = mk("submit", str(tmp_path / "quick.yaml"), "--wait", env=env)
    assert done.returncode == 0, done.stderr


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
    assert block.splitlines()[-1] == "mpirun_kit sim down"
    env = {**os.environ, "MPIRUN_KIT_STATE_DIR": str(tmp_path / "state"),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    root = Path("/var/tmp/mpirun-kit-sim/sim")   # sim up's default name and root
    res = None
    try:
        res = subprocess.run(["bash", "-ec", block], cwd=repo, capture_output=True, text=True, env=env, timeout=600)
    finally:
        subprocess.run([*MK, "sim", "down"], env=env, capture_output=True)
        # The job's run directory, under the spec's default workdir (/tmp/mpirun-kit-slurm), is this test's to remove.
        said = re.search(r"slurm: submitted job \d+ \(run directory (/tmp/mpirun-kit-slurm/[\w.-]+)\)",
                         res.stderr if res else "")
        if said:
            shutil.rmtree(said.group(1), ignore_errors=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert said, res.stderr[-3000:]
    assert "[0 algo-1] allreduce check ok world=6 expected=21.0" in res.stdout, res.stdout[-3000:]
    # The block's own `sim down` left nothing: no namespace, no Slurm daemon of the cluster, no files.
    assert "mrk-sim-" not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    daemons = subprocess.run(["pgrep", "-af", "slurmctld|slurmd|munged|slurmstepd"], capture_output=True,
                             text=True).stdout
    assert str(root) not in daemons, daemons
    assert not root.exists(), sorted(root.rglob("*"))[:20]


@pytest.mark.skipif(os.geteuid() != 0, reason="the simulated cluster needs root")
def test_a_failed_bring_up_leaves_no_daemon_and_no_munge_key(tmp_path, monkeypatch):
    """SlurmCluster.up() failing after its daemons started (here: the nodes never become idle) stops
    them and deletes what it wrote, the munge key first, before the error reaches the caller: a
    failed `sim up --slurm` left the cluster's key and spools on disk (session 7's notes)."""
    from mpirun_kit.sim import SimCluster
    from mpirun_kit.sim.cluster import SimError
    from mpirun_kit.sim.slurm import SlurmCluster

    started = []

    def never_idle(self, *args, **kwargs):
        started.extend(self._procs)
        assert plan_slurm(self.sim.layout).munge_key.exists()  # what the failure must remove
        raise SimError("forced by the test: no node became idle")

    monkeypatch.setattr(SlurmCluster, "wait_idle", never_idle)
    with SimCluster(1, tmp_path / "sim", f"tsfail{os.getpid():x}"[:12]) as sim:
        with pytest.raises(SimError, match="forced by the test"):
            SlurmCluster(sim).up()
        layout = plan_slurm(sim.layout)
        assert len(started) >= 3  # munged, slurmctld, slurmd
        assert all(p.poll() is not None for p in started), "a Slurm daemon outlived the failed bring-up"
        assert not layout.munge_key.exists()
        assert not any(d.exists() for d in layout.host_dirs)
