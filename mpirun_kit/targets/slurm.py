"""Target ``slurm``: one batch script, submitted with ``sbatch --parsable``, whose batch step is the job's master.

Place in the data flow: CompiledJob + a run id (``choices``) -> ``dryrun`` (pure: the batch script
whole, the LaunchSpec every host reads, where sbatch runs) -> ``run``:

  1. reaches the cluster's login side: this machine (sbatch on PATH), a login node over ssh
     (``login: user@host``, exec/remote.py), or a simulated cluster's algo-1 (``sim: NAME``,
     ``mpirun_kit sim up --slurm``);
  2. discovers the cluster (``scontrol show config``: version, MpiDefault; ``sinfo --json``,
     or its text form: partitions and their nodes) and refuses, in one line each, a partition
     it lacks, a job larger than the partition, or an account Slurm rejects;
  3. writes the run directory under ``workdir`` (a file system every node sees): the script,
     the LaunchSpec, a job secret made for this run (0600), then ``sbatch --parsable``;
  4. with ``submit --wait``, follows the job (``squeue --json``/``sacct --json`` with fallbacks,
     module ``parse_*``) and copies its output, then reads the job's own result.

The batch script (``render_script``): scrubs what a parent allocation or the submitting shell
left (``SLURM_*``, ``SBATCH_*``, ``PMIX_*`` but those Slurm sets for this job), starts the worker
entrypoints as one background step on the other nodes (``srun --overlap``; they hand their ranks
the result channel's keys), runs the master entrypoint itself, which launches the ranks with
``srun --mpi=pmix`` under the rank wrapper (plan/srun.py; or ``mpirun`` inside the allocation, which
reads the batch step's allocation variables and starts its orted daemons with srun: Open MPI's plm:slurm),
loops on ``wait`` across signals (``--signal=B:USR1@N`` interrupts a bare ``wait`` with 138),
forwards SIGTERM/USR1 to the master (ranks get SIGTERM, checkpoint, exit), and exits with the
master's code: each rank's real exit code or signal and the root cause (rank, node) are in
``attempt-N/<node>/output/failure``, whatever srun (143/137) or sacct (often COMPLETED or
FAILED 15:0) say.  ``--requeue`` with ``retries``: the script requeues itself
(``scontrol requeue``) after a retryable failure or a preemption notice while
``SLURM_RESTART_COUNT`` < retries.

Shell appears only here, at the script boundary: every argv is quoted once with ``shlex.join``.
"""
from __future__ import annotations

import base64
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..core.programs import cli_argv
from ..core import verbosity
from ..core.clock import SYSTEM_CLOCK, Clock, Deadline
from ..errors import ClusterError, ExitCode, SpecError
from ..records import JobRecord, JobState
from ..spec.compile import CompiledJob
from .base import DryRun, JobStatus, StatusLine, SubmitOptions, Target
from .outcome import Outcome, outcome_of

#: the allocation as Open MPI's ras/plm ``slurm`` components and srun read it: the same on every node of the job.
#: With ``launch: mpirun`` they reach mpirun (the LaunchSpec's env_forward), which then starts its orted daemons
#: with srun inside the allocation (plm:slurm) instead of over ssh.
ALLOCATION_VARS = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NUM_NODES",
                   "SLURM_NNODES", "SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE", "SLURM_NTASKS_PER_NODE")
#: the Slurm variables the batch step keeps: the ones Slurm sets in every batch step of a job submitted as ``submit``
#: submits it (--nodes, --ntasks-per-node; measured on 22.05), so their values are this job's even where the
#: submitting shell had its own copies (Slurm overwrote them).  Every other SLURM_*, SBATCH_*, PMIX_* is what a
#: parent allocation or the submitting shell left (SLURM_CPU_BIND, SLURM_MEM_BIND, ...), and goes.
KEEP_VARS = (*ALLOCATION_VARS, "SLURMD_NODENAME", "SLURM_RESTART_COUNT", "SLURM_CONF", "SLURM_JOB_NAME",
             "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST", "SLURM_CLUSTER_NAME", "SLURM_JOB_PARTITION", "SLURM_JOB_ACCOUNT",
             "SLURM_JOB_QOS", "SLURM_JOB_UID", "SLURM_JOB_GID", "SLURM_JOB_USER", "SLURM_NTASKS", "SLURM_NPROCS",
             "SLURM_CPUS_ON_NODE", "SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_GTIDS", "SLURM_TASK_PID",
             "SLURM_PRIO_PROCESS", "SLURM_TOPOLOGY_ADDR", "SLURM_TOPOLOGY_ADDR_PATTERN", "SLURM_WORKING_CLUSTER",
             "SLURM_NODE_ALIASES")
#: runs a command with the submitting shell's inherited SLURM_*/SBATCH_*/PMIX_* removed (SLURM_CONF kept):
#: sbatch reads SBATCH_* as options and passes the rest into the job (submitit's clean_env).
SCRUB = ('for v in $(compgen -e); do case "$v" in SLURM_CONF) ;; SLURM_*|SBATCH_*|PMIX_*) unset "$v";; esac; '
         'done; exec "$@"')
#: codes a requeue cannot change (bad input, usage, Ctrl-C, a cancel's SIGTERM).
NOT_REQUEUED = (0, 2, 64, 130, 143)
#: how often ``--wait`` asks Slurm: a real cluster's slurmctld serves every user, so once a second at most.
POLL_S = 1.0
#: ... and a sim cluster's (``sim: NAME``), which runs on this machine for this job alone.
SIM_POLL_S = 0.25
#: a job Slurm no longer lists, whose result file is still missing, is waited for this long (a shared file
#: system's attribute cache).
RESULT_GRACE_S = 10.0


# --- Slurm's own words -> ours -------------------------------------------------------------------------

