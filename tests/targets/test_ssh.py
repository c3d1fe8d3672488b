"""Target ssh against real sshd: `submit --target ssh` runs inside simulated host algo-1 and reaches
algo-1..3 with paramiko (the hosts' own keys and known_hosts, host keys verified).

Also the readiness errors: a host whose sshd never starts (named in the message, exit 69)
and a host key missing from known_hosts (never accepted, never prompted).
"""
from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from mpirun_kit.sim import SimCluster
from mpirun_kit.spec.compile import compile_job
from mpirun_kit.spec.load import load_job_text
from mpirun_kit.targets import ssh as T

pytestmark = pytest.mark.sim
EXE = str(Path(sys.executable).with_name("mpirun_kit"))


def STATE(tmp_path: Path) -> list[str]:
    """A submit inside a simulated host gets the host's environment, not the test's MPIRUN_KIT_STATE_DIR: its
    records go to the test's own store, never the user's (issue #40: 8 ssh-test jobs were found there)."""
    return ["--state-dir", str(tmp_path / "state")]


def spec(tmp_path: Path, hosts: list[str], command: str, extra: str = "") -> Path:
    p = tmp_path / "job.yaml"
    p.write_text(textwrap.dedent(f"""\
        apiVersion: mpirun_kit/v1
        kind: Job
        name: ssh-test
        target:
          type: ssh
          ssh: {{hosts: {hosts}, python: {sys.executable}, workdir: {tmp_path / 'remote'}, connect_timeout_s: 3}}
        resources: {{processes_per_host: 1}}
        program:
          command: [sh, -c, '{command}']
        timeouts: {{ssh_ready_s: 8, ssh_ready_per_host_s: 0.5}}
        {extra}
        """))
    return p


#: run inside algo-1: SshTarget.start returns while every host's entrypoint runs; the one supervisor then stops it
START = """\
import json, sys
from mpirun_kit.exec.supervisor import Supervisor, signal_stop
from mpirun_kit.service.compile import compile_spec
from mpirun_kit.targets.base import SubmitOptions
from mpirun_kit.targets.ssh import SshTarget

compiled, _, _ = compile_spec(sys.argv[1], default_region=lambda: None)
target = SshTarget()
dry = target.prepare(compiled, SubmitOptions(job_id="ssh-start-1"))
started = target.start(dry)
running = started.child.poll() is None
child = started.child
try:
    ended = Supervisor(child, grace_s=child.cancel_bound_s(), requested=lambda: signal_stop("SIGTERM"),
                       tick_s=0.2).run()
finally:
    child.close()
print(json.dumps({"running": running, "native": started.native, "workdir": dry.request.workdir,
                  "code": ended.stop.exit_code, "codes": {s.host: s.code for s in child.sessions}}))
"""


