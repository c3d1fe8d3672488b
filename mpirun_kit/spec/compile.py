"""JobSpec -> ``CompiledJob``: the LaunchSpec every host runs, plus what the target needs.

Place in the data flow: after load.py validated a spec and before a target
runs it.  Pure: stack outputs come through an injected resolver
(``mpirun_kit.stack.get_outputs`` in the CLI, a dict in tests), EFA presence and
the local GPU count are arguments, and the python interpreter is passed in.

What happens here, in order:
  1. ``${stack:STACK.OutputKey}`` anywhere in the spec -> the stack's output value;
  2. ``${data:NAME}``, ``${checkpoint}``, ``${output}`` in args/env -> the path the
     ranks see on this target (SageMaker mounts channels at /opt/ml/input/data/NAME);
  3. the program argv: ``python -m module`` or the command, then args, then
     hyperparameters as ``--key value``;
  4. NCCL/EFA preset merged under the user's env (presets.merge: user wins);
  5. the planned host list (names and slots) for the target.

``${job_name}`` (the training job's name, chosen at submit) is not resolved here: a plan has
no name yet.  ``with_job_name`` puts it into every S3 path of the spec (checkpoint, output,
TensorBoard, channels) once the target has chosen it, so each job has its own home.
"""
from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..cluster import Host
from ..errors import SpecError
from ..redact import is_secret
from .launch_spec import LaunchSpec, Timeouts
from . import presets
from . import schema as S
from .schema import MACRO_RE, STACK_RE

#: resolves a stack name to its outputs (OutputKey -> value).
StackResolver = Callable[[str], Mapping[str, str]]

SAGEMAKER_DATA_ROOT = "/opt/ml/input/data"
#: what a spec's S3 paths name the job by (the training job's name, chosen at submit).
JOB_NAME_REF = "${job_name}"
SAGEMAKER_CHECKPOINTS = "/opt/ml/checkpoints"
SAGEMAKER_MODEL_DIR = "/opt/ml/model"


@dataclass(frozen=True)
class CompiledJob:
    """A job ready for a target: a pure value, printed by ``plan``."""

    job: S.JobSpec
    launch: LaunchSpec
    tuning: presets.TuningResult
    #: planned hosts with slots; the master is the first (algo-1 on sim/sagemaker).
    hosts: tuple[Host, ...]
    #: GPUs per host assumed for the plan (instance table, or this machine's count).
    gpus_per_host: int
    #: channel name -> path the ranks read it at.
    channels: tuple[tuple[str, str], ...]
    warnings: tuple[str, ...] = ()
    #: what the job leaves of the submitting shell's environment, each variable named with how to send it
    #: (service/compile.py ``with_submit_env``): warnings that ``plan`` always shows and ``submit`` says unless -q
    #: (as the local target's master says its own)
    env_notes: tuple[str, ...] = ()


def resolve_stack_refs(job: S.JobSpec, resolver: StackResolver | None) -> S.JobSpec:
    """Replace every ``${stack:STACK.OutputKey}`` in the spec's strings.

    Raises:
        SpecError: a reference without a resolver, an unknown stack output.
    """
    cache: dict[str, Mapping[str, str]] = {}

    def sub(text: str) -> str:
        def one(m: re.Match) -> str:
            ref = STACK_RE.match(m.group(1))
            if ref is None:
                return m.group(0)
            stack, key = ref.groups()
            if resolver is None:
                raise SpecError(f"{job.source}: ${{stack:{stack}.{key}}} needs the stack's outputs; run with "
                                "AWS credentials and region set (or replace the reference with its value)")
            if stack not in cache:
                cache[stack] = resolver(stack)
            if key not in cache[stack]:
                raise SpecError(f"{job.source}: stack {stack!r} has no output {key!r}; its outputs are "
                                f"{', '.join(sorted(cache[stack])) or 'none'}")
            return str(cache[stack][key])
        return MACRO_RE.sub(one, text)

    return map_strings(job, sub)