#: Slurm job states (squeue/sacct, every version) -> JobState.  Anything else is kept as text and read as running.
STATE_MAP = {
    "PENDING": JobState.PENDING, "CONFIGURING": JobState.PENDING, "REQUEUED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING, "REQUEUE_FED": JobState.PENDING, "RESV_DEL_HOLD": JobState.PENDING,
    "SUSPENDED": JobState.RUNNING, "RUNNING": JobState.RUNNING, "COMPLETING": JobState.RUNNING,
    "RESIZING": JobState.RUNNING, "SIGNALING": JobState.RUNNING, "STAGE_OUT": JobState.RUNNING,
    "STOPPED": JobState.RUNNING,
    "COMPLETED": JobState.SUCCEEDED,
    "CANCELLED": JobState.CANCELLED, "REVOKED": JobState.CANCELLED,
    "FAILED": JobState.FAILED, "TIMEOUT": JobState.FAILED, "NODE_FAIL": JobState.FAILED,
    "PREEMPTED": JobState.FAILED, "BOOT_FAIL": JobState.FAILED, "DEADLINE": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED, "SPECIAL_EXIT": JobState.FAILED,
}
ENDED = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


@dataclass(frozen=True)
class SlurmJob:
    """One job as Slurm reports it (any version's JSON, or sacct's text)."""

    job_id: str
    name: str
    state: str                      # Slurm's word, upper case ("RUNNING"); "" when it gave none
    exit_code: int | None = None    # Slurm's view (the batch script's code): not the job's result
    signal: int | None = None
    nodes: str = ""
    reason: str = ""
    restarts: int = 0

    @property
    def job_state(self) -> JobState:
        return STATE_MAP.get(self.state, JobState.RUNNING)

    @property
    def known_state(self) -> bool:
        return self.state in STATE_MAP


def _state_word(value: Any) -> str:
    """``job_state``: a string (22.05), a list (23.11+: ``["RUNNING", "COMPLETING"]``), or a dict ({"current": [...]}, sacct)."""
    if isinstance(value, dict):
        value = value.get("current", value.get("state", ""))
    if isinstance(value, list):
        value = value[0] if value else ""
    return str(value or "").split()[0].upper() if str(value or "").strip() else ""


