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

import re
from typing import Iterable, Mapping

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
AWS_CREDENTIALS: frozenset[str] = frozenset({
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
})
_SECRET_RE = re.compile(r"SECRET|TOKEN|PASSWORD|PASSWD|KEY|CREDENTIAL", re.IGNORECASE)
REDACTED = "***"


def is_secret(name: str) -> bool:
    return bool(_SECRET_RE.search(name)) or name in AWS_CREDENTIALS


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


def redact(pairs: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``(name, value)`` pairs with secret-looking values replaced by ``***``."""
    return tuple((n, REDACTED if is_secret(n) else v) for n, v in pairs)


def redact_arg(arg: str) -> str:
    """An argv item with the value of a secret-looking ``NAME=VALUE`` replaced."""
    name, sep, _ = arg.partition("=")
    return f"{name}{sep}{REDACTED}" if sep and is_secret(name) else arg
