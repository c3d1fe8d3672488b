"""Target ``slurm`` (this package; ``target.py`` holds ``TARGET``): one batch script, submitted with ``sbatch --parsable``, whose batch step is the job's master.

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

The files, by concern: ``script.py`` (the request as a value: the batch script, sbatch's options, ``dryrun``),
``runner.py`` (where Slurm's clients run: this machine, a login node over ssh, a sim cluster's algo-1; the
run directory's files written and read there through exec/remote_host.py's argvs), ``accounting.py``
(squeue/sacct/sinfo/scontrol output of every version -> values), ``discovery.py`` (the cluster read before
sbatch, and what it refuses), ``target.py`` (submit, follow, the result, cancel: ``SlurmTarget``).
"""