def test_start_returns_while_every_host_runs_and_the_supervisor_stops_it(tmp_path):
    """Issue 38 item 2: SshTarget.start connects, ships and starts every host's entrypoint and returns at once with
    the run's working directory; the sessions are the child the one supervisor follows and stops."""
    with SimCluster(2, tmp_path / "c", "tssh2s") as sim:
        job = spec(tmp_path, ["algo-1", "algo-2"], "sleep 120")
        r = sim.run("algo-1", [sys.executable, "-c", START, str(job)], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(r.stdout.splitlines()[-1])
    assert got["running"] is True and got["native"] == got["workdir"]
    assert got["code"] == 143, got


def test_job_over_ssh_on_three_hosts(tmp_path):
    with SimCluster(3, tmp_path / "c", "tssh3") as sim:
        job = spec(tmp_path, ["algo-1", "algo-2", "algo-3"],
                   'echo "rank $OMPI_COMM_WORLD_RANK on $(hostname)"; [ "$OMPI_COMM_WORLD_RANK" != 2 ] || exit 4')
        r = sim.run("algo-1", [EXE, "submit", "-v", str(job), *STATE(tmp_path)], timeout=180)
        # 70 is also the launcher-failure code: --json tells them apart by the master's failure report,
        # read back over ssh, not by the code.  Without -v: no progress lines of the tool's own.
        job70 = spec(tmp_path, ["algo-1", "algo-2"],
                     'echo "rank $OMPI_COMM_WORLD_RANK"; [ "$OMPI_COMM_WORLD_RANK" != 1 ] || exit 70')
        q = sim.run("algo-1", [EXE, "submit", "--json", str(job70), *STATE(tmp_path)], timeout=180)
    assert r.returncode == 4, r.stdout + r.stderr
    assert "[0 algo-1] rank 0 on algo-1" in r.stdout
    assert "[1 algo-2] rank 1 on algo-2" in r.stdout
    assert "[2 algo-3] rank 2 on algo-3" in r.stdout
    assert "ssh: all 3 host(s) ready" in r.stderr
    assert "ssh: every host finished (algo-1=4, algo-2=4, algo-3=4)" in r.stderr
    assert "launching 3 ranks on 3 host(s)" in r.stderr + r.stdout
    assert q.returncode == 70, q.stdout + q.stderr
    result = json.loads(q.stdout.splitlines()[-1])
    assert result["source"] == "job", result
    assert result["root_cause"] == {"rank": 1, "host": "algo-2", "exit_code": 70, "signal": None}, result
    assert result["failure_file"].startswith("algo-1:") and result["failure_file"].endswith("/algo-1/output/failure")
    assert result["timeline"]["hosts"] == {"algo-1": 70, "algo-2": 70}, result
    # the master's whole result, read back over ssh (issue 38): every failing rank, not the failure file's head
    assert [(f["rank"], f["exit_code"]) for f in result["result"]["failures"]] == [(1, 70)], result
    assert "[1 algo-2] rank 1" in q.stdout
    tool_lines = [ln for ln in (q.stdout + q.stderr).replace("[algo-2 entrypoint] ", "").splitlines()
                  if ln.startswith("mpirun_kit: ") and not ln.startswith(
                      ("mpirun_kit: error:", "mpirun_kit: warning:", "mpirun_kit: job failed"))]
    assert tool_lines == [], tool_lines


def test_host_without_sshd_is_named(tmp_path):
    with SimCluster(2, tmp_path / "c", "tsshno", start_sshd=["algo-1"]) as sim:
        job = spec(tmp_path, ["algo-1", "algo-2"], "true")
        r = sim.run("algo-1", [EXE, "submit", str(job), *STATE(tmp_path)], timeout=120)
    assert r.returncode == 69, r.stdout + r.stderr
    assert "1 of 2 host(s) never accepted an ssh session within 9s (algo-2:" in r.stderr
    assert "check that sshd runs there" in r.stderr


def test_unknown_host_key_is_rejected(tmp_path):
    with SimCluster(2, tmp_path / "c", "tsshkey") as sim:
        empty = tmp_path / "empty_known_hosts"
        empty.write_text("")
        job = spec(tmp_path, ["algo-2"], "true")
        text = job.read_text().replace("connect_timeout_s: 3}", f"connect_timeout_s: 3, known_hosts: {empty}}}")
        job.write_text(text)
        # Only our file: hide the host's own known_hosts from paramiko's system lookup.
        r = sim.run("algo-1", ["sh", "-c", f"mount --bind {empty} /root/.ssh/known_hosts && "
                               f"{EXE} submit {job} {' '.join(STATE(tmp_path))}"], timeout=120)
    assert r.returncode == 69, r.stdout + r.stderr
    assert "host key check failed for algo-2" in r.stderr
    assert f"add it to {empty}" in r.stderr


def test_dry_run_passes_the_output_level_to_every_host(tmp_path):
    """submit -q on ssh hosts leaves only errors and the result, as on sim and local: -q reaches each entrypoint."""
    c = compile_job(load_job_text(spec(tmp_path, ["a:2", "b"], "true").read_text(), "job.yaml"))
    flags = {level: (lambda argv: argv[argv.index("--opt-ml") + 2:])(T.dryrun(c, run_id="r1", **kw).request.commands["b"])
             for level, kw in {"quiet": {"verbose": False, "quiet": True}, "default": {"verbose": False},
                               "verbose": {"verbose": True}}.items()}
    assert flags == {"quiet": ["-q"], "default": ["--no-progress"], "verbose": []}


def test_dry_run_value(tmp_path):
    c = compile_job(load_job_text(spec(tmp_path, ["a:2", "b"], "true").read_text(), "job.yaml"))
    d = T.dryrun(c, run_id="r1")
    wd = f"{tmp_path / 'remote'}/r1"
    assert d.request.hosts == [{"name": "a", "slots": 2}, {"name": "b", "slots": 1}]
    assert d.files[1] == (f"{wd}/hostfile", "a slots=2\nb slots=1\n")
    # Every command is an argv: what used to be shell (the pid file, the cancel loop, the atomic write) runs on the
    # host as mpirun_kit.exec.remote_host (issue 31 item 8).
    py = sys.executable
    assert d.request.commands["b"] == [
        py, "-m", "mpirun_kit.exec.remote_host", "start", "--pid-file", f"{wd}/b.pid", "--dir", f"{wd}/b",
        "--private", wd, "--grace", f"{c.launch.timeouts.grace_s + 5:g}", "--",
        py, "-m", "mpirun_kit.cli.main", "entrypoint", "--no-sshd", "--hostfile", f"{wd}/hostfile", "--current-host",
        "b", "--spec", f"{wd}/launch-spec.json", "--secret-file", f"{wd}/job-secret", "--opt-ml", f"{wd}/b"]
    assert d.request.ready_timeout_s == 9.0
    # Everything sent is in the value: preflight, ship (per host, per file), cancel, the failure report's read.
    # The preflight ends itself on the host 5 s after we stop waiting for it (the connect timeout + 20 s).
    assert d.request.preflight == ["timeout", "--signal=KILL", f"{c.job.target.ssh.connect_timeout_s + 25:g}", py, "-c",
                                   "import mpirun_kit, sys; sys.stdout.write(mpirun_kit.__version__)"]
    # --private: the run directory is made 0700 and refused where another user could swap it (the default is in /tmp).
    assert d.request.ship["b"][f"{wd}/hostfile"] == [py, "-m", "mpirun_kit.exec.remote_host", "write",
                                                         f"{wd}/hostfile", "--private", wd]
    assert sorted(d.request.ship["a"]) == [f"{wd}/hostfile", f"{wd}/job-secret", f"{wd}/launch-spec.json"]
    assert d.request.ship["a"][f"{wd}/job-secret"][-2:] == ["--mode", "600"]   # made per run: never in the value
    grace = c.launch.timeouts.grace_s
    assert d.request.cancel["a"] == [py, "-m", "mpirun_kit.exec.remote_host", "cancel", "--pid-file",
                                        f"{wd}/a.pid", "--grace", f"{grace + T.ENTRYPOINT_STOP_S:g}", "--wait",
                                        f"{T.PID_WAIT_S:g}"]
    assert d.request.fetch_failure == {"a": [py, "-m", "mpirun_kit.exec.remote_host", "read",
                                                f"{wd}/a/output/failure", "--limit", str(T.FAILURE_READ_LIMIT)]}
    assert d.request.fetch_result == {"a": [py, "-m", "mpirun_kit.exec.remote_host", "read",
                                            f"{wd}/a/output/result.json", "--limit", str(T.FAILURE_READ_LIMIT)]}
    assert not any(isinstance(v, str) for v in (d.request.preflight, *d.request.commands.values(),
                                                *d.request.cancel.values()))
    text = d.render()
    for argv in (d.request.preflight, d.request.cancel["b"], d.request.commands["a"]):
        assert all(word.replace('"', '\\"') in text for word in argv)


def test_each_run_ships_a_secret_of_its_own(tmp_path):
    """Issue #40 item 1: an ssh job had no job secret, so two runs of one spec on the same hosts derived the same
    result port from the hosts and the job's name, and the second failed on a port in use.  Each run now ships a
    secret made for it (never in the dry run); the workers' key, and with it the result port, comes from it."""
    from mpirun_kit.exec.channel.keys import worker_key_from_secret
    from mpirun_kit.exec.sshkeys import parse_secret

    c = compile_job(load_job_text(spec(tmp_path, ["a", "b"], "true").read_text(), "job.yaml"))
    d = T.dryrun(c, run_id="r1")
    first, second = (dict(T.run_files(d)) for _ in range(2))
    path = d.request.secret_file
    assert path == f"{tmp_path / 'remote'}/r1/job-secret" and path not in dict(d.files)
    assert first[path] != second[path] and first[path] not in d.render()
    keys = {worker_key_from_secret(parse_secret(files[path]), "") for files in (first, second)}
    assert len(keys) == 2


def test_two_runs_of_one_spec_on_the_same_hosts_at_once(tmp_path):
    """Issue #40 item 1, for real: two submits of one spec at once on algo-1 and algo-2 both end 0.  Before, both
    masters derived one port and the second ended in seconds with 'cannot open the result channel'."""
    with SimCluster(2, tmp_path / "c", "tssh2j") as sim:
        job = spec(tmp_path, ["algo-1", "algo-2"], 'sleep 4; echo "done $OMPI_COMM_WORLD_RANK"')
        procs = [sim.popen("algo-1", [EXE, "submit", str(job), *STATE(tmp_path)], log_path=tmp_path / f"s{i}.log")
                 for i in range(2)]
        codes = [p.wait(timeout=120) for p in procs]
    logs = [(tmp_path / f"s{i}.log").read_text() for i in range(2)]
    assert codes == [0, 0], logs
    assert all("[1 algo-2] done 1" in log for log in logs), logs


@pytest.mark.parametrize("sig", ["SIGINT", "SIGHUP"])
def test_ctrl_c_stops_every_host(tmp_path, sig):
    """Also a closed terminal (SIGHUP): on ee9fb3a only Ctrl-C (KeyboardInterrupt) was caught, and a SIGHUP or
    SIGTERM ended submit at once with every host's entrypoint, orted and ranks left running."""
    import signal

    from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline

    with SimCluster(2, tmp_path / "c", "tsshint") as sim:
        job = spec(tmp_path, ["algo-1", "algo-2"], 'echo "started $OMPI_COMM_WORLD_RANK"; exec sleep 300',
                   extra="timeouts: {ssh_ready_s: 8, ssh_ready_per_host_s: 0.5, grace_s: 2}")
        job.write_text(job.read_text().replace("timeouts: {ssh_ready_s: 8, ssh_ready_per_host_s: 0.5}\n", ""))
        log = tmp_path / "submit.log"
        proc = sim.popen("algo-1", [EXE, "submit", str(job), *STATE(tmp_path)], log_path=log)
        end = Deadline(SYSTEM_CLOCK, 90)
        while not ("[0 algo-1] started 0" in log.read_text() and "[1 algo-2] started 1" in log.read_text()):
            assert proc.poll() is None and not end.expired(), log.read_text()
            SYSTEM_CLOCK.sleep(0.2)
        proc.send_signal(signal.Signals[sig])
        assert proc.wait(timeout=60) == 128 + signal.Signals[sig], log.read_text()
        why = {"SIGINT": "interrupted (Ctrl-C)", "SIGHUP": "the terminal closed (SIGHUP)"}[sig]
        assert f"ssh: {why}; sending {sig} to every host's entrypoint" in log.read_text()
        # one code and one source everywhere (issue #40 item 6): the master's failure file says the stop submit got,
        # not the SIGTERM it was sent on as (143, source launcher)
        failure, = (tmp_path / "remote").glob("*/algo-1/output/failure")
        head = json.loads(failure.read_text().splitlines()[0].split(" ", 2)[2])
        code = 128 + signal.Signals[sig]
        assert (head["exit_code"], head["source"], head["cause"]) == (code, "user", "interrupted"), failure.read_text()
        assert f"exit code {code}" in log.read_text() and "exit code 143" not in log.read_text(), log.read_text()
        for host in ("algo-1", "algo-2"):
            left = sim.run(host, ["ps", "-e", "-o", "comm="]).stdout.split()
            assert "sleep" not in left and "orted" not in left, (host, left)


def test_preflight_names_hosts_without_mpirun_kit(tmp_path):
    with SimCluster(1, tmp_path / "c", "tsshpy") as sim:
        job = spec(tmp_path, ["algo-1"], "true")
        job.write_text(job.read_text().replace(f"python: {sys.executable}", "python: /nonexistent/python"))
        r = sim.run("algo-1", [EXE, "submit", str(job), *STATE(tmp_path)], timeout=120)
    assert r.returncode == 69, r.stdout + r.stderr
    assert "mpirun_kit is not importable with '/nonexistent/python' on 1 host(s) (algo-1: exit 127:" in r.stderr
    assert "or set target.ssh.python" in r.stderr


def test_rank_output_is_byte_for_byte_over_ssh(tmp_path):
    """Issue 16 defect 1 on the ssh target: the master's channel output is copied unchanged."""
    import subprocess

    from . import exact_output

    (tmp_path / "exact.py").write_text(exact_output.PROGRAM)
    with SimCluster(2, tmp_path / "c", "h5sshx") as sim:
        job = spec(tmp_path, ["algo-1", "algo-2"], f"exec python3 {tmp_path / 'exact.py'}")
        p = sim.popen("algo-1", [EXE, "submit", str(job), *STATE(tmp_path)], stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE)
        out, err = p.popen.communicate(timeout=120)
    assert p.returncode == 0, (out + err).decode(errors="replace")
    # The channel carries stdout and stderr together.
    exact_output.assert_exact(out, out, {0: "algo-1", 1: "algo-2"})


# --- cancel, deadlines and keepalive against a real sshd on 127.0.0.1 ---------------------------------
# One sshd with a throwaway host key and user key; "hosts" are names for pid files, all reached on loopback.

@pytest.fixture(scope="module")
def loopback_sshd(tmp_path_factory):
    import shutil
    import socket
    import subprocess

    from mpirun_kit.exec.sshd import start_sshd

    if shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists():
        pytest.skip("openssh-server not installed")
    d = tmp_path_factory.mktemp("h3sshd")
    for name in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    (d / "authorized_keys").write_text((d / "user_key.pub").read_text())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} " + " ".join((d / "host_key.pub").read_text().split()[:2]) + "\n")
    cfg = d / "sshd_config"
    cfg.write_text(f"ListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\nPidFile {d / 'sshd.pid'}\nUsePAM no\n"
                   f"AuthorizedKeysFile {d / 'authorized_keys'}\nStrictModes no\nPermitRootLogin prohibit-password\n")
    proc = start_sshd(port, str(cfg))
    req = {"user": os.environ.get("USER", "root") if os.geteuid() else "root", "port": port,
           "identity_file": str(d / "user_key"), "known_hosts": str(d / "known_hosts"), "connect_timeout_s": 5}
    yield d, req
    if proc is not None:
        proc.terminate()
        proc.wait(10)


