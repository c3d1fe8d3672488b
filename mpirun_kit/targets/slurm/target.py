"""``SlurmTarget``: submit the batch script, follow the job, read its result, cancel it.

Place in the data flow: a ``DryRun[SlurmRequest]`` (script.py) -> ``submit`` (discovery.py's checks, the run
directory written through the runner, ``sbatch --parsable``) -> with ``--wait``, ``follow`` (squeue/sacct through
accounting.py, slurm.out/slurm.err copied as they grow) -> ``outcome_for`` (the master's code and report, Slurm's
state only when the batch step left none).  ``cancel_job``: the run directory's cancel marker, ``scancel --batch``
(the batch shell's trap stops the master, which stops every rank, then the shell scancels its own job: CANCELLED
in sacct), then ``scancel``.  ``describe`` and ``logs`` from a host that cannot reach Slurm or the run directory
raise, naming the host the job was submitted from: a job is never taken for lost for being asked from the wrong host.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ...core import verbosity
from ...core.clock import SYSTEM_CLOCK, Clock, Deadline
from ...errors import ClusterError, ExitCode, SpecError
from ...exec.supervisor import Phase, Stop, Supervisor
from ...records import JobRecord, JobState
from ..base import DryRun, JobStatus, Started, StatusLine, SubmitOptions, Target
from ..outcome import Outcome, outcome_of
from .accounting import ENDED, SlurmJob, query
from .discovery import check_request, discover, for_cluster, sbatch_error
from .runner import Runner, runner_for
from .script import CANCEL_MARKER, SlurmRequest, dryrun

#: how often ``--wait`` asks Slurm: a real cluster's slurmctld serves every user, so once a second at most.
POLL_S = 1.0
#: ... and a sim cluster's (``sim: NAME``), which runs on this machine for this job alone.
SIM_POLL_S = 0.25
#: a job Slurm no longer lists, whose result file is still missing, is waited for this long (a shared file
#: system's attribute cache).
RESULT_GRACE_S = 10.0


# --- submit, follow, result ----------------------------------------------------------------------------

def submit(dry: DryRun[SlurmRequest], runner: Runner, secret: str) -> str:
    """Discover, check, write the run directory, sbatch; the Slurm job id."""
    req = dry.request
    facts = discover(runner)
    check_request(req, facts)
    dry = for_cluster(dry, facts)   # the GPU option by the cluster's version, known only now
    for path, text in dry.files:
        runner.write(path, text, 0o755 if path.endswith(".sh") else 0o644)
    runner.write(f"{req.run_dir}/job-secret", secret, 0o600)
    code, out, err = runner.scrubbed(req.sbatch)
    if code != 0:
        raise sbatch_error(err or out, req)
    job_id = out.strip().split(";")[0]
    if not job_id.isdigit():
        raise ClusterError(f"sbatch --parsable printed {out.strip()[:200]!r}, not a job id")
    runner.write(f"{req.run_dir}/slurm-job-id", job_id + "\n")
    return job_id


@dataclass(frozen=True)
class JobResultFiles:
    """What the batch step left: the master's exit code (None: it never wrote one) and failure report."""

    exit_code: int | None
    failure_text: str | None
    failure_file: str | None
    attempt: int
    #: the signal the batch shell caught (TERM: scancel or the time limit; USR1: --signal before the limit)
    signal: str | None = None


def read_result(runner: Runner, run_dir: str) -> JobResultFiles:
    attempt_text = runner.read(f"{run_dir}/attempt")
    attempt = int(attempt_text.strip()) if attempt_text and attempt_text.strip().isdigit() else 0
    adir = f"{run_dir}/attempt-{attempt}"
    code_text, master_text, sig_text = runner.read_many([f"{adir}/exit_code", f"{adir}/master", f"{adir}/signal"])
    code = int(code_text.strip()) if code_text and code_text.strip().lstrip("-").isdigit() else None
    failure = failure_file = None
    master = (master_text or "").strip()
    if code and master and "/" not in master:
        # The master's report (the batch node's) is the job's; a worker's only repeats its result.
        failure_file = f"{adir}/{master}/output/failure"
        failure = runner.read(failure_file)
        failure_file = failure_file if failure else None
    sig = (sig_text or "").strip() or None
    return JobResultFiles(code, failure, failure_file, attempt, sig)