def _number(value: Any) -> int | None:
    """A Slurm number: 3, "3", or 23.11+'s {"set": true, "infinite": false, "number": 3}."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _exit_of(value: Any) -> tuple[int | None, int | None]:
    """(exit code, signal) from an ``exit_code`` field: an int (22.05 squeue), or {"status":..., "return_code":...,
    "signal": {"signal_id":...}} (sacct, 23.11+)."""
    if isinstance(value, dict):
        code = _number(value.get("return_code"))
        sig = value.get("signal")
        # 22.05: {"signal_id": 15}; 23.11+: {"id": {"set": true, "number": 15}, "name": "TERM"}
        sig = _number(sig.get("signal_id", sig.get("id")) if isinstance(sig, dict) else sig)
        return code, sig or None
    n = _number(value)
    if n is None:
        return None, None
    # squeue's 22.05 integer is a wait status: code << 8 | signal.
    return (n >> 8, (n & 0x7F) or None) if n > 255 else (n, None)


def parse_jobs_json(text: str) -> list[SlurmJob]:
    """``squeue --json`` or ``sacct --json`` of any version: every job it lists; fields it lacks stay empty.

    A foreign job (another user's, odd names, unknown states) never raises; only text that is not JSON does.

    Raises:
        ClusterError: ``text`` is not the JSON of squeue/sacct.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ClusterError(f"Slurm gave no JSON ({exc}; it printed {text[:200]!r}); is it older than 21.08? "
                           "the text fallback is used instead") from exc
    jobs = data.get("jobs") if isinstance(data, dict) else None
    out = []
    for j in jobs if isinstance(jobs, list) else []:
        if not isinstance(j, dict):
            continue
        job_id = _number(j.get("job_id"))
        if job_id is None:
            continue
        state = j.get("job_state", j.get("state"))
        code, sig = _exit_of(j.get("exit_code"))
        nodes = j.get("nodes", "")
        out.append(SlurmJob(str(job_id), str(j.get("name", "")), _state_word(state), code, sig,
                            nodes if isinstance(nodes, str) else "",
                            str(j.get("state_reason", j.get("state", {}).get("reason", "")
                                      if isinstance(j.get("state"), dict) else "") or ""),
                            _number(j.get("restart_cnt", j.get("restarts"))) or 0))
    return out


def parse_sacct_text(text: str) -> list[SlurmJob]:
    """``sacct -X -n -P -o JobID,JobName,State,ExitCode,NodeList`` (every version, and clusters where --json fails)."""
    out = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 4 or not parts[0].split("_")[0].isdigit():
            continue
        code, _, sig = parts[3].partition(":")
        out.append(SlurmJob(parts[0], parts[1], _state_word(parts[2]), int(code) if code.isdigit() else None,
                            int(sig) if sig.isdigit() and int(sig) else None, parts[4] if len(parts) > 4 else ""))
    return out


def parse_scontrol_config(text: str) -> dict[str, str]:
    """``scontrol show config``: ``Key = value`` lines -> dict (the version line included as SLURM_VERSION)."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def parse_mpi_list(text: str) -> tuple[str, ...]:
    """``srun --mpi=list``: the MPI plugin types this cluster's srun offers (``pmix``, ``pmix_v4``, ``pmi2``, ...).

    22.05 and later print ``MPI plugin types are...``, one type a line, then ``specific pmix plugin versions
    available: pmix_v4``; older ones put ``srun: `` before each line.
    """
    out: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("srun:"):
            line = line[len("srun:"):].strip()
        _, sep, rest = line.partition("available:")
        if sep:
            out += [v.strip() for v in rest.replace(",", " ").split() if v.strip()]
        elif line and " " not in line and not line.endswith("..."):
            out.append(line)
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: tuple[str, ...]
    default: bool = False
    state: str = "UP"


def parse_sinfo_json(text: str) -> list[Partition]:
    """``sinfo --json``: one entry per node and partition (22.05: ``nodes`` with ``partitions``; 23.11+:
    ``sinfo`` with ``partition.name`` and ``nodes.nodes``)."""
    data = json.loads(text)
    parts: dict[str, set[str]] = {}
    for n in data.get("nodes") or []:
        for p in n.get("partitions") or []:
            parts.setdefault(p, set()).add(n.get("name") or n.get("hostname", ""))
    for entry in data.get("sinfo") or []:
        p = (entry.get("partition") or {}).get("name")
        names = (entry.get("nodes") or {}).get("nodes") or []
        if p:
            parts.setdefault(p, set()).update(names)
    return [Partition(p, tuple(sorted(n for n in ns if n))) for p, ns in sorted(parts.items())]


def parse_sinfo_text(text: str) -> list[Partition]:
    """``sinfo -h -N -o '%P %N'``: one line per node and partition; the default partition ends with ``*``."""
    parts: dict[str, list[str]] = {}
    default = ""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 2:
            continue
        name, node = fields
        if name.endswith("*"):
            name = default = name[:-1]
        parts.setdefault(name, []).append(node)
    return [Partition(p, tuple(sorted(set(ns))), default=p == default) for p, ns in sorted(parts.items())]


# --- the request: a value ------------------------------------------------------------------------------

def render_script(*, job: str, run_dir: str, entrypoint: list[str], sbatch: list[str], retries: int = 0,
                  requeue: bool = False) -> str:
    """The batch script, whole.  ``entrypoint``: the argv every node's entrypoint starts with (its per-node
    flags are added here); ``sbatch``: the ``#SBATCH`` options, one argv item each."""
    q = shlex.quote
    head = ["#!/bin/bash"] + [f"#SBATCH {q(o)}" for o in sbatch]
    keep = "|".join(KEEP_VARS)
    requeue_line = (
        f'  if [ "$attempt" -lt {retries} ] && {{ [ "$caught" = USR1 ] || ! case " {" ".join(map(str, NOT_REQUEUED))} " '
        'in *" $rc "*) true;; *) false;; esac; }; then\n'
        '    echo "mpirun_kit: attempt $attempt ended with $rc; requeueing (SLURM_RESTART_COUNT counts it)" >&2\n'
        '    scontrol requeue "$SLURM_JOB_ID" && exit "$rc"\n'
        '  fi\n') if requeue and retries > 0 else ""
    return "\n".join(head) + f"""
# Written by mpirun_kit (target slurm) for job {job}: the batch step runs the job's master.
set -u
run={q(run_dir)}
cd "$run" || exit 66
# Nothing a parent allocation or the submitting shell left reaches the job: SLURM_*, SBATCH_*, PMIX_* go,
# except what Slurm set for this job.
for v in $(compgen -e); do
  case "$v" in
    {keep}) ;;
    SLURM_*|SBATCH_*|PMIX_*) unset "$v" ;;
  esac
done
attempt=${{SLURM_RESTART_COUNT:-0}}
adir="$run/attempt-$attempt"
mkdir -p "$adir"
echo "$SLURMD_NODENAME" > "$adir/master"
hosts=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | paste -sd, -)
me=$SLURMD_NODENAME
n=$(echo "$hosts" | tr , '\\n' | wc -l)
ep=({shlex.join(entrypoint)} --hosts "$hosts")
master=
workers=
caught=
# A signal (scancel's SIGTERM, --signal=B:USR1 before the time limit) goes to the master, which stops every
# rank (SIGTERM: checkpoint and exit) and reports; the loop below waits again after each one.
trap 'caught=TERM; [ -n "$master" ] && kill -TERM "$master" 2>/dev/null' TERM
trap 'caught=USR1; [ -n "$master" ] && kill -TERM "$master" 2>/dev/null' USR1
if [ "$n" -gt 1 ]; then
  # One worker entrypoint on every other node: each hands its ranks their result-channel keys.
  srun --jobid="$SLURM_JOB_ID" --overlap --mpi=none --nodes=$((n - 1)) --ntasks=$((n - 1)) --ntasks-per-node=1 \\
    --exclude="$me" --kill-on-bad-exit=0 --output="$adir/%N.worker.log" \\
    bash -c 'exec "$@" --current-host "$SLURMD_NODENAME" --opt-ml "$0/$SLURMD_NODENAME"' "$adir" "${{ep[@]}}" &
  workers=$!
fi
"${{ep[@]}}" --role master --current-host "$me" --opt-ml "$adir/$me" &
master=$!
while :; do
  last=$caught
  wait "$master"; rc=$?
  # wait returns 128+N when a trapped signal interrupts it, the master still running: wait again.
  if [ "$caught" != "$last" ] && [ "$rc" -gt 128 ] && kill -0 "$master" 2>/dev/null; then continue; fi
  if [ "$caught" != "$last" ] && [ "$rc" -gt 128 ]; then wait "$master"; r=$?; [ "$r" -ne 127 ] && rc=$r; fi
  break
done
[ -n "$caught" ] && echo "$caught" > "$adir/signal"
echo "$rc" > "$adir/exit_code"
echo "$attempt" > "$run/attempt"
if [ -n "$workers" ]; then
  # The workers end once the master's result reaches them; a stuck one is stopped.
  for i in $(seq 50); do kill -0 "$workers" 2>/dev/null || break; sleep 0.2; done
  kill -TERM "$workers" 2>/dev/null
  wait "$workers" 2>/dev/null
fi
if [ "$rc" -ne 0 ]; then
{requeue_line}  :
fi
# Slurm itself may have queued the job again (a node failed, --requeue; the next attempt may even be running
# already, with Restarts one higher): that attempt needs the secret.
now=$(scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null | tr ' ' '\\n')
restarts=$(echo "$now" | sed -n 's/^Restarts=//p')
case "$(echo "$now" | sed -n 's/^JobState=//p')" in PENDING|REQUEUED|REQUEUE_HOLD|REQUEUE_FED) exit "$rc" ;; esac
[ "${{restarts:-0}}" -gt "$attempt" ] 2>/dev/null && exit "$rc"
# Not requeued: the job is over, and its secret with it.
rm -f "$run/job-secret"
exit "$rc"
"""


#: the first Slurm whose sbatch takes --gpus-per-node; an older one takes the generic-resource form --gres=gpu:N.
GPUS_PER_NODE_SINCE = (19, 5)