def _client(req):
    return T.paramiko_client(req, "127.0.0.1")


def _start_entrypoint_stand_in(workdir: Path, host: str, delay_s: float = 0.0):
    """What the ssh target's remote command does: write $$ to HOST.pid, then exec the (long) entrypoint."""
    import subprocess

    return subprocess.Popen(["sh", "-c", f"sleep {delay_s}; echo $$ > {workdir / (host + '.pid')} && exec sleep 300"])


def test_cancel_visits_every_host_when_one_session_is_broken(loopback_sshd, tmp_path):
    _, req = loopback_sshd
    broken, live = _client(req), _client(req)
    broken.get_transport().close()  # a dead session: exec_command raises paramiko's SSHException, not OSError
    proc = _start_entrypoint_stand_in(tmp_path, "algo-2")
    try:
        failures = T.cancel({"algo-1": broken, "algo-2": live}, str(tmp_path), grace_s=2, pid_wait_s=5)
        assert proc.wait(timeout=30) == -15  # SIGTERM reached algo-2's entrypoint
        assert list(failures) == ["algo-1"] and failures["algo-1"].startswith("SSHException: ")
    finally:
        proc.kill()
        live.close()


def test_a_cancel_before_the_pid_file_exists_waits_for_it(loopback_sshd, tmp_path):
    _, req = loopback_sshd
    client = _client(req)
    proc = _start_entrypoint_stand_in(tmp_path, "algo-1", delay_s=1.0)  # the pid file appears only after 1 s
    try:
        assert T.cancel({"algo-1": client}, str(tmp_path), grace_s=2, pid_wait_s=20) == {}
        assert proc.wait(timeout=30) == -15
    finally:
        proc.kill()
        client.close()


