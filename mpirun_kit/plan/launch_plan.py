"""LaunchPlan: the whole resolved launch as one frozen, printable value.

``build_launch_plan(spec, cluster, environ, gpu_count)`` is pure: the same
inputs give the same plan on every host, so the master runs it and each worker
knows the master, the result port and the MPI daemon to wait for without a
round trip.  ``render`` (``--dry-run``) and ``to_json`` (``--dry-run --json``)
show it with secrets redacted.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, field
from typing import Mapping

from ..cluster import Cluster, Host, elect_master
from ..errors import SpecError
from ..spec.launch_spec import LaunchSpec, Timeouts
from .env import FORWARD_HOW, left_behind, resolve_env
from ..redact import redact_argv, redact_pairs
from .mpi import get_flavour
from .mpirun import build_mpirun_argv
from .srun import build_srun_argv
from .contract import RUN_NONCE_VAR, HOSTS_VAR, PINNING_VAR, RENDEZVOUS_VAR, RESULT_ADDR_VAR
from .ranks import RankSlot, assign_ranks, encode_host_slots

RANK_MODULE = "mpirun_kit.rank"


@dataclass(frozen=True)
class LaunchPlan:
    hosts: tuple[Host, ...]          # every host with its resolved slot count
    master: str
    ranks: tuple[RankSlot, ...]
    program: tuple[str, ...]          # the user's argv, as every rank runs it
    env: tuple[tuple[str, str], ...]  # set for every rank (values unredacted: never print directly)
    env_dropped: tuple[tuple[str, str], ...]
    mpi_flavour: str
    daemons: tuple[str, ...]          # what a worker waits for
    argv: tuple[str, ...]             # the full launcher argv
    conflicts: tuple[str, ...]        # user values that replaced built-in ones
    network_interface: str | None
    result_port: int | None       # None: chosen per job at run time (the master binds a free one)
    ssh_port: int
    timeouts: Timeouts = field(default_factory=Timeouts)
    working_dir: str | None = None
    source: str = ""
    #: the master waits for every worker's sshd before launching: mpirun starts its daemons over ssh
    #: (not srun's direct launch, nor mpirun inside a Slurm allocation, whose daemons srun starts)
    worker_sshd: bool = True
    #: the launching host's variables that reach no rank, besides ``env_dropped`` (plan/env.py left_behind)
    env_left: tuple[str, ...] = ()

    @property
    def workers(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts if h.name != self.master)

    def ssh_deadline_s(self) -> float:
        t = self.timeouts
        return t.ssh_ready_s + t.ssh_ready_per_host_s * len(self.hosts)

    def daemon_deadline_s(self) -> float:
        t = self.timeouts
        return t.daemon_wait_s + t.daemon_wait_per_host_s * len(self.hosts)

    def rank_env(self) -> dict[str, str]:
        return dict(self.env)


def build_launch_plan(spec: LaunchSpec, cluster: Cluster, environ: Mapping[str, str], gpu_count: int, *,
                      detected_flavour: str = "openmpi4", run_as_root: bool = False,
                      cpu_count: int | None = None, python: str = "python3",
                      launcher: str | None = None, master: str | None = None) -> LaunchPlan:
    """Resolve ``spec`` on ``cluster`` into a LaunchPlan.  Pure: reads nothing but its arguments.

    This is the stable entry point for every producer of launches (entrypoint, the
    YAML job layer).  Slots per host: ``spec.processes_per_host``, else the host's
    own slots (hostfile), else ``gpu_count`` when > 0, else 1.

    Args:
        spec: what to run.
        cluster: the hosts (cluster/).
        environ: the launching host's environment; only allow-listed names are forwarded.
        gpu_count: GPUs per host (NVML on the launching host; 0 when none).
        detected_flavour: the MPI flavour used when ``spec.mpi_flavour`` is "auto".
        run_as_root: the launcher runs as root (Open MPI refuses that unless told).
        cpu_count: cores per host; more ranks than cores turns on oversubscription
            and yield-when-idle.  None: unknown, assume enough.
        python: the interpreter that runs the rank wrapper on every host.
        launcher: the mpirun path (default: the flavour's launcher on PATH).
        master: the host that runs mpirun (default: elected, see cluster/election.py);
            ``mpirun_kit launch`` passes the host it runs on.

    Raises:
        SpecError: an unknown flavour, a bad slot count, or a bad user MPI option.
    """
    flavour = get_flavour(detected_flavour if spec.mpi_flavour == "auto" else spec.mpi_flavour)
    if spec.processes_per_host is not None and (not isinstance(spec.processes_per_host, int)
                                                or spec.processes_per_host < 1):
        raise SpecError(f"processes_per_host is {spec.processes_per_host!r}; expected a positive integer or null "
                        "(null = one per GPU)")
    if spec.pinning not in ("auto", "none"):
        raise SpecError(f"pinning is {spec.pinning!r}; expected 'auto' (one GPU and its NUMA-local CPUs per rank) "
                        "or 'none'")
    if (spec.result_port is not None and not 0 < spec.result_port < 65536) or not 0 < spec.ssh_port < 65536:
        raise SpecError(f"result_port {spec.result_port} / ssh_port {spec.ssh_port}: expected TCP ports 1-65535")
    default_slots = gpu_count if gpu_count > 0 else 1
    hosts = tuple(Host(h.name, spec.processes_per_host or h.slots or default_slots) for h in cluster.hosts)
    host_slots = [(h.name, h.slots) for h in hosts]
    ranks = assign_ranks(host_slots)
    if master is None:
        master = elect_master(cluster.host_names)
    elif master not in cluster.host_names:
        raise SpecError(f"master {master!r} is not among the hosts {list(cluster.host_names)}; "
                        "the master must be one of the job's hosts")
    env, dropped = resolve_env(environ, spec.env_forward, spec.env, inherit=spec.env_inherit)
    left = left_behind(environ, env, dropped)
    # A port chosen per job at run time (None here) reaches the ranks in mpirun's environment: the master sets
    # RESULT_ADDR_VAR to the port it bound, whatever the plan says (entrypoint/master.py).
    env = tuple(sorted(dict(env, **{RESULT_ADDR_VAR: f"{master}:{spec.result_port or 0}",
                                    RENDEZVOUS_VAR: ranks[0].host,
                                    HOSTS_VAR: encode_host_slots(host_slots),
                                    PINNING_VAR: spec.pinning}).items()))
    oversubscribed = cpu_count is not None and max(h.slots for h in hosts) > cpu_count
    command = (python, "-m", RANK_MODULE, "--", *spec.program)
    # The run nonce is made by the master at run time (never in the plan): mpirun forwards it by name
    # from its own environment.  It names the directory of the ranks' key files (exec/channel/keys.py).
    if flavour.launcher == "srun":
        # Inside a Slurm job: srun starts the ranks (plan/srun.py); every rank gets srun's environment.
        argv, conflicts = build_srun_argv(host_slots, command, environ, options=spec.mpi_options, mca=spec.mca,
                                          launcher=launcher)
    else:
        argv, conflicts = build_mpirun_argv(
            flavour, host_slots, [n for n, _ in env] + [RUN_NONCE_VAR], command, mca=spec.mca,
            options=spec.mpi_options, network_interface=cluster.network_interface, ssh_port=spec.ssh_port,
            run_as_root=run_as_root, oversubscribed=oversubscribed, launcher=launcher)
    return LaunchPlan(
        hosts=hosts, master=master, ranks=ranks, program=tuple(spec.program), env=env, env_dropped=dropped,
        mpi_flavour=flavour.name, daemons=flavour.daemons, argv=argv, conflicts=conflicts,
        network_interface=cluster.network_interface, result_port=spec.result_port, ssh_port=spec.ssh_port,
        timeouts=spec.timeouts, working_dir=spec.working_dir, source=cluster.source,
        worker_sshd=flavour.uses_ssh and spec.daemons_via == "ssh", env_left=left)


def to_dict(plan: LaunchPlan) -> dict:
    """A JSON-ready dict of the plan with secret values redacted."""
    d = asdict(plan)
    d["env"] = dict(redact_pairs(plan.env))
    d["env_dropped"] = dict(plan.env_dropped)
    d["argv"] = redact_argv(plan.argv)
    d["program"] = redact_argv(plan.program)
    d["hosts"] = [{"name": h.name, "slots": h.slots} for h in plan.hosts]
    d["ranks"] = [[r.rank, r.host, r.local_rank] for r in plan.ranks]
    d["command"] = shlex.join(d["argv"])
    return d


def to_json(plan: LaunchPlan) -> str:
    return json.dumps(to_dict(plan), indent=2, sort_keys=True)


def render(plan: LaunchPlan) -> str:
    """The human-readable plan (``--dry-run``), secrets redacted."""
    t = plan.timeouts
    by_host: dict[str, list[int]] = {}
    for r in plan.ranks:
        by_host.setdefault(r.host, []).append(r.rank)
    lines = [
        "launch plan",
        f"  source     {plan.source}",
        f"  master     {plan.master} (result channel port "
        f"{plan.result_port if plan.result_port else 'chosen per job when it starts'}, ssh port {plan.ssh_port})",
        f"  mpi        {plan.mpi_flavour} (workers wait for {', '.join(plan.daemons)})"
        + ("" if plan.worker_sshd or plan.mpi_flavour == "srun" else "; srun starts them: no sshd wait"),
        f"  interface  {plan.network_interface or '(any)'}",
        f"  hosts      {len(plan.hosts)} hosts, {len(plan.ranks)} ranks",
    ]
    for h in plan.hosts:
        rr = by_host.get(h.name, [])
        lines.append(f"    {h.name:<20} slots={h.slots}  ranks {rr[0]}-{rr[-1]}" if rr else f"    {h.name}")
    lines.append("  env (every rank)")
    lines += [f"    {n}={v}" for n, v in redact_pairs(plan.env)]
    lines.append(f"    {RUN_NONCE_VAR}=*** (result channel run nonce, made by the master for each run)")
    for n, why in plan.env_dropped:
        lines.append(f"    dropped {n}: {why}")
    if plan.env_left:
        lines.append(f"    not forwarded ({len(plan.env_left)}): {' '.join(plan.env_left)}; {FORWARD_HOW} to send one")
    for c in plan.conflicts:
        lines.append(f"  conflict   {c}")
    lines.append(f"  timeouts   ssh {plan.ssh_deadline_s():g}s, daemon {plan.daemon_deadline_s():g}s, "
                 f"master silence {t.master_silence_s:g}s, worker silence {t.worker_silence_s:g}s, grace {t.grace_s:g}s, job "
                 f"{'none' if t.job_s is None else f'{t.job_s:g}s'}")
    abort = t.hang_abort_after()
    lines.append(f"  stalls     hang report after {t.stall_s:g}s without progress (progress.step, else seen from "
                 f"outside: I/O, stacks); " + ("no abort (timeouts.hang_abort_s: 0)" if abort is None else
                                                   f"job stopped {abort:g}s after the report (exit 76"
                                                   + (", 2 x stall_s" if t.hang_abort_s is None else "") + ")"))
    if plan.working_dir:
        lines.append(f"  cwd        {plan.working_dir}")
    lines.append("  argv")
    lines.append("    " + shlex.join(redact_argv(plan.argv)))
    return "\n".join(lines) + "\n"