def resolve_relative_paths(job: S.JobSpec, base_dir: str) -> S.JobSpec:
    """Relative paths of this machine's files, joined to ``base_dir`` (the spec file's directory, as
    compose and kubectl resolve them), so a spec means the same from any working directory.

    Local and sim targets: data ``local``/``mount``, checkpoint/output ``local_path``, ``working_dir``,
    ``target.sim.root``.  ssh: the identity and known_hosts files (the rest is on the remote hosts).
    SageMaker paths are inside the container and stay as written; so do ``~`` and ``${...}`` values.

    On local, sim and ssh the ranks' working directory is ``working_dir``, by default ``base_dir`` itself:
    ``command: [python, x.py]`` means the x.py beside the spec from any directory, and on every host
    (sim hosts see this machine's files at the same paths; ssh hosts must share the directory, or the spec
    sets ``working_dir``), so the pre-launch check and the ranks look at the same file.
    """
    def fix(p: str | None) -> str | None:
        if not p or os.path.isabs(p) or p.startswith("~") or "${" in p:
            return p
        return os.path.normpath(os.path.join(base_dir, p))

    t = job.target
    if t.type in ("local", "sim", "ssh") and not job.program.working_dir:
        job = dataclasses.replace(job, program=dataclasses.replace(job.program, working_dir=base_dir))
    if t.type == "ssh":
        return dataclasses.replace(job, target=dataclasses.replace(t, ssh=dataclasses.replace(
            t.ssh, identity_file=fix(t.ssh.identity_file), known_hosts=fix(t.ssh.known_hosts))))
    if t.type not in ("local", "sim"):
        return job
    return dataclasses.replace(
        job, data=tuple(dataclasses.replace(ch, local=fix(ch.local), mount=fix(ch.mount)) for ch in job.data),
        checkpoint=dataclasses.replace(job.checkpoint, local_path=fix(job.checkpoint.local_path)),
        output=dataclasses.replace(job.output, local_path=fix(job.output.local_path)),
        program=dataclasses.replace(job.program, working_dir=fix(job.program.working_dir)),
        target=dataclasses.replace(t, sim=dataclasses.replace(t.sim, root=fix(t.sim.root))))


def map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """``value`` (a spec dataclass, tuple or string) with ``fn`` applied to every string holding ``${``."""
    if isinstance(value, str):
        return fn(value) if "${" in value else value
    if isinstance(value, tuple):
        return tuple(map_strings(v, fn) for v in value)
    if dataclasses.is_dataclass(value):
        return dataclasses.replace(value, **{f.name: map_strings(getattr(value, f.name), fn)
                                            for f in dataclasses.fields(value) if f.name != "source"})
    return value


def s3_paths(job: S.JobSpec) -> tuple[tuple[str, str], ...]:
    """Every S3 path of a spec as (field path, value): where ``${job_name}`` may appear."""
    sm = job.target.sagemaker
    out = [("target.sagemaker.output_s3", sm.output_s3), ("target.sagemaker.tensorboard_s3", sm.tensorboard_s3),
           ("checkpoint.s3", job.checkpoint.s3)]
    out += [(f"data.{ch.name}.s3", ch.s3) for ch in job.data]
    return tuple((k, v) for k, v in out if v)


