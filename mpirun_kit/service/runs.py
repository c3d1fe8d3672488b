"""The job's record and run directory: made before its target runs anything, written once when it ends.

Place in the data flow: ``begin`` makes the record (records/: a job id, a run directory of its own) and
writes the request into it (``record_request``: the resolved spec, the plan, the request as sent, which
``load_request`` reads back for the detached supervisor); ``end_record`` writes how the job ended
(``outcome_json``: the Outcome with the job id, ``submit --json``'s last line, as ``outcome.json``) and copies the failure
report and timeline a target left elsewhere.  records.RUN_FILES names every file.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path
from typing import Callable

from ..core.files import write_atomic
from ..errors import ExitCode
from ..records import RUN_FILES, JobRecord, JobState, RecordStore
from ..targets.base import DryRun, SubmitOptions, Target, plain
from ..targets.outcome import Outcome
from .requests import SubmitRequest, Submission

#: the record's ``details`` key for the sha256 of the request.json submit wrote (load_request checks it).
REQUEST_DIGEST = "request_sha256"


def begin(store: RecordStore, req: SubmitRequest, compiled, target: Target,
          sweep: Callable[[], object] | None = None) -> Submission:
    """A real submission up to its start: the record (job id, run directory), the request prepared with the
    record's choices and written to the run directory.  A failure here ends the record as failed, with the
    error's code and first line.  ``sweep``: run first (the CLI's sim-orphan sweep)."""
    if sweep is not None:
        sweep()
    spec_path = Path(req.spec).resolve()
    rec = store.create(compiled.job.name, target.name, spec=str(spec_path),
                       runs_root=runs_root(compiled, store, spec_path.parent))
    opts = req.options(rec)
    try:
        dry = target.prepare(compiled, opts)
        rec = record_request(store, rec, target, compiled, dry, opts)
    except Exception as exc:   # the record says the job never ran, and why
        store.finish(rec.job_id, state=JobState.FAILED, exit_code=getattr(exc, "exit_code", None),
                     source="launcher", reason=str(exc).split("\n", 1)[0])
        raise
    return Submission(rec, target, dry, opts, tuple(dry.warnings))


def runs_root(compiled, store: RecordStore, spec_dir: Path) -> Path:
    """Where the job's run directories go: in its output directory on this machine (``output.local_path``,
    default ``runs/NAME`` beside the spec, where the ranks' ``${output}`` is too); for a platform whose output
    path is inside its container, under the store."""
    from ..spec.compile import output_path

    if compiled.job.target.type == "sagemaker":
        return store.dir / "runs" / compiled.job.name
    return spec_dir / output_path(compiled.job)   # an absolute output path stays itself


def record_request(store: RecordStore, rec: JobRecord, target: Target, compiled, dry: DryRun,
                   opts: SubmitOptions) -> JobRecord:
    """Write the run directory's spec, plan and request (records.RUN_FILES), and what the record keeps of them."""
    run = Path(rec.run_dir)
    # The resolved spec holds the env's real values (secret-looking ones too: the ranks need them): only this user reads it.
    write_atomic(run / RUN_FILES["spec"], compiled.launch.to_json() + "\n", mode=0o600)
    write_atomic(run / RUN_FILES["plan"], dry.render(), mode=0o600)
    saved = {"target": dry.target, "job": dry.job, "request": plain(dry.request), "files": [list(f) for f in dry.files],
             "notes": list(dry.notes), "warnings": list(dry.warnings), "opts": dataclasses.asdict(opts)}
    # As sent, secrets included: only this user reads it (the detached supervisor runs from it).
    write_atomic(run / RUN_FILES["request"], json.dumps(saved, indent=1, sort_keys=True, default=str), mode=0o600)
    digest = hashlib.sha256((run / RUN_FILES["request"]).read_bytes()).hexdigest()
    native, details = target.handle(dry)
    # The request's digest stays in the record: load_request runs only the request this submit wrote (issue #39).
    details = {**details, REQUEST_DIGEST: digest}
    # what `jobs` shows beside the target's own details (squeue's NODES and USER): the planned hosts, the submitter
    details = {**details, "nodes": len(compiled.hosts), "user": submitter()}
    return store.update(rec.job_id, native=native, details=details)


