"""Stopping a job the way SageMaker does: SIGTERM to EVERY host's entrypoint at once (StopTrainingJob, a spot
interruption, and the ssh target's cancel all do this), on the simulated cluster with real sshd and mpirun.

The master asks every rank's wrapper over the result channel to SIGTERM its program and to hold its own exit
until every rank is done (exec/channel/stop.py): Open MPI 4's mpirun would SIGKILL every rank 1 s after its own
SIGTERM, or after any rank's early exit, whatever grace_s says.  So every rank's SIGTERM handler runs to its
end within grace_s (here handlers of 0.1 s, of 2.5 s, and one that exits 3 at once beside others of 2 s), its
output reaches the master's log, and every host still exits promptly with the job's code (143).
Cluster name stpstop.
"""
import signal
import sys
import time
from pathlib import Path

import pytest

from mpirun_kit.errors import ExitCode
from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline
from mpirun_kit.spec.launch_spec import LAUNCH_SPEC_HYPERPARAMETER, LaunchSpec, Timeouts

pytestmark = [pytest.mark.sim, pytest.mark.timeout(300)]

PY = sys.executable
ENTRY = [str(Path(PY).parent / "mpirun_kit"), "entrypoint", "--no-sshd"]
GRACE_S = 5.0
#: how long after grace_s every host must have exited (the master's ack wait and the processes' exit).
PROMPT_S = 6.0
HOSTS = ("algo-1", "algo-2", "algo-3")
RANK_HOSTS = [h for h in HOSTS for _ in range(2)]


def trap(work_s: float, codes: dict[int, int] | None = None, quick: tuple[int, ...] = ()) -> str:
    """A rank that cleans up on SIGTERM (``work_s`` of work, none for the ranks in ``quick``), says so, and exits
    with ``codes[rank]`` (0 by default)."""
    return ("import os, signal, sys, time\n"
            "r = int(os.environ['OMPI_COMM_WORLD_RANK'])\n"
            "def bye(*_):\n"
            f"    time.sleep(0 if r in {tuple(quick)!r} else {work_s!r})\n"
            "    print(f'rank {r} handler ran', flush=True)\n"
            f"    sys.exit({dict(codes or {})!r}.get(r, 0))\n"
            "signal.signal(signal.SIGTERM, bye)\n"
            "print(f'rank {r} ready', flush=True)\n"
            "time.sleep(300)\n")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    from mpirun_kit.sim import SimCluster

    with SimCluster(3, tmp_path_factory.mktemp("stpstop"), "stpstop") as sim:
        yield sim


def stop_every_host(sim, program: str):
    """Start the job, SIGTERM every entrypoint at once once every rank is ready; (exit codes, procs, seconds from
    the SIGTERM to the last host's exit)."""
    timeouts = Timeouts(ssh_ready_s=30.0, master_connect_s=60.0, master_silence_s=10.0, daemon_wait_s=60.0,
                        grace_s=GRACE_S)
    spec = LaunchSpec(program=(PY, "-c", program), processes_per_host=2, timeouts=timeouts)
    sim.write_sagemaker_config({LAUNCH_SPEC_HYPERPARAMETER: spec.to_json()})
    procs = sim.start_entrypoints(ENTRY)
    try:
        ready = Deadline(SYSTEM_CLOCK, 120)
        while not all(f"rank {r} ready" in procs["algo-1"].output() for r in range(6)):
            assert not ready.expired() and all(p.poll() is None for p in procs.values()), procs["algo-1"].output()
            time.sleep(0.1)
        t0 = time.monotonic()
        for p in procs.values():           # every host at once, as the platform does
            p.send_signal(signal.SIGTERM)
        end = Deadline(SYSTEM_CLOCK, GRACE_S + PROMPT_S)
        codes = {}
        for h, p in procs.items():
            codes[h] = p.wait(timeout=max(end.remaining(), 0.01))
        took = time.monotonic() - t0
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.popen.kill()
    # Not asserted (tests never assert timings): the stop's duration, for the record (pytest -s).
    print(f"stop took {took:.2f} s (SIGTERM to every host's exit)")
    return codes, procs, took


def assert_stopped(procs, codes):
    out = procs["algo-1"].output()
    assert codes == {h: ExitCode.SIGTERM for h in HOSTS}, out
    for r, h in enumerate(RANK_HOSTS):
        assert f"[{r} {h}] rank {r} handler ran" in out, out
    assert "killed by SIGTERM" not in out and "killed by SIGKILL" not in out, out
    for h in ("algo-2", "algo-3"):
        assert "job result from master: exit code 143" in procs[h].output(), procs[h].output()
    return out


def test_sigterm_to_every_entrypoint_at_once_lets_every_rank_handler_run(sim):
    codes, procs, _ = stop_every_host(sim, trap(0.1))
    out = assert_stopped(procs, codes)
    # The ranks were stopped over the channel before mpirun was.
    assert "asked 6 rank(s) to stop" in out, out


def test_handlers_longer_than_mpiruns_own_kill_timeout_finish_within_grace(sim):
    # 2.5 s of clean-up each: mpirun alone would have SIGKILLed every rank 1 s after its SIGTERM.
    codes, procs, _ = stop_every_host(sim, trap(2.5))
    out = assert_stopped(procs, codes)
    assert "still running" not in out, out


def test_a_handler_that_fails_at_once_does_not_cut_the_others_short(sim):
    # Rank 1 exits 3 at once; mpirun would abort the others (1 s SIGKILL) on seeing it exit non-zero.
    codes, procs, _ = stop_every_host(sim, trap(2.0, codes={1: 3}, quick=(1,)))
    out = assert_stopped(procs, codes)
    assert "the job was stopped by SIGTERM" in out, out
