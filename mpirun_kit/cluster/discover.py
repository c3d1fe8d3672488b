"""Discovery: the one place that reads /opt/ml and the environment (this machine's devices: local.py).

It picks a source for the cluster, in this order: an explicit host list or
hostfile (CLI), ``<opt_ml>/input/config/resourceconfig.json``, the ``SM_HOSTS`` /
``SM_CURRENT_HOST`` environment, then "this machine alone".  It also reads
``<opt_ml>/input/config/hyperparameters.json``, where a LaunchSpec may travel; spec/
parses that (``LaunchSpec.from_hyperparameters``), since cluster/ sits below spec/.
Parsing is delegated to the pure functions in sagemaker.py and hostfile.py.
"""
from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Collection, Mapping

from ..errors import SpecError
from . import Cluster, Host
from .hostfile import hostfile_cluster, parse_hostfile, parse_hosts_arg
from .trust import read_plan_input
from .sagemaker import HYPERPARAMETERS, RESOURCE_CONFIG, parse_resource_config, parse_sm_env, read_json

log = logging.getLogger(__name__)

DEFAULT_OPT_ML = Path("/opt/ml")


def local_interfaces() -> frozenset[str]:
    """Names of this host's network interfaces (checked against resourceconfig).

    The kernel's list (if_nameindex), not psutil's: importing psutil cost ~15 ms of CPU on every
    host's entrypoint, on the launch's critical path, for a list of names.
    """
    return frozenset(name for _, name in socket.if_nameindex())


def discover_cluster(opt_ml: Path, environ: Mapping[str, str], *, hosts: str | None = None,
                     hostfile: Path | None = None, current_host: str | None = None,
                     hostname: str | None = None, interfaces: Collection[str] | None = None) -> Cluster:
    """Find the cluster (see the module docstring for the order of sources).

    Args:
        opt_ml: the SageMaker root (``--opt-ml``).
        environ: the environment to read SM_* from.
        hosts: ``h1:2,h2:2`` from the CLI.
        hostfile: a ``host slots=N`` file from the CLI.
        current_host: this host's name among ``hosts``/``hostfile`` (default: ``hostname``).
        hostname: this machine's name (default: ``socket.gethostname()``).
        interfaces: this host's interfaces (default: read with psutil); the cluster's
            network interface must be one of them.

    Raises:
        SpecError: the chosen source is malformed or contradicts itself.
    """
    hostname = hostname or socket.gethostname()
    if interfaces is None:
        interfaces = local_interfaces()
    if hosts is not None and hostfile is not None:
        raise SpecError("both --hosts and --hostfile given; pass only one of them")
    if hosts is not None:
        return hostfile_cluster(parse_hosts_arg(hosts), current_host or _self_name(parse_hosts_arg(hosts), hostname),
                                "--hosts")
    if hostfile is not None:
        try:
            text = read_plan_input(Path(hostfile), "hostfile")
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or "not UTF-8 text"
            raise SpecError(f"{hostfile}: cannot read hostfile ({why}); pass an existing file") from exc
        parsed = parse_hostfile(text, str(hostfile))
        return hostfile_cluster(parsed, current_host or _self_name(parsed, hostname), str(hostfile))
    rc_path = Path(opt_ml) / RESOURCE_CONFIG
    if rc_path.exists():
        return parse_resource_config(read_json(rc_path), str(rc_path), interfaces)
    from_env = parse_sm_env(environ, interfaces)
    if from_env is not None:
        return from_env
    log.info("no %s and no SM_HOSTS: running on this machine (%s) alone", rc_path, hostname)
    name = current_host or hostname
    return Cluster(hosts=(Host(name),), current_host=name, source="this machine alone")


def _self_name(hosts: tuple[Host, ...], hostname: str) -> str:
    """This machine in a host list: its hostname, else localhost/127.0.0.1 when listed."""
    names = [h.name for h in hosts]
    for candidate in (hostname, hostname.split(".")[0], "localhost", "127.0.0.1"):
        if candidate in names:
            return candidate
    return hostname


def read_hyperparameters(opt_ml: Path) -> tuple[dict, str] | None:
    """``<opt_ml>/input/config/hyperparameters.json`` as (its JSON object, its path), or None when absent.

    Raises:
        SpecError: the file cannot be read or is not a JSON object.
    """
    path = Path(opt_ml) / HYPERPARAMETERS
    if not path.exists():
        return None
    return read_json(path), str(path)
