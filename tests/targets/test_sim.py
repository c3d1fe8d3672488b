"""`submit --target sim` of jobs/allreduce-bench.yaml: 3 simulated hosts x 2 ranks, result checked.

Real processes end to end: the simulated cluster (namespaces, sshd per host), the
per-host entrypoint on every host, mpirun across hosts, torch.distributed (gloo).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mpirun_kit.cli.main import main

from result_kit import code_and_text

pytestmark = pytest.mark.sim
REPO = Path(__file__).resolve().parents[2]


def test_allreduce_bench_on_three_simulated_hosts(tmp_path, capfd):
    spec = tmp_path / "allreduce.yaml"
    # The repo's job, with the cluster state under tmp_path so nothing is left behind.
    spec.write_text((REPO / "jobs" / "allreduce-bench.yaml").read_text().replace(
        "target:\n  type: sim\n", f"target:\n  type: sim\n  sim: {{root: {tmp_path / 'sim'}}}\n"))
    assert main(["submit", str(spec), "--target", "sim", "-v"]) == 0
    captured = capfd.readouterr()
    out = captured.out
    assert "[0 algo-1] allreduce check ok world=6 expected=21.0" in out
    sizes = re.findall(r"allreduce backend=gloo world=6 hosts=3 bytes=(\d+) .* busbw_GBps=([0-9.]+)", out)
    assert [int(s) for s, _ in sizes] == [65536, 1048576, 8388608]
    assert all(float(bw) > 0 for _, bw in sizes)
    assert "sim: every host finished (algo-1=0, algo-2=0, algo-3=0)" in captured.err
    assert "[algo-2 entrypoint] mpirun_kit: worker algo-2: job result from master: exit code 0" in captured.err
    assert "mpirun_kit" not in out  # stdout: only what the ranks print


def sim_job(tmp_path: Path, hosts: int, ppn: int, command: str, root: Path | None = None) -> Path:
    """A sim-target job running ``command`` (a YAML flow sequence), cluster state under ``root``."""
    spec = tmp_path / "job.yaml"
    spec.write_text(f"""\
apiVersion: mpirun_kit/v1
kind: Job
name: h5-sim-job
target: {{type: sim, sim: {{root: {root or tmp_path / 'sim'}}}}}
resources: {{hosts: {hosts}, processes_per_host: {ppn}}}
program:
  command: {command}
