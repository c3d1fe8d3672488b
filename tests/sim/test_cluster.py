"""The simulated cluster for real: namespaces, sshd per host, mpirun across hosts, clean tear-down."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mpirun_kit.sim import SimCluster, SimError, down_named, list_clusters

pytestmark = pytest.mark.sim
REPO = Path(__file__).resolve().parents[2]


def netns():
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@pytest.fixture
def sim3(tmp_path):
    with SimCluster(3, tmp_path / "c", "tsim3") as sim:
        yield sim


def test_hosts_are_isolated_and_named(sim3):
    for h in sim3.hosts:
        r = sim3.run(h.name, ["sh", "-c", "hostname; ip -4 -o addr show eth0; cat /opt/ml/input/config/resourceconfig.json"])
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0] == h.name
        assert f"inet {h.address}/24" in lines[1]
        assert json.loads("\n".join(lines[2:]))["current_host"] == h.name
    # Own PID namespace: a host sees its init, sshd and this command, not the machine's processes.
    ps = sim3.run("algo-2", ["ps", "-e", "-o", "pid=,comm="]).stdout.split("\n")
    assert len([p for p in ps if p.strip()]) < 10, ps
    assert any(p.split()[0] == "1" and "python" in p for p in ps if p.strip())


def test_ssh_between_hosts_with_strict_host_keys(sim3):
    r = sim3.run("algo-1", ["ssh", "algo-3", "hostname"])
    assert (r.returncode, r.stdout.strip()) == (0, "algo-3"), r.stderr
    # By address too; known_hosts lists both.
    r = sim3.run("algo-3", ["ssh", "10.233.0.2", "hostname"])
    assert (r.returncode, r.stdout.strip()) == (0, "algo-2"), r.stderr


def test_password_login_refused(sim3):
    r = sim3.run("algo-1", ["ssh", "-o", "IdentityFile=/dev/null", "-o", "IdentitiesOnly=yes",
                            "-o", "PreferredAuthentications=password", "algo-2", "true"])
    assert r.returncode == 255
    assert "Permission denied" in r.stderr


def test_mpirun_across_hosts_allreduce(sim3):
    prog = REPO / "tests" / "sim" / "mpi_allreduce.py"
    argv = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-H", "algo-1:2,algo-2:2,algo-3:2", "-np", "6",
            "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0",
            "--mca", "mpi_yield_when_idle", "1", "-x", "PATH", sys.executable, str(prog)]
    r = sim3.run("algo-1", argv, timeout=120)
    assert r.returncode == 0, r.stderr
    got = sorted(line.split() for line in r.stdout.splitlines())
    # Each rank reports its host and the allreduce of rank+1 over 6 ranks (= 21).
    assert got == sorted([["0", "algo-1", "21"], ["1", "algo-1", "21"], ["2", "algo-2", "21"],
                          ["3", "algo-2", "21"], ["4", "algo-3", "21"], ["5", "algo-3", "21"]])


def test_stop_sshd_makes_host_unreachable(sim3):
    sim3.stop_sshd("algo-2")
    r = sim3.run("algo-1", ["ssh", "-o", "ConnectTimeout=2", "algo-2", "true"])
    assert r.returncode == 255
    assert "Connection refused" in r.stderr


def test_kill_host_kills_everything_on_it(sim3):
    p = sim3.popen("algo-3", ["sleep", "300"])
    pid = p.pid
    sim3.kill_host("algo-3")
    assert p.wait(timeout=10) != 0
    assert not Path(f"/proc/{pid}").exists()
    with pytest.raises(SimError, match="host algo-3 of sim cluster 'tsim3' is not running"):
        sim3.popen("algo-3", ["true"])


def test_partition_cuts_host_off(sim3):
    sim3.partition("algo-2")
    r = sim3.run("algo-1", ["ssh", "-o", "ConnectTimeout=1", "algo-2", "true"], timeout=30)
    assert r.returncode == 255


def test_signal_reaches_program_not_nsenter(sim3):
    p = sim3.popen("algo-1", [sys.executable, "-c",
                              "import signal,sys,time\n"
                              "signal.signal(signal.SIGTERM, lambda *a: sys.exit(42))\n"
                              "print('ready', flush=True)\ntime.sleep(60)"],
                   stdout=subprocess.PIPE, text=True)
    assert p.popen.stdout.readline().strip() == "ready"
    p.send_signal(15)
    assert p.wait(timeout=10) == 42


def test_host_without_sshd(tmp_path):
    with SimCluster(2, tmp_path / "c", "tnossh", start_sshd=["algo-1"]) as sim:
        r = sim.run("algo-1", ["ssh", "-o", "ConnectTimeout=2", "algo-2", "true"])
        assert r.returncode == 255 and "Connection refused" in r.stderr


def test_down_is_idempotent_and_leaves_nothing(tmp_path):
    sim = SimCluster(2, tmp_path / "c", "tdown")
    sim.up()
    p = sim.popen("algo-2", ["sleep", "300"])
    pid = p.pid
    assert "mrk-tdown-1" in netns()
    sim.down()
    sim.down()
    assert "mrk-tdown" not in netns()
    assert not Path(f"/proc/{pid}").exists()
    assert "tdown" not in list_clusters()


def test_up_of_a_name_that_is_up_refuses_unless_replacing(tmp_path):
    from mpirun_kit.sim import SimClusterExistsError

    sim = SimCluster(2, tmp_path / "c", "h5up2")
    try:
        sim.up()
        other = SimCluster(2, tmp_path / "d", "h5up2")
        with pytest.raises(SimClusterExistsError) as e:
            with other:
                pass
        assert str(e.value) == ("a sim cluster named 'h5up2' is already up; tear it down first (mpirun_kit sim down "
                                "--name h5up2), replace it (sim up --replace) or choose another name")
        # refused, and the running cluster was left alone
        assert sim.run("algo-2", ["hostname"]).stdout.strip() == "algo-2"
        sim.up(replace=True)
        assert sim.run("algo-2", ["hostname"]).stdout.strip() == "algo-2"
    finally:
        sim.down()
    assert "mrk-h5up2" not in netns()
    # down leaves no private key behind
    assert not list((tmp_path / "c").rglob("*ed25519*"))


def test_failed_body_still_tears_down(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with SimCluster(2, tmp_path / "c", "tfail"):
            raise RuntimeError("boom")
    assert "mrk-tfail" not in netns()


def test_down_named_sweeps_without_state(tmp_path):
    sim = SimCluster(1, tmp_path / "c", "torphan")
    sim.up()
    # A controller that died leaves only namespace names behind.
    assert down_named("torphan") is True
    assert "mrk-torphan" not in netns()
    assert down_named("torphan") is False


def test_cli_up_exec_down(tmp_path):
    exe = [sys.executable, "-m", "mpirun_kit.cli.main", "sim"]
    root = ["--root", str(tmp_path / "c")]
    try:
        up = subprocess.run(exe + ["up", "--hosts", "2", "--name", "tcli", "--json", *root],
                            capture_output=True, text=True, timeout=60)
        assert up.returncode == 0, up.stderr
        assert json.loads(up.stdout)["hosts"] == {"algo-1": "10.233.0.1", "algo-2": "10.233.0.2"}
        ex = subprocess.run(exe + ["exec", "--name", "tcli", *root, "algo-2", "--", "ssh", "algo-1", "hostname"],
                            capture_output=True, text=True, timeout=60)
        assert (ex.returncode, ex.stdout.strip()) == (0, "algo-1"), ex.stderr
        again = subprocess.run(exe + ["up", "--hosts", "2", "--name", "tcli", *root], capture_output=True, text=True,
                               timeout=60)
        assert again.returncode == 69
        assert "a sim cluster named 'tcli' is already up" in again.stderr
        assert "replace it (sim up --replace)" in again.stderr
        ex = subprocess.run(exe + ["exec", "--name", "tcli", *root, "algo-2", "--", "true"], timeout=60)
        assert ex.returncode == 0  # the refused `up` left the cluster running
    finally:
        down = subprocess.run(exe + ["down", "--name", "tcli", *root], capture_output=True, text=True, timeout=60)
    assert down.returncode == 0 and "torn down" in down.stderr
    assert "mrk-tcli" not in netns()
    assert not (tmp_path / "c").exists()  # nothing left: no state, no private key
    gone = subprocess.run(exe + ["exec", "--name", "tcli", *root, "algo-1", "--", "true"],
                          capture_output=True, text=True, timeout=60)
    assert gone.returncode == 69
    assert "no running sim cluster 'tcli'" in gone.stderr and "mpirun_kit sim up --name tcli" in gone.stderr


def test_cli_exec_without_command(tmp_path):
    r = subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main", "sim", "exec", "--root", str(tmp_path),
                        "algo-1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 64
    assert "sim exec: no command given" in r.stderr


def test_the_hosts_hyperparameters_are_readable_by_their_user_only(tmp_path):
    """hyperparameters.json carries the LaunchSpec, whose env holds secret-looking values as they are (the ranks
    need them; every printed copy is redacted): 0600, as submit's request.json and spec.json (was 0644)."""
    import stat

    with SimCluster(1, tmp_path / "c", "thpmode", start_sshd=[]) as sim:
        sim.write_sagemaker_config({"mpirun_kit_launch_spec": '{"env": [["AWS_SECRET_ACCESS_KEY", "s3cr3tv4l"]]}'})
        path = sim.host("algo-1").opt_ml / "input" / "config" / "hyperparameters.json"
        assert oct(stat.S_IMODE(path.stat().st_mode)) == "0o600"
        assert "s3cr3tv4l" in sim.run("algo-1", ["cat", "/opt/ml/input/config/hyperparameters.json"]).stdout
