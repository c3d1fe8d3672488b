"""The fully resolved job plan that ``mpirun_kit plan`` prints: a pure value.

Place in the data flow: ``CompiledJob`` (spec/compile.py) + the planned cluster go
through the launcher's ``build_launch_plan`` (plan/launch_plan.py, the same
function the per-host entrypoint calls on the master, so what ``plan`` shows is
what runs); this module adds what the job layer knows on top: the rank -> host
-> GPU -> CPU-set map (plan/gpu.py), where each rank variable came from
(preset, spec, forwarded, launcher), the tuning report and warnings.

The topology for the map is an argument: this machine's (local/sim targets) or
None for remote hosts, where the CPU sets are computed on each host at run time.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

from ..cluster import Cluster
from ..cluster.topology import Topology
from ..spec.compile import CompiledJob
from .gpu import pin_local_ranks
from ..redact import redact_pairs, redact_value
from .launch_plan import LaunchPlan, build_launch_plan, render as render_launch_plan, to_dict

#: the interface name the hosts share, by target (SageMaker's resourceconfig says eth0; the sim's veth too).
TARGET_INTERFACE = {"local": None, "sim": "eth0", "ssh": None, "sagemaker": "eth0"}


@dataclass(frozen=True)
class RankRow:
    rank: int
    host: str
    local_rank: int
    #: "0".."7", "-" without GPUs.
    gpu: str
    #: a cpulist, "all" when unpinned, "NUMA-local (on host)" when computed remotely.
    cpus: str


@dataclass(frozen=True)
class EnvRow:
    name: str
    value: str  # redacted where the name looks secret
    origin: str


@dataclass(frozen=True)
class JobPlan:
    compiled: CompiledJob
    launch: LaunchPlan
    ranks: tuple[RankRow, ...]
    env: tuple[EnvRow, ...]
    warnings: tuple[str, ...]
    #: ("STACK.OutputKey", value) for every ${stack:...} the spec uses, as resolved.
    stack_values: tuple[tuple[str, str], ...] = ()
    #: what the ranks do not get of the submitting shell, each with how to send it (CompiledJob.env_notes): facts
    #: about the shell, not problems of the job, so they are a section of their own, not warnings.
    env_notes: tuple[str, ...] = ()


def planned_cluster(compiled: CompiledJob) -> Cluster:
    job = compiled.job
    return Cluster(hosts=compiled.hosts, current_host=compiled.hosts[0].name,
                   source=f"{job.source} (target {job.target.type})",
                   network_interface=TARGET_INTERFACE.get(job.target.type),
                   instance_type=job.resources.instance_type)


def rank_map(launch: LaunchPlan, topology: Topology | None, pinning: str) -> tuple[RankRow, ...]:
    """Rank -> host -> GPU -> CPU set, as ``pinning.apply_rank_pinning`` will choose it."""
    rows = []
    for slot in launch.ranks:
        if pinning == "none":
            rows.append(RankRow(slot.rank, slot.host, slot.local_rank, "-", "all (pinning: none)"))
        elif topology is None:
            rows.append(RankRow(slot.rank, slot.host, slot.local_rank, str(slot.local_rank),
                                "NUMA-local (resolved on the host)"))
        else:
            pin = pin_local_ranks(topology, slot.local_size)[slot.local_rank]
            rows.append(RankRow(slot.rank, slot.host, slot.local_rank,
                                "-" if pin.gpu is None else str(pin.gpu), pin.cpu_list() or "all (no GPU)"))
    return tuple(rows)


def make_job_plan(compiled: CompiledJob, environ: Mapping[str, str], *, topology: Topology | None = None,
                  detected_flavour: str = "openmpi4", run_as_root: bool = False, cpu_count: int | None = None,
                  python: str = "python3", stack_values: tuple[tuple[str, str], ...] = ()) -> JobPlan:
    """Build the plan ``mpirun_kit plan`` prints.

    Args:
        compiled: from compile_job.
        environ: the launching host's environment (only allow-listed names reach ranks).
        topology: the hosts' topology when known (this machine for local/sim).
        detected_flavour, run_as_root, cpu_count, python: passed to build_launch_plan.
        stack_values: the ``${stack:...}`` values the spec was compiled with (shown, not used).
    """
    launch = build_launch_plan(compiled.launch, planned_cluster(compiled), environ, compiled.gpus_per_host,
                               detected_flavour=detected_flavour, run_as_root=run_as_root,
                               cpu_count=cpu_count, python=python)
    job = compiled.job
    preset_names = {k.name: k.reason for k in compiled.tuning.applied}
    spec_names = {k for k, _ in job.env}
    rows = []
    for name, value in redact_pairs(launch.env):
        if name in preset_names:
            origin = f"preset {compiled.tuning.preset}"  # its reason is under tuning, once
        elif name in spec_names:
            origin = "spec env"
        elif name in job.env_forward:
            origin = "forwarded (env_forward)"
        elif name.startswith("MPIRUN_KIT_"):
            origin = "launcher"
        elif compiled.launch.env_inherit:
            origin = "inherited (target local)"
        else:
            origin = "forwarded (allow-list)"
        rows.append(EnvRow(name, value, origin))
    warnings = compiled.warnings + tuple(f"mpi: {c}" for c in launch.conflicts)
    return JobPlan(compiled, launch, rank_map(launch, topology, job.pinning), tuple(rows), warnings,
                   tuple(stack_values), compiled.env_notes)


def _span(values: list[int]) -> str:
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def collapse_ranks(rows: tuple[RankRow, ...]) -> list[tuple[str, str, str, str, str]]:
    """Rank rows as (rank, host, local, gpu, cpus) strings, consecutive rows that differ only in their
    numbers (rank = local rank + offset, GPU = local rank) merged into one range row."""
    out: list[tuple[str, str, str, str, str]] = []
    group: list[RankRow] = []

    def flush() -> None:
        if group:
            gpus = [int(r.gpu) for r in group] if group[0].gpu != "-" else None
            out.append((_span([r.rank for r in group]), group[0].host, _span([r.local_rank for r in group]),
                        _span(gpus) if gpus else "-", group[0].cpus))
            group.clear()
    for r in rows:
        g = group[-1] if group else None
        if g is not None and (r.host, r.cpus) == (g.host, g.cpus) and r.rank == g.rank + 1 \
                and r.local_rank == g.local_rank + 1 \
                and (r.gpu == g.gpu == "-" or (r.gpu.isdigit() and g.gpu.isdigit() and int(r.gpu) == int(g.gpu) + 1)):
            group.append(r)
        else:
            flush()
            group.append(r)
    flush()
    return out


#: sections of the launch plan's rendering that the job view already shows (hosts, env by origin).
_SHOWN_IN_JOB_VIEW = ("launch", "source", "hosts", "env")


def render(plan: JobPlan) -> str:
    """Human-readable plan, each fact once: hosts, ranks, tuning, env with origins, warnings, argv."""
    c, job, t, lp = plan.compiled, plan.compiled.job, plan.compiled.tuning, plan.launch
    lines = [
        f"job {job.name} ({job.source})",
        f"  target     {job.target.type}" + (f", {job.resources.instance_type}" if job.resources.instance_type else ""),
    ]
    lines += [f"  stack      {ref} = {value}" for ref, value in redact_pairs(plan.stack_values)]
    slots = sorted({h.slots for h in lp.hosts})
    lines.append(f"  hosts      {len(lp.hosts)} x {slots[0] if len(slots) == 1 else '/'.join(map(str, slots))} "
                 f"slots, {len(lp.ranks)} ranks: {', '.join(h.name for h in lp.hosts[:8])}"
                 f"{' ...' if len(lp.hosts) > 8 else ''}")
    lines.append("  ranks      rank   host                  local  gpu   cpus")
    lines += [f"             {a:<6} {b:<21} {cc:<6} {d:<5} {e}" for a, b, cc, d, e in collapse_ranks(plan.ranks)]
    lines.append(f"  tuning     {t.preset or 'none'} ({t.why})")
    lines += [f"    applied  {k.name}={k.value}: {k.reason}" for k in t.applied]
    lines += [f"    override {x.render()}" for x in t.conflicts]
    for name, path in c.channels:
        lines.append(f"  data       {name} -> {path}")
    # The launch plan's own sections, minus what is shown here already (hosts, env by origin): master,
    # mpi, interface, timeouts, argv; its env lines this view lacks (the per-run channel key, dropped
    # variables) go with the env.
    shown = tuple(f"{e.name}=" for e in plan.env)
    extra_env, rest, section = [], [], ""
    for line in render_launch_plan(lp).rstrip("\n").splitlines():
        if not line.startswith("    "):
            section = line.split()[0] if line.strip() else ""
            if section not in _SHOWN_IN_JOB_VIEW:
                rest.append(line)
        elif section == "env":
            if not line.strip().startswith(shown):
                extra_env.append(line)
        elif section not in _SHOWN_IN_JOB_VIEW:
            rest.append(line)
    lines.append("  env (set for every rank)")
    lines += [f"    {e.name}={e.value}    [{e.origin}]" for e in plan.env] + extra_env + rest
    if plan.env_notes:
        lines.append("  env of this shell the ranks do not get")
        lines += [f"    - {n}" for n in plan.env_notes]
    if plan.warnings:
        lines.append("  warnings")
        lines += [f"    ! {w}" for w in plan.warnings]
    return "\n".join(lines) + "\n"


def to_json(plan: JobPlan) -> str:
    c = plan.compiled
    d = {
        "job": c.job.name, "source": c.job.source, "target": c.job.target.type,
        "instance_type": c.job.resources.instance_type,
        "ranks": [r.__dict__ for r in plan.ranks],
        "env": [e.__dict__ for e in plan.env],
        "tuning": {"preset": c.tuning.preset, "why": c.tuning.why,
                   "applied": [k.__dict__ for k in c.tuning.applied],
                   "overridden": [x.__dict__ for x in c.tuning.conflicts],
                   "stale": [s.__dict__ for s in c.tuning.stale]},
        "channels": dict(c.channels),
        "stack_outputs": dict(redact_pairs(plan.stack_values)),
        "warnings": list(plan.warnings),
        "env_notes": list(plan.env_notes),
        "launch_spec": redact_value(json.loads(c.launch.to_json())),  # env values and program flags
        "launch_plan": to_dict(plan.launch),
    }
    return json.dumps(d, indent=2, sort_keys=True)