""")
    return spec


def test_failing_rank_exit_code_comes_back_from_the_sim(tmp_path, capfd):
    """Also (issue 16 defects 3, 4): the --json result, and every printed path exists on this machine."""
    spec = sim_job(tmp_path, 2, 1, """[sh, -c, 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then exit 7; fi; sleep 1']""")
    assert main(["submit", str(spec), "--json", "-v"]) == 7
    captured = capfd.readouterr()
    assert "sim: every host finished (algo-1=7, algo-2=7)" in captured.err
    result = json.loads(captured.out.splitlines()[-1])
    failure = tmp_path / "sim" / "attempt-0" / "algo-1" / "opt_ml" / "output" / "failure"
    assert {k: result[k] for k in ("target", "job", "exit_code", "source", "reason", "root_cause", "failure_file",
                                   "attempts")} == {
        "target": "sim", "job": "h5-sim-job", "exit_code": 7, "source": "job",
        "reason": "rank 1 on algo-2 exited with code 7",
        "root_cause": {"rank": 1, "host": "algo-2", "exit_code": 7, "signal": None},
        "failure_file": str(failure), "attempts": 1}
    assert result["timeline"]["hosts"] == {"algo-1": 7, "algo-2": 7}
    assert result["timeline"]["duration_s"] > 0
    # The master's own line names the report where it is on this machine, not /opt/ml inside the host.
    assert f"failure written to {failure}" in captured.err
    assert code_and_text(failure.read_text()).startswith("exit_code=7\n")
    # The dry run's note names the log directory that was used.
    dry = json.loads(_dry_run(spec, capfd))
    assert f"per-host logs: {tmp_path / 'sim'}/attempt-<N>/<host>/entrypoint.log (N = 0, then 1.. for retries); " \
           "what the ranks printed: entrypoint.out beside it" in dry["notes"]
    assert (tmp_path / "sim" / "attempt-0" / "algo-2" / "entrypoint.log").is_file()
    assert (tmp_path / "sim" / "attempt-0" / "algo-1" / "entrypoint.out").is_file()


def _dry_run(spec: Path, capfd) -> str:
    assert main(["submit", str(spec), "--dry-run", "--json"]) == 0
    return capfd.readouterr().out


def test_dry_run_writes_nothing(tmp_path, capfd, monkeypatch):
    """Issue 16 defect 4: no temporary cluster directory per dry run."""
    import tempfile

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    spec = tmp_path / "job.yaml"
    spec.write_text("apiVersion: mpirun_kit/v1\nkind: Job\nname: h5-dry\ntarget: {type: sim}\n"
                    "resources: {hosts: 2}\nprogram: {command: [hostname]}\n")
    dry = json.loads(_dry_run(spec, capfd))
    assert list(temp.iterdir()) == []
    assert dry["request"]["root"] is None
    assert dry["request"]["entrypoint"][-2:] == ["--opt-ml", "${host_opt_ml}"]
    assert f"per-host logs: {temp}/mrk-sim-XXXXXXXX (made at start)/attempt-<N>/<host>/entrypoint.log " \
           "(N = 0, then 1.. for retries); what the ranks printed: entrypoint.out beside it" in dry["notes"]


def test_ctrl_c_stops_the_ranks_with_sigterm_and_a_grace_period(tmp_path):
    """Issue 16 defect 4: as on local, ssh and SageMaker, the ranks get SIGTERM and their handlers run."""
    import signal
    import subprocess
    import sys

    from mpirun_kit.core.clock import SYSTEM_CLOCK, Deadline

    (tmp_path / "trap.py").write_text(
        "import os, signal, sys, time\n"
        "r = os.environ['OMPI_COMM_WORLD_RANK']\n"
        "def bye(*_):\n"
        "    print(f'rank {r} handler ran', flush=True); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print(f'rank {r} ready', flush=True)\n"
        "time.sleep(300)\n")
    spec = sim_job(tmp_path, 2, 1, f"[python3, {tmp_path / 'trap.py'}]")
    spec.write_text(spec.read_text() + "timeouts: {grace_s: 5}\n")
    log = tmp_path / "submit.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "mpirun_kit.cli.main", "submit", str(spec), "--json"],
                                stdout=f, stderr=subprocess.STDOUT)
    try:
        end = Deadline(SYSTEM_CLOCK, 90)
        while not ("[0 algo-1] rank 0 ready" in log.read_text() and "[1 algo-2] rank 1 ready" in log.read_text()):
            assert proc.poll() is None and not end.expired(), log.read_text()
            SYSTEM_CLOCK.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert "[0 algo-1] rank 0 handler ran" in text and "[1 algo-2] rank 1 handler ran" in text, text
    assert "sim: interrupted (Ctrl-C): sending SIGINT to the master's entrypoint (it stops every rank, SIGKILL 5s " \
           "later; what is left 20s from now goes with the cluster)" in text
    result = json.loads(text.splitlines()[-1])
    assert (result["exit_code"], result["source"]) == (130, "user")
    assert result["reason"] == "stopped by SIGINT: SIGTERM to every rank, SIGKILL after the grace period"


def test_rank_output_is_byte_for_byte_on_the_sim(tmp_path, capfdbinary):
    """Issue 16 defect 1 on the sim target: mpirun's tags off exactly, then the host log copied unchanged."""
    from . import exact_output

    (tmp_path / "exact.py").write_text(exact_output.PROGRAM)
    assert main(["submit", str(sim_job(tmp_path, 2, 2, f"[python3, {tmp_path / 'exact.py'}]"))]) == 0
    captured = capfdbinary.readouterr()
    # Each rank's stdout on stdout, its stderr on stderr, as on the other targets.
    exact_output.assert_exact(captured.out, captured.err, {0: "algo-1", 1: "algo-1", 2: "algo-2", 3: "algo-2"})
    assert all(exact_output.stderr_line(r, h) not in captured.out
               for r, h in {0: "algo-1", 1: "algo-1", 2: "algo-2", 3: "algo-2"}.items())


def _submit_process(spec: Path, *flags: str):
    """`mpirun_kit submit SPEC FLAGS` as a user runs it: a real process, stdout and stderr apart."""
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main", "submit", str(spec), *flags],
                          capture_output=True, text=True, timeout=300, cwd=spec.parent,
                          env={k: v for k, v in os.environ.items() if not k.startswith("OMPI_")})