def slurm_ended_it(res: JobResultFiles, job: SlurmJob | None) -> str | None:
    """Why Slurm, not the job, ended it (its time limit, or the --signal that comes before it), or None.

    The master's code is then a stop's (143: every rank was asked to stop and checkpoint), so the job's
    result is ExitCode.TIMEOUT with source ``platform``.
    """
    if job is not None and job.state == "TIMEOUT":
        return f"Slurm's time limit ended job {job.job_id}: every rank was asked to stop (SIGTERM) and checkpoint"
    if res.signal == "USR1":
        return ("Slurm signalled USR1 ahead of the time limit (target.slurm.signal): every rank was asked to stop "
                "(SIGTERM) and checkpoint before it")
    return None


#: after a graceful cancel's SIGTERM to the batch step, how long past ``grace_s`` before ``scancel`` kills the rest.
CANCEL_MARGIN_S = 20.0


class SlurmChild:
    """A Slurm job as the one supervisor's ``Child`` (exec/supervisor.py): the supervisor's loop follows it, stops
    it and drains it, as it does a local process or the ssh sessions.

    ``poll``: Slurm's state (squeue, then sacct: accounting.query); once Slurm no longer runs it, its result file
    is waited for up to RESULT_GRACE_S (a shared file system's attribute cache), then the master's code (or
    ``NO_RESULT``).  ``terminate``: ``scancel --batch --signal=TERM`` to a running job's batch shell (its trap stops
    the master, which asks every rank to stop within the grace period and writes the result), its kill deadline
    ``grace_s`` + CANCEL_MARGIN_S; a pending job has no batch shell, so it gets ``scancel`` at once.  ``kill``:
    ``scancel`` (Slurm's SIGTERM to every step, SIGKILL after KillWait).  ``drain``: the last of slurm.out/err.
    ``detached()``: true once following should end with the job left running (a signal to ``submit --wait``, its
    deadline): ``poll`` then answers ``DETACHED``.
    """

    #: ``poll``'s answer when the job ended but its batch step left no exit code.
    NO_RESULT = -1
    #: ``poll``'s answer when following ended with the job left running (``detached``).
    DETACHED = -2

    def __init__(self, runner: Runner, job_id: str, run_dir: str, *, grace_s: float = 10.0,
                 clock: Clock = SYSTEM_CLOCK, tails=(), detached=lambda: False, close_runner: bool = False):
        self.runner, self.job_id, self.run_dir = runner, job_id, run_dir
        self.grace_s, self.clock, self.tails, self.detached = grace_s, clock, list(tails), detached
        self.close_runner = close_runner       # ours to close once drained (SlurmTarget.start made it)
        self.last: SlurmJob | None = None      # the job as Slurm last reported it
        self._gone: Deadline | None = None
        self._scancelled = False               # the plain scancel was sent: once is enough

    def poll(self) -> int | None:
        for t, dst in self.tails:
            t.pump(dst)
        try:
            job = query(self.runner, self.job_id)
        except ClusterError:
            # Slurm did not answer this time (slurmctld restarting): asked again next tick, the follow deadline
            # bounds it; never taken for a job that ended.
            return self.DETACHED if self.detached() else None
        if job is not None:
            self.last = job
        if job is not None and job.job_state not in ENDED:
            self._gone = None
            return self.DETACHED if self.detached() else None
        # Ended (or forgotten): its result file may lag on a shared file system; wait for it briefly.
        self._gone = self._gone or Deadline(self.clock, RESULT_GRACE_S)
        code = read_result(self.runner, self.run_dir).exit_code
        if code is not None:
            return code
        if self._gone.expired():
            return self.NO_RESULT
        return self.DETACHED if self.detached() else None

    def _scancel(self, *flags: str) -> None:
        code, _, err = self.runner.run(["scancel", *flags, self.job_id])
        if code != 0 and "already completing or completed" not in err and "Invalid job id" not in err:
            raise ClusterError(f"scancel {self.job_id} failed (exit {code}): {err.strip()[-300:]}")

    def terminate(self, stop) -> float | None:
        if self.last is not None and self.last.job_state == JobState.RUNNING:
            self._scancel("--batch", "--signal=TERM")
            return self.grace_s + CANCEL_MARGIN_S
        self.kill()     # pending: no batch shell to ask; Slurm removes it
        return 0.0

    def stopping(self) -> float | None:
        return None

    def kill(self) -> None:
        if not self._scancelled:
            self._scancel()
            self._scancelled = True

    def drain(self, deadline: Deadline) -> None:
        for t, dst in self.tails:
            t.pump(dst, final=True)
        if self.close_runner:
            self.runner.close()     # a later read (the result) reconnects; its owner closes that

    def wait(self, seconds: float) -> None:
        self.clock.sleep(seconds)


