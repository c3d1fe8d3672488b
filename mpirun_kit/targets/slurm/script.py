"""The Slurm job as a value: the batch script, its ``#SBATCH`` options, where sbatch runs, ``dryrun``.

Place in the data flow: CompiledJob + a run id -> ``dryrun`` -> a ``DryRun[SlurmRequest]`` whose files are the
batch script and the LaunchSpec, printed whole by ``plan`` and ``submit --dry-run``; target.py submits it.
Shell appears only here, at the script boundary: every argv item is quoted once with ``shlex.quote``/
``shlex.join``, and no value may hold a line break (``one_line``): a value must never start a line of
the script (issue 39 item 4).
"""
from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass

from ...core import verbosity
from ...core.programs import cli_argv
from ...errors import SpecError
from ...spec.compile import CompiledJob
from ..base import DryRun

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
#: the run directory's file ``mpirun_kit cancel`` writes before its TERM to the batch shell (target.py cancel_job).
CANCEL_MARKER = "cancel-requested"
#: codes a requeue cannot change (bad input, usage, Ctrl-C, a cancel's SIGTERM).
NOT_REQUEUED = (0, 2, 64, 130, 143)
# --- the request: a value ------------------------------------------------------------------------------

#: characters no value of the script may hold: a line break would start a line of the script (a shell command, or,
#: in the ``#SBATCH`` head, an option of someone else's choosing); NUL and the other control characters have no
#: meaning in a name, a path or an option.
_NOT_IN_A_LINE = frozenset(chr(c) for c in range(32) if chr(c) != "\t") | {"\x7f", "\u2028", "\u2029", "\x85"}


def one_line(field: str, value: str) -> str:
    """``value`` when it stays on one line of the batch script; it is quoted (shlex) where it goes in.

    Raises:
        SpecError: it holds a line break or another control character, named with ``field``.
    """
    bad = sorted({c for c in value if c in _NOT_IN_A_LINE})
    if bad:
        raise SpecError(f"{field}: {value!r} holds {', '.join(repr(c) for c in bad)}; each value becomes part of one "
                        "line of the batch script and must not start another; remove the line break or control "
                        "character")
    return value


def render_script(*, job: str, run_dir: str, entrypoint: list[str], sbatch: list[str], retries: int = 0,
                  requeue: bool = False) -> str:
    """The batch script, whole.  ``entrypoint``: the argv every node's entrypoint starts with (its per-node
    flags are added here); ``sbatch``: the ``#SBATCH`` options, one argv item each."""
    q = shlex.quote
    # The last guard, whatever the caller checked: no value starts a line (sbatch_options names the spec's fields).
    one_line("the job's name", job)
    one_line("the run directory (target.slurm.workdir)", run_dir)
    for i, item in enumerate(entrypoint):
        one_line(f"the entrypoint's argv[{i}]", item)
    for i, o in enumerate(sbatch):
        one_line(f"the #SBATCH option {i + 1} ({o.split('=', 1)[0][:40]!r})", o)
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
# mpirun_kit cancel asked for this stop (its marker, written before the TERM; the time limit's TERM has none):
# the master has reported, and the job now ends as Slurm's own cancel ends one (sacct: CANCELLED, not FAILED).
if [ "$caught" = TERM ] && [ -e "$run/{CANCEL_MARKER}" ]; then scancel "$SLURM_JOB_ID"; fi
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


#: sbatch options that break the job's model (one record, one Slurm job, started now), with why and the remedy.
#: Each long name is refused from the shortest prefix sbatch (getopt_long) takes for it alone.
_NOT_ONE_JOB = {
    "--array": ("--ar", "-a", "starts one Slurm job per array task, and mpirun_kit follows one Slurm job per mpirun_kit "
                "job (its record, result and cancel would see only the first); remove it and submit the spec once per "
                "task (a loop over mpirun_kit submit, each with its own name or env)"),
    "--dependency": ("--dep", "-d", "leaves the job pending until another one ends, while its record, its secret and "
                     "--wait's deadline count from now; remove it, wait for the other job (mpirun_kit submit --wait, "
                     "or mpirun_kit status until it ends), then submit this one"),
}


def refuse_other_job_models(options) -> None:
    """Refuse ``--array`` and ``--dependency`` (and their short forms and prefixes) in target.slurm.sbatch_options.

    Raises:
        SpecError: naming the item (``target.slurm.sbatch_options[i]``), why it breaks the job and the remedy.
    """
    for i, o in enumerate(options):
        name = o.split("=", 1)[0].split(" ", 1)[0]
        for full, (shortest, short, why) in _NOT_ONE_JOB.items():
            if (name.startswith("--") and name.startswith(shortest) and full.startswith(name)) or (
                    not name.startswith("--") and name.startswith(short)):
                raise SpecError(f"target.slurm.sbatch_options[{i}]: {o!r} is not supported: {full} {why}")


def sbatch_options(compiled: CompiledJob, run_dir: str, run_id: str) -> list[str]:
    """The ``#SBATCH`` lines of the job, from the spec (argv items, quoted once in the script)."""
    s = compiled.job.target.slurm
    nodes = len(compiled.hosts)
    ppn = compiled.hosts[0].slots if compiled.hosts else 1
    # Each spec field that reaches a line of the script, refused by its own name when it would start another.
    one_line("name", compiled.job.name)
    one_line("target.slurm.workdir", s.workdir)
    for field in ("partition", "account", "qos", "time", "signal"):
        if getattr(s, field):
            one_line(f"target.slurm.{field}", getattr(s, field))
    for i, o in enumerate(s.sbatch_options):
        one_line(f"target.slurm.sbatch_options[{i}]", o)
    refuse_other_job_models(s.sbatch_options)
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
    """Where sbatch and the other clients run: ``local``, ``ssh`` (a login node, and the Python with mpirun_kit
    there: target.slurm.python) or ``sim`` (algo-1 of a sim cluster)."""
    s = compiled.job.target.slurm
    if s.sim:
        return {"kind": "sim", "name": s.sim, "root": s.sim_root or f"/var/tmp/mpirun-kit-sim/{s.sim}"}
    if s.login:
        user, _, host = s.login.partition("@")
        host, _, port = host.partition(":")
        return {"kind": "ssh", "user": user, "host": host, "port": int(port or 22),
                "identity_file": s.identity_file, "known_hosts": s.known_hosts, "connect_timeout_s": 10.0,
                "python": s.python}
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
    sbatch: list[str]               # run with the submitting shell's SLURM_*/SBATCH_*/PMIX_* removed
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
        sbatch=["sbatch", "--parsable", f"{run_dir}/batch.sh"],
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
