"""The job service's typed values in and out: ``SubmitRequest`` (what to submit, as the submit flags say it)
and ``JobHandle`` (the recorded job: its id and run directory), and ``Submission``, a recorded job ready to run.

Place in the data flow: the CLI (cli/submit.py) and the Python API (api.py) build a ``SubmitRequest``;
``JobService.submit`` (runner.py) answers with a ``JobHandle``; ``SubmitRequest.options`` turns the
request and its record into the target's ``SubmitOptions`` (targets/base.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..core import verbosity
from ..records import JobRecord
from ..targets.base import DryRun, SubmitOptions, Target


@dataclass(frozen=True)
class SubmitRequest:
    """A job spec to submit and what the caller says beyond it (the ``submit`` command's flags).

    ``spec``: the job spec file; ``target``: run there instead of the spec's ``target.type``;
    ``region``, ``stack_outputs`` (``STACK.KEY=VALUE`` strings): how ``${stack:...}`` references resolve;
    ``job_name``, ``wait``, ``keep_keys``, ``resume_from``: SageMaker's; ``detach``: return once the job
    runs under a supervisor of its own; ``verbosity``: the output level (core/verbosity.py).
    """

    spec: str
    target: str | None = None
    region: str | None = None
    stack_outputs: tuple[str, ...] = ()
    job_name: str | None = None
    wait: bool = False
    keep_keys: bool = False
    resume_from: str | None = None
    detach: bool = False
    verbosity: int = verbosity.VERBOSE

    def options(self, record: JobRecord | None = None) -> SubmitOptions:
        """The target's SubmitOptions for this request; ``record``: the job's (None: a dry run)."""
        return SubmitOptions(wait=self.wait, job_name=self.job_name, keep_keys=self.keep_keys,
                             resume_from=self.resume_from, job_id=record.job_id if record else None,
                             run_dir=record.run_dir if record else None, verbosity=self.verbosity)


@dataclass(frozen=True)
class JobHandle:
    """A recorded job: what ``status``, ``logs``, ``wait`` and ``cancel`` take (torchx's AppHandle).

    ``native``: the target's own name for the job (a SageMaker training job name, a Slurm job id), once known.
    """

    job_id: str
    name: str
    target: str
    run_dir: str | None = None
    native: str | None = None

    @classmethod
    def of(cls, record: JobRecord) -> "JobHandle":
        return cls(record.job_id, record.name, record.target, record.run_dir, record.native)


@dataclass(frozen=True)
class Submission:
    """A recorded job ready to run: its record, its target, the request as sent (``dry``) and the options."""

    record: JobRecord
    target: Target
    dry: DryRun
    opts: SubmitOptions
    warnings: tuple[str, ...] = field(default=())

    @property
    def handle(self) -> JobHandle:
        return JobHandle.of(self.record)
