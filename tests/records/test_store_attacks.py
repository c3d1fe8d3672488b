"""The job records and run directories against another user of the host (issue #39, items 1 and 3).

The attacker is uid nobody running real processes (setpriv); the job's owner is root (the tests' uid) running
`mpirun_kit` as a user would (a fresh interpreter per command).  Each test fails on the tree before the fix:
there the run directory was made in the attacker's directory and the job ran from it, the store used the
attacker's directory and database without a word and `cancel` killed the process a planted record named, and
`cancel` of another user's job said "cancel: : Operation not permitted".
"""
from __future__ import annotations

import json
import multiprocessing
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from attack_kit import as_nobody, nobody_uid, shared  # noqa: F401 - shared is a fixture

from mpirun_kit.errors import SpecError
from mpirun_kit.records import JobState, RecordStore, process_start

NOBODY_UID = None


def mrk(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main", *argv], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def test_submit_detach_refuses_a_runs_directory_another_user_made_before_writing_anything(shared):
    """The default runs/NAME beside a spec kept in a shared directory: the attacker makes it first (0777) and
    waits for root's request.json to swap it.  Refused (64) naming the directory and its owner; nothing is
    written in it, nothing runs."""
    spec = shared / "hello.yaml"
    spec.write_text(textwrap.dedent("""\
        apiVersion: mpirun_kit/v1
        kind: Job
        name: hello
        resources: {processes_per_host: 1}
        program: {command: [python3, -c, 'print(1)']}
        """))
    runs = shared / "runs" / "hello"
    as_nobody("import os, sys; os.makedirs(sys.argv[1]); os.chmod(sys.argv[1], 0o777); "
              "os.chmod(os.path.dirname(sys.argv[1]), 0o777)", runs)
    r = mrk("submit", str(spec), "--detach")
    assert r.returncode == 64, (r.stdout, r.stderr)
    assert f"belongs to uid {nobody_uid()} (nobody), not to you or root, so another user could swap its files" \
        in r.stderr, r.stderr
    assert os.listdir(runs) == []


def _planted_store(shared, pid: int) -> str:
    """A store whose one record says the job runs under ``pid`` (its real start time, read from /proc as
    anyone can): made where the attacker can read it; the attacker copies it into its own directory."""
    template = shared / "template"
    store = RecordStore(template)
    rec = store.create("victim", "local", spec=None, runs_root=None)
    store.update(rec.job_id, state=JobState.RUNNING, supervisor_pid=pid, supervisor_start=process_start(pid))
    os.chmod(template, 0o755)
    os.chmod(template / "jobs.db", 0o644)
    return rec.job_id


def test_a_state_directory_another_user_can_write_is_refused_and_nothing_is_signalled(shared):
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        job = _planted_store(shared, sleeper.pid)
        state = shared / "state"
        as_nobody("import os, shutil, sys; os.mkdir(sys.argv[1]); os.chmod(sys.argv[1], 0o777); "
                  "shutil.copy(sys.argv[2], sys.argv[1] + '/jobs.db'); os.chmod(sys.argv[1] + '/jobs.db', 0o666)",
                  state, shared / "template" / "jobs.db")
        r = mrk("cancel", job, "--state-dir", str(state))
        assert r.returncode == 64, (r.stdout, r.stderr)
        assert (f"job records: {state} is refused: {state} belongs to uid {nobody_uid()} (nobody), not to you, so "
                "another user could change your job records; set --state-dir or MPIRUN_KIT_STATE_DIR to a "
                "directory of your own that only you can write") in r.stderr, r.stderr
        assert sleeper.poll() is None, "cancel signalled the process a planted record named"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_database_another_user_can_write_is_refused(shared):
    state = shared / "state"
    state.mkdir(mode=0o700)
    RecordStore(state).list()
    os.chmod(state / "jobs.db", 0o666)
    with pytest.raises(SpecError, match=rf"{state}/jobs.db is a file of uid 0 \(root\) with mode 666"):
        RecordStore(state).list()


def test_cancel_signals_only_a_process_that_proves_it_is_the_jobs_supervisor(tmp_path):
    """A record in the owner's own store naming a process of the owner's that is no supervisor (pid and start
    time right: a record may say anything) never gets it signalled: the job is taken for lost."""
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        store = RecordStore(tmp_path / "state")
        rec = store.create("victim", "local", spec=None, runs_root=tmp_path / "runs")
        store.update(rec.job_id, state=JobState.RUNNING, supervisor_pid=sleeper.pid,
                     supervisor_start=process_start(sleeper.pid))
        r = mrk("cancel", rec.job_id, "--state-dir", str(tmp_path / "state"))
        assert r.returncode == 0, r.stderr
        assert sleeper.poll() is None, "cancel signalled a process that is not an mpirun_kit supervisor"
        assert "lost" in r.stdout, r.stdout
    finally:
        sleeper.kill()
        sleeper.wait()


def _cancel_as_nobody(record, q) -> None:
    from mpirun_kit.targets import supervised

    os.setgid(65534)
    os.setuid(nobody_uid())
    try:
        supervised.cancel(record)
        q.put("no error")
    except Exception as exc:   # what the user would read
        q.put(f"{type(exc).__name__}: {exc}")


def test_cancel_of_another_users_job_says_whose_it_is(tmp_path):
    """The job's supervisor is root's mpirun_kit process; uid nobody asks to cancel it (a forked child that
    set its uid).  Before: "cancel: : Operation not permitted"; now it names the owner."""
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    sup = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "mpirun_kit.cli.main"])
    try:
        store = RecordStore(tmp_path / "state")
        rec = store.create("theirs", "local", spec=None, runs_root=tmp_path / "runs")
        rec = store.update(rec.job_id, state=JobState.RUNNING, supervisor_pid=sup.pid,
                           supervisor_start=process_start(sup.pid))
        ctx = multiprocessing.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=_cancel_as_nobody, args=(rec, q))
        p.start()
        said = q.get(timeout=60)
        p.join(30)
        assert said == (f"SpecError: job {rec.job_id}: its supervisor (pid {sup.pid}) runs as uid 0 (root), not as "
                        f"you (uid {nobody_uid()} (nobody)): only that user can cancel it")
        assert sup.poll() is None
    finally:
        sup.kill()
        sup.wait()