def test_cancel_reconnects_and_kills_an_entrypoint_that_ignores_sigterm(loopback_sshd, tmp_path):
    import subprocess

    _, req = loopback_sshd
    broken = _client(req)
    broken.get_transport().close()
    proc = subprocess.Popen(["sh", "-c", f"echo $$ > {tmp_path / 'algo-1.pid'}; trap '' TERM; "
                                         "while :; do sleep 0.1; done"])
    made = []

    def connect(r, host):
        made.append(_client(r))
        return made[-1]

    try:
        failures = T.cancel({"algo-1": broken}, str(tmp_path), grace_s=1, pid_wait_s=5, req=req, connect=connect)
        assert failures == {}
        assert proc.wait(timeout=30) == -9  # outlived the grace period: killed
        # The connections the cancel opened are closed by it: on 14f00b4 each stayed open, an sshd session on the
        # host and a transport thread here, for as long as the caller ran (issue #28).
        assert made and [c.get_transport() for c in made] == [None] * len(made)
    finally:
        proc.kill()


def test_cancel_lets_the_entrypoint_finish_its_own_stop_past_grace_s(loopback_sshd, tmp_path):
    """The entrypoint's stop ends after grace_s (mpirun's SIGKILL at grace_s, then the result to every worker):
    the cancel's SIGKILL must not come at grace_s (it did, and the master died before sending the result)."""
    import subprocess

    _, req = loopback_sshd
    client = _client(req)
    proc = subprocess.Popen(["sh", "-c", f"echo $$ > {tmp_path / 'algo-1.pid'}; "
                                         "trap 'sleep 2.5; exit 143' TERM; while :; do sleep 0.1; done"])
    try:
        assert T.cancel({"algo-1": client}, str(tmp_path), grace_s=1, pid_wait_s=5) == {}
        assert proc.wait(timeout=30) == 143  # ended by its own stop, 1.5 s past grace_s, not SIGKILLed
    finally:
        proc.kill()
        client.close()


