"""Issue 28 items 3 and 5 on the local target: a signal to `submit` stops the job like a cancel, nothing is
left running, and the result says who stopped it (a person: ``user``; the deadline: ``launcher``).

Real processes end to end (submit, the launcher, mpirun, the ranks); nothing is mocked.  Before the one
supervisor (exec/supervisor.py) a SIGHUP ended `submit` at once and left the launcher, mpirun and every rank
running, and a deadline's result blamed the rank the stop killed (``source: job``)."""
from __future__ import annotations

import signal
import textwrap

import pytest

from .stop_kit import WAITER, left_running, result_line, start_submit, wait_ready

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(240)]


def local_job(tmp_path, extra: str = ""):
    (tmp_path / "waiter.py").write_text(WAITER)
    spec = tmp_path / "job.yaml"
    spec.write_text(textwrap.dedent(f"""\
        apiVersion: mpirun_kit/v1
        kind: Job
        name: local-stop
        program:
          command: [python3, {tmp_path / 'waiter.py'}]
        resources: {{processes_per_host: 2}}
        output: {{local_path: {tmp_path / 'out'}}}
        env: {{OMP_NUM_THREADS: 1}}
        """) + extra)
    return spec


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_submit_stops_the_job_and_leaves_nothing(tmp_path, sig):
    spec = local_job(tmp_path, "timeouts: {grace_s: 3}\n")
    log = tmp_path / "submit.log"
    proc = start_submit(spec, log)
    try:
        started = wait_ready(proc, log, ["[0 localhost] rank 0", "[1 localhost] rank 1"])
        assert any("mpirun" in " ".join(p.cmdline()) for p in started)
        proc.send_signal(sig)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text(errors="replace")
    assert code == 128 + sig, text
    assert left_running(started, str(tmp_path)) == [], text
    result = result_line(log)
    assert (result["exit_code"], result["source"], result["root_cause"]) == (128 + sig, "user", None), result


def test_the_job_deadline_is_the_launchers_with_no_rank_blamed(tmp_path):
    spec = local_job(tmp_path, "timeouts: {job_s: 3, grace_s: 2}\n")
    log = tmp_path / "submit.log"
    proc = start_submit(spec, log)
    try:
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text(errors="replace")
    assert code == 124, text
    result = result_line(log)
    assert (result["exit_code"], result["source"], result["root_cause"]) == (124, "launcher", None), result
    assert "deadline" in result["reason"], result
    assert "root cause: rank" not in text, text


def test_a_submit_killed_by_sigkill_leaves_nothing_running(tmp_path):
    """SIGKILL cannot be caught: the launcher runs in its own session with PR_SET_PDEATHSIG, so our death is its
    SIGTERM, and it stops mpirun and every rank as on a cancel (on ee9fb3a they all ran on)."""
    spec = local_job(tmp_path, "timeouts: {grace_s: 3}\n")
    log = tmp_path / "submit.log"
    proc = start_submit(spec, log)
    try:
        started = wait_ready(proc, log, ["[0 localhost] rank 0", "[1 localhost] rank 1"])
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert left_running(started, str(tmp_path), timeout=30) == [], log.read_text(errors="replace")
