"""Issue 12 on the simulated cluster (real sshd, real mpirun, network namespaces): the result channel against a
hostile process on a job host, and a worker host whose network is cut mid-job.

Every host holds the job secret where SageMaker's ``mpirun-keys`` channel puts it
(``/opt/ml/input/data/mpirun-keys/job-secret``), so workers and master authenticate
each other; the forger runs on a job host, so only the MAC (not the address filter)
stands between it and the result.
"""
import time

import pytest

from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline
from mpirun_kit.spec.launch_spec import LaunchSpec, Timeouts

from result_kit import code_and_text
from entrypoint_helpers import BIN, FAST, PY, failure_of, run_job, sim_cluster, wait_all

pytestmark = [pytest.mark.sim, pytest.mark.timeout(300)]

SECRET = bytes(range(32)).hex() + "\n"


@pytest.fixture(scope="module")
def sim3(tmp_path_factory):
    with sim_cluster(3, tmp_path_factory.mktemp("h2trust"), "h2trust") as sim:
        for h in sim.hosts:
            d = h.opt_ml / "input" / "data" / "mpirun-keys"
            d.mkdir(parents=True, exist_ok=True)
            (d / "job-secret").write_text(SECRET)
        yield sim


# Runs on algo-2 with none of the job's environment: what another job or a notebook in the security group could do.
FORGER = r"""
import json, socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
end = time.monotonic() + 60
def conn():
    while True:
        try:
            return socket.create_connection((host, port), timeout=2)
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.1)
lines = [
    {"type": "rank", "event": "exit", "rank": 3, "exit_code": 3, "signal": None, "host": "algo-1; any text", "t": 1.0},
    {"type": "rank", "event": "exit", "rank": 0, "exit_code": "x", "signal": None, "host": "algo-1", "t": 1.0},
    {"type": "hello", "host": "algo-2"},
    {"type": "ack"},
]
for msg in lines:
    c = conn()
    c.sendall((json.dumps(msg) + "\n").encode())
    c.sendall(("0" * 64 + " " + json.dumps(msg) + "\n").encode())  # a MAC-shaped prefix does not help
    c.close()
c = conn()
c.sendall(b"[" * 100000 + b"\n")
c.close()
idle = [conn() for _ in range(100)]
print("forger: sent", flush=True)
time.sleep(30)
"""


def test_forged_messages_from_a_job_host_never_change_the_result(sim3):
    procs = run_job(sim3, [PY, "-c", "import time; time.sleep(5)"], result_port=29411)   # a port the forger knows
    forger = sim3.popen("algo-2", [PY, "-c", FORGER, "algo-1", "29411"],
                        log_path=sim3.host("algo-2").dir / "forger.log")
    codes = wait_all(procs)
    out = procs["algo-1"].output()
    assert "forger: sent" in forger.output(), forger.output()
    forger.send_signal(9)
    assert codes == {"algo-1": 0, "algo-2": 0, "algo-3": 0}, out
    for h in ("algo-1", "algo-2", "algo-3"):
        assert failure_of(sim3, h) == "", h
    for h in ("algo-2", "algo-3"):
        assert "job result from master: exit code 0" in procs[h].output()
    assert "mpirun_kit: warning: result channel: dropped from " in out, out
    assert ": not a signed line (no MAC and sender) (1 of kind malformed" in out, out
    assert "Traceback" not in out


def test_worker_network_cut_every_host_exits_with_host_lost(sim3):
    """eth0 of algo-3 goes down mid-job (no FIN, no RST): master and algo-2 exit 74 naming algo-3;
    algo-3 itself exits 75 when its master goes silent.  Before, master and algo-2 ran on forever."""
    t = Timeouts(**{**FAST.__dict__, "worker_silence_s": 4.0, "grace_s": 4.0})
    procs = run_job(sim3, [PY, str(BIN / "sleep_forever.py")], timeouts=t)
    deadline = Deadline(SYSTEM_CLOCK, 90)
    while procs["algo-1"].output().count(" ready") < 6:
        assert not deadline.expired(), procs["algo-1"].output()
        assert procs["algo-1"].poll() is None, procs["algo-1"].output()
        time.sleep(0.1)
    sim3.run("algo-3", ["ip", "link", "set", "eth0", "down"])
    t0 = time.monotonic()
    try:
        codes = {h: procs[h].wait(60) for h in ("algo-1", "algo-2", "algo-3")}
        took = time.monotonic() - t0
    finally:
        sim3.run("algo-3", ["ip", "link", "set", "eth0", "up"])
    out = procs["algo-1"].output()
    assert codes == {"algo-1": 74, "algo-2": 74, "algo-3": 75}, out
    # worker_silence_s + grace_s + a few seconds (a test may not assert timings finer than that bound)
    assert took < t.worker_silence_s + t.grace_s + 10, (took, out)
    for h in ("algo-1", "algo-2"):
        text = failure_of(sim3, h)
        assert code_and_text(text).startswith("exit_code=74\nhost lost: worker algo-3 stopped answering on the result "
                               "channel (silent "), (h, text)
        assert "limit timeouts.worker_silence_s = 4 s" in text
    assert code_and_text(failure_of(sim3, "algo-3")).startswith("exit_code=75\nworker algo-3: ")