def with_job_name(job: S.JobSpec, job_name: str) -> S.JobSpec:
    """The spec with ``${job_name}`` replaced by ``job_name`` in every S3 path (and only there).

    Raises:
        SpecError: a reference other than ``${job_name}`` left in an S3 path (``${stack:...}`` left
            unresolved in a dry run without AWS is shown as written, not refused).
    """
    for field, value in s3_paths(job):
        for m in MACRO_RE.finditer(value.replace(JOB_NAME_REF, "")):
            if not STACK_RE.match(m.group(1)):
                raise SpecError(f"{job.source}: {field}: unknown reference {m.group(0)} in {value!r}; S3 paths may "
                                f"use {JOB_NAME_REF} (the training job's name) and ${{stack:STACK.OutputKey}}")

    def sub(v: str) -> str:
        return v.replace(JOB_NAME_REF, job_name) if v else v
    sm = job.target.sagemaker
    return dataclasses.replace(
        job, data=tuple(dataclasses.replace(ch, s3=sub(ch.s3)) if ch.s3 else ch for ch in job.data),
        checkpoint=dataclasses.replace(job.checkpoint, s3=sub(job.checkpoint.s3)),
        target=dataclasses.replace(job.target, sagemaker=dataclasses.replace(
            sm, output_s3=sub(sm.output_s3), tensorboard_s3=sub(sm.tensorboard_s3))))


def channel_paths(job: S.JobSpec) -> tuple[tuple[str, str], ...]:
    """Where ranks see each data channel on the job's target."""
    out = []
    for ch in job.data:
        if ch.mount:
            path = ch.mount
        elif job.target.type == "sagemaker":
            path = f"{SAGEMAKER_DATA_ROOT}/{ch.name}"
        else:
            path = ch.local or f"{SAGEMAKER_DATA_ROOT}/{ch.name}"
        out.append((ch.name, path))
    return tuple(out)


def checkpoint_path(job: S.JobSpec) -> str:
    if job.checkpoint.local_path:
        return job.checkpoint.local_path
    return SAGEMAKER_CHECKPOINTS if job.target.type == "sagemaker" else f"./runs/{job.name}/checkpoints"


def output_path(job: S.JobSpec) -> str:
    if job.output.local_path:
        return job.output.local_path
    return SAGEMAKER_MODEL_DIR if job.target.type == "sagemaker" else f"./runs/{job.name}"


def expand_macros(text: str, job: S.JobSpec) -> str:
    """``${data:NAME}``, ``${checkpoint}``, ``${output}`` -> paths on the job's target; ``$${`` -> ``${``."""
    chans = dict(channel_paths(job))

    def one(m: re.Match) -> str:
        body = m.group(1)
        if body.startswith("data:") and body[5:] in chans:
            return chans[body[5:]]
        if body == "checkpoint":
            return checkpoint_path(job)
        if body == "output":
            return output_path(job)
        return m.group(0)
    # ``$${`` escapes a literal ``${`` (a shell's own ${VAR} in a command, say): MACRO_RE skipped it
    return MACRO_RE.sub(one, text).replace("$${", "${")


def program_argv(job: S.JobSpec, python: str) -> tuple[str, ...]:
    """The argv every rank runs (before the launcher wraps it)."""
    prog = job.program
    head = (python, "-m", prog.module) if prog.module else prog.command
    hp = tuple(x for k, v in job.hyperparameters for x in (f"--{k}", v))
    return tuple(expand_macros(a, job) for a in head + prog.args + hp)


def _timeouts(job: S.JobSpec) -> Timeouts:
    given = {f.name: getattr(job.timeouts, f.name) for f in dataclasses.fields(job.timeouts)
             if getattr(job.timeouts, f.name) is not None}
    return dataclasses.replace(Timeouts(), **given)


def planned_hosts(job: S.JobSpec, slots: int) -> tuple[Host, ...]:
    """Host names the target will use; sim and SageMaker name hosts algo-1..N."""
    t = job.target.type
    if t == "local":
        return (Host("localhost", slots),)
    if t == "ssh":
        out = []
        for entry in job.target.ssh.hosts:
            name, _, n = entry.partition(":")
            out.append(Host(name, int(n) if n else slots))
        return tuple(out)
    return tuple(Host(f"algo-{i}", slots) for i in range(1, (job.resources.hosts or 1) + 1))