def gpu_option(count: int, version: str | None = None) -> str:
    """The option asking ``count`` GPUs on every node, in the form Slurm ``version`` takes (None, or a version it
    cannot read: the current form, which every Slurm since 19.05 takes)."""
    parts = []
    for word in (version or "").split(".")[:2]:
        if not word.isdigit():
            break
        parts.append(int(word))
    if len(parts) == 2 and tuple(parts) < GPUS_PER_NODE_SINCE:
        return f"--gres=gpu:{count}"
    return f"--gpus-per-node={count}"


def sbatch_options(compiled: CompiledJob, run_dir: str, run_id: str) -> list[str]:
    """The ``#SBATCH`` lines of the job, from the spec (argv items, quoted once in the script)."""
    s = compiled.job.target.slurm
    nodes = len(compiled.hosts)
    ppn = compiled.hosts[0].slots if compiled.hosts else 1
    opts = [f"--job-name={compiled.job.name}", f"--nodes={nodes}", f"--ntasks-per-node={ppn}",
            f"--output={run_dir}/slurm.out", f"--error={run_dir}/slurm.err", "--open-mode=append",
            f"--comment=mpirun_kit:{run_id}"]
    for flag, value in (("--partition", s.partition), ("--account", s.account), ("--qos", s.qos),
                        ("--time", s.time)):
        if value:
            opts.append(f"{flag}={value}")
    if s.gpus_per_node:
        opts.append(gpu_option(s.gpus_per_node))   # the cluster's version may change it: for_cluster
    if s.exclusive:
        opts.append("--exclusive")
    opts.append("--requeue" if s.requeue else "--no-requeue")
    if s.signal:
        opts.append(f"--signal=B:{s.signal}")
    return opts + list(s.sbatch_options)


def srun_options(compiled: CompiledJob) -> tuple[str, ...]:
    """What the ranks' srun adds for pyxis/enroot: the image and its mounts (one MPI_Init per srun)."""
    s = compiled.job.target.slurm
    out: list[str] = []
    if s.container_image:
        out.append(f"--container-image={s.container_image}")
        if s.container_mounts:
            out.append(f"--container-mounts={','.join(s.container_mounts)}")
    return tuple(out)


def where_of(compiled: CompiledJob) -> dict:
    """Where sbatch and the other clients run: ``local``, ``ssh`` (a login node) or ``sim`` (algo-1 of a sim cluster)."""
    s = compiled.job.target.slurm
    if s.sim:
        return {"kind": "sim", "name": s.sim, "root": s.sim_root or f"/var/tmp/mpirun-kit-sim/{s.sim}"}
    if s.login:
        user, _, host = s.login.partition("@")
        host, _, port = host.partition(":")
        return {"kind": "ssh", "user": user, "host": host, "port": int(port or 22),
                "identity_file": s.identity_file, "known_hosts": s.known_hosts, "connect_timeout_s": 10.0}
    return {"kind": "local"}


@dataclass(frozen=True)
class SlurmRequest:
    """What ``run`` does for a Slurm job (the target's typed request, base.Target's ``R``): where Slurm's clients
    run, the run directory, the sbatch it sends, and what ``check_request`` weighs against the cluster."""

    where: dict                     # where_of: {"kind": "local"|"ssh"|"sim", ...}, as runner_for takes it
    run_dir: str                    # target.slurm.workdir/<run id>, on a file system every node sees
    run_id: str
    job: str
    nodes: int
    tasks_per_node: int
    partition: str | None           # None: the cluster's default partition
    account: str | None
    launch: str                     # "srun" (direct launch, PMIx) or "mpirun"
    gpus_per_node: int | None       # its #SBATCH line's form depends on the cluster's version (for_cluster)
    sbatch: list[str]               # run with the submitting shell's SLURM_*/SBATCH_*/PMIX_* removed (scrub)
    scrub: str
    grace_s: float
    deadline_s: float               # how long ``--wait`` follows the job


def dryrun(compiled: CompiledJob, *, run_id: str, python: str, verbose: bool = False,
           quiet: bool = False) -> DryRun[SlurmRequest]:
    """The Slurm submission as a value: the batch script whole, the LaunchSpec, where sbatch runs."""
    s = compiled.job.target.slurm
    if s.launch not in ("srun", "mpirun"):
        raise SpecError(f"target.slurm.launch is {s.launch!r}; expected 'srun' (direct launch, PMIx) or 'mpirun'")
    if s.launch == "mpirun" and s.container_image:
        # pyxis puts the ranks in the image through srun's options; mpirun's orted steps take none of ours
        raise SpecError(f"target.slurm.container_image {s.container_image!r} needs launch: srun (pyxis starts the "
                        "ranks' srun step in the image); with launch: mpirun the ranks would run outside it. "
                        "Set target.slurm.launch: srun, or drop container_image and install the program on the nodes")
    run_dir = f"{s.workdir.rstrip('/')}/{run_id}"
    flavour = "srun" if s.launch == "srun" else compiled.launch.mpi_flavour
    launch = dataclasses.replace(compiled.launch, mpi_flavour=flavour,
                                 # in the allocation Slurm starts what runs on the other nodes, never ssh
                                 daemons_via="slurm",
                                 mpi_options=tuple(compiled.launch.mpi_options) + srun_options(compiled)
                                 if s.launch == "srun" else compiled.launch.mpi_options,
                                 # mpirun inside the allocation: the batch step's own allocation reaches it.
                                 env_forward=tuple(dict.fromkeys((*compiled.launch.env_forward, *ALLOCATION_VARS)))
                                 if s.launch == "mpirun" else compiled.launch.env_forward)
    entry = [*cli_argv(python), "entrypoint", *verbosity.entrypoint_flags(verbose, quiet),
             "--no-sshd", "--spec", f"{run_dir}/launch-spec.json", "--secret-file", f"{run_dir}/job-secret",
             "--job", compiled.job.name]
    nodes = len(compiled.hosts)
    ppn = compiled.hosts[0].slots if compiled.hosts else 1
    script = render_script(job=compiled.job.name, run_dir=run_dir, entrypoint=entry,
                           sbatch=sbatch_options(compiled, run_dir, run_id), retries=compiled.job.retries,
                           requeue=s.requeue)
    t = compiled.launch.timeouts
    request = SlurmRequest(
        where=where_of(compiled), run_dir=run_dir, run_id=run_id, job=compiled.job.name,
        nodes=nodes, tasks_per_node=ppn, partition=s.partition, account=s.account, launch=s.launch,
        gpus_per_node=s.gpus_per_node,
        sbatch=["sbatch", "--parsable", f"{run_dir}/batch.sh"], scrub=SCRUB,
        grace_s=t.grace_s, deadline_s=(t.job_s or 7 * 24 * 3600.0) + 600.0)
    files = ((f"{run_dir}/batch.sh", script), (f"{run_dir}/launch-spec.json", launch.to_json() + "\n"))
    return DryRun("slurm", compiled.job.name, request, files=files, notes=(
        f"run directory {run_dir} (on a file system every node sees): slurm.out (what the ranks print), "
        "slurm.err (the entrypoints' lines), attempt-<N>/<node>/output/failure (the job's result and root cause)",
        f"job secret: {run_dir}/job-secret, made for this run (0600), authenticates the workers on the result channel",
        "sbatch runs with the submitting shell's SLURM_*/SBATCH_*/PMIX_* removed (SLURM_CONF kept)")
        + ((f"GPUs: {gpu_option(s.gpus_per_node)} assumes Slurm 19.05 or later; submit reads the cluster's version "
            f"(scontrol show config) before it writes the script, and an older one gets "
            f"{gpu_option(s.gpus_per_node, '19.04')} instead",) if s.gpus_per_node else ()))


