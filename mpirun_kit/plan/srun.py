"""The ``srun`` argv of a direct launch inside a Slurm allocation (``mpi_flavour: srun``), built purely.

Place in the data flow: ``launch_plan.build_launch_plan`` calls ``build_srun_argv`` instead of the
mpirun builder when the flavour's launcher is srun (plan/mpi.py's ``srun`` row); the master
entrypoint runs it in the batch step of a Slurm job (targets/slurm/script.py writes that script), as it runs
mpirun elsewhere.  Slurm's own PMIx starts the ranks (``--mpi=pmix``: the Slurm MPI guide's
recommended launch; Debian's Open MPI has no PMI-2), so no ssh and no MPI daemon of ours is
involved.

What the argv says, and why:

* ``--jobid``: the allocation, from the batch step's ``SLURM_JOB_ID`` (srun gets only the
  launcher's allow-listed environment, plan/env.py, so nothing inherited, such as a parent
  allocation's ``SLURM_CPU_BIND``, reaches it or the ranks);
* ``--nodes/--ntasks/--ntasks-per-node/--nodelist`` with ``--distribution=block``: the plan's
  placement exactly (rank r on the plan's host of rank r, as ``MPIRUN_KIT_HOSTS`` says);
* ``--overlap``: the workers' entrypoint step runs beside the ranks on the same CPUs;
* ``--kill-on-bad-exit=1``: a failing rank ends the step at once (the rank's own code and signal
  still come from its wrapper's report, whatever srun returns: 143 or 137 here);
* ``--label``: every line behind ``N: `` so the output pump can put ``[rank host]`` on it;
* the user's ``mpi_options`` verbatim, last but before the command (``--container-image`` and
  the like come from the target as options too).
"""
from __future__ import annotations

from typing import Mapping, Sequence

from ..errors import SpecError

#: srun's --label: the task number, right-aligned to the width of the largest one, then ": ".
SRUN_TAG = r"^ *(?P<rank>\d+): "


def build_srun_argv(host_slots: Sequence[tuple[str, int]], command: Sequence[str], environ: Mapping[str, str], *,
                    mpi: str = "pmix", options: Sequence[str] = (), mca: Sequence[tuple[str, str]] = (),
                    launcher: str | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The srun argv for ``host_slots`` (every host the same count) running ``command``; (argv, conflicts).

    Raises:
        SpecError: hosts with different rank counts (Slurm places one count per node), MCA pairs
            (srun has none: use OMPI_MCA_ variables in env), or no allocation in ``environ``.
    """
    counts = {n for _, n in host_slots}
    if len(counts) != 1:
        raise SpecError(f"mpi_flavour srun places the same number of ranks on every node; the hosts have "
                        f"{dict(host_slots)}; set resources.processes_per_host")
    if mca:
        raise SpecError(f"mca parameters {[k for k, _ in mca]} given, but srun takes none; set them as "
                        "OMPI_MCA_<key> in env instead")
    job_id = environ.get("SLURM_JOB_ID", "")
    if not job_id.isdigit():
        raise SpecError("mpi_flavour srun runs inside a Slurm job (the batch step of target slurm); SLURM_JOB_ID "
                        f"is {job_id or 'unset'}: submit with target slurm, or choose another flavour")
    per_node = counts.pop()
    argv = [launcher or "srun", f"--jobid={job_id}", f"--mpi={mpi}", f"--nodes={len(host_slots)}",
            f"--ntasks={per_node * len(host_slots)}", f"--ntasks-per-node={per_node}",
            f"--nodelist={','.join(h for h, _ in host_slots)}", "--distribution=block", "--overlap",
            "--kill-on-bad-exit=1", "--label", *options, *command]
    return tuple(argv), ()