def test_quiet_sim_run_prints_only_the_ranks_output(tmp_path):
    """Issue 22 defect 2: `submit ok.yaml --target sim -q > a.txt` put the hosts' "no job secret ... or pass
    --secret-file" warning among the ranks' lines, on every run.  The sim now delivers a job secret per run
    (as `keys install --sagemaker` does), the entrypoints' own lines go to stderr, and -q reaches them."""
    spec = sim_job(tmp_path, 2, 1, "[sh, -c, 'echo hello from $OMPI_COMM_WORLD_RANK']")
    r = _submit_process(spec, "--target", "sim", "-q")
    assert (r.returncode, r.stderr) == (0, "")
    assert sorted(r.stdout.splitlines()) == ["[0 algo-1] hello from 0", "[1 algo-2] hello from 1"]
    # the per-run secret went with the cluster
    assert not list((tmp_path / "sim").rglob("job-secret"))


def test_default_sim_run_has_no_secret_warning_and_keeps_stdout_for_the_ranks(tmp_path):
    spec = sim_job(tmp_path, 2, 1, "[sh, -c, 'echo hello from $OMPI_COMM_WORLD_RANK']")
    r = _submit_process(spec)
    assert r.returncode == 0, r.stderr
    assert "job secret" not in r.stderr + r.stdout
    assert sorted(r.stdout.splitlines()) == ["[0 algo-1] hello from 0", "[1 algo-2] hello from 1"]


def test_failed_sim_run_with_json_and_q_is_short_and_exact(tmp_path):
    """Issue 22 defect 3: rank 1 exiting 3 under `--json -q` wrote ~30 lines to stderr (Open MPI's two banners,
    then "mpirun output (last lines):" repeating the ranks' output and the banners).  Now stdout holds the
    ranks' output and the result line, stderr the root cause once."""
    spec = sim_job(tmp_path, 2, 1, """[sh, -c, 'echo out $OMPI_COMM_WORLD_RANK; if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then exit 3; fi']""")
    r = _submit_process(spec, "--json", "-q")
    assert r.returncode == 3, r.stderr
    lines = r.stdout.splitlines()
    assert sorted(lines[:-1]) == ["[0 algo-1] out 0", "[1 algo-2] out 1"]
    assert json.loads(lines[-1])["reason"] == "rank 1 on algo-2 exited with code 3"
    assert "mpirun output (last lines)" not in r.stderr
    assert r.stderr.count("rank 1 on algo-2 exited with code 3") == 1, r.stderr
    assert len(r.stderr.splitlines()) <= 4, r.stderr


def test_a_program_that_cannot_start_is_refused_before_the_cluster_comes_up(tmp_path, capfd):
    """Issue 22 defect 5 on the sim target: 127, and no cluster brought up for nothing."""
    spec = sim_job(tmp_path, 2, 1, "[python3, missing.py]")
    assert main(["submit", str(spec), "--json"]) == 127
    out, err = capfd.readouterr()
    assert "the program cannot start: program.command: python script 'missing.py' does not exist" in err
    assert json.loads(out)["exit_code"] == 127
    assert not (tmp_path / "sim").exists()


def test_start_returns_with_the_cluster_up_and_every_entrypoint_running(tmp_path):
    """Issue 38 item 2: SimTarget.start brings the cluster up, starts every host's entrypoint and returns at once
    with the cluster's name; the hosts are the child the one supervisor follows and stops, and closing them tears
    the cluster down."""
    from mpirun_kit.exec.supervisor import Supervisor, signal_stop
    from mpirun_kit.service.compile import compile_spec
    from mpirun_kit.sim import list_clusters
    from mpirun_kit.targets.base import SubmitOptions
    from mpirun_kit.targets.sim import SimTarget

    spec = sim_job(tmp_path, 2, 1, "[sleep, '120']")
    compiled, _, _ = compile_spec(str(spec), default_region=lambda: None)
    target = SimTarget()
    dry = target.prepare(compiled, SubmitOptions(job_id="h5-sim-start", run_dir=str(tmp_path / "run")))
    started = target.start(dry)
    hosts = started.child
    try:
        assert hosts.poll() is None and started.native == dry.request.name in list_clusters()
        ended = Supervisor(hosts, grace_s=5, requested=lambda: signal_stop("SIGTERM"), tick_s=0.2).run()
    finally:
        hosts.close()
    assert ended.stop.exit_code == 143
    assert dry.request.name not in list_clusters()
