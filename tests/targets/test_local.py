"""Target local: real mpirun on this machine through `mpirun_kit submit` (no mocks)."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from mpirun_kit.cli.main import main
from mpirun_kit.exec.result import RankFailure, failure_file_text, job_result

from . import exact_output

pytestmark = pytest.mark.mpi

# One write per line: mpirun --tag-output tags every write, so print() under PYTHONUNBUFFERED
# (one write per argument) would interleave tags into the line.
PROGRAM = """\
import os, sys
e = os.environ
line = "rank %s of %s tuned %s\\n" % (e["OMPI_COMM_WORLD_RANK"], e["OMPI_COMM_WORLD_SIZE"], e.get("NCCL_SOCKET_IFNAME"))
os.write(1, line.encode())
sys.exit(int(e["EXIT_" + e["OMPI_COMM_WORLD_RANK"]]))
"""


def job_file(tmp_path: Path, program: str, ranks: int, extra: str = "") -> Path:
    """A local job running ``program`` (Python source) on ``ranks`` ranks, output under tmp_path/out."""
    (tmp_path / "prog.py").write_text(program)
    p = tmp_path / "job.yaml"
    p.write_text(textwrap.dedent(f"""\
        apiVersion: mpirun_kit/v1
        kind: Job
        name: local-test
        program:
          command: [python3, {tmp_path / 'prog.py'}]
        resources: {{processes_per_host: {ranks}}}
        output: {{local_path: {tmp_path / 'out'}}}
        """) + extra)
    return p


def spec(tmp_path: Path, codes: tuple[int, int], retries: int = 0) -> Path:
    return job_file(tmp_path, PROGRAM, 2, f"tuning: {{profile: g5}}\n"
                    f"env: {{EXIT_0: {codes[0]}, EXIT_1: {codes[1]}, OMP_NUM_THREADS: 1}}\nretries: {retries}\n")


def run_dir(tmp_path: Path) -> Path:
    """The one run directory a test's single submit made under tmp_path/out (records/: one per run)."""
    (found,) = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
    return found


def test_two_ranks_succeed_with_prefixed_output_and_preset(tmp_path, capfd):
    assert main(["submit", str(spec(tmp_path, (0, 0)))]) == 0
    out = capfd.readouterr().out
    assert "[0 localhost] rank 0 of 2 tuned ^docker,lo,veth" in out
    assert "[1 localhost] rank 1 of 2 tuned ^docker,lo,veth" in out
    written = json.loads((run_dir(tmp_path) / "launch-spec.json").read_text())
    assert written["processes_per_host"] == 2


def test_default_output_is_the_ranks_and_warnings_only_and_v_adds_progress(tmp_path, capfd):
    """Issue 16 defect 5: without -v a successful submit prints the ranks' lines and no line of the tool's own
    except warnings and errors; -v adds the milestones (the target's and the launcher's)."""
    job = spec(tmp_path, (0, 0))
    assert main(["submit", str(job)]) == 0
    captured = capfd.readouterr()
    assert "[1 localhost] rank 1 of 2 tuned" in captured.out
    run_dir_of_first = run_dir(tmp_path)
    tool = [ln for ln in (captured.out + captured.err).splitlines()
            if not ln.startswith(("[0 localhost] ", "[1 localhost] ", "mpirun_kit: warning:", "mpirun_kit: error:"))]
    assert tool == [], tool
    assert main(["submit", str(job), "-v"]) == 0
    err = capfd.readouterr().err
    # -v: the job id and its run directory (issue #28; also first on a terminal), the second run's own
    second = [p for p in (tmp_path / "out").iterdir() if p.is_dir() and p != run_dir_of_first][0]
    assert f"mpirun_kit: job {second.name} (run directory {second})" in err
    assert "mpirun_kit: local: 2 rank(s) on this machine" in err
    assert "mpirun_kit: launching 2 ranks on 1 host(s)" in err
    assert "mpirun_kit: timeline: launch " in err


def test_rank_exit_code_is_the_submit_exit_code_and_retries(tmp_path, capfd):
    assert main(["submit", str(spec(tmp_path, (0, 3), retries=1))]) == 3
    captured = capfd.readouterr()
    assert captured.out.count("[0 localhost] rank 0 of 2") == 2  # ran twice: one retry
    assert "attempt 1 failed with exit code 3; retrying (1 left)" in captured.err
    failure = (run_dir(tmp_path) / "output" / "failure").read_text()
    assert "rank 1 on localhost exited with code 3" in failure


