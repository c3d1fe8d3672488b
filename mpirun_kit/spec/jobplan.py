"""The fully resolved job plan that ``mpirun_kit plan`` prints: a pure value.

Place in the data flow: ``CompiledJob`` (compile.py) + the planned cluster go
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
from ..plan.env import redact
from ..plan.gpu import Topology, pin_local_ranks
from ..plan.launch_plan import LaunchPlan, build_launch_plan, render as render_launch_plan, to_dict
from .compile import CompiledJob

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
                  python: str = "python3") -> JobPlan:
    """Build the plan ``mpirun_kit plan`` prints.

    Args:
        compiled: from compile_job.
        environ: the launching host's environment (only allow-listed names reach ranks).
        topology: the hosts' topology when known (this machine for local/sim).
        detected_flavour, run_as_root, cpu_count, python: passed to build_launch_plan.
    """
    launch = build_launch_plan(compiled.launch, planned_cluster(compiled), environ, compiled.gpus_per_host,
                               detected_flavour=detected_flavour, run_as_root=run_as_root,
                               cpu_count=cpu_count, python=python)
    job = compiled.job
    preset_names = {k.name: k.reason for k in compiled.tuning.applied}
    spec_names = {k for k, _ in job.env}
    rows = []
    for name, value in redact(launch.env):
        if name in preset_names:
            origin = f"preset {compiled.tuning.preset}: {preset_names[name]}"
        elif name in spec_names:
            origin = "spec env"
        elif name in job.env_forward:
            origin = "forwarded (env_forward)"
        elif name.startswith("MPIRUN_KIT_"):
            origin = "launcher"
        else:
            origin = "forwarded (allow-list)"
        rows.append(EnvRow(name, value, origin))
    warnings = compiled.warnings + tuple(f"mpi: {c}" for c in launch.conflicts)
    return JobPlan(compiled, launch, rank_map(launch, topology, job.pinning), tuple(rows), warnings)


def render(plan: JobPlan) -> str:
    """Human-readable plan: hosts, rank map, tuning, env diff, warnings, argv."""
    c, job, t = plan.compiled, plan.compiled.job, plan.compiled.tuning
    lines = [
        f"job {job.name} ({job.source})",
        f"  target     {job.target.type}" + (f", {job.resources.instance_type}" if job.resources.instance_type else ""),
        f"  hosts      {len(plan.launch.hosts)} x {plan.launch.hosts[0].slots} slots, "
        f"{len(plan.launch.ranks)} ranks, master {plan.launch.master}",
        "  ranks      rank  host                  local  gpu  cpus",
    ]
    lines += [f"             {r.rank:<5} {r.host:<21} {r.local_rank:<6} {r.gpu:<4} {r.cpus}" for r in plan.ranks]
    lines.append(f"  tuning     {t.preset or 'none'} ({t.why})")
    lines += [f"    applied  {k.name}={k.value}: {k.reason}" for k in t.applied]
    lines += [f"    override {x.render()}" for x in t.conflicts]
    for name, path in c.channels:
        lines.append(f"  data       {name} -> {path}")
    lines.append("  env diff (set for every rank)")
    lines += [f"    {e.name}={e.value}    [{e.origin}]" for e in plan.env]
    if plan.warnings:
        lines.append("  warnings")
        lines += [f"    ! {w}" for w in plan.warnings]
    lines.append("")
    lines.append(render_launch_plan(plan.launch).rstrip("\n"))
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
        "warnings": list(plan.warnings),
        "launch_spec": dict(json.loads(c.launch.to_json()), env=[list(p) for p in redact(c.launch.env)]),
        "launch_plan": to_dict(plan.launch),
    }
    return json.dumps(d, indent=2, sort_keys=True)
