"""Job records and the lifecycle verbs (issue #28): submit, submit --detach, jobs, status, logs, cancel.

Real processes throughout: `mpirun_kit` as a user runs it (a fresh interpreter per command), real
mpirun and ranks on this machine, the simulated cluster for sim and ssh (tests/targets/test_sim_jobs.py).
Each test's records are in its own store (tests/conftest.py sets MPIRUN_KIT_STATE_DIR).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from jobs_kit import LONG, mrk, processes_with, wait_for

pytestmark = pytest.mark.mpi


def spec_file(d: Path, name: str, command: str, extra: str = "") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{name}.yaml"
    p.write_text(textwrap.dedent(f"""\
        apiVersion: mpirun_kit/v1
        kind: Job
        name: {name}
        resources: {{processes_per_host: 2}}
        program: {{command: {command}}}
        """) + extra)
    return p


def test_two_submissions_of_one_spec_at_once_get_two_ids_and_two_directories(tmp_path):
    """Issue #28: every run of a spec reused runs/NAME/launch, so two at once overwrote each other's
    timeline.json and failure file.  Now each gets its own id and directory, and both complete."""
    spec = spec_file(tmp_path / "spec", "twice", "[python3, -c, 'import time; time.sleep(2); print(\"done\")']")
    procs = [subprocess.Popen([sys.executable, "-m", "mpirun_kit.cli.main", "submit", str(spec), "--json", "-v"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.splitlines()[-1]))
        assert f"mpirun_kit: job {results[-1]['job_id']} (run directory {results[-1]['run_dir']})" in err
    ids = {r["job_id"] for r in results}
    dirs = {r["run_dir"] for r in results}
    assert len(ids) == 2 and len(dirs) == 2
    for r in results:
        run = Path(r["run_dir"])
        assert run.parent == tmp_path / "spec" / "runs" / "twice"
        assert r["timeline"]["launch"]["file"] == str(run / "output" / "timeline.json")
        assert (run / "output.log").read_text().count("] done") == 2
        for name in ("spec.json", "plan.txt", "request.json", "outcome.json", "output/timeline.json"):
            assert (run / name).is_file(), name
        assert oct((run / "request.json").stat().st_mode & 0o777) == "0o600"
    listed = json.loads(mrk("jobs", "--json", check=0).stdout)
    assert {(j["job_id"], j["state"], j["exit_code"]) for j in listed} == {(i, "succeeded", 0) for i in ids}


def test_detach_then_status_logs_rank_and_cancel_leave_nothing(tmp_path):
    marker = f"mrk-{uuid.uuid4().hex[:8]}"
    spec = spec_file(tmp_path / "spec", "long", f"[python3, -c, {json.dumps(LONG)}, {marker}]",
                     "timeouts: {grace_s: 3}\n")
    t0 = time.monotonic()
    p = mrk("submit", str(spec), "--detach", cwd=tmp_path, check=0)
    job = p.stdout.strip()
    assert job.startswith("long-") and "\n" not in job       # only the id on stdout
    assert f"`mpirun_kit cancel {job}`" in p.stderr
    wait_for(lambda: processes_with(marker), "the ranks")    # it runs on after submit returned
    status = json.loads(mrk("status", job, "--json", check=0).stdout)
    assert (status["state"], status["target"], status["exit_code"]) == ("running", "local", None)
    wait_for(lambda: "[1 localhost] tick 2" in mrk("logs", job).stdout, "rank 1's third line")
    ones = mrk("logs", job, "--rank", "1", check=0).stdout.splitlines()
    assert ones and all(line.startswith("[1 localhost] ") for line in ones), ones
    assert any(line.startswith("[0 localhost] ") for line in mrk("logs", job, check=0).stdout.splitlines())
    listed = mrk("jobs", "--state", "running", check=0).stdout
    assert job in listed and "running" in listed

    c = mrk("cancel", job, check=0)
    assert c.stdout.startswith(f"job {job}: cancelled (exit code 143); nothing of it is left running"), c.stdout
    assert processes_with(marker) == []
    status = json.loads(mrk("status", job, "--json", check=143).stdout)
    assert (status["state"], status["exit_code"]) == ("cancelled", 143)
    assert status["root_cause"] is None                     # no rank is blamed for the stop
    log = Path(status["run_dir"], "output.log").read_text()
    assert "[0 localhost] rank got SIGTERM" in log and "[1 localhost] rank got SIGTERM" in log
    # cancelling again changes nothing
    assert mrk("cancel", job, check=0).stdout.startswith(f"job {job} already ended (cancelled)")
    assert time.monotonic() - t0 < 300


def test_logs_follow_ends_with_the_jobs_exit_code(tmp_path):
    spec = spec_file(tmp_path / "spec", "follow", "[sh, -c, 'for i in 1 2 3; do echo line $i; sleep 1; done; "
                                                   "[ $OMPI_COMM_WORLD_RANK = 1 ] && exit 5; exit 0']")
    job = mrk("submit", str(spec), "--detach", "-q", check=0).stdout.strip()
    f = mrk("logs", job, "--follow", "--rank", "1", check=5)
    assert f.stdout.splitlines() == ["[1 localhost] line 1", "[1 localhost] line 2", "[1 localhost] line 3"]
    status = mrk("status", job, check=5).stdout
    assert "state       failed" in status and "root_cause  rank 1 on localhost" in status


def test_a_detached_supervisor_killed_with_sigkill_is_lost_not_running(tmp_path):
    spec = spec_file(tmp_path / "spec", "lost", f"[python3, -c, {json.dumps(LONG)}]")
    job = mrk("submit", str(spec), "--detach", "-q", check=0).stdout.strip()
    from mpirun_kit.records import RecordStore

    rec = RecordStore(os.environ["MPIRUN_KIT_STATE_DIR"]).get(job)
    pid = rec.supervisor_pid
    os.killpg(pid, 9)   # the supervisor leads its own session: it and its launcher's group
    wait_for(lambda: json.loads(mrk("status", job, "--json").stdout)["state"] == "lost", "the job to be lost")
    r = mrk("status", job, check=70)
    assert f"its supervisor (pid {pid}) ended without a result" in r.stdout
    mrk("cancel", job, check=0)   # nothing to cancel: already ended


def test_a_relative_script_runs_beside_the_spec_from_any_directory(tmp_path):
    """Issue #28 item 4: `command: [python3, hi.py]` resolved against the current directory on local (the
    README says the spec's), so from another directory submit refused it (127, 'does not exist')."""
    d = tmp_path / "spec"
    spec = spec_file(d, "rel", "[python3, hi.py]")
    (d / "hi.py").write_text("import os; print('cwd', os.getcwd())\n")
    (tmp_path / "elsewhere").mkdir()
    r = mrk("submit", str(spec), "--json", cwd=tmp_path / "elsewhere", check=0)
    assert f"[0 localhost] cwd {d}" in r.stdout and f"[1 localhost] cwd {d}" in r.stdout


