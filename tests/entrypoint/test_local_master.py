"""The master role end to end on this machine alone: real mpirun, real ranks, real signals.

Multi-host behaviour is covered on the simulated cluster (test_sim_*.py).
"""
import json
import os
import signal
import subprocess

import pytest

from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline
from mpirun_kit.spec.launch_spec import LaunchSpec, Timeouts

from clock_kit import FakeClock
from result_kit import code_and_text
from entrypoint_helpers import BIN, CLI, PY, cli, free_port, write_spec

pytestmark = [pytest.mark.timeout(180), pytest.mark.mpi]


def launch_args(tmp_path, program, n=2, **spec_kw):
    spec = LaunchSpec(program=tuple(program), processes_per_host=n, result_port=free_port(), **spec_kw)
    return ["launch", "--hosts", f"localhost:{n}", "--opt-ml", str(tmp_path / "opt_ml"),
            "--spec", str(write_spec(tmp_path / "spec.json", spec))]


def test_success_prefixes_output(tmp_path):
    res = cli(launch_args(tmp_path, [PY, str(BIN / "allreduce.py")], n=3) + ["--json"])
    assert res.returncode == 0, res.stderr
    assert "[0 localhost] ALLREDUCE sum=6 expected=6 size=3" in res.stdout
    assert json.loads(res.stdout.strip().splitlines()[-1]) == {"host": "localhost", "role": "master",
                                                                "exit_code": 0, "summary": ""}
    assert not (tmp_path / "opt_ml" / "output" / "failure").exists()


def test_rank_exit_code_and_failure_file(tmp_path):
    res = cli(launch_args(tmp_path, [PY, str(BIN / "exit_with.py"), "3", "1"]))
    assert res.returncode == 3, res.stderr
    failure = (tmp_path / "opt_ml" / "output" / "failure").read_text()
    assert code_and_text(failure).startswith("exit_code=3\nroot cause: rank 1 on localhost exited with code 3 (first seen ")
    assert len(failure) <= 1025
    # what `submit --wait` makes of it once SageMaker has put it in FailureReason (issue 12 finding 4)
    from mpirun_kit.targets.sagemaker import exit_code_for

    assert exit_code_for({"TrainingJobStatus": "Failed", "FailureReason": "AlgorithmError: " + failure}) == 3


def test_rank_signal_by_name(tmp_path):
    res = cli(launch_args(tmp_path, [PY, str(BIN / "kill_self.py"), "SIGKILL", "1", "0.2"]))
    assert res.returncode == 137, res.stderr
    failure = (tmp_path / "opt_ml" / "output" / "failure").read_text()
    assert code_and_text(failure).startswith("exit_code=137\nroot cause: rank 1 on localhost was killed by SIGKILL")
    from mpirun_kit.targets.sagemaker import exit_code_for

    assert exit_code_for({"TrainingJobStatus": "Failed", "FailureReason": "AlgorithmError: " + failure}) == 137


def test_sigterm_reaches_ranks(tmp_path):
    marks = tmp_path / "marks"
    args = launch_args(tmp_path, [PY, str(BIN / "sleep_forever.py"), str(marks)],
                       timeouts=Timeouts(grace_s=20.0))
    log = open(tmp_path / "entrypoint.log", "w+")
    p = subprocess.Popen(CLI + args, stdout=log, stderr=subprocess.STDOUT, text=True)
    deadline = Deadline(SYSTEM_CLOCK, 120)
    while sorted(x.name for x in marks.glob("ready.*")) != ["ready.0", "ready.1"]:
        assert not deadline.expired() and p.poll() is None, (tmp_path / "entrypoint.log").read_text()
        SYSTEM_CLOCK.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError("entrypoint still running 60 s after SIGTERM:\n" + (tmp_path / "entrypoint.log").read_text())
    assert p.returncode == 143, (tmp_path / "entrypoint.log").read_text()
    assert sorted(x.name for x in marks.glob("sigterm.*")) == ["sigterm.0", "sigterm.1"]
    assert code_and_text((tmp_path / "opt_ml" / "output" / "failure").read_text()).startswith(
        "exit_code=143\nthe job was stopped by SIGTERM sent to the master entrypoint")


def test_job_deadline_124(tmp_path):
    res = cli(launch_args(tmp_path, [PY, str(BIN / "sleep_forever.py")], timeouts=Timeouts(job_s=2.0, grace_s=2.0)))
    assert res.returncode == 124, res.stderr
    assert code_and_text((tmp_path / "opt_ml" / "output" / "failure").read_text()).startswith(
        "exit_code=124\nthe job ran past its deadline of 2 s and was stopped")


