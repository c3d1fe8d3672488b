"""Which environment variables reach the ranks, and how they are shown.

Forwarding is an explicit allow-list: a few names (PATH, LD_LIBRARY_PATH, ...),
the prefixes users rely on (NCCL_, SM_, WANDB_, MLFLOW_, CUDA_ ...), the LaunchSpec's ``env_forward`` names and
its ``env`` values (which win); with ``env_inherit`` (target local, as torchrun does) the launching shell's
whole environment instead.  Whatever is left out is named with why and how to forward it (``dropped``,
``left_behind``).  Names that look secret (SECRET, TOKEN, PASSWORD,
KEY, CREDENTIAL) are never picked up by a prefix, only when named explicitly, and
are always redacted when printed.  AWS credentials are never forwarded at all:
ranks get them from the instance role, never from the master's environment
(the SageMaker toolkit writes them to /etc/environment on every host).
"""
from __future__ import annotations

from typing import Iterable, Mapping

# What a secret is is decided in one place, mpirun_kit/redact.py.
from ..redact import AWS_CREDENTIALS, is_secret

FORWARD_NAMES: tuple[str, ...] = (
    "PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONUNBUFFERED", "LANG", "LC_ALL", "TZ",
    "OMP_NUM_THREADS", "VIRTUAL_ENV", "AWS_REGION", "AWS_DEFAULT_REGION", "PYTHONHASHSEED", "PYTHONWARNINGS",
)
#: what users of torchrun and srun expect to reach every rank: the platform's, the collectives', the trackers'
#: (Weights & Biases, MLflow, Comet, Neptune), CUDA's and the frameworks' settings.
FORWARD_PREFIXES: tuple[str, ...] = (
    "SM_", "NCCL_", "FI_", "UCX_", "TORCH_", "HF_", "MPIRUN_KIT_", "WANDB_", "MLFLOW_", "COMET_", "NEPTUNE_",
    "CUDA_", "PYTORCH_", "TORCHINDUCTOR_", "TRANSFORMERS_", "TOKENIZERS_", "OMP_", "MKL_", "KMP_", "XLA_", "JAX_",
    "TF_",
)
#: per-host values: forwarding the master's copy would lie to every other host (a GPU list is this host's).
PER_HOST_NAMES: frozenset[str] = frozenset({
    "SM_CURRENT_HOST", "SM_CURRENT_INSTANCE_TYPE", "SM_CURRENT_INSTANCE_GROUP",
    "SM_CURRENT_INSTANCE_GROUP_HOSTS", "SM_RESOURCE_CONFIG", "CUDA_VISIBLE_DEVICES",
})
#: a launcher's own state in the submitting shell (one job inside another's allocation, say): handed to this job's
#: ranks it would make them join the other job's MPI or Slurm step.  Never inherited (``inherit``).
LAUNCHER_STATE_PREFIXES: tuple[str, ...] = ("OMPI_", "PMIX_", "PRTE_", "OPAL_", "SLURM_", "SBATCH_", "SRUN_",
                                           "PMI_", "HYDRA_", "I_MPI_")
#: the shell's own bookkeeping, meaningless in a rank: never inherited, never listed as left behind.
SHELL_NAMES: frozenset[str] = frozenset({"_", "SHLVL", "PWD", "OLDPWD", "PS1", "PS2", "COLUMNS", "LINES"})
#: how a variable left out reaches the ranks anyway (the plan says it with each name).
FORWARD_HOW = "name it in env_forward (or set it in env)"
SECRET_WHY = f"secret-looking name: not forwarded unless named; {FORWARD_HOW} to send it (shown as ***)"
AWS_WHY = "AWS credential: never forwarded; ranks use the instance role"
STATE_WHY = "a launcher's own state (another MPI or Slurm job's): never inherited; " + FORWARD_HOW + " if meant"


def _env_name(name: str) -> bool:
    """A name mpirun's ``-x`` and a POSIX shell take (exported bash functions, ``BASH_FUNC_f%%``, are not)."""
    return bool(name) and (name[0].isalpha() or name[0] == "_") and all(c.isalnum() or c == "_" for c in name)

