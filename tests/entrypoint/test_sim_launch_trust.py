"""Issue 27 finding 2 on the simulated cluster (real sshd, real mpirun, network namespaces): `mpirun_kit launch`
across hosts.  Before, launch had no secret: the workers' key derived from the hosts, the port and an empty job
name, all in every rank's environment; a process of any user on a job host said hello with it, took that host's
seed and forged ``exit 42`` for a rank there (whose wrapper, with no entrypoint on its host, never reported);
and a rank that never reported was counted as neither success nor failure.

Now launch makes a random workers' key per run (no hello is expected, none can be forged), hands every other
host's ranks their keys over the ssh mpirun uses (exec/channel/keyhost.py), so every rank reports, and a
rank that ran but never reported its exit fails the job with cause ``report_missing``, source ``channel``.
"""
import json
import sys
from pathlib import Path

import pytest

from entrypoint_helpers import PY, sim_cluster

pytestmark = [pytest.mark.sim, pytest.mark.timeout(300)]
REPO = Path(__file__).resolve().parents[2]
PORT = 29411
HOSTS = "algo-1:2,algo-2:2,algo-3:2"
LAUNCH = [str(Path(PY).parent / "mpirun_kit"), "launch", "--hosts", HOSTS, "--opt-ml", "/opt/ml",
          "--mpi-flavour", "openmpi4", "--result-port", str(PORT)]   # a port the forger knows


@pytest.fixture(scope="module")
def sim3(tmp_path_factory):
    with sim_cluster(3, tmp_path_factory.mktemp("h4launch"), "h4launch") as sim:
        yield sim


def result_of(sim) -> dict:
    return json.loads((sim.host("algo-1").opt_ml / "output" / "result.json").read_text())


def launch(sim, program, name):
    for f in ("result.json", "failure", "timeline.json"):
        (sim.host("algo-1").opt_ml / "output" / f).unlink(missing_ok=True)
    # This checkout's code on the master (PYTHONPATH wins over the installed package), so the same test shows
    # the tree it sits in.
    env = {**sim.default_env(), "PYTHONPATH": str(REPO)}
    return sim.popen("algo-1", LAUNCH + ["--", *program], env=env, log_path=sim.host("algo-1").dir / f"{name}.log")


# uid nobody on algo-2, with nothing of the job but what its environment shows every rank (hosts, port, job
# name): derives the workers' key as launch used to, says hello for algo-2, and with the seed it gets forges
# exit 42 for rank 2 (a rank on algo-2).  It tries for as long as the job runs.
FORGER = r"""
import socket, sys, time
from mpirun_kit.exec.channel import keys, wire
port = int(sys.argv[1])
wk = keys.worker_key_without_secret(["algo-2", "algo-3"], port, "")
end = time.monotonic() + 8
def session_of(c):
    buf = b""
    while b"\n" not in buf:
        chunk = c.recv(256)
        if not chunk:
            return None, b""
        buf += chunk
    line, rest = buf.split(b"\n", 1)
    n = wire.parse_greeting(line)
    return (wire.Session("", *n, master_end=False) if n else None), rest
while time.monotonic() < end:
    try:
        c = socket.create_connection(("algo-1", port), timeout=2)
    except OSError:
        time.sleep(0.1)
        continue
    s, buf = session_of(c)
    if s is None:
        continue
    c.sendall(s.seal({"type": "hello", "host": "algo-2"}, wk, "w"))
    c.settimeout(1)
    try:
        while b'"keys"' not in buf:
            chunk = c.recv(65536)
            if not chunk:
                break
            buf += chunk
    except OSError:
        pass
    if b'"keys"' in buf:
        seed = bytes.fromhex(buf.split(b'"seed":"', 1)[1][:64].decode())
        print("forger: got a seed", flush=True)
        r = socket.create_connection(("algo-1", port), timeout=2)
        rs, _ = session_of(r)
        r.sendall(rs.seal({"type": "rank", "event": "exit", "rank": 2, "host": "algo-2", "exit_code": 42,
                           "signal": None, "t": time.time()}, keys.rank_key(seed, "", 2), "r2"))
        print("forger: sent exit 42 for rank 2", flush=True)
        time.sleep(1)
        break
    c.close()
    time.sleep(0.2)
print("forger: done", flush=True)
"""


def test_launch_across_hosts_every_rank_reports_and_a_forged_hello_gets_nothing(sim3):
    forger = sim3.popen("algo-2", ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                                   "/usr/bin/python3", "-c", FORGER, str(PORT)],
                        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
                        log_path=sim3.host("algo-2").dir / "forger.log")
    job = launch(sim3, [PY, "-c", "import time; time.sleep(5)"], "launch-ok")
    code = job.wait(timeout=180)
    forger.wait(timeout=30)
    out, said = job.output(), forger.output()
    assert "forger: done" in said, said
    assert "got a seed" not in said, said
    assert code == 0, out
    res = result_of(sim3)
    assert (res["exit_code"], res["cause"]) == (0, "succeeded"), res
    # every rank on every host reported its start and exit (the master's timeline holds the ranks' reports)
    tl = json.loads((sim3.host("algo-1").opt_ml / "output" / "timeline.json").read_text())
    assert sorted((r["rank"], r["host"]) for r in tl["ranks"] if "exited" in r) == [
        (0, "algo-1"), (1, "algo-1"), (2, "algo-2"), (3, "algo-2"), (4, "algo-3"), (5, "algo-3")], tl["ranks"]
    assert "run without reports" not in out, out
    # and nothing of the hand-off is left on the other hosts
    left = sim3.run("algo-2", ["sh", "-c", "ls /dev/shm | grep -c mpirun_kit-keys || true"])
    assert left.stdout.strip() == "0", left.stdout


# On algo-3: a second address, made the source of its new connections, so its ranks' connections to the result
# channel come from an address that is not algo-3's (refused by the master's filter), while ssh to algo-3 and
# the MPI daemons' own connections work as before.
SECOND_SOURCE = r"""
set -e
cidr=$(ip -4 -o addr show dev eth0 | awk '{print $4}' | head -1)
net=$(ip -4 route show dev eth0 scope link | awk '{print $1}' | head -1)
other="${cidr%.*}.250"
ip addr add "$other/${cidr#*/}" dev eth0
ip route replace "$net" dev eth0 src "$other"
"""


def test_a_rank_that_ran_but_never_reported_fails_the_job(sim3):
    """algo-3's ranks run and exit 0, but their reports never reach the master (their connections come from an
    address that is not algo-3's).  Before: exit 0, as if the master knew how they ended."""
    r = sim3.run("algo-3", ["sh", "-c", SECOND_SOURCE])
    assert r.returncode == 0, r.stderr
    job = launch(sim3, [PY, "-c", "print('ran')"], "launch-missing")
    code = job.wait(timeout=240)
    out = job.output()
    res = result_of(sim3)
    assert (code, res["exit_code"], res["cause"], res["source"]) == (70, 70, "report_missing", "channel"), out
    assert res["reason"].startswith("rank(s) 4, 5 on algo-3 ran (mpirun exited 0) but never reported their exit "
                                    "to the result channel"), res["reason"]