def test_status_logs_cancel_name_an_unknown_id_and_bad_arguments(tmp_path):
    r = mrk("status", "--", "-x")
    assert (r.returncode, r.stderr) == (64, "mpirun_kit: error: training job name '-x' is not valid; expected a "
                                            "job id (`mpirun_kit jobs` lists them) or a SageMaker training job "
                                            "name\n")
    r = mrk("jobs", "--state", "runing")
    assert r.returncode == 2 and "unknown value 'runing' (did you mean `running`?)" in r.stderr
    r = mrk("jobs")
    assert (r.returncode, r.stdout) == (0, "") and r.stderr.startswith("no jobs recorded (")
    r = mrk("logs", "nosuchjob", "--rank", "x")
    assert r.returncode == 2 and "--rank: invalid int value: 'x'" in r.stderr


def _unknown(verb: str, *args: str, region: str | None = None) -> subprocess.CompletedProcess:
    """`mpirun_kit VERB NO-SUCH-ID ARGS` as a user without AWS configured (no region, unless ``region``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull})
    if region:
        env["AWS_DEFAULT_REGION"] = region
    return subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main", verb, "NO-SUCH-ID", *args],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("verb", ["status", "logs", "cancel", "stop"])
def test_a_mistyped_job_id_is_no_such_job_in_the_records(job_records, verb):
    """Issue #28 follow-up: an id the records do not hold fell through to SageMaker, whose error (no AWS region
    configured) said nothing of the records.  Now: no such job, naming the id, the records and `mpirun_kit jobs`;
    SageMaker is the home of a name only when it can be asked and knows it."""
    db = job_records / "jobs.db"
    r = _unknown(verb)
    assert (r.returncode, r.stdout, r.stderr) == (
        64, "", f"mpirun_kit: error: no such job in the records: 'NO-SUCH-ID' is not in {db} (`mpirun_kit jobs` "
                "lists the jobs there; give --state-dir if it was submitted with another), and no AWS region is "
                "configured to look for a SageMaker training job of that name (--region REGION)\n")


@pytest.mark.parametrize("verb", ["status", "cancel"])
def test_a_mistyped_job_id_with_json_is_one_json_object(job_records, verb):
    db = job_records / "jobs.db"
    r = _unknown(verb, "--json")
    reason = (f"no such job in the records: 'NO-SUCH-ID' is not in {db} (`mpirun_kit jobs` lists the jobs there; "
              "give --state-dir if it was submitted with another), and no AWS region is configured to look for a "
              "SageMaker training job of that name (--region REGION)")
    assert r.returncode == 64 and r.stderr == f"mpirun_kit: error: {reason}\n"
    assert json.loads(r.stdout) == {"job_id": "NO-SUCH-ID", "found": False, "records": str(db), "exit_code": 64,
                                    "reason": reason}


def test_a_name_sagemaker_cannot_hold_is_no_such_job_without_asking_it(job_records):
    r = subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main", "status", "no_such.id"], capture_output=True,
                       text=True, timeout=120)
    assert (r.returncode, r.stderr) == (64, f"mpirun_kit: error: no such job in the records: 'no_such.id' is not in "
                                            f"{job_records / 'jobs.db'} (`mpirun_kit jobs` lists the jobs there; give "
                                            "--state-dir if it was submitted with another), and it is not a "
                                            "SageMaker training job name either\n")


def test_an_ambiguous_prefix_is_said_so_not_asked_of_sagemaker(job_records):
    from mpirun_kit.records import RecordStore

    store = RecordStore(job_records)
    ids = [store.create("dup", "local", spec=None, runs_root=job_records / "runs").job_id for _ in range(2)]
    r = subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main", "status", "dup-"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 64 and r.stderr.startswith("mpirun_kit: error: job 'dup-' is ambiguous: it starts 2 job "
                                                      "ids ("), r.stderr
    assert all(i in r.stderr for i in ids)


@pytest.mark.parametrize("verb", ["status", "logs", "cancel"])
def test_a_mistyped_job_id_sagemaker_does_not_know_either_is_no_such_job(job_records, moto, verb):
    """With a region, SageMaker (moto here) is asked once and knows no training job of that name."""
    env = {**os.environ, "AWS_ENDPOINT_URL": moto, "AWS_MAX_ATTEMPTS": "1"}
    r = subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main", verb, "NO-SUCH-ID"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert (r.returncode, r.stderr) == (64, f"mpirun_kit: error: no such job in the records: 'NO-SUCH-ID' is not in "
                                            f"{job_records / 'jobs.db'} (`mpirun_kit jobs` lists the jobs there; give "
                                            "--state-dir if it was submitted with another), and SageMaker in "
                                            "us-west-2 has no training job of that name\n")


def test_a_job_submitted_from_another_directory_writes_nothing_there(tmp_path):
    """Every file of a run goes beside the spec (its run directory, and ${output} above it), never into the
    submitting shell's directory: /slurm-1.out and /algo-2/output/result.json were found at a machine's root after a session whose
    commands ran with cwd / (a Slurm batch script's unset variable; a job without --output).  A guard on the
    local target, foreground and detached, with the program writing to ${output}."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    spec = spec_file(tmp_path / "spec", "here", "[sh, -c, 'echo x > ${output}/mine.txt; echo done']")
    mrk("submit", str(spec), cwd=cwd, check=0)
    job = mrk("submit", str(spec), "--detach", cwd=cwd, check=0).stdout.strip()
    wait_for(lambda: json.loads(mrk("status", job, "--json", cwd=cwd).stdout)["state"] == "succeeded",
             "the detached job to end")
    assert list(cwd.iterdir()) == []
    assert (tmp_path / "spec" / "runs" / "here" / "mine.txt").read_text() == "x\n"


def test_jobs_shows_elapsed_nodes_and_user(tmp_path, capsys):
    """Issue 40 item 7: squeue and sacct show the time a job ran, its nodes and its user; `jobs` had none."""
    from mpirun_kit.cli.jobs import elapsed
    from mpirun_kit.cli.main import main
    from mpirun_kit.records import JobState, RecordStore
    from mpirun_kit.targets.outcome import JobStatus

    store = RecordStore(tmp_path / "state")
    rec = store.create("cols", "local", spec=None, runs_root=tmp_path / "runs", details={"nodes": 3, "user": "alice"})
    store.update(rec.job_id, started_at=1000.0)
    store.finish(rec.job_id, state=JobState.FAILED, exit_code=2, now=1000.0 + 86400 + 3723)
    assert main(["jobs", "--state-dir", str(store.dir)]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["JOB", "ID", "STATE", "TARGET", "EXIT", "CREATED", "ELAPSED", "NODES", "USER", "SPEC"]
    assert row.split()[:3] == [rec.job_id, "failed", "local"]
    assert row.split()[-4:] == ["1-01:02:03", "3", "alice", "-"]
    assert json.loads(main(["jobs", "--json", "--state-dir", str(store.dir)]) or capsys.readouterr().out)[0][
        "user"] == "alice"
    # not started yet: no time; running: up to now
    status = JobStatus("j", "j", "local", JobState.RUNNING, started_at=10.0)
    assert elapsed(status, now=75.0) == "00:01:05"
    assert elapsed(JobStatus("j", "j", "local", JobState.PENDING), now=75.0) == "-"