def follow(dry: DryRun[SlurmRequest], runner: Runner, job_id: str, *, clock: Clock = SYSTEM_CLOCK, out=None, err=None,
           progress: StatusLine | None = None, stopped=lambda: None,
           level: int = verbosity.VERBOSE) -> SlurmJob | None:
    """Follow the job under the supervisor (``SlurmChild``) until Slurm no longer runs it, copying
    slurm.out/slurm.err as they grow (when they are on this machine); its last record.  ``stopped()`` names a
    signal submit received, and the follow deadline may pass: following ends, the job runs on."""
    child = SlurmChild(runner, job_id, dry.request.run_dir, grace_s=dry.request.grace_s, clock=clock)
    return follow_child(dry, child, out=out, err=err, progress=progress or StatusLine(clock=clock, level=level),
                        stopped=stopped)


def follow_child(dry: DryRun[SlurmRequest], child: SlurmChild, *, out=None, err=None, progress: StatusLine,
                 stopped=lambda: None) -> SlurmJob | None:
    """``follow`` of a started job's child (``SlurmTarget.start``): the supervisor's loop until Slurm no longer runs
    it, or ``stopped()``/the follow deadline end the following; its last record."""
    req, clock, job_id = dry.request, child.clock, child.job_id
    if req.where["kind"] in ("local", "sim"):
        from ...exec.output import FileTail

        child.tails = [(FileTail(Path(req.run_dir) / "slurm.out", ""), out or sys.stdout.buffer),
                       (FileTail(Path(req.run_dir) / "slurm.err", ""), err or sys.stderr.buffer)]
    deadline = Deadline(clock, req.deadline_s)
    child.detached = lambda: bool(stopped()) or deadline.expired()

    def show(phase: Phase) -> None:
        job = child.last
        if phase is Phase.RUNNING and job is not None and job.job_state not in ENDED:
            progress.update(f"slurm: job {job_id} {job.state.lower()}"
                            + (f" ({job.reason})" if job.reason and job.reason != "None" else ""))

    poll_s = SIM_POLL_S if req.where["kind"] == "sim" else POLL_S
    # No stop is ever asked here: a signal to submit or the follow deadline leave the job running (detached).
    ended = Supervisor(child, clock=clock, tick_s=poll_s, on_tick=show, deadline_what="following the job").run()
    if ended.returncode == SlurmChild.DETACHED and not stopped():
        last = child.last
        progress.done(f"slurm: job {job_id} still {last.state if last else 'unknown'} after "
                      f"{req.deadline_s:g} s; stopped following it (it keeps running; cancel it with "
                      f"mpirun_kit cancel or scancel {job_id})")
    return child.last


def outcome_for(dry: DryRun[SlurmRequest], runner: Runner, job_id: str, job: SlurmJob | None, *,
                started: float) -> Outcome:
    """The job's result: the master's code and report; Slurm's state only when the batch step left none."""
    req = dry.request
    res = read_result(runner, req.run_dir)
    why = slurm_ended_it(res, job) if res.exit_code not in (None, 0) else None
    if why is not None:
        return outcome_of("slurm", dry.job, int(ExitCode.TIMEOUT), platform_reason=why, failure_file=res.failure_file,
                          attempts=res.attempt + 1, started=started, ended=time.time())
    if res.exit_code is not None:
        return outcome_of("slurm", dry.job, res.exit_code, failure_text=res.failure_text,
                          failure_file=res.failure_file, attempts=res.attempt + 1, started=started, ended=time.time())
    # The batch step never got to write its code: Slurm ended it (cancelled before start, node failure, time limit
    # past the kill) or it failed to start.
    word = job.state if job else "unknown"
    code = (ExitCode.TIMEOUT if word == "TIMEOUT" else ExitCode.SIGTERM if word == "CANCELLED"
            else ExitCode.HOST_LOST if word == "NODE_FAIL" else ExitCode.LAUNCH_FAILED)
    return outcome_of("slurm", dry.job, int(code), platform_reason=f"Slurm job {job_id} ended {word} before its "
                      f"batch step reported a result; see {req.run_dir}/slurm.err", started=started,
                      ended=time.time())


