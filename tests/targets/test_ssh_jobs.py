"""Job records and the lifecycle verbs on the ssh target (issue #28): `submit --detach` inside simulated
host algo-1 reaching algo-1 and algo-2 over real sshd (paramiko, host keys verified), then status,
logs --rank and cancel by job id, and nothing of the job left on either host.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from mpirun_kit.sim import SimCluster

from .test_ssh import spec

pytestmark = pytest.mark.sim
EXE = str(Path(sys.executable).with_name("mpirun_kit"))


def test_detach_status_logs_rank_and_cancel_over_ssh(tmp_path):
    state = str(tmp_path / "state")
    with SimCluster(2, tmp_path / "c", "tsshjob") as sim:
        job = spec(tmp_path, ["algo-1", "algo-2"],
                   'trap \"echo got SIGTERM; exit 143\" TERM; i=0; while true; do echo tick $i; i=$((i+1)); '
                   'sleep 1; done', extra="timeouts: {ssh_ready_s: 8, ssh_ready_per_host_s: 0.5, grace_s: 2}")
        job.write_text(job.read_text().replace("timeouts: {ssh_ready_s: 8, ssh_ready_per_host_s: 0.5}\n", ""))

        def mrk(*argv, timeout=120):
            return sim.run("algo-1", [EXE, *argv, "--state-dir", state], timeout=timeout)

        r = mrk("submit", str(job), "--detach", "-q")
        assert r.returncode == 0, r.stderr
        job_id = r.stdout.strip()
        status = json.loads(mrk("status", job_id, "--json").stdout)
        assert (status["state"], status["target"]) == ("running", "ssh")
        end = time.monotonic() + 120
        while "[1 algo-2] tick 1" not in mrk("logs", job_id).stdout:
            assert time.monotonic() < end, mrk("logs", job_id).stdout
            time.sleep(0.5)
        ones = mrk("logs", job_id, "--rank", "1").stdout.splitlines()
        assert ones and all(line.startswith("[1 algo-2] ") for line in ones), ones
        c = mrk("cancel", job_id, timeout=180)
        assert c.returncode == 0 and c.stdout.startswith(f"job {job_id}: cancelled"), c.stdout + c.stderr
        status = json.loads(mrk("status", job_id, "--json").stdout)
        assert status["state"] == "cancelled" and status["root_cause"] is None, status
        for host in ("algo-1", "algo-2"):
            left = sim.run(host, ["ps", "-e", "-o", "args="]).stdout
            assert "tick" not in left and "orted" not in left and " entrypoint " not in left, (host, left)


def test_a_submit_killed_by_sigkill_leaves_nothing_on_the_hosts(tmp_path):
    """A `submit` on the ssh target that dies by SIGKILL cancels nothing itself; its sessions close, and each
    host's ``remote_host start`` stops its entrypoint when its session's channel closes (sshd sends nothing
    without a pty).  On 6ec1f54 the entrypoints, mpirun, orted and the ranks of both hosts ran on (issue #28)."""
    import os
    import signal

    from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline

    with SimCluster(2, tmp_path / "c", "tsshkill") as sim:
        job = spec(tmp_path, ["algo-1", "algo-2"], 'i=0; while true; do echo tick $i; i=$((i+1)); sleep 1; done',
                   extra="timeouts: {ssh_ready_s: 8, ssh_ready_per_host_s: 0.5, grace_s: 2}")
        job.write_text(job.read_text().replace("timeouts: {ssh_ready_s: 8, ssh_ready_per_host_s: 0.5}\n", ""))
        log = tmp_path / "submit.log"
        p = sim.popen("algo-1", [EXE, "submit", str(job), "--state-dir", str(tmp_path / "state")], log_path=log)
        try:
            end = Deadline(SYSTEM_CLOCK, 120)
            while "[1 algo-2] tick 1" not in log.read_text(errors="replace"):
                assert p.poll() is None and not end.expired(), log.read_text(errors="replace")
                SYSTEM_CLOCK.sleep(0.2)
            os.kill(p.pid, signal.SIGKILL)
            p.wait(30)
        finally:
            if p.poll() is None:
                p.popen.kill()

        def left() -> dict[str, list[str]]:
            found = {}
            for host in ("algo-1", "algo-2"):
                lines = sim.run(host, ["ps", "-e", "-o", "args="]).stdout.splitlines()
                found[host] = [ln for ln in lines if "tick" in ln or "orted" in ln or " entrypoint " in ln]
            return {h: ps for h, ps in found.items() if ps}

        # The entrypoint's own stop takes up to its grace period (2 s) and a few seconds more: wait for it, bounded.
        end = Deadline(SYSTEM_CLOCK, 60)
        while left() and not end.expired():
            SYSTEM_CLOCK.sleep(0.5)
        assert left() == {}
