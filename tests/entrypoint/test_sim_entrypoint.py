"""The per-host entrypoint on the simulated cluster: every host runs it at once, exactly as SageMaker does.

Each host has its own network/PID/UTS/mount namespaces, sshd (started by the
sim, hence ``--no-sshd``), /opt/ml with resourceconfig.json + hyperparameters.json.
"""
import json
import signal
import time
from pathlib import Path

import pytest

from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline
from mpirun_kit.spec.launch_spec import LAUNCH_SPEC_HYPERPARAMETER, LaunchSpec, Timeouts

from result_kit import code_and_text
from entrypoint_helpers import BIN, ENTRY, FAST, PY, failure_of, run_job, sim_cluster, wait_all

pytestmark = [pytest.mark.sim, pytest.mark.timeout(300)]

@pytest.fixture(scope="module")
def sim3(tmp_path_factory):
    with sim_cluster(3, tmp_path_factory.mktemp("sim3"), "h1ep3") as sim:
        yield sim


def test_allreduce_3x2_every_host_exits_0(sim3):
    procs = run_job(sim3, [PY, str(BIN / "allreduce.py")])
    codes = wait_all(procs)
    out = procs["algo-1"].output()
    assert codes == {"algo-1": 0, "algo-2": 0, "algo-3": 0}, out
    assert ("[0 algo-1] ALLREDUCE sum=21 expected=21 size=6 "
            "hosts=algo-1,algo-1,algo-2,algo-2,algo-3,algo-3") in out
    for h in ("algo-2", "algo-3"):
        assert "job result from master: exit code 0" in procs[h].output()


def test_rank_exit_3_on_worker_every_host_exits_3(sim3):
    procs = run_job(sim3, [PY, str(BIN / "exit_with.py"), "3", "3", "0.5"])
    codes = wait_all(procs)
    assert codes == {"algo-1": 3, "algo-2": 3, "algo-3": 3}, procs["algo-1"].output()
    for h in ("algo-1", "algo-2", "algo-3"):
        assert code_and_text(failure_of(sim3, h)).startswith(
            "exit_code=3\nroot cause: rank 3 on algo-2 exited with code 3 (first seen"), h


def test_rank_killed_by_signal_named(sim3):
    procs = run_job(sim3, [PY, str(BIN / "kill_self.py"), "SIGKILL", "5", "0.5"])
    codes = wait_all(procs)
    assert set(codes.values()) == {137}, procs["algo-1"].output()
    assert code_and_text(failure_of(sim3, "algo-1")).startswith(
        "exit_code=137\nroot cause: rank 5 on algo-3 was killed by SIGKILL")


def test_sigterm_to_master_reaches_every_rank(sim3):
    procs = run_job(sim3, [PY, str(BIN / "sleep_forever.py"), "/opt/ml/output/marks"],
                    timeouts=Timeouts(**{**FAST.__dict__, "grace_s": 15.0}))
    for h in sim3.hosts:
        for m in (h.opt_ml / "output" / "marks").glob("*"):
            m.unlink()
    deadline = Deadline(SYSTEM_CLOCK, 90)
    while sum(len(list((h.opt_ml / "output" / "marks").glob("ready.*"))) for h in sim3.hosts) < 6:
        assert not deadline.expired(), procs["algo-1"].output()
        assert procs["algo-1"].poll() is None, procs["algo-1"].output()
        time.sleep(0.1)
    procs["algo-1"].send_signal(signal.SIGTERM)
    codes = wait_all(procs, 60)
    assert codes == {"algo-1": 143, "algo-2": 143, "algo-3": 143}, procs["algo-1"].output()
    marks = {h.name: sorted(m.name for m in (h.opt_ml / "output" / "marks").glob("sigterm.*")) for h in sim3.hosts}
    assert marks == {"algo-1": ["sigterm.0", "sigterm.1"], "algo-2": ["sigterm.2", "sigterm.3"],
                     "algo-3": ["sigterm.4", "sigterm.5"]}