def job_id_of(record: JobRecord) -> str:
    """The Slurm job id of a recorded job: the record's native name, else what ``run`` wrote in its run directory."""
    if record.native:
        return record.native
    if record.run_dir:
        p = Path(record.run_dir) / "slurm.json"
        if p.is_file():
            return json.loads(p.read_text())["job_id"]
    raise SpecError(f"job {record.job_id} has no Slurm job id (it was never submitted)")




def cancel_job(runner: Runner, job_id: str, *, run_dir: str | None = None, grace_s: float = 10.0,
               clock: Clock = SYSTEM_CLOCK, timeout: float = 60.0) -> SlurmJob | None:
    """Stop the job under the supervisor (``SlurmChild``) and wait until Slurm no longer runs any of it.

    First SIGTERM to the batch shell only (``scancel --batch``): its trap stops the master, which asks every
    rank to stop (SIGTERM to each program, ``grace_s`` for its handler) and writes the result, so the job ends
    as any stopped job does, its checkpoint written.  A job still there ``grace_s`` + CANCEL_MARGIN_S later
    (or pending: no batch shell yet) gets a plain ``scancel``: Slurm's SIGTERM to every step, SIGKILL after
    KillWait.  ``run_dir``: the job's, where the marker (script.CANCEL_MARKER) goes first: the batch shell then
    ends the job with its own ``scancel`` once the master reported, so Slurm records it CANCELLED (a TERM alone
    would leave FAILED 15:0).

    Raises:
        ClusterError: scancel failed, or the job still runs ``timeout`` s after the plain scancel.
    """
    job = query(runner, job_id)
    if job is None or job.job_state in ENDED:
        return job
    if run_dir and job.job_state == JobState.RUNNING:
        try:
            runner.write(f"{run_dir}/{CANCEL_MARKER}", "mpirun_kit cancel\n")
        except ClusterError:
            pass   # the run directory is not reachable from here: the stop goes on, the job then ends FAILED 15:0
    # The job is over once Slurm no longer runs it (its result is read after).
    child = _Cancelled(runner, job_id, run_dir or "", grace_s=grace_s, clock=clock)
    child.last = job
    sup = Supervisor(child, clock=clock, tick_s=0.2, kill_wait_s=timeout, grace_s=grace_s + CANCEL_MARGIN_S)
    sup.request_stop(Stop("user", f"mpirun_kit cancel of Slurm job {job_id}", int(ExitCode.SIGTERM), "SIGTERM"))
    ended = sup.run()
    if ended.abandoned:
        last = child.last
        raise ClusterError(f"Slurm job {job_id} is still {last.state if last else 'running'} {timeout:g} s after "
                           f"scancel; check it with scontrol show job {job_id}")
    return child.last


class _Cancelled(SlurmChild):
    """``SlurmChild`` for a cancel: done as soon as Slurm no longer runs the job (no result file is waited for)."""

    def poll(self) -> int | None:
        self.last = query(self.runner, self.job_id)
        return 0 if self.last is None or self.last.job_state in ENDED else None