def test_dry_run_prints_the_argv_and_spec_and_runs_nothing(tmp_path, capsys):
    assert main(["submit", str(spec(tmp_path, (0, 0))), "--dry-run", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["request"]["argv"][3:7] == ["launch", "--hosts", "localhost:2", "--spec"]
    assert not (tmp_path / "out").exists()


def test_launcher_past_the_deadline_is_stopped_with_124(tmp_path):
    """The supervisor bounds the launcher process itself (a real sleeping process, a 0.5 s deadline)."""
    from mpirun_kit.targets.local import LocalRequest, follow_launcher, start_launcher

    req = LocalRequest(argv=["sleep", "30"], cwd=None, retries=0, ranks=1, deadline_s=0.5, grace_s=1,
                       failure_file=str(tmp_path / "failure"))
    stops = []
    assert follow_launcher(start_launcher(req), req, stops=stops) == 124
    assert stops[0].source == "launcher"


def test_rank_output_is_byte_for_byte_what_each_rank_wrote(tmp_path, capfdbinary):
    """Issue 16 defect 1: only the launcher's tag is replaced by ``[rank host] ``; nothing else changes."""
    assert main(["submit", str(job_file(tmp_path, exact_output.PROGRAM, 4))]) == 0
    captured = capfdbinary.readouterr()
    exact_output.assert_exact(captured.out, captured.err, {r: "localhost" for r in range(4)})


def test_json_result_tells_the_jobs_own_70_from_the_launchers(tmp_path, capfd):
    """Issue 16 defect 3: a job exiting 70 and a launcher failure (70) or bad spec (64) differ in ``source``."""
    job = spec(tmp_path, (0, 70))
    assert main(["submit", str(job), "--json"]) == 70
    result = json.loads(capfd.readouterr().out.splitlines()[-1])
    failure = Path(result["run_dir"]) / "output" / "failure"
    assert {k: result[k] for k in ("target", "exit_code", "source", "reason", "root_cause", "failure_file")} == {
        "target": "local", "exit_code": 70, "source": "job", "reason": "rank 1 on localhost exited with code 70",
        "root_cause": {"rank": 1, "host": "localhost", "exit_code": 70, "signal": None},
        "failure_file": str(failure)}
    assert result["timeline"]["hosts"] == {"localhost": 70}
    # the launcher's own timeline (launch, run, shutdown) when it wrote one
    assert result["timeline"]["launch"]["total_s"] > 0
    assert Path(result["timeline"]["launch"]["file"]).is_file()

    # The launcher fails: mpirun refuses an option, no rank ever starts.
    job.write_text(job.read_text() + "mpi: {options: [--no-such-mpirun-flag]}\n")
    code = main(["submit", str(job), "--json"])
    result = json.loads(capfd.readouterr().out.splitlines()[-1])
    assert (result["exit_code"], result["source"], result["root_cause"]) == (code, "launcher", None)
    assert code != 0 and result["reason"].startswith("mpirun exited with code")
    job.write_text(job.read_text().replace("mpi: {options: [--no-such-mpirun-flag]}\n", ""))

    # Bad input never runs: the error line on stderr, the result on stdout.
    job.write_text(job.read_text().replace("processes_per_host: 2", "processes_per_host: two"))
    assert main(["submit", str(job), "--json"]) == 64
    captured = capfd.readouterr()
    result = json.loads(captured.out.splitlines()[-1])
    assert (result["exit_code"], result["source"], result["target"], result["job"]) == (64, "launcher", None, None)
    assert result["reason"] in captured.err


def test_json_result_of_a_success_and_a_stale_failure_report_is_not_reused(tmp_path, capfd):
    """Each run has a directory of its own (issue #28: `runs/NAME/launch` was reused, so a run could overwrite
    another's failure report and timeline): an earlier run's report is never this run's."""
    job = spec(tmp_path, (0, 0))
    stale = tmp_path / "out" / "launch" / "output" / "failure"
    stale.parent.mkdir(parents=True)
    stale.write_text(failure_file_text(job_result(3, None, (RankFailure(1, "localhost", 3, None, 1.0),))) + "\n")
    assert main(["submit", str(job), "--json"]) == 0
    result = json.loads(capfd.readouterr().out.splitlines()[-1])
    assert (result["exit_code"], result["source"], result["reason"], result["root_cause"]) == (
        0, "job", "the job succeeded", None)
    assert Path(result["run_dir"]).parent == tmp_path / "out" and Path(result["run_dir"]).name != "launch"
    assert stale.exists()   # another run's file: left as it was


def test_failed_job_with_json_and_q_prints_the_root_cause_once(tmp_path, capfd):
    """Issue 22 defect 3: rank 1 exiting 3 under `--json -q` wrote Open MPI's two banners, then "mpirun output
    (last lines):" with the ranks' output and the banners again.  Now stderr is the root cause, once."""
    assert main(["submit", str(spec(tmp_path, (0, 3))), "--json", "-q"]) == 3
    captured = capfd.readouterr()
    failure = run_dir(tmp_path) / "output" / "failure"
    lines = captured.err.splitlines()
    assert lines[0] == f"mpirun_kit: job failed with exit code 3; failure written to {failure}"
    assert lines[1].startswith("root cause: rank 1 on localhost exited with code 3 (first seen ")
    assert len(lines) == 2, captured.err
    assert json.loads(captured.out.splitlines()[-1])["exit_code"] == 3
    # the failure file (SageMaker's FailureReason elsewhere) keeps mpirun's last lines
    assert "mpirun output (last lines):" in failure.read_text()


def test_failed_job_default_output_has_open_mpis_banner_once_and_v_names_no_python_values(tmp_path, capfd):
    """Issue 22 defects 3 and 7: the banners were printed, then quoted again in the summary; -v printed
    `mpirun exited: code 3, signal None`."""
    assert main(["submit", str(spec(tmp_path, (0, 3))), "-v"]) == 3
    err = capfd.readouterr().err
    assert err.count("Primary job  terminated normally") == 1
    assert "mpirun output (last lines)" not in err
    assert "mpirun_kit: mpirun exited: code 3" in err
    assert "None" not in err


@pytest.mark.parametrize("command, why", [
    ("[python3, missing.py]", "python script 'missing.py' does not exist (resolved against {d}); fix the path or "
                              "set program.working_dir"),
    ("[nosuchbinary, x]", "'nosuchbinary' not found on PATH; install it or give its full path"),
    ("[./notexec.sh]", "'./notexec.sh' is not executable; chmod +x it or run it through its interpreter"),
    ("[./nothere.sh]", "'./nothere.sh' does not exist (resolved against {d})"),
])
def test_a_program_that_cannot_start_exits_127_not_the_usage_code(command, why, tmp_path, capfd, monkeypatch):
    """Issue 22 defect 5: a rank running `python3 missing.py` made submit exit 2 (python's own code for a
    missing script, the same as our usage error); `command: [nosuchbinary]` gave an undocumented 127.
    Now both are refused before the launch with ExitCode.CANNOT_START (127), documented in --help."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notexec.sh").write_text("#!/bin/sh\n")
    spec = tmp_path / "job.yaml"
    spec.write_text(f"apiVersion: mpirun_kit/v1\nkind: Job\nname: nostart\nresources: {{processes_per_host: 2}}\n"
                    f"output: {{local_path: {tmp_path / 'out'}}}\nprogram:\n  command: {command}\n")
    assert main(["submit", str(spec), "--json"]) == 127
    out, err = capfd.readouterr()
    run = run_dir(tmp_path)
    assert err == f"mpirun_kit: error: nostart: the program cannot start: program.command: {why.format(d=tmp_path)}\n"
    assert json.loads(out)["exit_code"] == 127
    # refused before anything ran: the run directory has the record's files, no launch spec, and says 127
    assert not (run / "launch-spec.json").exists()
    assert json.loads((run / "outcome.json").read_text())["exit_code"] == 127
    # a dry run is a value: it prints the request and checks nothing on this machine
    assert main(["submit", str(spec), "--dry-run"]) == 0


def test_python_module_and_inline_programs_are_not_taken_for_scripts(tmp_path, capfd):
    from mpirun_kit.targets.local import program_start_problem

    assert program_start_problem(["python3", "-m", "nosuch.module"], str(tmp_path)) is None
    assert program_start_problem(["python3", "-u", "-c", "print(1)"], str(tmp_path)) is None
    (tmp_path / "t.py").write_text("")
    assert program_start_problem(["python3", "-u", "t.py"], str(tmp_path)) is None
    assert program_start_problem(["sh", "-c", "exit 0"], None) is None


def test_start_returns_at_once_with_the_launchers_pid_and_the_supervisor_follows_it(tmp_path):
    """Issue 38 item 2: ``Target.start`` starts the job and returns while it runs, with the target's own id for it
    (the launcher's pid) and the child the one supervisor follows; a stop through it ends every rank."""
    import os

    from mpirun_kit.exec.process import follow
    from mpirun_kit.exec.supervisor import signal_stop
    from mpirun_kit.service.compile import compile_spec
    from mpirun_kit.targets.base import SubmitOptions
    from mpirun_kit.targets.local import LocalTarget

    job = job_file(tmp_path, "import time\nprint('up', flush=True)\ntime.sleep(120)\n", 2,
                   "timeouts: {grace_s: 3}\n")
    compiled, _, _ = compile_spec(str(job), default_region=lambda: None)
    target = LocalTarget()
    dry = target.prepare(compiled, SubmitOptions(job_id="local-test-1", run_dir=str(tmp_path / "run")))
    started = target.start(dry)
    assert started.child.poll() is None                       # running: start did not wait for it
    assert started.native == str(started.child.proc.pid) and os.path.exists(f"/proc/{started.native}")
    started.child.terminate(signal_stop("SIGTERM"))
    code, _ = follow(started.child, grace_s=3)
    assert code == 143
    assert not os.path.exists(f"/proc/{started.native}")