def test_every_remote_wait_has_a_deadline_and_sessions_keep_alive(loopback_sshd, tmp_path):
    import socket

    from mpirun_kit.errors import ClusterError
    from mpirun_kit.exec.remote import KEEPALIVE_S

    _, req = loopback_sshd
    client = _client(req)
    try:
        transport = client.get_transport()
        # paramiko keeps the interval private; this is where Transport.set_keepalive stores it.
        assert transport.packetizer._Packetizer__keepalive_interval == KEEPALIVE_S
        assert transport.sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        # A "python" that never answers: the preflight ends at its deadline and names the host.  The remote
        # command carries this test's directory in its argv, so what is left of it can be found by name.
        hang = tmp_path / "hang"
        hang.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import time; time.sleep(300)' {tmp_path}\n")
        hang.chmod(0o755)
        with pytest.raises(ClusterError, match=r"on 1 host\(s\) \(algo-1: exit -1: no exit status within 1s\)"):
            T.preflight({"algo-1": client}, str(hang), timeout=1)
    finally:
        client.close()
    # A peer that stops waiting ends its remote command too: without a pty sshd never hangs up on it, so on
    # 14f00b4 the `sleep 300` ran on after the preflight gave up (issue #28).
    assert _remote_left(str(tmp_path)) == []