def for_cluster(dry: DryRun[SlurmRequest], facts: ClusterFacts) -> DryRun[SlurmRequest]:
    """``dry`` as this cluster takes it: the batch script's GPU line in the form its version knows (``dryrun``
    rendered the current form, and its notes say so); the rest unchanged."""
    n = dry.request.gpus_per_node
    assumed, actual = (f"#SBATCH {shlex.quote(gpu_option(n, v))}\n" for v in (None, facts.version))
    if not n or assumed == actual:
        return dry
    files = tuple((p, t.replace(assumed, actual, 1) if p.endswith("/batch.sh") else t) for p, t in dry.files)
    return dataclasses.replace(dry, files=files)


#: Runner.write's script ($1 path, $2 temporary name beside it, $3 mode): make the run directory
#: (umask 077), check it, the workdir and every directory above them (see ``Runner.write``), then
#: write the temporary file and rename it over the path.
_WRITE_SCRIPT = r"""umask 077
d=$(dirname -- "$1"); mkdir -p -- "$d" || exit 1
me=$(id -u); p=$d; n=0
while :; do
  read -r o m <<<"$(stat -c '%u %a' -- "$p")" || exit 1
  if [ "$n" -lt 2 ]; then
    [ "$o" = "$me" ] || { echo "mpirun_kit: $p belongs to uid $o, not to you" >&2; exit 3; }
    [ $(( 8#$m & 8#22 )) = 0 ] || { echo "mpirun_kit: $p is writable by other users (mode $m)" >&2; exit 3; }
  else
    [ "$o" = "$me" ] || [ "$o" = 0 ] || { echo "mpirun_kit: $p belongs to uid $o, not to you or root" >&2; exit 3; }
    [ $(( 8#$m & 8#22 )) = 0 ] || [ $(( 8#$m & 8#1000 )) != 0 ] ||
      { echo "mpirun_kit: $p is writable by other users (mode $m)" >&2; exit 3; }
  fi
  [ "$p" = / ] && break
  p=$(dirname -- "$p"); n=$((n + 1))
done
cat > "$2" && chmod "$3" "$2" && mv -f "$2" "$1"
"""


#: Runner.read_many's script ($1 the byte limit, then the paths): one line per path, in order: "-" where the
#: file is missing, else "+" and its first $1 bytes in base64 (any byte, newlines included, fits one line).
_READ_MANY = ('n=$1; shift; for f; do if [ -f "$f" ]; then printf +; head -c "$n" -- "$f" | base64 -w0; echo; '
              'else echo -; fi; done')


# --- where the clients run -----------------------------------------------------------------------------

class Runner:
    """Runs Slurm's clients (and file writes) where they reach the cluster; ``run`` -> (code, stdout, stderr)."""

    def run(self, argv: list[str], *, input: str | None = None, timeout: float = 60.0) -> tuple[int, str, str]:
        raise NotImplementedError

    def scrubbed(self, argv: list[str], **kw) -> tuple[int, str, str]:
        """``argv`` with the inherited SLURM_*/SBATCH_*/PMIX_* removed from its environment first."""
        return self.run(["bash", "-c", SCRUB, "scrub", *argv], **kw)

    def write(self, path: str, text: str, mode: int = 0o644) -> None:
        """Write ``path`` atomically where the cluster sees it (a temporary name, then mv).

        The run directory and the workdir above it must be ours and writable by no one else, and
        every directory above them ours or root's and not writable by others unless sticky: the
        default workdir is under /tmp, shared by every user of a login node, and whoever can
        rename an entry there could swap the batch script or read the secret before sbatch runs.

        Raises:
            ClusterError: a directory another user controls (exit 3 of the script), or the write failed.
        """
        tmp = f"{path}.tmp{os.getpid()}"
        code, _, err = self.run(["bash", "-c", _WRITE_SCRIPT, "write", path, tmp, f"{mode:o}"], input=text)
        if code == 3:
            raise ClusterError(f"{err.strip().removeprefix('mpirun_kit: ')}: another user could replace the job's "
                               "files there; set target.slurm.workdir to a directory only you can write (on a "
                               "file system every node sees)")
        if code != 0:
            raise ClusterError(f"could not write {path} on the Slurm side ({err.strip()[-300:]}); check that "
                               "target.slurm.workdir is writable there")

    def read(self, path: str, limit: int = 1 << 20) -> str | None:
        code, out, _ = self.run(["bash", "-c", 'test -f "$1" && head -c "$2" -- "$1"', "read", path, str(limit)])
        return out if code == 0 else None

    def close(self) -> None:
        """Let go of what reaches the cluster (an ssh connection); nothing to do for the others."""

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def read_many(self, paths: list[str], limit: int = 1 << 20) -> list[str | None]:
        """``read`` of each path, in one command (over ssh: one session instead of one each); None where a file is
        missing.  An answer it cannot read (no base64 on the node) falls back to ``read`` one by one."""
        code, out, _ = self.run(["bash", "-c", _READ_MANY, "read-many", str(limit), *paths])
        lines = out.splitlines()
        if code != 0 or len(lines) != len(paths) or any(line[:1] not in ("+", "-") for line in lines):
            return [self.read(p, limit) for p in paths]
        try:
            return [base64.b64decode(line[1:], validate=True).decode(errors="replace") if line[0] == "+" else None
                    for line in lines]
        except ValueError:
            return [self.read(p, limit) for p in paths]