def _old_run_directory(shared, tmp_path) -> tuple[str, object]:
    """A record whose run directory another user can write (as every run directory under a shared runs
    directory was before): the job ended, its supervisor is gone."""
    run = shared / "run"
    run.mkdir()
    os.chmod(run, 0o777)
    store = RecordStore(tmp_path / "state")
    rec = store.create("victim", "local", spec=None, runs_root=None)
    store.update(rec.job_id, run_dir=str(run), state=JobState.RUNNING, supervisor_pid=None)
    return rec.job_id, run


def test_logs_never_follow_a_link_another_user_put_for_output_log(shared, tmp_path):
    secret = shared / "root-only"
    secret.write_text("root's secret\n")
    os.chmod(secret, 0o600)
    job, run = _old_run_directory(shared, tmp_path)
    as_nobody("import os, sys; os.symlink(sys.argv[2], sys.argv[1])", run / "output.log", secret)
    r = mrk("logs", job, "--state-dir", str(tmp_path / "state"))
    assert "root's secret" not in r.stdout
    assert r.returncode == 64, (r.stdout, r.stderr)
    assert (f"{run / 'output.log'}: the job's output is a symbolic link of uid {nobody_uid()} (nobody), which "
            "mpirun_kit never follows: remove it") in r.stderr, r.stderr


def test_a_result_another_user_wrote_is_not_taken_for_the_jobs(shared, tmp_path):
    job, run = _old_run_directory(shared, tmp_path)
    as_nobody("import sys; open(sys.argv[1], 'w').write('{\"exit_code\": 0, \"source\": \"job\"}')",
              run / "result.json")
    r = mrk("status", job, "--json", "--state-dir", str(tmp_path / "state"))
    assert '"succeeded"' not in r.stdout
    assert r.returncode == 64, (r.stdout, r.stderr)
    assert f"{run / 'result.json'}: the job's result is refused: it belongs to uid {nobody_uid()} (nobody)" \
        in r.stderr, r.stderr


# A program of the user's that supervises a job through the Python API (a foreground submit): its command line is
# not mpirun_kit's, and it must still count as the job's supervisor (it recorded its own command line).
API_SUPERVISOR = r"""
import sys
from mpirun_kit import api
api.submit(sys.argv[1], detach=False)
"""


def test_a_program_supervising_through_the_api_is_still_its_jobs_supervisor(tmp_path):
    from jobs_kit import LONG, wait_for

    spec = tmp_path / "fg.yaml"
    spec.write_text(textwrap.dedent(f"""\
        apiVersion: mpirun_kit/v1
        kind: Job
        name: fg
        resources: {{processes_per_host: 1}}
        program: {{command: [python3, -c, {LONG!r}]}}
        """))
    state = tmp_path / "state"
    sup = subprocess.Popen([sys.executable, "-c", API_SUPERVISOR, str(spec)], env={**os.environ,
                           "MPIRUN_KIT_STATE_DIR": str(state)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        rec = wait_for(lambda: next((r for r in RecordStore(state).list() if r.supervisor_pid), None),
                       "the job's record naming its supervisor", 60)
        wait_for(lambda: "] tick" in (tmp_path / "runs" / "fg" / rec.job_id / "output.log").read_text(errors="replace")
                 if (tmp_path / "runs" / "fg" / rec.job_id / "output.log").exists() else False, "the job's output", 60)
        status = mrk("status", rec.job_id, "--json", "--state-dir", str(state))
        assert '"state": "running"' in status.stdout, status.stdout + status.stderr
        c = mrk("cancel", rec.job_id, "--state-dir", str(state))
        assert c.returncode == 0 and "cancelled" in c.stdout, (c.stdout, c.stderr)
        assert sup.wait(60) is not None
    finally:
        sup.kill()
        sup.communicate()


def test_another_user_reads_nothing_of_a_jobs_run_directory(shared):
    """Issue #39, item 5: output.log, result.json and plan.txt were 0644 in a 0755 directory, so any user of the
    host read the ranks' output.  The run directory is 0700 and its files 0600 now."""
    spec = shared / "quiet.yaml"
    spec.write_text(textwrap.dedent("""\
        apiVersion: mpirun_kit/v1
        kind: Job
        name: quiet
        resources: {processes_per_host: 1}
        program: {command: [python3, -c, 'print("the ranks private line")']}
        """))
    r = mrk("submit", str(spec), "--json")
    assert r.returncode == 0, r.stderr
    run = Path(json.loads(r.stdout.splitlines()[-1])["run_dir"])
    assert "the ranks private line" in (run / "output.log").read_text()
    seen = as_nobody("import os, sys\n"
                     "for name in ('output.log', 'plan.txt', 'outcome.json', 'result.json', 'spec.json'):\n"
                     "    try:\n"
                     "        print(name, open(os.path.join(sys.argv[1], name)).read()[:40].replace(chr(10), ' '))\n"
                     "    except OSError as exc:\n"
                     "        print(name, type(exc).__name__)\n", run)
    assert "private line" not in seen and "PermissionError" in seen, seen
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in run.iterdir() if p.is_file()}
    assert stat.S_IMODE(run.stat().st_mode) == 0o700 and set(modes.values()) == {0o600}, modes