def compile_job(job: S.JobSpec, *, python: str = "python3", resolver: StackResolver | None = None,
                efa: bool | None = None, local_gpus: int = 0) -> CompiledJob:
    """Compile a validated job for its target.

    Args:
        job: from load_job (its target may have been overridden there).
        python: interpreter for ``program.module`` on the hosts.
        resolver: stack name -> outputs, for ``${stack:...}``.
        efa: EFA presence detected on this host (None: trust the family table);
            the spec's ``tuning.efa`` wins when it is not ``auto``.
        local_gpus: GPUs on this machine (local/sim targets without an instance type).

    Raises:
        SpecError: unresolved stack outputs, or an inconsistency found after resolution.
    """
    job = resolve_stack_refs(job, resolver)
    from .checks import string_problems
    from .findings import render_path

    bad = string_problems(job)   # a stack output can fill any string: it must not break out either (issue #39)
    if bad:
        raise SpecError(f"{job.source}: with its ${{stack:...}} outputs put in, "
                        + "; ".join(f"{render_path(p)}: {why}" for p, why in bad))
    warnings: list[str] = []
    itype = job.resources.instance_type
    table_gpus = presets.gpus_for_instance(itype) if itype else None
    if job.target.type in ("local", "sim"):
        gpus = local_gpus
    else:
        gpus = table_gpus if table_gpus is not None else 0
        if itype and table_gpus is None:
            warnings.append(f"instance type {itype} is not in the GPU table; processes_per_host defaults to 1")
    ppn = job.resources.processes_per_host or max(gpus, 1)
    if gpus and ppn > gpus and job.pinning != "none":
        raise SpecError(f"{job.source}: resources.processes_per_host is {ppn} but the hosts have {gpus} GPU(s); "
                        "expected at most one rank per GPU, or set pinning: none")
    preset = presets.preset_for(job.tuning.profile, itype)
    efa_flag = {"true": True, "false": False}.get(job.tuning.efa, efa)
    knobs = presets.preset_knobs(preset, efa=efa_flag, ofi_nccl_version=job.tuning.aws_ofi_nccl)
    if job.tuning.profile == "auto":
        why = (f"auto: instance family of {itype}" if itype else "auto: no instance type, CPU preset") \
            if preset else f"auto: no preset for the family of {itype}; nothing applied"
        if preset is None:
            warnings.append(f"tuning: no NCCL/EFA preset for {itype}; set tuning.profile to one of "
                            f"{[p.name for p in presets.PRESETS]} or 'none'")
    else:
        why = f"profile {job.tuning.profile!r} set in the spec"
    env = {k: expand_macros(v, job) for k, v in job.env}
    tuning = presets.merge(knobs, env, preset=preset.name if preset else None, why=why)
    if job.target.type == "sagemaker":
        # Only names the spec allowed get here (checks.check_spec refuses the others); still worth saying.
        for name in sorted(n for n in env if is_secret(n)):
            warnings.append(f"env {name}: SageMaker shows hyperparameters and environment in its console and API; "
                            "fetch secrets at run time (Secrets Manager via the instance role) instead")
    warnings.extend(c.render() for c in tuning.conflicts)
    warnings.extend(s.render() for s in tuning.stale)
    launch = LaunchSpec(
        program=program_argv(job, python),
        # None lets the entrypoint count GPUs with NVML on the real host (1 without GPUs).
        processes_per_host=job.resources.processes_per_host or (gpus or None),
        env=tuning.env,
        env_forward=job.env_forward,
        # local ranks get the submitting shell's environment, as torchrun's do; other targets the allow-list
        env_inherit=job.target.type == "local",
        mpi_flavour=job.mpi.flavour,
        mpi_options=job.mpi.options,
        mca=job.mpi.mca,
        pinning=job.pinning,
        working_dir=job.program.working_dir,
        timeouts=_timeouts(job),
    )
    return CompiledJob(job, launch, tuning, planned_hosts(job, ppn), gpus, channel_paths(job), tuple(warnings))
