"""``JobService``: the job service's one entry point (torchx's ``Runner``), typed in and out.

Place in the data flow: the CLI's commands and mpirun_kit/api.py make one over a record store and call
``submit(SubmitRequest) -> JobHandle``, ``wait``, ``describe``, ``cancel``, ``logs`` and ``list``; the
steps of a submission (``compile``, ``dry_run``, ``record``, ``run``, ``detach``) are methods too, so the
CLI can print between them (warnings, the job id) without doing any of the work.
"""
from __future__ import annotations

import time
from typing import Callable, Iterator, Mapping, Sequence

from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..records import JobRecord, JobState, RecordStore
from ..targets.base import DryRun, JobStatus
from ..targets.outcome import Outcome
from . import lifecycle
from .compile import ClientFactory, compile_for_submit, plain_aws_client
from .requests import JobHandle, Submission, SubmitRequest
from .runs import begin
from .supervise import run_recorded, start_detached, supervise

#: how often ``wait`` asks the job's target.
WAIT_POLL_S = 0.5


class JobService:
    """Jobs submitted to any target and followed through one record store.

    ``store``: the job records (records.RecordStore; the CLI's and the API's are the same by default);
    ``aws``: the boto3 client factory stack outputs are read with; ``report``: our own one-line notes (the
    region a spec's stacks are read in, a sim cluster swept); ``clock``: every wait's; ``stack_names``: the
    user's stack prefix, which ``${stack:mrk-...}`` stands for (stack/prefix.py; names as written without it), or
    a callable giving it, called only for a spec that names a stack (the CLI's reads the user's configuration
    only then); ``environ``: the submitting shell's environment, whose allow-listed variables a multi-host job
    takes with it (service/compile.py ``with_submit_env``; None: none), read by the CLI or the API, never here.
    """

    def __init__(self, store: RecordStore, *, aws: ClientFactory = plain_aws_client,
                 report: Callable[[str], None] = lambda line: None, clock: Clock = SYSTEM_CLOCK, stack_names=None,
                 environ: Mapping[str, str] | None = None):
        self.stack_names = stack_names
        self.environ = environ
        self.store = store
        self.aws = aws
        self.report = report
        self.clock = clock

    # -- submitting ---------------------------------------------------------------------------------

    def compile(self, req: SubmitRequest, *, dry_run: bool = False):
        """The request's spec compiled (a dry run's without AWS: unread stacks stay ``${stack:...}``).

        Raises:
            SpecError: the spec is invalid (every problem listed); ClusterError: a host or AWS is unreachable,
                or the account's quota cannot hold a real run.
        """
        return compile_for_submit(req.spec, target=req.target, region=req.region, stack_outputs=req.stack_outputs,
                                  dry_run=dry_run, aws=self.aws, report=self.report,
                                  stack_names=self.stack_names, environ=self.environ)

    def dry_run(self, req: SubmitRequest, compiled=None) -> DryRun:
        """What ``submit`` would run, as a printable value; nothing is recorded or run."""
        from ..targets import get_target

        compiled = compiled or self.compile(req, dry_run=True)
        return get_target(compiled.job.target.type).prepare(compiled, req.options())

    def record(self, req: SubmitRequest, compiled) -> Submission:
        """The job recorded (job id, run directory, the request written there), ready to run or detach."""
        from ..targets import get_target

        sweep = lambda: lifecycle.sweep_orphans(self.report)  # noqa: E731 - sim clusters of a SIGKILLed submit
        return begin(self.store, req, compiled, get_target(compiled.job.target.type), sweep=sweep)

    def run(self, sub: Submission, *, started: float | None = None, tee: bool = True) -> Outcome:
        """Run the recorded job here to its end (its ranks' output on this process's stdout, and with ``tee`` in
        the run directory's output.log); how it ended, also in its record."""
        return supervise(self.store, sub, started=time.time() if started is None else started, tee=tee)

    def detach(self, sub: Submission, *, level: int | None = None) -> JobRecord:
        """Start the recorded job under a supervisor of its own; its record once it runs."""
        target, opts = sub.target, sub.opts
        # a platform's job is started once the platform named it (Slurm's id: only sbatch's answer gives it)
        named = (lambda rec: rec.native is not None or target.submitted_as(opts) is not None) \
            if target.platform else None
        return start_detached(self.store, sub.record, level=level, clock=self.clock, named=named)

    def submit(self, req: SubmitRequest) -> JobHandle:
        """Compile, record and start the job: detached (``req.detach``), returning once it runs, else here, to
        its end.  Either way the handle's job is in the records (``describe`` says how it is doing).

        Raises:
            SpecError: the spec is invalid; ClusterError: a host or AWS is unreachable; LaunchError: the
                detached supervisor did not start.
        """
        started = time.time()
        sub = self.record(req, self.compile(req))
        if req.detach:
            self.detach(sub, level=req.verbosity)
        else:
            self.run(sub, started=started)
        return sub.handle

    def run_recorded(self, job_id: str) -> Outcome:
        """Run the request recorded for ``job_id`` to its end (the detached supervisor, `run-detached`)."""
        return run_recorded(self.store, job_id)

    # -- following ----------------------------------------------------------------------------------

    def get(self, job: str | JobHandle) -> JobRecord:
        """The record of ``job`` (a handle, a job id, a unique prefix of one, or the target's own name).

        Raises:
            NoSuchJobError: none; SpecError: a prefix several job ids share.
        """
        return self.store.get(job.job_id if isinstance(job, JobHandle) else job)

    def describe(self, job: str | JobHandle) -> JobStatus:
        """The job's state now and, once it ended, its exit code, source, reason and root cause."""
        return lifecycle.describe_job(self.store, self.get(job))

    def wait(self, job: str | JobHandle, *, timeout_s: float | None = None,
             poll_s: float = WAIT_POLL_S) -> JobStatus:
        """The job's status once it ended, or at ``timeout_s`` (None: no deadline) whatever it is then."""
        deadline = Deadline(self.clock, timeout_s)
        while True:
            status = self.describe(job)
            if status.state.terminal or deadline.expired():
                return status
            self.clock.sleep(poll_s)

    def cancel(self, job: str | JobHandle) -> tuple[JobStatus, bool]:
        """Stop the job on every host -> (its status after, whether it had ended before: then nothing changed)."""
        return lifecycle.cancel_job(self.store, self.get(job))

    def logs(self, job: str | JobHandle, *, rank: int | None = None, follow: bool = False) -> Iterator[str]:
        """The job's output lines, each behind ``[rank host]`` (``rank``: only that rank's); with ``follow``,
        new lines until the job ends."""
        rec = self.get(job)
        return lifecycle.target_of(rec).logs(rec, rank=rank, follow=follow, clock=self.clock)

    def list(self, *, states: Sequence[JobState | str] = (), spec: str | None = None, target: str | None = None,
             limit: int | None = 50) -> list[JobStatus]:
        """The recorded jobs, newest first, as their targets describe them now (filters: ``states``, ``spec``,
        ``target``; ``limit``: at most that many, None or 0: all)."""
        lifecycle.sweep_orphans(self.report)
        return lifecycle.list_jobs(self.store, states=states or None, spec=spec, target=target, limit=limit)
