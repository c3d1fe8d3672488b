"""`run-detached` runs only the request `submit` wrote (issue #39, item 1): the detached supervisor of a job read
whatever request.json its run directory held, so another user who could swap it (a run directory made before
run directories were private, or one on a shared file system) had root run a job of theirs.

The attacker is uid nobody (setpriv, a real process); root (the tests' uid) runs `mpirun_kit run-detached` as
`submit --detach` does.  The crafted request is made the way submit makes one (the format is no secret).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from attack_kit import as_nobody, shared  # noqa: F401 - shared is a fixture

from mpirun_kit.records import RecordStore
from mpirun_kit.service.requests import SubmitRequest
from mpirun_kit.service.runner import JobService

pytestmark = pytest.mark.mpi


def _spec(d: Path, name: str, code: str) -> str:
    p = d / f"{name}.yaml"
    p.write_text(textwrap.dedent(f"""\
        apiVersion: mpirun_kit/v1
        kind: Job
        name: {name}
        resources: {{processes_per_host: 1}}
        program: {{command: [python3, -c, {code!r}]}}
        """))
    return str(p)


def _recorded(svc: JobService, spec: str):
    req = SubmitRequest(spec=spec)
    return svc.record(req, svc.compile(req)).record


def _run_detached(job: str, state: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpirun_kit.cli.main", "run-detached", job, "--state-dir",
                           str(state)], capture_output=True, text=True, timeout=120)


def test_a_request_another_user_swapped_in_is_never_run(shared, tmp_path):
    owned = shared / "owned"
    svc = JobService(RecordStore(tmp_path / "state"))
    payload = _recorded(svc, _spec(tmp_path, "payload", f"import os; open({str(owned)!r}, 'w').write(str(os.getuid()))"))
    crafted = shared / "crafted.json"
    crafted.write_bytes((Path(payload.run_dir) / "request.json").read_bytes())
    os.chmod(crafted, 0o644)
    victim = _recorded(svc, _spec(shared, "victim", "print('the job I meant')"))
    run = Path(victim.run_dir)
    for d in (run.parent.parent, run.parent):
        os.chmod(d, 0o755)
    os.chmod(run, 0o777)   # a run directory another user can write (made before they were private, or shared)
    as_nobody("import os, shutil, sys; shutil.copy(sys.argv[2], sys.argv[1] + '.new'); "
              "os.replace(sys.argv[1] + '.new', sys.argv[1])", run / "request.json", crafted)
    r = _run_detached(victim.job_id, tmp_path / "state")
    assert not owned.exists(), f"root ran the attacker's request: {owned.read_text()!r}"
    assert r.returncode == 64, (r.stdout, r.stderr)
    assert (f"job {victim.job_id}: its run directory {run} is refused: {run} is writable by other users (mode 777), "
            "so another user could have swapped its request; nothing was run") in r.stderr, r.stderr


def test_a_request_that_is_not_the_one_submit_wrote_is_never_run(tmp_path):
    """Whatever changed request.json after submit wrote it (the digest in the record says so)."""
    owned = tmp_path / "owned"
    svc = JobService(RecordStore(tmp_path / "state"))
    payload = _recorded(svc, _spec(tmp_path, "payload", f"open({str(owned)!r}, 'w').write('ran')"))
    victim = _recorded(svc, _spec(tmp_path, "victim", "print('the job I meant')"))
    request = Path(victim.run_dir) / "request.json"
    request.write_bytes((Path(payload.run_dir) / "request.json").read_bytes())
    r = _run_detached(victim.job_id, tmp_path / "state")
    assert not owned.exists()
    assert r.returncode == 64, (r.stdout, r.stderr)
    assert (f"job {victim.job_id}: {request} is not the request submit wrote (its sha256 differs from the one in "
            "the job's record); nothing was run") in r.stderr, r.stderr
