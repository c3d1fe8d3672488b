"""Which environment variables reach the ranks, and how they are shown.

Forwarding is an explicit allow-list: a few names (PATH, LD_LIBRARY_PATH, ...),
a few prefixes (NCCL_, FI_, SM_ ...), the LaunchSpec's ``env_forward`` names and
its ``env`` values (which win).  Names that look secret (SECRET, TOKEN, PASSWORD,
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
    "OMP_NUM_THREADS", "VIRTUAL_ENV",
)
FORWARD_PREFIXES: tuple[str, ...] = ("SM_", "NCCL_", "FI_", "UCX_", "TORCH_", "HF_", "MPIRUN_KIT_")
#: per-host values: forwarding the master's copy would lie to every other host.
PER_HOST_NAMES: frozenset[str] = frozenset({
    "SM_CURRENT_HOST", "SM_CURRENT_INSTANCE_TYPE", "SM_CURRENT_INSTANCE_GROUP",
    "SM_CURRENT_INSTANCE_GROUP_HOSTS", "SM_RESOURCE_CONFIG",
})

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
                explicit: Iterable[tuple[str, str]] = ()) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """The ranks' environment, and what was left out on purpose.

    Args:
        environ: the launching host's environment (an argument, never os.environ here).
        forward: names to copy from ``environ`` when set there (LaunchSpec.env_forward).
        explicit: ``(name, value)`` set for every rank (LaunchSpec.env); these win.

    Returns:
        (env, dropped): env sorted by name; dropped as ``(name, reason)``.
    """
    forward = tuple(forward)
    picked: dict[str, str] = {}
    dropped: dict[str, str] = {}
    for name in sorted(environ):
        by_default = name in FORWARD_NAMES or (name.startswith(FORWARD_PREFIXES) and not is_secret(name))
        if by_default and name not in PER_HOST_NAMES:
            picked[name] = environ[name]
    for name in forward:
        if name in environ:
            picked[name] = environ[name]
    for name, value in explicit:
        picked[name] = value
    for name in sorted(picked):
        if name in AWS_CREDENTIALS:
            dropped[name] = "AWS credential: never forwarded; ranks use the instance role"
            del picked[name]
    return tuple(sorted(picked.items())), tuple(sorted(dropped.items()))