class LocalRunner(Runner):
    """sbatch on this machine's PATH (a login node)."""

    def run(self, argv, *, input=None, timeout=60.0):
        from ..exec.command import run

        try:
            res = run(argv, input=input, timeout_s=timeout)
        except FileNotFoundError as exc:
            raise ClusterError(f"{argv[0]} not found: run submit on a Slurm login node, or set target.slurm.login "
                               "(user@host) or target.slurm.sim") from exc
        except TimeoutError as exc:
            raise ClusterError(f"`{shlex.join(argv[:4])}` gave no answer within {timeout:g} s; is slurmctld up?") from exc
        return res.returncode, res.stdout, res.stderr


class SimRunner(Runner):
    """algo-1 of a simulated cluster brought up with ``sim up --slurm`` (its Slurm's client environment)."""

    def __init__(self, name: str, root: str):
        from ..sim import SimCluster
        from ..sim import slurm as sim_slurm

        self.sim = SimCluster.attach(name, root)
        st = sim_slurm.state(self.sim.layout)
        if st is None:
            raise ClusterError(f"sim cluster {name!r} under {root} runs no Slurm; bring it up with "
                               f"`mpirun_kit sim up --slurm --name {name}`")
        self.login, self.env = st["login"], st["env"]

    def run(self, argv, *, input=None, timeout=60.0):
        p = self.sim.popen(self.login, argv, self.env, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = p.popen.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            p.popen.kill()
            p.popen.communicate()
            raise ClusterError(f"`{shlex.join(argv[:4])}` on {self.login} gave no answer within {timeout:g} s") from exc
        return p.popen.returncode, out, err


class _KeptOpen:
    """The runner's ssh client as RemoteProcess uses it, but whose ``close`` keeps the connection for the next command."""

    def __init__(self, client):
        self.client = client

    def get_transport(self):
        return self.client.get_transport()

    def close(self) -> None:
        pass


class SshRunner(Runner):
    """A login node over ssh (exec/remote.py: host key verified); start_remote joins the argv.

    One connection serves every command of the runner, each in a session of its own: a connection's handshake
    cost ~0.4 s here, and a submit runs a dozen commands, ``--wait`` several more a second.
    """

    def __init__(self, where: dict):
        self.where = where
        self._client = None

    def _connect(self, settings: dict, host: str) -> _KeptOpen:
        from ..exec.remote import paramiko_client

        transport = self._client.get_transport() if self._client is not None else None
        if transport is None or not transport.is_active():
            self._client = paramiko_client(settings, host)
        return _KeptOpen(self._client)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()   # the sshd session on the login node ends with it
            self._client = None

    def run(self, argv, *, input=None, timeout=60.0):
        from ..exec.remote import bounded, start_remote

        # the login node ends the command itself past our deadline (a root login's session would not)
        proc = start_remote(self.where, self.where["host"], bounded(argv, timeout), connect=self._connect)
        if input is not None:
            proc.channel.sendall(input.encode())
            proc.channel.shutdown_write()
        try:
            out, err = proc.communicate(timeout)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            raise ClusterError(f"`{shlex.join(argv[:4])}` on {self.where['host']} gave no answer within "
                               f"{timeout:g} s") from exc
        return proc.returncode if proc.returncode is not None else 255, out, err


def runner_for(where: dict) -> Runner:
    if where["kind"] == "sim":
        return SimRunner(where["name"], where["root"])
    if where["kind"] == "ssh":
        return SshRunner(where)
    return LocalRunner()


# --- discovery and checks ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ClusterFacts:
    version: str
    mpi_default: str
    partitions: tuple[Partition, ...]
    accounting: bool
    #: what ``srun --mpi=list`` offers; None: srun could not say (nothing is refused on it then)
    mpi_plugins: tuple[str, ...] | None = None

    def partition(self, name: str | None) -> Partition | None:
        for p in self.partitions:
            if (name and p.name == name) or (not name and p.default):
                return p
        return None


def discover(runner: Runner) -> ClusterFacts:
    """The cluster as it is (never assumed): version, MpiDefault, accounting, partitions and their nodes.

    Raises:
        ClusterError: scontrol cannot reach slurmctld.
    """
    code, out, err = runner.run(["scontrol", "show", "config"])
    if code != 0:
        raise ClusterError(f"`scontrol show config` failed (exit {code}): {err.strip()[-300:]}; is slurmctld up and "
                           "SLURM_CONF right?")
    cfg = parse_scontrol_config(out)
    version = cfg.get("SLURM_VERSION", "")
    parts: list[Partition] = []
    code, out, _ = runner.run(["sinfo", "--json"])
    if code == 0:
        try:
            parts = parse_sinfo_json(out)
        except (json.JSONDecodeError, AttributeError, TypeError):
            parts = []
    code, text, _ = runner.run(["sinfo", "-h", "-N", "-o", "%P %N"])
    by_text = parse_sinfo_text(text) if code == 0 else []
    default = next((p.name for p in by_text if p.default), None)
    if not parts:
        parts = by_text
    parts = [dataclasses.replace(p, default=p.name == default) for p in parts]
    code, out, err = runner.run(["srun", "--mpi=list"])
    plugins = parse_mpi_list(out + "\n" + err) if code == 0 else None
    return ClusterFacts(version, cfg.get("MpiDefault", ""), tuple(parts),
                        cfg.get("AccountingStorageType", "accounting_storage/none") != "accounting_storage/none",
                        plugins or None)


def check_request(req: SlurmRequest, facts: ClusterFacts) -> None:
    """What the cluster cannot run, in one line each, before sbatch.

    Raises:
        SpecError: the partition does not exist (or none is the default), the job needs more nodes than it has,
            or the ranks' direct launch (``srun --mpi=pmix``) needs a PMIx plugin the cluster's srun lacks.
    """
    plugins = facts.mpi_plugins
    if req.launch == "srun" and plugins is not None and not any(p.startswith("pmix") for p in plugins):
        raise SpecError(f"target.slurm.launch is 'srun' (the ranks start with srun --mpi=pmix), but this cluster's "
                        f"srun offers no pmix (srun --mpi=list: {', '.join(plugins)}; MpiDefault="
                        f"{facts.mpi_default or 'unset'}); set target.slurm.launch: mpirun (Open MPI starts the "
                        "ranks inside the allocation), or ask the cluster's admins for Slurm's PMIx plugin")
    names = [p.name for p in facts.partitions]
    part = facts.partition(req.partition)
    if part is None and req.partition:
        raise SpecError(f"target.slurm.partition: the cluster has no partition {req.partition!r}; "
                        f"its partitions are {', '.join(names) or '(none)'}")
    if part is None:
        raise SpecError("target.slurm.partition is not set and the cluster has no default partition; set it to one of "
                        f"{', '.join(names) or '(none)'}")
    if part.nodes and req.nodes > len(part.nodes):
        raise SpecError(f"resources.hosts: the job needs {req.nodes} nodes, but partition {part.name!r} has "
                        f"{len(part.nodes)} ({','.join(part.nodes)}); lower resources.hosts or choose a larger partition")


def sbatch_error(stderr: str, req: SlurmRequest) -> SpecError | ClusterError:
    """sbatch's refusal as one line naming the field to fix."""
    text = " ".join(line.strip() for line in stderr.strip().splitlines() if line.strip())[-400:]
    low = text.lower()
    if "account" in low:
        return SpecError(f"target.slurm.account: Slurm refused account {req.account!r} ({text}); use an account "
                         "you belong to (sacctmgr show assoc user=$USER)")
    if "partition" in low:
        return SpecError(f"target.slurm.partition: Slurm refused partition {req.partition!r} ({text})")
    if "node configuration is not available" in low or "node count" in low or "more processors" in low:
        return SpecError(f"the job is larger than the cluster can run: {req.nodes} node(s) x {req.tasks_per_node} "
                         f"task(s) ({text}); lower resources.hosts or resources.processes_per_host")
    if "qos" in low:
        return SpecError(f"target.slurm.qos: Slurm refused it ({text})")
    return ClusterError(f"sbatch refused the job: {text}")


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


def query(runner: Runner, job_id: str) -> SlurmJob | None:
    """The job as Slurm has it now: squeue --json, then sacct --json, then sacct's text; None when none knows it."""
    for tool in ("squeue", "sacct"):  # squeue while the job is known there, sacct after it ended
        code, out, _ = runner.run([tool, "--json", "-j", job_id])
        if code == 0:
            try:
                found = [j for j in parse_jobs_json(out) if j.job_id == job_id]
                if found:
                    return found[0]
            except ClusterError:
                pass  # a shape we cannot read: the next source may answer
    code, out, _ = runner.run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,JobName,State,ExitCode,NodeList"])
    if code == 0:
        found = [j for j in parse_sacct_text(out) if j.job_id == job_id]
        if found:
            return found[0]
    return None


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


def follow(dry: DryRun[SlurmRequest], runner: Runner, job_id: str, *, clock: Clock = SYSTEM_CLOCK, out=None, err=None,
           progress: StatusLine | None = None, stopped=lambda: None,
           level: int = verbosity.VERBOSE) -> SlurmJob | None:
    """Wait until Slurm no longer runs the job, copying slurm.out/slurm.err as they grow (when they are on this
    machine); its last record.  ``stopped()`` names a signal submit received: following ends (the job runs on)."""
    req = dry.request
    out = out or sys.stdout.buffer
    err = err or sys.stderr.buffer
    progress = progress or StatusLine(clock=clock, level=level)
    tails = []
    if req.where["kind"] in ("local", "sim"):
        from ..exec.output import FileTail

        tails = [(FileTail(Path(req.run_dir) / "slurm.out", ""), out),
                 (FileTail(Path(req.run_dir) / "slurm.err", ""), err)]
    deadline = Deadline(clock, req.deadline_s)
    poll_s = SIM_POLL_S if req.where["kind"] == "sim" else POLL_S
    last: SlurmJob | None = None
    gone = None
    while True:
        for t, dst in tails:
            t.pump(dst)
        job = query(runner, job_id)
        if job is not None:
            last = job
        state = job.job_state if job is not None else None
        if state in ENDED or job is None:
            # Ended (or forgotten): its result file may lag on a shared file system; wait for it briefly.
            gone = gone or Deadline(clock, RESULT_GRACE_S)
            if read_result(runner, req.run_dir).exit_code is not None or gone.expired():
                break
        else:
            gone = None
            progress.update(f"slurm: job {job_id} {job.state.lower()}"
                            + (f" ({job.reason})" if job.reason and job.reason != "None" else ""))
        if stopped():
            break
        if deadline.expired():
            progress.done(f"slurm: job {job_id} still {last.state if last else 'unknown'} after "
                          f"{req.deadline_s:g} s; stopped following it (it keeps running; cancel it with "
                          f"mpirun_kit cancel or scancel {job_id})")
            break
        clock.sleep(poll_s)
    for t, dst in tails:
        t.pump(dst, final=True)
    return last


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


#: after a graceful cancel's SIGTERM to the batch step, how long past ``grace_s`` before ``scancel`` kills the rest.
CANCEL_MARGIN_S = 20.0


def cancel_job(runner: Runner, job_id: str, *, grace_s: float = 10.0, clock: Clock = SYSTEM_CLOCK,
               timeout: float = 60.0) -> SlurmJob | None:
    """Stop the job and wait until Slurm no longer runs any of it.

    First SIGTERM to the batch shell only (``scancel --batch``): its trap stops the master, which asks every
    rank to stop (SIGTERM to each program, ``grace_s`` for its handler) and writes the result, so the job ends
    as any stopped job does, its checkpoint written.  A job still there ``grace_s`` + CANCEL_MARGIN_S later
    (or pending: no batch shell yet) gets a plain ``scancel``: Slurm's SIGTERM to every step, SIGKILL after
    KillWait.

    Raises:
        ClusterError: scancel failed, or the job still runs ``timeout`` s after the plain scancel.
    """
    job = query(runner, job_id)
    if job is None or job.job_state in ENDED:
        return job

    def scancel(*flags: str) -> None:
        code, _, err = runner.run(["scancel", *flags, job_id])
        if code != 0 and "already completing or completed" not in err and "Invalid job id" not in err:
            raise ClusterError(f"scancel {job_id} failed (exit {code}): {err.strip()[-300:]}")

    if job.job_state == JobState.RUNNING:
        scancel("--batch", "--signal=TERM")
        soft = Deadline(clock, grace_s + CANCEL_MARGIN_S)
        while not soft.expired():
            job = query(runner, job_id)
            if job is None or job.job_state in ENDED:
                return job
            clock.sleep(0.2)
    scancel()
    deadline = Deadline(clock, timeout)
    while True:
        job = query(runner, job_id)
        if job is None or job.job_state in ENDED:
            return job
        if deadline.expired():
            raise ClusterError(f"Slurm job {job_id} is still {job.state} {timeout:g} s after scancel; check it with "
                               f"scontrol show job {job_id}")
        clock.sleep(0.2)


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
        req = dry.request
        return None, {"where": req.where, "run_dir": req.run_dir, "grace_s": req.grace_s}

    def submitted_as(self, opts: SubmitOptions) -> str | None:
        # Slurm names the job only when sbatch accepts it: run() wrote its id in the record's run directory.
        p = Path(opts.run_dir or "") / "slurm.json"
        try:
            return str(json.loads(p.read_text())["job_id"]) if opts.run_dir else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def run(self, dry: DryRun[SlurmRequest], opts: SubmitOptions = SubmitOptions(), *, started: float | None = None,
            clock: Clock = SYSTEM_CLOCK, out=None, err=None) -> Outcome:
        from ..exec.sshkeys import SECRET_BYTES, format_secret

        started = time.time() if started is None else started
        with runner_for(dry.request.where) as runner:
            return self._run(dry, opts, runner, format_secret(os.urandom(SECRET_BYTES)), started=started,
                             clock=clock, out=out, err=err)

    def _run(self, dry: DryRun[SlurmRequest], opts: SubmitOptions, runner: Runner, secret: str, *, started: float,
             clock: Clock, out, err) -> Outcome:
        job_id = submit(dry, runner, secret)
        if opts.run_dir:
            from ..core.files import write_atomic

            write_atomic(Path(opts.run_dir) / "slurm.json", json.dumps({"job_id": job_id, **dry.request.where}))
        progress = StatusLine(clock=clock, level=opts.verbosity)
        progress.done(f"slurm: submitted job {job_id} (run directory {dry.request.run_dir})")
        if not opts.wait:
            return outcome_of("slurm", dry.job, 0, started=started, ended=time.time())
        from ..exec.signals import SignalLatch

        with SignalLatch() as latch:
            job = follow(dry, runner, job_id, clock=clock, out=out, err=err, progress=progress,
                         stopped=lambda: latch.received)
        if latch.received:
            progress.done(f"slurm: stopped following job {job_id} on {latch.received}; it keeps running "
                          f"(mpirun_kit cancel, or scancel {job_id})")
            return outcome_of("slurm", dry.job, int(ExitCode.INTERRUPTED), interrupted=latch.received,
                              started=started, ended=time.time())
        return outcome_for(dry, runner, job_id, job, started=started)

    # -- lifecycle --------------------------------------------------------------------------------------
    def _runner(self, record: JobRecord) -> Runner:
        where = (record.details or {}).get("where")
        if where is None:
            raise SpecError(f"job {record.job_id}'s record says nothing of where its Slurm cluster is")
        return runner_for(where)

    def describe(self, record: JobRecord, *, clock: Clock = SYSTEM_CLOCK) -> JobStatus:
        with self._runner(record) as runner:
            return self._describe(record, runner)

    def _describe(self, record: JobRecord, runner: Runner) -> JobStatus:
        job_id = job_id_of(record)
        run_dir = (record.details or {}).get("run_dir", "")
        job = query(runner, job_id)
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
                             root_cause=o.root_cause, detail=f"Slurm: {job.state if job else 'gone'}"
                             + (f" {job.exit_code}:{job.signal or 0}" if job and job.exit_code is not None else ""),
                             **base)
        if job is None:
            return JobStatus(state=JobState.LOST, detail="Slurm no longer knows the job and it left no result", **base)
        return JobStatus(state=job.job_state, detail=f"Slurm: {job.state} (the batch step left no result)", **base)

    def cancel(self, record: JobRecord, *, clock: Clock = SYSTEM_CLOCK) -> JobStatus:
        grace = float((record.details or {}).get("grace_s") or 10.0)
        with self._runner(record) as runner:
            cancel_job(runner, job_id_of(record), grace_s=grace, clock=clock)
            return self._describe(dataclasses.replace(record, cancel_requested=True), runner)

    def logs(self, record: JobRecord, *, rank: int | None = None, follow: bool = False,
             clock: Clock = SYSTEM_CLOCK) -> Iterator[str]:
        run_dir = (record.details or {}).get("run_dir", "")
        seen = 0
        prefix = f"[{rank} " if rank is not None else ""
        with self._runner(record) as runner:
            while True:
                text = runner.read(f"{run_dir}/slurm.out") or ""
                lines = text.splitlines()
                for line in lines[seen:]:
                    if not prefix or line.startswith(prefix):
                        yield line
                seen = len(lines)
                if not follow:
                    return
                job = query(runner, job_id_of(record))
                if job is None or job.job_state in ENDED:
                    follow = False
                    continue
                clock.sleep(POLL_S)


TARGET = SlurmTarget()