def _remote_left(marker: str, timeout: float = 30.0) -> list[str]:
    """The processes whose command line names ``marker`` that still run ``timeout`` s from now (killed then, so a
    failing test leaves nothing either)."""
    import psutil

    from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline

    end = Deadline(SYSTEM_CLOCK, timeout)
    while True:
        found = []
        for p in psutil.process_iter(["pid", "cmdline", "status"]):
            if marker in " ".join(p.info["cmdline"] or ()) and p.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(p)
        if not found or end.expired():
            break
        SYSTEM_CLOCK.sleep(0.1)
    for p in found:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    return [f"{p.pid} {' '.join(p.info['cmdline'])}" for p in found]


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to nobody needs root")
@pytest.mark.parametrize("case", ["owned_by_nobody", "mode_0777"])
def test_ship_refuses_a_workdir_another_user_could_swap(loopback_sshd, tmp_path, case):
    """target.ssh.workdir defaults to /tmp/mpirun-kit-job, shared by every user of a host: a workdir another user
    owns, or one others may write without the sticky bit, could have the launch spec or the hostfile swapped
    before the entrypoint reads them.  Over real sshd, the ship is refused in one line naming the host, the
    directory, its owner or mode and the remedy, and nothing is written (the same rule as the Slurm target's)."""
    import pwd

    from mpirun_kit.errors import ClusterError

    _, req = loopback_sshd
    nobody = pwd.getpwnam("nobody").pw_uid
    wd = tmp_path / "remote"
    wd.mkdir()
    if case == "owned_by_nobody":
        os.chown(wd, nobody, -1)
        why = f"{wd} belongs to uid {nobody} (nobody), not to you"
    else:
        wd.chmod(0o777)
        why = f"{wd} is writable by other users (mode 777)"
    d = T.dryrun(compile_job(load_job_text(spec(tmp_path, ["algo-1"], "true").read_text(), "job.yaml")),
                 run_id="r1")
    client = _client(req)
    try:
        with pytest.raises(ClusterError) as e:
            T.ship({"algo-1": client}, d.files, 20, d.request.ship)
    finally:
        client.close()
    assert str(e.value) == (f"algo-1: {why}: another user could replace the job's files there; set "
                            "target.ssh.workdir to a directory only you can write, on every host")
    assert not (wd / "r1" / "launch-spec.json").exists() and not (wd / "r1" / "hostfile").exists()


def test_a_refused_connection_leaves_no_session_behind(loopback_sshd, tmp_path):
    """A host key paramiko refuses (RejectPolicy) fails the connect after the transport started: the client must be
    closed there, or each retry of connect_hosts leaves a transport thread and a socket here and a half-open
    session on the host until the garbage collector runs (issue #28)."""
    import threading

    import paramiko

    _, req = loopback_sshd
    empty = tmp_path / "known_hosts"
    empty.write_text("")

    def transports() -> set:
        return {t for t in threading.enumerate() if isinstance(t, paramiko.Transport)}

    before = transports()
    for _ in range(3):
        with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
            _client({**req, "known_hosts": str(empty)})
    for t in transports() - before:
        t.join(timeout=10)   # a closed transport's thread ends on its own, soon
    assert transports() - before == set()