class SlurmTarget(Target[SlurmRequest]):
    name = "slurm"
    request_type = SlurmRequest
    platform = True

    def python(self, job) -> str:
        # On a sim cluster the nodes run this very interpreter (they share this machine's files).
        return sys.executable if job.target.slurm.sim else job.target.slurm.python

    def choices(self, compiled, opts: SubmitOptions) -> dict:
        run_id = f"{compiled.job.name}-{opts.job_id or format(os.getpid(), 'x')}"
        return {"run_id": run_id, "python": self.python(compiled.job), "verbose": opts.verbosity >= verbosity.VERBOSE,
                "quiet": opts.verbosity <= verbosity.QUIET}

    def dryrun(self, compiled, **choices) -> DryRun[SlurmRequest]:
        return dryrun(compiled, **choices)

    def handle(self, dry: DryRun[SlurmRequest]) -> tuple[str | None, dict]:
        import socket

        req = dry.request
        # submitted_from: the host status and logs name when this one cannot reach Slurm or the run directory
        return None, {"where": req.where, "run_dir": req.run_dir, "grace_s": req.grace_s,
                      "submitted_from": socket.gethostname()}

    def submitted_as(self, opts: SubmitOptions) -> str | None:
        # Slurm names the job only when sbatch accepts it: run() wrote its id in the record's run directory.
        p = Path(opts.run_dir or "") / "slurm.json"
        try:
            return str(json.loads(p.read_text())["job_id"]) if opts.run_dir else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def start(self, dry: DryRun[SlurmRequest], opts: SubmitOptions = SubmitOptions(), *,
              clock: Clock = SYSTEM_CLOCK) -> Started:
        """Submit ``dry`` (discovery, the checks, the run directory, sbatch) and return at once: Slurm's job id and
        the ``SlurmChild`` the one supervisor follows, stops (scancel --batch, then scancel) and drains.  The
        child's runner (an ssh connection to a login node) is closed by its ``drain``."""
        from ...exec.sshkeys import SECRET_BYTES, format_secret

        runner = runner_for(dry.request.where)
        try:
            job_id = submit(dry, runner, format_secret(os.urandom(SECRET_BYTES)))
            if opts.run_dir:
                from ...core.files import write_atomic

                write_atomic(Path(opts.run_dir) / "slurm.json", json.dumps({"job_id": job_id, **dry.request.where}))
        except BaseException:
            runner.close()
            raise
        return Started(job_id, SlurmChild(runner, job_id, dry.request.run_dir, grace_s=dry.request.grace_s,
                                          clock=clock, close_runner=True))

    def run(self, dry: DryRun[SlurmRequest], opts: SubmitOptions = SubmitOptions(), *, started: float | None = None,
            clock: Clock = SYSTEM_CLOCK, out=None, err=None) -> Outcome:
        """``start``, then (``--wait``) the supervisor follows the child, then the job's own result."""
        started = time.time() if started is None else started
        job = self.start(dry, opts, clock=clock)
        child: SlurmChild = job.child
        try:
            progress = StatusLine(clock=clock, level=opts.verbosity)
            # Both ids, whatever the output goes to: status, logs and cancel take the mpirun_kit one (issue 40)
            ours = f" as mpirun_kit job {opts.job_id}" if opts.job_id else ""
            progress.done(f"slurm: submitted job {job.native} (run directory {dry.request.run_dir}){ours}")
            if not opts.wait:
                return outcome_of("slurm", dry.job, 0, started=started, ended=time.time())
            from ...exec.signals import SignalLatch

            with SignalLatch() as latch:
                last = follow_child(dry, child, out=out, err=err, progress=progress, stopped=lambda: latch.received)
            if latch.received:
                progress.done(f"slurm: stopped following job {job.native} on {latch.received}; it keeps running "
                              f"(mpirun_kit cancel, or scancel {job.native})")
                return outcome_of("slurm", dry.job, int(ExitCode.INTERRUPTED), interrupted=latch.received,
                                  started=started, ended=time.time())
            return outcome_for(dry, child.runner, job.native, last, started=started)
        finally:
            child.runner.close()

    # -- lifecycle --------------------------------------------------------------------------------------
    def _runner(self, record: JobRecord) -> Runner:
        where = (record.details or {}).get("where")
        if where is None:
            raise SpecError(f"job {record.job_id}'s record says nothing of where its Slurm cluster is")
        return runner_for(where)

    def describe(self, record: JobRecord, *, clock: Clock = SYSTEM_CLOCK) -> JobStatus:
        with self._runner(record) as runner:
            return self._describe(record, runner)

    def list(self, records, *, clock: Clock = SYSTEM_CLOCK) -> list[JobStatus]:
        """``describe`` of each record; one this host cannot ask Slurm about keeps its recorded state, said why."""
        out = []
        for r in records:
            if r.target != self.name:
                continue
            try:
                out.append(self.describe(r, clock=clock))
            except ClusterError as exc:
                out.append(JobStatus(job_id=r.job_id, name=r.name, target=self.name, state=r.state, native=r.native,
                                     run_dir=r.run_dir, spec=r.spec, created_at=r.created_at,
                                     started_at=r.started_at, detail=f"Slurm not reachable from this host: {exc}"))
        return out

    @staticmethod
    def _submitted_from(record: JobRecord) -> str:
        host = (record.details or {}).get("submitted_from")
        return f" (the job was submitted from {host})" if host else ""

    def _query(self, record: JobRecord, runner: Runner, job_id: str) -> SlurmJob | None:
        """``query``, its error naming where to run the command instead."""
        try:
            return query(runner, job_id)
        except ClusterError as exc:
            raise ClusterError(f"{exc}; run it on a host whose Slurm clients reach the cluster"
                               f"{self._submitted_from(record)}, or set target.slurm.login (sbatch, squeue and sacct "
                               "over ssh)") from None

    def _no_run_dir(self, record: JobRecord, runner: Runner, run_dir: str, command: str) -> None:
        """Raise when ``run_dir`` is not on this host (its batch.sh is missing): a job's files are never taken for
        a job that left none."""
        if runner.read(f"{run_dir}/batch.sh", limit=16) is None:
            raise ClusterError(f"job {record.job_id}'s run directory {run_dir} is not on this host (its batch.sh is "
                               f"missing here); run {command} on a host that mounts target.slurm.workdir"
                               f"{self._submitted_from(record)}")

    def _describe(self, record: JobRecord, runner: Runner) -> JobStatus:
        try:
            job_id = job_id_of(record)
        except SpecError:
            # No Slurm id yet: sbatch has not answered (a submit in another shell), or it never ran (its record
            # ended with why).  Either way Slurm has nothing to ask about.
            return JobStatus(job_id=record.job_id, name=record.name, target=self.name,
                             state=record.state if record.state.terminal else JobState.PENDING,
                             exit_code=record.exit_code, source=record.source, reason=record.reason,
                             root_cause=record.root_cause, run_dir=record.run_dir, spec=record.spec,
                             created_at=record.created_at, started_at=record.started_at, ended_at=record.ended_at,
                             detail="Slurm: never submitted" if record.state.terminal
                             else "Slurm: submitting (sbatch has not answered yet)")
        run_dir = (record.details or {}).get("run_dir", "")
        job = self._query(record, runner, job_id)
        res = read_result(runner, run_dir) if run_dir else None
        base = dict(job_id=record.job_id, name=record.name, target=self.name, native=job_id, run_dir=record.run_dir,
                    spec=record.spec, created_at=record.created_at, started_at=record.started_at)
        if job is not None and job.job_state not in ENDED:
            return JobStatus(state=job.job_state, detail=f"Slurm: {job.state}"
                             + ("" if job.known_state else " (a state this version does not know)")
                             + (f", {job.reason}" if job.reason and job.reason != "None" else ""), **base)
        if res is not None and res.exit_code is not None:
            why = slurm_ended_it(res, job) if res.exit_code != 0 else None
            o = outcome_of("slurm", record.name, res.exit_code, failure_text=res.failure_text,
                           failure_file=res.failure_file) if why is None else outcome_of(
                "slurm", record.name, int(ExitCode.TIMEOUT), platform_reason=why, failure_file=res.failure_file)
            cancelled = (job is not None and job.state == "CANCELLED") or (
                record.cancel_requested and res.exit_code == ExitCode.SIGTERM)
            state = JobState.SUCCEEDED if res.exit_code == 0 else JobState.CANCELLED if cancelled else JobState.FAILED
            return JobStatus(state=state, exit_code=o.exit_code, source=o.source, reason=o.reason,
                             root_cause=o.root_cause, detail=f"Slurm: {job.state if job else 'no longer lists it'}"
                             + (f" {job.exit_code}:{job.signal or 0}" if job and job.exit_code is not None else ""),
                             **base)
        if run_dir:
            self._no_run_dir(record, runner, run_dir, "status")
        if job is None:
            return JobStatus(state=JobState.LOST, detail="Slurm no longer knows the job and it left no result", **base)
        return JobStatus(state=job.job_state, detail=f"Slurm: {job.state} (the batch step left no result)", **base)

    def cancel(self, record: JobRecord, *, clock: Clock = SYSTEM_CLOCK) -> JobStatus:
        grace = float((record.details or {}).get("grace_s") or 10.0)
        with self._runner(record) as runner:
            cancel_job(runner, job_id_of(record), run_dir=(record.details or {}).get("run_dir"), grace_s=grace,
                       clock=clock)
            return self._describe(dataclasses.replace(record, cancel_requested=True), runner)

    def logs(self, record: JobRecord, *, rank: int | None = None, follow: bool = False,
             clock: Clock = SYSTEM_CLOCK) -> Iterator[str]:
        run_dir = (record.details or {}).get("run_dir", "")
        seen = 0
        prefix = f"[{rank} " if rank is not None else ""
        with self._runner(record) as runner:
            while True:
                text = runner.read(f"{run_dir}/slurm.out")
                if text is None:
                    self._no_run_dir(record, runner, run_dir, "logs")
                text = text or ""
                lines = text.splitlines()
                for line in lines[seen:]:
                    if not prefix or line.startswith(prefix):
                        yield line
                seen = len(lines)
                if not follow:
                    return
                job = self._query(record, runner, job_id_of(record))
                if job is None or job.job_state in ENDED:
                    follow = False
                    continue
                clock.sleep(POLL_S)


TARGET = SlurmTarget()
