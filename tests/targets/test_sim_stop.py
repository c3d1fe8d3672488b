"""Issue 28 items 3 and 5 on the sim target: a signal to `submit` stops the job like a cancel and leaves no
process and no namespace; a `submit` killed by SIGKILL leaves a cluster that the next `sim` command sweeps and
names; a stop says ``source: user`` and blames no rank; a Ctrl-C during the bring-up stops at once.

Real processes end to end (namespaces, sshd per host, the entrypoints, mpirun, orted, the ranks).  On
ee9fb3a a SIGHUP ended `submit` at once and left 4 namespaces, 3 sshd, the entrypoints, orted and the ranks,
and a SIGKILL left the same with nothing to sweep it."""
from __future__ import annotations

import signal
import subprocess
import sys

import psutil
import pytest

from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline
from mpirun_kit.targets.sim import cluster_name

from .stop_kit import WAITER, left_running, netns_of, result_line, start_submit, wait_ready

pytestmark = [pytest.mark.sim, pytest.mark.timeout(300)]
RANKS = ["[0 algo-1] rank 0", "[1 algo-2] rank 1"]


def sim_job(tmp_path, extra: str = "timeouts: {grace_s: 3}\n"):
    (tmp_path / "waiter.py").write_text(WAITER)
    spec = tmp_path / "job.yaml"
    spec.write_text(f"""\
apiVersion: mpirun_kit/v1
kind: Job
name: sim-stop
target: {{type: sim, sim: {{root: {tmp_path / 'sim'}}}}}
resources: {{hosts: 2, processes_per_host: 1}}
program:
  command: [python3, {tmp_path / 'waiter.py'}]
""" + extra)
    return spec


def cluster_of(tmp_path) -> str:
    """The cluster's name, from the state it wrote once up (targets/sim.py names it per job)."""
    import json

    return json.loads((tmp_path / "sim" / "attempt-0" / "state.json").read_text())["name"]


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_submit_stops_the_job_and_leaves_nothing(tmp_path, sig):
    spec = sim_job(tmp_path)
    log = tmp_path / "submit.log"
    proc = start_submit(spec, log)
    try:
        started = wait_ready(proc, log, RANKS)
        name = cluster_of(tmp_path)
        assert netns_of(name)
        proc.send_signal(sig)
        code = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text(errors="replace")
    assert code == 128 + sig, text
    assert left_running(started, str(tmp_path)) == [], text
    assert netns_of(name) == [], text
    result = result_line(log)
    assert (result["exit_code"], result["source"], result["root_cause"]) == (128 + sig, "user", None), result
    # The stop's rank deaths are its consequences: no host blames a rank, none says the job failed.
    assert "root cause: rank" not in text and "job failed with exit code" not in text, text
    assert "still running after the grace period" not in text, text


def test_a_submit_killed_by_sigkill_leaves_no_process_and_the_next_sim_command_sweeps_its_cluster(tmp_path):
    spec = sim_job(tmp_path)
    log = tmp_path / "submit.log"
    proc = start_submit(spec, log)
    try:
        started = wait_ready(proc, log, RANKS)
        name = cluster_of(tmp_path)
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    # The hosts' PID 1 got SIGKILL when their owner died (PR_SET_PDEATHSIG): no process of the job runs on.
    assert left_running(started, str(tmp_path)) == []
    # The namespaces are files that only a sweep removes; another sim, submit or jobs command on this machine
    # (a test running beside this one) may have swept them already, and then said so itself.
    left = netns_of(name)
    r = subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main", "sim", "list"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    said = f"mpirun_kit: swept sim cluster {name!r}: its submit (pid {proc.pid}) died without tearing it down"
    assert said in r.stderr or not left, r.stderr
    assert netns_of(name) == []
    assert name not in r.stdout.split()
    assert not list((tmp_path / "sim").rglob("id_ed25519")), "the cluster's keys went with it"


def _said(log) -> str:
    """What submit said, without the --json result line (whose reason describes the stop sequence)."""
    return "\n".join(ln for ln in log.read_text(errors="replace").splitlines() if not ln.startswith("{"))


@pytest.mark.parametrize("when", ["bring-up", "entrypoints started"])
def test_ctrl_c_during_the_start_up_stops_within_the_grace_period_without_a_kill(tmp_path, when):
    """On ee9fb3a a Ctrl-C while the hosts came up waited for the bring-up, started every entrypoint, then waited
    out the grace period and its margin (29.6 s) and ended in SIGKILL.  Now a stop during the bring-up ends it at
    once, and one while the entrypoints start is obeyed by the master's entrypoint within the grace period."""
    spec = sim_job(tmp_path, "timeouts: {grace_s: 10}\n")
    log = tmp_path / "submit.log"
    proc = start_submit(spec, log, "-v")
    started = tmp_path / "sim" / "attempt-0" / "algo-1" / "entrypoint.log"
    try:
        end = Deadline(SYSTEM_CLOCK, 60)
        while not ("sim: bringing up 2 host(s)" in log.read_text(errors="replace") if when == "bring-up"
                   else started.exists()):
            assert proc.poll() is None and not end.expired(), log.read_text(errors="replace")
            SYSTEM_CLOCK.sleep(0.02)
        procs = psutil.Process(proc.pid).children(recursive=True)   # the hosts' inits so far, nsenter, ...
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    said = _said(log)
    assert code == 130, said
    # Nothing of the job is left, not even a host whose init was starting when the teardown came: on 14f00b4 an
    # init that unshare had just forked escaped both the namespace sweep and unshare's --kill-child (issue #28).
    assert left_running(procs, str(tmp_path)) == [], said
    assert netns_of(cluster_name(said.split("mpirun_kit: job ", 1)[1].split()[0])) == [], said
    assert "rank 0 ready" not in said, said
    assert "still running after the grace period" not in said and "killing" not in said, said
    if when == "bring-up":
        assert "sim: interrupted (Ctrl-C) during the bring-up; the cluster is torn down" in said, said
    assert result_line(log)["source"] == "user"
