"""Stopping a job the way SageMaker does: SIGTERM to EVERY host's entrypoint at once (StopTrainingJob, a spot
interruption, and the ssh target's cancel all do this), on the simulated cluster with real sshd and mpirun.

The ranks belong to the master's mpirun (SIGTERM -> grace_s -> SIGKILL): a worker's entrypoint leaves them
to it, so every rank's SIGTERM handler runs and its output reaches the master's log, and every host still
exits promptly with the job's code (143).  Cluster name h10stop.
"""
import signal
import sys
import time
from pathlib import Path

import pytest

from mpirun_kit.errors import ExitCode
from mpirun_kit.exec.clock import SYSTEM_CLOCK, Deadline
from mpirun_kit.spec.launch_spec import LAUNCH_SPEC_HYPERPARAMETER, LaunchSpec, Timeouts

pytestmark = [pytest.mark.sim, pytest.mark.timeout(300)]

PY = sys.executable
ENTRY = [str(Path(PY).parent / "mpirun_kit"), "entrypoint", "--no-sshd"]
GRACE_S = 5.0
#: how long after grace_s every host must have exited (the master's ack wait and the processes' exit).
PROMPT_S = 6.0
HOSTS = ("algo-1", "algo-2", "algo-3")
#: a rank that cleans up on SIGTERM (0.1 s of work), says so, and exits 0.
TRAP = ("import os, signal, sys, time\n"
        "r = os.environ['OMPI_COMM_WORLD_RANK']\n"
        "def bye(*_):\n"
        "    time.sleep(0.1)\n"
        "    print(f'rank {r} handler ran', flush=True)\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print(f'rank {r} ready', flush=True)\n"
        "time.sleep(300)\n")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    from mpirun_kit.sim import SimCluster

    with SimCluster(3, tmp_path_factory.mktemp("h10stop"), "h10stop") as sim:
        yield sim


def test_sigterm_to_every_entrypoint_at_once_lets_every_rank_handler_run(sim):
    timeouts = Timeouts(ssh_ready_s=30.0, master_connect_s=60.0, master_silence_s=10.0, daemon_wait_s=60.0,
                        grace_s=GRACE_S)
    spec = LaunchSpec(program=(PY, "-c", TRAP), processes_per_host=2, timeouts=timeouts)
    sim.write_sagemaker_config({LAUNCH_SPEC_HYPERPARAMETER: spec.to_json()})
    procs = sim.start_entrypoints(ENTRY)
    try:
        ready = Deadline(SYSTEM_CLOCK, 120)
        while not all(f"rank {r} ready" in procs["algo-1"].output() for r in range(6)):
            assert not ready.expired() and all(p.poll() is None for p in procs.values()), procs["algo-1"].output()
            time.sleep(0.1)
        for p in procs.values():           # every host at once, as the platform does
            p.send_signal(signal.SIGTERM)
        end = Deadline(SYSTEM_CLOCK, GRACE_S + PROMPT_S)
        codes = {}
        for h, p in procs.items():
            codes[h] = p.wait(timeout=max(end.remaining(), 0.01))
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.popen.kill()
    out = procs["algo-1"].output()
    assert codes == {h: ExitCode.SIGTERM for h in HOSTS}, out
    for r, h in enumerate(h for h in HOSTS for _ in range(2)):
        assert f"[{r} {h}] rank {r} handler ran" in out, out
    assert "killed by SIGTERM" not in out, out
    for h in ("algo-2", "algo-3"):
        assert "job result from master: exit code 143" in procs[h].output(), procs[h].output()