#: what mpirun itself needs from the launching host besides the ranks' env: what an ssh login gives
#: a remote host's MPI daemon, and MPI's own settings.  Local ranks inherit mpirun's environment, so
#: it is built from this and the ranks' allow-listed env only, never the master's whole environment.
#: SLURM_CONF: where srun (mpi_flavour srun) finds the cluster's configuration, when not in its default place.
LAUNCHER_NAMES: tuple[str, ...] = ("HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "SLURM_CONF")
LAUNCHER_PREFIXES: tuple[str, ...] = ("OMPI_MCA_", "OPAL_", "PMIX_MCA_", "PRTE_MCA_")


def launcher_env(environ: Mapping[str, str], ranks_env: Iterable[tuple[str, str]]) -> dict[str, str]:
    """mpirun's environment: ``LAUNCHER_NAMES``/``LAUNCHER_PREFIXES`` from ``environ`` plus the ranks' env.

    ``ranks_env`` is the plan's env (``resolve_env``: the same allow-list remote ranks get with
    ``-x``), so a rank on the master's host sees what a rank on any other host sees.
    """
    base = {k: v for k, v in environ.items()
            if (k in LAUNCHER_NAMES or k.startswith(LAUNCHER_PREFIXES)) and not is_secret(k)}
    return {**base, **dict(ranks_env)}


def resolve_env(environ: Mapping[str, str], forward: Iterable[str] = (),
                explicit: Iterable[tuple[str, str]] = (), *,
                inherit: bool = False) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """The ranks' environment, and what was left out on purpose.

    Args:
        environ: the launching host's environment (an argument, never os.environ here).
        forward: names to copy from ``environ`` when set there (LaunchSpec.env_forward).
        explicit: ``(name, value)`` set for every rank (LaunchSpec.env); these win.
        inherit: every variable of ``environ`` (target local: the submitting shell's, as torchrun's ranks get
            it), less secret-looking names, AWS credentials and another launcher's state, each named in
            ``dropped``; else the allow-list (``FORWARD_NAMES``/``FORWARD_PREFIXES``).

    Returns:
        (env, dropped): env sorted by name; dropped as ``(name, reason and remedy)``.
    """
    forward = tuple(forward)
    picked: dict[str, str] = {}
    dropped: dict[str, str] = {}
    for name in sorted(environ):
        if inherit:
            if name in SHELL_NAMES or not _env_name(name) or name.startswith(LAUNCHER_PREFIXES):
                continue        # LAUNCHER_PREFIXES: MPI's own settings, which reach mpirun (launcher_env)
            if name.startswith(LAUNCHER_STATE_PREFIXES):
                dropped[name] = STATE_WHY
            elif is_secret(name):
                dropped[name] = AWS_WHY if name in AWS_CREDENTIALS else SECRET_WHY
            else:
                picked[name] = environ[name]
            continue
        listed = name in FORWARD_NAMES or name.startswith(FORWARD_PREFIXES)
        if listed and is_secret(name) and name not in AWS_CREDENTIALS:
            dropped[name] = SECRET_WHY      # HF_TOKEN, WANDB_API_KEY: a prefix never carries a secret
        elif listed and name not in PER_HOST_NAMES:
            picked[name] = environ[name]
    for name in forward:
        if name in environ:
            picked[name] = environ[name]
            dropped.pop(name, None)
    for name, value in explicit:
        picked[name] = value
        dropped.pop(name, None)
    for name in sorted(picked):
        if name in AWS_CREDENTIALS:
            dropped[name] = AWS_WHY
            del picked[name]
    return tuple(sorted(picked.items())), tuple(sorted(dropped.items()))


def left_behind(environ: Mapping[str, str], env: Iterable[tuple[str, str]],
                dropped: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """The launching host's variables that reach no rank and are not in ``dropped`` (which says why for its
    own): the names a user may expect (``MYVAR``), for the plan to list with ``FORWARD_HOW``.  mpirun's own
    login variables (HOME, USER, ...) and the shell's bookkeeping are not listed: each host has its own."""
    sent = {n for n, _ in env} | {n for n, _ in dropped}
    return tuple(n for n in sorted(environ) if n not in sent and n not in SHELL_NAMES and n not in LAUNCHER_NAMES
                 and n not in PER_HOST_NAMES and not n.startswith(LAUNCHER_PREFIXES) and _env_name(n))


#: the launching host's own, never carried from the submitting shell to other hosts: its paths (a remote host has
#: its own PATH and interpreter), the region its platform runs in, and the variables SageMaker and this tool set
#: on every host themselves.  ``env_forward`` still sends one that is named.
HOST_OWN_NAMES: frozenset[str] = frozenset({"PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "AWS_REGION",
                                            "AWS_DEFAULT_REGION"})
HOST_OWN_PREFIXES: tuple[str, ...] = ("SM_", "MPIRUN_KIT_")


def submit_env(environ: Mapping[str, str], forward: Iterable[str] = ()
               ) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...], tuple[str, ...]]:
    """What a multi-host job (sim, ssh, Slurm, SageMaker) takes from the submitting shell: its remote master builds
    the plan from its own environment, so the shell's allow-listed variables travel in the LaunchSpec's env
    (service/compile.py ``with_submit_env``), as srun passes them.

    Args:
        environ: the submitting shell's environment (an argument: only the CLI and the API read os.environ).
        forward: the LaunchSpec's ``env_forward`` names, sent whatever they are (AWS credentials excepted).

    Returns:
        (env, dropped, left): the ``(name, value)`` pairs that go with the job (the allow-list less
        ``HOST_OWN_NAMES``/``HOST_OWN_PREFIXES``, plus ``forward``); ``(name, why and how to send it)`` for the
        ones held back on purpose (secret-looking names, AWS credentials); and every other variable's name, left
        behind (``FORWARD_HOW`` sends one), less this host's own (``HOST_OWN_NAMES``: each host has its own, as
        the docs say; listing PATH on every submit would bury the names that matter).
    """
    forward = tuple(forward)
    env, dropped = resolve_env(environ, forward)
    kept = tuple((n, v) for n, v in env
                 if n in forward or (n not in HOST_OWN_NAMES and not n.startswith(HOST_OWN_PREFIXES)))
    left = tuple(n for n in left_behind(environ, kept, dropped)
                 if n not in HOST_OWN_NAMES and not n.startswith(HOST_OWN_PREFIXES))   # documented as this host's
    return kept, dropped, left