@pytest.mark.parametrize("patch, expected", [
    (None, "malformed JSON"),
    ({"current_host": "algo-9"}, "field 'current_host' is 'algo-9', which is not in field 'hosts'"),
    ({"network_interface_name": "eth9"},
     "field 'network_interface_name' names network interface 'eth9', which this host does not have"),
])
def test_bad_resourceconfig_exit_64(sim3, patch, expected):
    run_job(sim3, ["true"], hosts=[])
    rc_path = sim3.host("algo-2").opt_ml / "input" / "config" / "resourceconfig.json"
    raw = json.loads(rc_path.read_text())
    rc_path.write_text("{ not json" if patch is None else json.dumps({**raw, **patch}))
    p = sim3.start_entrypoints(ENTRY, hosts=["algo-2"])["algo-2"]
    assert p.wait(60) == 64
    assert "mpirun_kit: error: /opt/ml/input/config/resourceconfig.json: " in p.output()
    assert expected in p.output()


def test_worker_host_never_up(tmp_path):
    with sim_cluster(3, tmp_path, "h1down", start_sshd=["algo-1", "algo-2"]) as sim:
        procs = run_job(sim, [PY, str(BIN / "allreduce.py")], hosts=["algo-1", "algo-2"])
        t0 = time.monotonic()
        codes = wait_all(procs, 60)
        took = time.monotonic() - t0
    assert codes == {"algo-1": 69, "algo-2": 69}, procs["algo-1"].output()
    out = procs["algo-1"].output()
    assert "sshd on 1 of 2 worker host(s) never answered on port 22 within 7.5 s: algo-3:" in out
    assert took < 60
    assert "job result from master: exit code 69" in procs["algo-2"].output()


def test_master_killed_mid_job_workers_exit_75(tmp_path):
    with sim_cluster(3, tmp_path, "h1kill") as sim:
        procs = run_job(sim, [PY, str(BIN / "sleep_forever.py")])
        deadline = Deadline(SYSTEM_CLOCK, 90)
        while procs["algo-1"].output().count(" ready") < 6:
            assert not deadline.expired(), procs["algo-1"].output()
            time.sleep(0.1)
        sim.kill_host("algo-1")
        t0 = time.monotonic()
        codes = {h: procs[h].wait(60) for h in ("algo-2", "algo-3")}
        took = time.monotonic() - t0
    assert codes == {"algo-2": 75, "algo-3": 75}
    assert took < FAST.master_silence_s + 10
    for h in ("algo-2", "algo-3"):
        out = procs[h].output()
        assert f"mpirun_kit: error: worker {h}: master algo-1 closed the result channel" in out \
            or f"mpirun_kit: error: worker {h}: no heartbeat from master algo-1" in out, out


def test_master_partitioned_workers_exit_75_on_silence(tmp_path):
    with sim_cluster(2, tmp_path, "h1part") as sim:
        procs = run_job(sim, [PY, str(BIN / "sleep_forever.py")])
        deadline = Deadline(SYSTEM_CLOCK, 90)
        while procs["algo-1"].output().count(" ready") < 4:
            assert not deadline.expired(), procs["algo-1"].output()
            time.sleep(0.1)
        sim.partition("algo-1")
        assert procs["algo-2"].wait(60) == 75
    assert "no heartbeat from master algo-1 for 5 s" in procs["algo-2"].output()


def test_workers_start_their_own_sshd(tmp_path):
    """The platform runs no sshd here: each worker's entrypoint starts it (key-only, with the host's config)."""
    with sim_cluster(2, tmp_path, "h1sshd", start_sshd=[]) as sim:
        spec = LaunchSpec(program=(PY, str(BIN / "allreduce.py")), processes_per_host=1, timeouts=FAST)
        sim.write_sagemaker_config({LAUNCH_SPEC_HYPERPARAMETER: spec.to_json()})
        entry = [str(Path(PY).parent / "mpirun_kit"), "entrypoint"]
        procs = {"algo-1": sim.popen("algo-1", entry, log_path=sim.host("algo-1").dir / "entrypoint.log"),
                 "algo-2": sim.popen("algo-2", entry + ["--sshd-config", str(sim.host("algo-2").sshd_config)],
                                     log_path=sim.host("algo-2").dir / "entrypoint.log")}
        codes = wait_all(procs, 120)
        assert codes == {"algo-1": 0, "algo-2": 0}, procs["algo-1"].output() + procs["algo-2"].output()
        assert "ALLREDUCE sum=3 expected=3 size=2" in procs["algo-1"].output()
        # the worker's sshd was its child and is gone with it
        assert "sshd" not in sim.run("algo-2", ["ps", "-e", "-o", "comm="]).stdout
