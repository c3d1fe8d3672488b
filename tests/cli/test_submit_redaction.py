"""What `submit --detach` shows and leaves of a job's secrets (cli/submit.py): the detached supervisor runs from the
request the run directory keeps (record_request -> load_request), and the DryRun it rebuilds must show what the
submitted one showed, through the target's own redaction hook (DryRun.redact); a secret's value is only in files
no other user can read.  Real processes for the detached run (mpirun on this machine)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mpirun_kit.spec.compile import compile_job
from mpirun_kit.spec.load import load_job_text

SAGEMAKER_DIR = Path(__file__).resolve().parents[1] / "targets"
sys.path.insert(0, str(SAGEMAKER_DIR))
from sagemaker_specs import OUTPUTS, SECRET_SPEC  # noqa: E402  (a helper module beside the sagemaker tests)


def test_the_detached_supervisors_dry_run_keeps_the_targets_redaction_hook(tmp_path):
    """load_request rebuilt the DryRun without its hook: the SageMaker request then showed through the generic
    one (a null submit_role, KmsKeyId-like names hidden), not as `submit --dry-run` and plan.txt show it."""
    from mpirun_kit.service.runs import load_request, record_request
    from mpirun_kit.records import RecordStore
    from mpirun_kit.targets import get_target
    from mpirun_kit.targets.base import SubmitOptions

    compiled = compile_job(load_job_text(SECRET_SPEC, "mrcnn.yaml"), python="python", resolver=OUTPUTS.__getitem__)
    target = get_target("sagemaker")
    store = RecordStore(tmp_path / "state")
    rec = store.create(compiled.job.name, "sagemaker", spec=None, runs_root=tmp_path / "runs")
    opts = SubmitOptions(job_name="mrcnn-1", job_id=rec.job_id, run_dir=rec.run_dir)
    dry = target.prepare(compiled, opts)
    rec = record_request(store, rec, target, compiled, dry, opts)
    _, back, _ = load_request(rec)
    assert back.redact is dry.redact
    assert (back.render(), back.to_json()) == (dry.render(), dry.to_json())
    assert "hunter2" not in back.render() + back.to_json()
    assert back.request.CreateTrainingJob["Environment"]["WANDB_API_KEY"] == "hunter2"   # sent as is


SECRETS = ("supersecretvalue123", "tokval98765")


@pytest.mark.mpi
def test_a_detached_submit_shows_no_secret_and_keeps_it_only_in_private_files(tmp_path):
    """A spec env value under a secret-looking name (AWS_SECRET_ACCESS_KEY, MY_TOKEN): nothing `submit --detach`
    prints, nor plan.txt, submit.log, output.log or outcome.json, holds it; the files that must (the request as
    sent, the resolved spec, the launcher's launch spec) are 0600 (spec.json and launch-spec.json were 0644)."""
    spec = tmp_path / "spec" / "s.yaml"
    spec.parent.mkdir()
    spec.write_text(textwrap.dedent(f"""\
        apiVersion: mpirun_kit/v1
        kind: Job
        name: s
        resources: {{processes_per_host: 2}}
        env: {{AWS_SECRET_ACCESS_KEY: {SECRETS[0]}, MY_TOKEN: {SECRETS[1]}}}
        program: {{command: [sh, -c, 'echo done']}}
        """))
    mrk = [sys.executable, "-m", "mpirun_kit.cli.main"]
    p = subprocess.run(mrk + ["submit", str(spec), "--detach", "-v"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip()
    end = time.monotonic() + 120
    while json.loads(subprocess.run(mrk + ["status", job, "--json"], capture_output=True, text=True,
                                    timeout=60).stdout)["state"] in ("pending", "running"):
        assert time.monotonic() < end, "the detached job did not end"
        time.sleep(0.5)
    status = subprocess.run(mrk + ["status", job, "--json"], capture_output=True, text=True, timeout=60)
    logs = subprocess.run(mrk + ["logs", job], capture_output=True, text=True, timeout=60)
    assert "] done" in logs.stdout
    shown = p.stdout + p.stderr + status.stdout + status.stderr + logs.stdout + logs.stderr
    assert not [s for s in SECRETS if s in shown]
    run = Path(json.loads(status.stdout)["run_dir"])
    holding = {str(f.relative_to(run)): oct(stat.S_IMODE(f.stat().st_mode)) for f in run.rglob("*")
               if f.is_file() and any(s.encode() in f.read_bytes() for s in SECRETS)}
    assert holding == {"request.json": "0o600", "spec.json": "0o600", "launch-spec.json": "0o600"}
    assert "***" in (run / "plan.txt").read_text()