def submitter() -> str:
    """This process's user name (its uid when the password database has none)."""
    import os
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def load_request(rec: JobRecord) -> tuple[Target, DryRun, SubmitOptions]:
    """The DryRun and SubmitOptions ``record_request`` saved for the job ``rec`` (the detached supervisor's input)."""
    from ..core.private import read_private, swappable
    from ..errors import SpecError
    from ..targets import get_target

    # Only what this user can prove is theirs: a run directory no one else could swap, a request file of
    # theirs (no link), the very request whose digest submit kept in the record (issue #39).
    path = Path(rec.run_dir) / RUN_FILES["request"]
    why = swappable(rec.run_dir)
    if why:
        raise SpecError(f"job {rec.job_id}: its run directory {rec.run_dir} is refused: {why}, so another user could "
                        "have swapped its request; nothing was run: submit the job again")
    data = read_private(path, "job's request")
    if hashlib.sha256(data).hexdigest() != rec.details.get(REQUEST_DIGEST):
        raise SpecError(f"job {rec.job_id}: {path} is not the request submit wrote (its sha256 differs from the "
                        "one in the job's record); nothing was run: submit the job again")
    saved = json.loads(data)
    target = get_target(saved["target"])
    # The target's own redaction hook again: whatever this copy prints shows what `submit --dry-run` showed.
    dry = DryRun(saved["target"], saved["job"], target.request_from(saved["request"]),
                 files=tuple(tuple(f) for f in saved["files"]), notes=tuple(saved["notes"]),
                 warnings=tuple(saved["warnings"]), redact=target.redact)
    return target, dry, SubmitOptions(**saved["opts"])


def end_record(store: RecordStore, rec: JobRecord, outcome: Outcome | None, target: Target,
               opts: SubmitOptions) -> None:
    """The job's end in its record and run directory: the outcome file (the Outcome with the job id), copies
    of the failure report and timeline a target left elsewhere (a sim host's /opt/ml), the state."""
    from ..targets.supervised import state_of

    run = Path(rec.run_dir)
    native = target.submitted_as(opts)   # a name the platform gave only once run() submitted it (Slurm's job id)
    if native is not None:
        store.update(rec.job_id, native=native)
    if outcome is None:  # an internal error: no result to keep, but the job is over
        store.finish(rec.job_id, state=JobState.FAILED, exit_code=int(ExitCode.LAUNCH_FAILED), source="launcher",
                     reason="submit failed before the job ended; see its log")
        return
    write_atomic(run / RUN_FILES["outcome"], outcome_json(outcome, rec) + "\n", mode=0o600)
    for key, src in (("failure", outcome.failure_file),
                     ("timeline", ((outcome.timeline or {}).get("launch") or {}).get("file"))):
        dst = run / RUN_FILES[key]
        if src and ":" not in src and Path(src).is_file() and Path(src).resolve() != dst.resolve():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    if outcome.exit_code == 0 and target.platform and not opts.wait:
        return   # created on the platform, where it runs on: the target's describe follows it from here
    cancelled = store.get(rec.job_id).cancel_requested
    store.finish(rec.job_id, state=state_of(outcome.exit_code, cancelled=cancelled), exit_code=outcome.exit_code,
                 source=outcome.source, reason=outcome.reason, root_cause=outcome.root_cause)


def outcome_json(outcome: Outcome, rec: JobRecord) -> str:
    """``submit --json``'s last line: the Outcome, with the job id and run directory of its record."""
    return json.dumps({**outcome.to_dict(), "job_id": rec.job_id, "run_dir": rec.run_dir}, sort_keys=True)


def error_outcome(target_name: str | None, compiled, target: Target | None, exc, started: float) -> Outcome:
    """The Outcome of a submit that ended in an error of ours, before or while its target ran.
    ``target_name``: the target asked for, when the spec never compiled."""
    from ..targets.outcome import error_outcome as outcome_of_error

    job = compiled.job.name if compiled else None
    if target is not None:
        return target.error_outcome(job, exc, started)
    # The spec never compiled, or named no known target: the launcher (mpirun_kit) decided.
    name = compiled.job.target.type if compiled else target_name
    return outcome_of_error(name or None, job, exc, started)