def test_result_port_taken(tmp_path):
    import socket

    args = launch_args(tmp_path, [PY, "-c", "pass"])
    port = json.loads((tmp_path / "spec.json").read_text())["result_port"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen(1)
        res = cli(args)
    assert res.returncode == 70
    assert f"cannot open the result channel on 127.0.0.1:{port} (Address already in use)" in res.stderr
    # the holder is named (this test process), so the user knows what to stop (issue #40)
    assert f"the port's holder on localhost: pid {os.getpid()} (" in res.stderr, res.stderr


def test_master_sigkilled_takes_mpirun_and_ranks_with_it(tmp_path):
    """mpirun runs in its own session, so it would outlive a SIGKILLed entrypoint without PR_SET_PDEATHSIG."""
    import psutil

    args = launch_args(tmp_path, [PY, str(BIN / "sleep_forever.py")])
    p = subprocess.Popen(CLI + args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ready = 0
    for line in p.stdout:
        ready += "ready" in line
        if ready == 2:
            break
    tree = psutil.Process(p.pid).children(recursive=True)
    assert any(c.name() == "mpirun" for c in tree)
    p.kill()
    p.wait(10)
    gone, alive = psutil.wait_procs(tree, timeout=30)
    assert alive == [], [c.cmdline() for c in alive]


def test_sigterm_while_planning_still_fails_cleanly_and_releases_the_worker(tmp_path):
    """Issue 12 finding 9: a SIGTERM during `mpirun --version` used to kill the master with no failure file,
    leaving its workers to wait out master_connect_s.  Here mpirun is a stand-in whose --version hangs."""
    import os
    import time

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "mpirun").write_text(f"#!/bin/sh\ntouch {tmp_path}/version-asked\nexec sleep 60\n")
    (fake / "mpirun").chmod(0o755)
    port = free_port()
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "PYTHONUNBUFFERED": "1"}
    env.pop("SM_HOSTS", None)

    def entry(name, role, flavour):
        spec = LaunchSpec(program=("true",), mpi_flavour=flavour, result_port=port,
                          timeouts=Timeouts(master_connect_s=120.0, master_silence_s=120.0, daemon_wait_s=120.0))
        args = ["entrypoint", "--role", role, "--no-sshd", "--hosts", "127.0.0.1,localhost", "--current-host", name,
                "--opt-ml", str(tmp_path / name), "--spec", str(write_spec(tmp_path / f"{name}.json", spec))]
        return subprocess.Popen(CLI + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    worker = entry("localhost", "worker", "openmpi5")
    master = entry("127.0.0.1", "master", "auto")
    deadline = Deadline(SYSTEM_CLOCK, 60)
    while not (tmp_path / "version-asked").exists():
        assert not deadline.expired() and master.poll() is None
        time.sleep(0.05)
    master.send_signal(signal.SIGTERM)
    _, merr = master.communicate(timeout=30)
    _, werr = worker.communicate(timeout=30)  # released at once, not after master_connect_s (120 s)
    assert master.returncode == 143, merr
    assert code_and_text((tmp_path / "127.0.0.1" / "output" / "failure").read_text()) == (
        "exit_code=143\nthe master entrypoint received SIGTERM before mpirun started\n")
    assert worker.returncode == 143, werr
    assert "job result from master: exit code 143" in werr


def test_host_probe_reads_the_machine_once_through_its_runner(tmp_path):
    """The entrypoint reads this machine through cluster/local.py's Machine, the CLI's reader too (it ran its
    own `mpirun --version` before): the runner it is handed sees one `mpirun --version`, and the plan takes
    the flavour from it."""
    from mpirun_kit.cluster import Cluster, Host
    from mpirun_kit.cluster.local import Machine
    from mpirun_kit.entrypoint import main as M

    seen = []
    machine = Machine(lambda argv: seen.append(list(argv)) or "mpirun (Open MPI) 5.0.6\n", dev=tmp_path)
    spec = LaunchSpec(program=("true",), mpi_flavour="auto")
    probe = M.HostProbe(spec, machine=machine).start()
    plan = M.plan_of(M.EntrypointOptions(), {}, Cluster((Host("a"),), "a", "test"), spec, probe)
    assert probe.result() == ("openmpi5", 0)
    assert "openmpi5" in repr(plan)
    assert seen == [["mpirun", "--version"]]


def test_host_probe_stops_a_hanging_mpirun_on_a_signal(tmp_path, monkeypatch):
    """A signal held by the latch stops `mpirun --version` at once (exec/command.py's cancellable runner):
    the probe answers the stop's flavour instead of waiting out VERSION_TIMEOUT_S."""
    from mpirun_kit.entrypoint import main as M

    fake = tmp_path / "mpirun"
    fake.write_text("#!/bin/sh\nexec sleep 60\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    probe = M.HostProbe(LaunchSpec(program=("true",), mpi_flavour="auto"), cancelled=lambda: True).start()
    assert probe.result()[0] == M._STOPPED_FLAVOUR


def test_gpu_discovery_that_never_answers_is_a_launch_error(monkeypatch):
    """The probe thread's join has a deadline on the injected clock.  NVML cannot run here (no driver), so a
    hanging NVML is a stand-in: gpu_count blocks until released."""
    import threading

    from mpirun_kit.cluster.local import Machine
    from mpirun_kit.entrypoint import main as M
    from mpirun_kit.errors import LaunchError

    release = threading.Event()
    machine = Machine(lambda argv: "")
    monkeypatch.setattr(machine, "gpu_count", lambda: release.wait(30) and 0)
    probe = M.HostProbe(LaunchSpec(program=("true",), mpi_flavour="openmpi4"), clock=FakeClock(jump=60.0),
                        machine=machine).start()
    try:
        with pytest.raises(LaunchError) as e:
            probe.result()
    finally:
        release.set()
    assert str(e.value) == ("GPU discovery (NVML) gave no answer within 60 s; the NVIDIA driver on this host is "
                            "broken: check `nvidia-smi`, or replace the host")
